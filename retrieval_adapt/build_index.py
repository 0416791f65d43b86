"""Build a BM25 or dense (faiss) index folder from a corpus.

    python -m retrieval_adapt.build_index --corpus world --kind bm25 --out runs/index/world-bm25
    python -m retrieval_adapt.build_index --corpus passages.jsonl --kind dense --encoder minilm --out runs/index/d
    python -m retrieval_adapt.build_index my_index.yaml --faiss hnsw

``--corpus`` is a canonical passage JSONL, a DPR-style TSV (id, text, title), or ``world`` (the embedded world).
The folder appears complete or not at all: a build writes ``OUT.tmp`` and renames it to ``OUT`` when done (an
existing index is replaced only then), and ``OUT`` is locked while it runs.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Literal

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config, save_config
from adaptive_rag.plumbing.errors import DataError
from data_builders.readers import read_corpus
from data_builders.world import WorldConfig, build_world
from retrieval_adapt.bm25 import BM25Retriever
from retrieval_adapt.corpus_store import index_writer


@dataclass
class IndexConfig:
    corpus: str = field(default="world", metadata={"help": "passage JSONL, DPR TSV, or 'world'"})
    corpus_format: str | None = field(default=None, metadata={"help": "force a corpus format (jsonl, dpr_tsv)"})
    out: str = field(default="runs/index/world-bm25", metadata={"help": "index folder to write"})
    kind: Literal["bm25", "dense"] = "bm25"
    encoder: str = field(default="minilm", metadata={"help": "dense passage encoder: minilm, hub id or path"})
    faiss: Literal["flat", "ivf", "hnsw"] = "flat"
    batch_size: int = 64
    max_length: int = 256
    world_seed: int = 0

    def __post_init__(self):
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")


def load_corpus(cfg: IndexConfig):
    if cfg.corpus == "world":
        return build_world(WorldConfig(seed=cfg.world_seed)).passages
    return read_corpus(cfg.corpus, format=cfg.corpus_format)


def build(cfg: IndexConfig):
    """Build the index and publish ``cfg.out`` whole: the files go to ``OUT.tmp`` and replace ``OUT`` (an existing
    index included) only once complete; ``OUT`` is locked meanwhile, so two builds of it cannot interleave."""
    passages = load_corpus(cfg)
    if not passages:  # checked before anything is written
        raise DataError("the corpus holds no passages (every text empty?); nothing was written", source=cfg.corpus)
    start = time.perf_counter()
    with index_writer(cfg.out) as tmp:
        if cfg.kind == "bm25":
            retriever = BM25Retriever.build(passages)
        else:
            # lazy: they import torch and faiss (~3.5 s), which a BM25 build and --help never need
            from retrieval_adapt.dense import DenseRetriever, FaissOptions
            from retrieval_adapt.encoders import MeanPoolingEncoder

            encoder = MeanPoolingEncoder.from_name(cfg.encoder, max_length=cfg.max_length)
            retriever = DenseRetriever.build(passages, encoder, faiss_options=FaissOptions(kind=cfg.faiss),
                                             batch_size=cfg.batch_size)
        retriever.write_to(tmp)
        save_config(tmp / "config.yaml", cfg)
    print(f"built {cfg.kind} index over {len(passages)} passages in {time.perf_counter() - start:.1f}s -> {cfg.out}")
    return retriever


def main(argv: list[str] | None = None) -> None:
    (cfg,) = parse_config((IndexConfig,), argv, prog="python -m retrieval_adapt.build_index")
    build(cfg)


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return (run_cli(main, resume_hint="the index folder is as it was (a build is published only when complete); "
                                       "rerun the same command to build it"))


if __name__ == "__main__":
    sys.exit(cli())
