"""Build a dense index over a corpus of any size: sharded, resumable encoding (data-parallel under ``accelerate
launch``), then a faiss index trained on a sample, with its recall@10 against exact search reported.

    python -m retrieval_adapt.build_dense --corpus world --encoder minilm --faiss ivfpq \\
        --output_dir runs/index/world-ivfpq
    accelerate launch --num_processes 8 -m retrieval_adapt.build_dense --corpus psgs_w100.tsv \\
        --encoder facebook/contriever --faiss ivfpq --pq_m 64 --refine 4 --output_dir runs/index/wiki-contriever-ivfpq

Every process encodes its share of the shards (``shard_size`` passages each) into ``OUT.build/``; a killed run,
rerun with the same command, encodes only the missing shards. The main process then writes the index folder
(``embeddings.npy``, ``index.faiss``, the passage store), loadable by ``retrieval_adapt.search``, Iter-RetGen and
the distillation commands like any dense index (``--query_encoder`` swaps in an adapted query encoder).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from adaptive_rag.plumbing.atomic_files import remove
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config, save_config
from adaptive_rag.plumbing.errors import DataError
from retrieval_adapt.bm25_stream import build_dir
from retrieval_adapt.build_index import IndexConfig, stream_corpus
from retrieval_adapt.corpus_store import META, index_writer, save_store
from retrieval_adapt.dense_scale import (
    ScaleIndexOptions,
    ScaleKind,
    build_index,
    check_settings,
    concat_shards,
    encode_shards,
    open_shards,
)
from retrieval_adapt.encoders import MeanPoolingEncoder

logger = logging.getLogger(__name__)


@dataclass
class DenseScaleConfig:
    corpus: str = field(default="world", metadata={"help": "passage JSONL, DPR TSV, dataset folder, or 'world'"})
    corpus_format: str | None = None
    output_dir: str = field(default="runs/index/world-ivfpq", metadata={"aliases": ["--out"]})
    encoder: str = field(default="minilm", metadata={"help": "passage encoder: minilm, hub id or path"})
    max_length: int = 256
    batch_size: int = 64
    shard_size: int = 100_000  # passages per shard: the unit of resumption and of work between processes
    shards_dir: str | None = field(default=None, metadata={"help": "where shards go (default OUT.build)"})
    keep_shards: bool = field(default=False, metadata={
        "help": "keep the shards: another index kind is then built from them without encoding again"})
    faiss: ScaleKind = "ivfpq"
    nlist: int = 4096
    nprobe: int = 64
    pq_m: int = 64
    hnsw_m: int = 32
    train_size: int = 200_000
    refine: int = 0
    recall_queries: int = 500
    world_seed: int = 0

    def __post_init__(self):
        for name in ("shard_size", "batch_size", "max_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def index_options(self) -> ScaleIndexOptions:
        return ScaleIndexOptions(kind=self.faiss, nlist=self.nlist, nprobe=self.nprobe, pq_m=self.pq_m,
                                 hnsw_m=self.hnsw_m, train_size=self.train_size, refine=self.refine,
                                 recall_queries=self.recall_queries)


def build(cfg: DenseScaleConfig) -> dict:
    import torch
    from accelerate import PartialState

    # cpu=True: processes started by torchrun on a machine without CUDA join one gloo group (else each runs alone)
    state = PartialState(cpu=not torch.cuda.is_available())
    index_cfg = IndexConfig(corpus=cfg.corpus, corpus_format=cfg.corpus_format, world_seed=cfg.world_seed)
    stream, source = stream_corpus(index_cfg)
    work = Path(cfg.shards_dir) if cfg.shards_dir else build_dir(Path(cfg.output_dir))
    encoder = MeanPoolingEncoder.from_name(cfg.encoder, max_length=cfg.max_length,
                                           device=str(state.device) if state.num_processes > 1 else "auto")
    settings = {"encoder": cfg.encoder, "max_length": cfg.max_length, "normalize": encoder.normalize,
                "shard_size": cfg.shard_size, "source": source}
    if state.is_main_process:
        check_settings(work, settings)
    state.wait_for_everyone()
    if not state.is_main_process:
        check_settings(work, settings)  # a process on another machine (shared disk) checks too
    start = time.perf_counter()
    n_shards = encode_shards(stream, encoder, work, shard_size=cfg.shard_size, batch_size=cfg.batch_size,
                             rank=state.process_index, world_size=state.num_processes,
                             show_progress=state.is_main_process)
    state.wait_for_everyone()
    encode_s = time.perf_counter() - start
    if not state.is_main_process:
        return {}
    shards = open_shards(work, n_shards)
    n = sum(len(s) for s in shards)
    if not n:
        raise DataError("the corpus holds no passages (every text empty?); nothing was written", source=cfg.corpus)
    with index_writer(cfg.output_dir) as tmp:
        import faiss
        import numpy as np

        concat_shards(shards, tmp / "embeddings.npy")
        embeddings = np.load(tmp / "embeddings.npy", mmap_mode="r")
        index, stats = build_index(shards, cfg.index_options(), embeddings)
        faiss.write_index(index, str(tmp / "index.faiss"))
        passages, _ = stream_corpus(index_cfg)
        save_store(tmp, (p for p in passages if p.text.strip()), {
            "kind": "dense", "encoder": cfg.encoder, "normalize": encoder.normalize, "max_length": cfg.max_length,
            "faiss": cfg.faiss, "refine": cfg.refine, **stats,
            "index_bytes": (tmp / "index.faiss").stat().st_size})
        meta = json.loads((tmp / META).read_text())
        if meta["num_passages"] != n:
            raise DataError(f"{meta['num_passages']} passages but {n} vectors: the corpus changed while encoding",
                            source=cfg.corpus)
        save_config(tmp / "config.yaml", cfg)
    if not cfg.keep_shards:
        remove(work)
    report = {"passages": n, "encode_s": encode_s, **stats, "index_bytes": meta["index_bytes"],
              "processes": state.num_processes}
    print(f"built {cfg.faiss} index over {n} passages ({state.num_processes} process(es), encoding "
          f"{encode_s:.1f}s): recall@10 vs exact {stats['recall10_vs_flat']:.3f} on {stats['recall_queries']} "
          f"held-out passages, index.faiss {meta['index_bytes'] / 1e6:.1f} MB -> {cfg.output_dir}")
    return report


def main(argv: list[str] | None = None) -> None:
    (cfg,) = parse_config((DenseScaleConfig,), argv, prog="python -m retrieval_adapt.build_dense")
    build(cfg)


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_cli(main, resume_hint="finished shards are kept in OUT.build/; rerun the same command to go on")


if __name__ == "__main__":
    sys.exit(cli())
