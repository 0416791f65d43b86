"""Dense indexes at scale: passages encoded in shards on disk by any number of processes, faiss indexes trained on a
sample and filled shard by shard, recall@10 against exact search measured at build time.

Shard ``k`` holds the non-empty passages of corpus records ``k*S .. (k+1)*S-1``; process ``r`` of ``W`` encodes the
shards with ``k % W == r`` (``accelerate launch`` starts the processes; one process does all). Each shard is written
under a temporary name and renamed, so a killed run keeps every finished shard and a rerun encodes only the others. A
shard's vectors do not depend on which process encoded it, so W processes give the embeddings one process gives.

Index kinds (inner product): ``flat`` (exact: 4 bytes x dim per passage), ``hnsw_sq`` (HNSW graph over 8-bit scalar
quantised vectors: dim bytes + ~2*M*4 bytes of graph per passage), ``ivfpq`` (inverted lists of product-quantised
codes: ``pq_m`` bytes + 8 bytes of id per passage; with DPR's 21M passages and pq_m=64, 1.5 GB). Quantised kinds
may re-rank ``refine`` x k candidates with the exact vectors of ``embeddings.npy`` (memory-mapped: only the
candidates' rows are read), which brings IVF-PQ's recall back to that of exact search. ``ivf*`` indexes are read
with faiss's mmap flag, so their inverted lists stay on disk.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Literal

import faiss
import numpy as np
from tqdm.auto import tqdm

from adaptive_rag.plumbing.atomic_files import remove, write_text_atomic
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.progress import bar_options
from adaptive_rag.plumbing.records import Passage

logger = logging.getLogger(__name__)

ScaleKind = Literal["flat", "hnsw_sq", "ivfpq"]
SETTINGS = "encode.json"


@dataclass
class ScaleIndexOptions:
    kind: ScaleKind = "ivfpq"
    nlist: int = 4096  # IVF cells; capped at passages / 39 (faiss wants ~39 training points a centroid)
    nprobe: int = 64
    pq_m: int = 64  # PQ bytes per vector: must divide the dimension
    hnsw_m: int = 32
    hnsw_ef_search: int = 128
    train_size: int = 200_000  # vectors sampled to train IVF/PQ/SQ (faiss needs ~39*nlist for IVF)
    refine: int = 0  # re-rank refine*k candidates with exact vectors; 0 = off
    recall_queries: int = 500  # held-out passage vectors used as queries for recall@10 vs flat

    def __post_init__(self):
        for name in ("nlist", "nprobe", "pq_m", "hnsw_m", "train_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def shard_name(k: int) -> str:
    return f"shard-{k:05d}.npy"


def shards_of(stream: Iterable[Passage], shard_size: int) -> Iterator[tuple[int, list[Passage]]]:
    """(k, non-empty passages of shard k) for every shard of the stream."""
    it = iter(stream)
    k = 0
    while records := list(islice(it, shard_size)):
        yield k, [p for p in records if p.text.strip()]
        k += 1


def encode_shards(stream: Iterable[Passage], encoder, folder: Path, *, shard_size: int, batch_size: int,
                  rank: int = 0, world_size: int = 1, dtype: str = "float32", show_progress: bool = True) -> int:
    """Encode this process's shards that are not on disk yet; returns the number of shards of the corpus."""
    folder.mkdir(parents=True, exist_ok=True)
    n_shards = 0
    bar = tqdm(desc=f"encoding (process {rank})", unit="shard", **bar_options(disable=not show_progress))
    for k, passages in shards_of(stream, shard_size):
        n_shards = k + 1
        path = folder / shard_name(k)
        if k % world_size != rank or path.is_file():
            continue
        emb = encoder.encode([p.contents for p in passages], batch_size=batch_size) if passages else \
            np.zeros((0, encoder.dim), dtype=np.float32)
        tmp = path.with_name(f".{path.name}.{rank}.tmp")
        with tmp.open("wb") as f:
            np.save(f, emb.astype(dtype))
        tmp.rename(path)
        bar.update(1)
    bar.close()
    return n_shards


def check_settings(folder: Path, settings: dict[str, Any]) -> None:
    """Shards on disk were made with these settings, or there are none yet (then the settings are recorded)."""
    path = folder / SETTINGS
    if path.is_file():
        found = json.loads(path.read_text())
        if found != settings:
            diff = sorted(k for k in settings.keys() | found.keys() if settings.get(k) != found.get(k))
            raise DataError(f"holds embeddings made with other settings ({', '.join(diff)}); use another folder or "
                            "delete it", source=str(folder))
    else:
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(settings, indent=1))


def open_shards(folder: Path, n_shards: int) -> list[np.ndarray]:
    missing = [shard_name(k) for k in range(n_shards) if not (folder / shard_name(k)).is_file()]
    if missing:
        raise DataError(f"{len(missing)} shard(s) not encoded yet (first: {missing[0]}); rerun the encoding",
                        source=str(folder))
    return [np.load(folder / shard_name(k), mmap_mode="r") for k in range(n_shards)]


def concat_shards(shards: list[np.ndarray], path: Path) -> None:
    """One ``(N, D)`` float32 ``.npy`` from the shards, written shard by shard (never the whole matrix in memory)."""
    n, d = sum(len(s) for s in shards), shards[0].shape[1]
    with path.open("wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (n, d)})
        for s in shards:
            f.write(np.ascontiguousarray(s, dtype=np.float32).tobytes())


def _sample(shards: list[np.ndarray], size: int, seed: int, exclude: np.ndarray | None = None) -> np.ndarray:
    """Global row numbers of ``size`` vectors drawn without replacement (sorted), avoiding ``exclude``."""
    n = sum(len(s) for s in shards)
    rng = np.random.default_rng(seed)
    pool = np.setdiff1d(np.arange(n), exclude) if exclude is not None and n <= 50_000_000 else np.arange(n)
    return np.sort(rng.choice(pool, size=min(size, len(pool)), replace=False))


def _rows(shards: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
    starts = np.cumsum([0] + [len(s) for s in shards])
    out = []
    for k, s in enumerate(shards):
        sel = rows[(rows >= starts[k]) & (rows < starts[k + 1])] - starts[k]
        if len(sel):
            out.append(np.asarray(s[sel], dtype=np.float32))
    return np.concatenate(out)


def new_index(d: int, n: int, opts: ScaleIndexOptions) -> faiss.Index:
    if opts.kind == "flat":
        return faiss.IndexFlatIP(d)
    if opts.kind == "hnsw_sq":
        index = faiss.IndexHNSWSQ(d, faiss.ScalarQuantizer.QT_8bit, opts.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = opts.hnsw_ef_search
        return index
    if opts.kind == "ivfpq":
        if d % opts.pq_m:
            raise ValueError(f"pq_m={opts.pq_m} must divide the embedding dimension {d}")
        nlist = max(1, min(opts.nlist, n // 39))
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, nlist, opts.pq_m, 8, faiss.METRIC_INNER_PRODUCT)
        index.nprobe = min(opts.nprobe, nlist)
        return index
    raise ValueError(f"unknown index kind '{opts.kind}' (flat, hnsw_sq, ivfpq)")


def exact_top_k(shards: list[np.ndarray], queries: np.ndarray, k: int) -> np.ndarray:
    """Exact inner-product top-k over all shards, one shard in memory at a time: (Q, k) global rows."""
    best_s = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    base = 0
    for s in shards:
        if len(s):
            scores = queries @ np.asarray(s, dtype=np.float32).T  # (Q, shard)
            best_s = np.concatenate([best_s, scores], axis=1)
            best_i = np.concatenate([best_i, np.broadcast_to(np.arange(base, base + len(s)), scores.shape)], axis=1)
            if best_s.shape[1] > k:  # a partial selection: a shard of millions is never sorted whole
                top = np.argpartition(-best_s, k - 1, axis=1)[:, :k]
                best_s, best_i = np.take_along_axis(best_s, top, 1), np.take_along_axis(best_i, top, 1)
            top = np.argsort(-best_s, axis=1, kind="stable")
            best_s, best_i = np.take_along_axis(best_s, top, 1), np.take_along_axis(best_i, top, 1)
        base += len(s)
    return best_i


def build_index(shards: list[np.ndarray], opts: ScaleIndexOptions, embeddings: np.ndarray | None = None,
                show_progress: bool = True) -> tuple[faiss.Index, dict[str, float]]:
    """Train on a sample, add shard by shard, and measure recall@10 against exact search on held-out vectors."""
    n, d = sum(len(s) for s in shards), shards[0].shape[1]
    index = new_index(d, n, opts)
    held_out = _sample(shards, min(opts.recall_queries, max(1, n // 10)), seed=1)
    if not index.is_trained:
        train = _rows(shards, _sample(shards, max(opts.train_size, 39), seed=0, exclude=held_out))
        index.train(train)
    for s in tqdm(shards, desc=f"faiss {opts.kind}", unit="shard", **bar_options(disable=not show_progress)):
        if len(s):
            index.add(np.ascontiguousarray(s, dtype=np.float32))
    queries = _rows(shards, held_out)
    k = min(10, n - 1)
    exact = exact_top_k(shards, queries, k + 1)
    found = search(index, queries, k + 1, opts.refine, embeddings)
    recall = []
    for got, truth, q in zip(found, exact, held_out):  # a held-out passage finds itself: its other neighbours count
        truth_k = [int(x) for x in truth if x != q][:k]
        got_k = [int(x) for x in got if x != q and x >= 0][:k]
        recall.append(len(set(got_k) & set(truth_k)) / max(1, len(truth_k)))
    return index, {"recall10_vs_flat": float(np.mean(recall)), "recall_queries": len(held_out)}


def search(index: faiss.Index, queries: np.ndarray, k: int, refine: int = 0,
           embeddings: np.ndarray | None = None) -> np.ndarray:
    """(Q, k) ids; with ``refine`` the index proposes refine*k candidates, re-scored with the exact vectors."""
    if not refine or embeddings is None:
        return index.search(queries, k)[1]
    return refine_search(index, queries, k, refine, embeddings)[1]


def refine_search(index: faiss.Index, queries: np.ndarray, k: int, refine: int,
                  embeddings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids) of the best k of refine*k candidates by exact inner product (rows read from ``embeddings``)."""
    _, cand = index.search(queries, k * refine)
    scores = np.full(cand.shape, -np.inf, dtype=np.float32)
    for i, row in enumerate(cand):
        ok = row >= 0
        ids = np.sort(row[ok])  # sorted rows: a memory map reads the file in order
        vecs = np.asarray(embeddings[ids], dtype=np.float32)
        s = vecs @ queries[i]
        scores[i, :len(ids)] = s
        cand[i, :len(ids)] = ids
        cand[i, len(ids):] = -1
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, 1), np.take_along_axis(cand, order, 1)


def remove_shards(folder: Path) -> None:
    remove(folder)
