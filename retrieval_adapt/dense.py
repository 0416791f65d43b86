"""Dense retrieval: passage embeddings computed once, a faiss inner-product index, a (trainable) query encoder.

The passage encoder and the index are fixed after the build; :class:`DenseRetriever` can take a different
query encoder (Iter-RetGen's adapted one) that shares the embedding space, so no re-indexing is needed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

try:
    import faiss
except ImportError as err:  # faiss is an extra: one build of it, cpu or gpu (both install the module `faiss`)
    raise ImportError("faiss is not installed: pip install -e '.[cpu]' (faiss-cpu) or -e '.[gpu]' "
                      "(faiss-gpu-cu12), or `make setup`, which picks one") from err
import numpy as np
import torch

from adaptive_rag.lm.models import resolve_model
from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.records import Passage
from adaptive_rag.plumbing.retriever import Hit
from retrieval_adapt.corpus_store import damaged, index_writer, load_meta, load_passages, save_store
from retrieval_adapt.dense_scale import refine_search
from retrieval_adapt.encoders import MeanPoolingEncoder

logger = logging.getLogger(__name__)

FaissKind = Literal["flat", "ivf", "hnsw"]


@dataclass
class FaissOptions:
    kind: FaissKind = "flat"
    nlist: int = 1024  # IVF cells; capped at corpus size / 39 (faiss wants ~39 points per centroid)
    nprobe: int = 32
    hnsw_m: int = 32
    hnsw_ef_search: int = 128  # faiss' default 16 loses most neighbours on 384-d sentence embeddings
    use_gpu: bool = True  # only where faiss-gpu and CUDA exist


def build_faiss(emb: np.ndarray, opts: FaissOptions) -> faiss.Index:
    """An inner-product index over (N, D) float32 embeddings."""
    n, d = emb.shape
    if opts.kind == "flat":
        index = faiss.IndexFlatIP(d)
    elif opts.kind == "ivf":
        nlist = max(1, min(opts.nlist, n // 39))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(emb)
        index.nprobe = min(opts.nprobe, nlist)
    elif opts.kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, opts.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = opts.hnsw_ef_search
    else:
        raise ValueError(f"unknown faiss index kind '{opts.kind}' (flat, ivf, hnsw)")
    index.add(emb)
    return index


def to_gpu_if_available(index: faiss.Index, use_gpu: bool) -> faiss.Index:
    if use_gpu and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        logger.info("moving the faiss index to %d GPU(s), sharded", faiss.get_num_gpus())
        options = faiss.GpuMultipleClonerOptions()
        options.shard = True  # each GPU holds 1/G of the vectors (a 21M index fits no single card in fp32)
        return faiss.index_cpu_to_all_gpus(index, co=options)
    return index


class DenseRetriever:
    kind = "dense"

    def __init__(self, index: faiss.Index, passages: list[Passage], query_encoder: MeanPoolingEncoder,
                 *, passage_encoder_name: str = "", batch_size: int = 64):
        if index.ntotal != len(passages):
            raise ValueError(f"index holds {index.ntotal} vectors but there are {len(passages)} passages")
        self.index, self.passages, self.query_encoder = index, passages, query_encoder
        self.passage_encoder_name, self.batch_size = passage_encoder_name, batch_size

    @classmethod
    def build(cls, passages: list[Passage], encoder: MeanPoolingEncoder, *, faiss_options: FaissOptions | None = None,
              batch_size: int = 64, show_progress: bool = True) -> DenseRetriever:
        if not passages:
            raise ValueError("cannot build a dense index over an empty corpus")
        opts = faiss_options or FaissOptions()
        emb = encoder.encode([p.contents for p in passages], batch_size=batch_size, show_progress=show_progress)
        self = cls(build_faiss(emb, opts), passages, encoder, passage_encoder_name=encoder.name,
                   batch_size=batch_size)
        self.embeddings = emb
        self.faiss_options = opts
        return self

    def embed_queries(self, queries: list[str]) -> np.ndarray:
        return self.query_encoder.encode(list(queries), batch_size=self.batch_size)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        if not queries:
            return []
        k = min(k, len(self.passages))
        if getattr(self, "refine", 0) and getattr(self, "embeddings", None) is not None:
            scores, ids = refine_search(self.index, self.embed_queries(queries), k, self.refine, self.embeddings)
        else:
            scores, ids = self.index.search(self.embed_queries(queries), k)
        return [[Hit(self.passages[int(i)], float(s)) for i, s in zip(row_i, row_s) if i >= 0]
                for row_i, row_s in zip(ids, scores)]

    def save(self, out_dir: str | Path) -> None:
        """Write the index folder whole or not at all (an existing index is replaced only once this one is done)."""
        with index_writer(out_dir) as tmp:
            self.write_to(tmp)

    def write_to(self, folder: Path) -> None:
        """The index files, written into ``folder`` in place (:meth:`save` is the safe way)."""
        save_store(folder, self.passages, {
            "kind": self.kind, "encoder": self.passage_encoder_name, "normalize": self.query_encoder.normalize,
            "max_length": self.query_encoder.max_length, "num_passages": len(self.passages),
            "faiss": getattr(self, "faiss_options", FaissOptions()).kind,
        })
        index = self.index
        if "Gpu" in type(index).__name__:
            index = faiss.index_gpu_to_cpu(index)
        faiss.write_index(index, str(folder / "index.faiss"))
        if getattr(self, "embeddings", None) is not None:
            # Kept so that training can read passage vectors memory-mapped, never re-encoding the corpus.
            np.save(folder / "embeddings.npy", self.embeddings)

    @classmethod
    def load(cls, index_dir: str | Path, *, query_encoder: str | None = None, device: str = "auto",
             use_gpu: bool = True) -> DenseRetriever:
        meta = load_meta(index_dir)
        if meta.get("kind") != cls.kind:
            raise DataError(f"holds a '{meta.get('kind')}' index, not a dense one", source=str(index_dir))
        if query_encoder:  # before the passages, the index and the encoder's weights are loaded
            check_query_encoder(index_dir, query_encoder, meta)
        passages = load_passages(index_dir, meta)
        # IVF indexes are memory-mapped: their inverted lists (the bulk) stay on disk, read as searches probe them
        flags = faiss.IO_FLAG_MMAP if meta.get("faiss") in ("ivf", "ivfpq") else 0
        index = _read_faiss(Path(index_dir), len(passages), flags)
        if query_encoder and (dim := encoder_dim(query_encoder)) is not None and dim != index.d:
            raise ConfigError(_dim_message(index_dir, query_encoder, dim, index.d, meta))
        index = to_gpu_if_available(index, use_gpu)
        embeddings = _read_embeddings(Path(index_dir), len(passages))
        encoder = MeanPoolingEncoder.from_name(query_encoder or meta["encoder"], normalize=meta["normalize"],
                                               max_length=meta["max_length"], device=device)
        self = cls(index, passages, encoder, passage_encoder_name=meta["encoder"])
        self.embeddings = embeddings
        self.refine = int(meta.get("refine") or 0)
        return self

    def passage_embeddings(self, ids: list[int]) -> torch.Tensor:
        """Fixed passage vectors by corpus position (N, D), for retriever distillation."""
        if self.embeddings is None:
            raise ValueError("this index was saved without embeddings.npy; rebuild it")
        return torch.from_numpy(np.asarray(self.embeddings[ids], dtype=np.float32))


def index_dim(index_dir: str | Path) -> int | None:
    """The dimension of an index's passage vectors, read from file headers only (``embeddings.npy``'s shape, else
    the faiss file's: its index type code, then the dimension); None when neither can tell."""
    folder = Path(index_dir)
    try:
        emb = np.load(folder / "embeddings.npy", mmap_mode="r")
        if emb.ndim == 2:
            return int(emb.shape[1])
    except (OSError, ValueError, EOFError):
        pass
    try:
        with (folder / "index.faiss").open("rb") as f:
            head = f.read(8)
    except OSError:
        return None
    if len(head) == 8 and head[:1] == b"I":  # IxFI (flat), IHNf (HNSW), IwFl / IwPQ (IVF), ...: d follows
        d = int.from_bytes(head[4:8], "little", signed=True)
        return d if 0 < d <= 1 << 16 else None
    return None


def encoder_dim(name: str) -> int | None:
    """The size of the vectors an encoder makes (its hidden size), from its config alone, without its weights;
    None when the config cannot be read here (the load that follows reports that)."""
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(resolve_model(name))
    except Exception:  # noqa: BLE001 (a missing or odd model is reported by the load itself, in one line)
        return None
    for key in ("hidden_size", "dim", "d_model"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def _dim_message(index_dir, query_encoder: str, dim: int, index_d: int, meta: dict) -> str:
    built = meta.get("encoder", "?")
    return (f"query encoder {query_encoder} makes {dim}-dimensional vectors, but the index {index_dir} holds "
            f"{index_d}-dimensional ones (built with {built}): give a query encoder trained from {built}, or an "
            f"index built with {query_encoder}")


def check_query_encoder(index_dir: str | Path, query_encoder: str, meta: dict | None = None) -> None:
    """A query encoder whose vectors do not match the index's passage vectors in size, refused in one line from
    the files' headers and the encoder's config (nothing heavy is loaded). Commands call it while checking their
    inputs, before they create an output folder."""
    index_d, dim = index_dim(index_dir), encoder_dim(query_encoder)
    if index_d is not None and dim is not None and index_d != dim:
        raise ConfigError(_dim_message(index_dir, query_encoder, dim, index_d, meta or load_meta(index_dir)))


def _read_faiss(folder: Path, n_passages: int, flags: int = 0) -> faiss.Index:
    path = folder / "index.faiss"
    if not path.is_file():
        raise damaged(folder, "index.faiss is missing")
    try:
        index = faiss.read_index(str(path), flags)
    except RuntimeError as err:  # faiss reports a short file as a C++ assertion
        raise damaged(folder, f"index.faiss is unreadable ({str(err).splitlines()[0][-120:]})") from err
    if index.ntotal != n_passages:
        raise damaged(folder, f"index.faiss holds {index.ntotal} vectors for {n_passages} passages")
    return index


def _read_embeddings(folder: Path, n_passages: int) -> np.ndarray | None:
    """The stored passage vectors, memory-mapped; None for an index saved without them."""
    path = folder / "embeddings.npy"
    if not path.is_file():
        return None
    try:
        emb = np.load(path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as err:  # numpy: "mmap length is greater than file size", "EOF: ..."
        raise damaged(folder, f"embeddings.npy is unreadable ({err})") from err
    if emb.ndim != 2 or emb.shape[0] != n_passages:
        raise damaged(folder, f"embeddings.npy has shape {emb.shape} for {n_passages} passages")
    return emb
