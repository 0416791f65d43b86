"""Build a BM25 or dense (faiss) index folder from a corpus.

    python -m retrieval_adapt.build_index --corpus world --kind bm25 --output_dir runs/index/world-bm25
    python -m retrieval_adapt.build_index --corpus world --bm25_scoring elasticsearch --output_dir runs/index/world-es
    python -m retrieval_adapt.build_index --corpus world --kind lucene --output_dir runs/index/world-lucene  # [lucene]
    python -m retrieval_adapt.build_index --corpus passages.jsonl --kind dense --encoder minilm --output_dir runs/idx
    python -m retrieval_adapt.build_index my_index.yaml --faiss hnsw

``--corpus`` is a canonical passage JSONL, a DPR-style TSV (id, text, title), a Hugging Face dataset folder
(``save_to_disk``; columns id, text, title), or ``world`` (the embedded world).
The folder appears complete or not at all: a build writes ``OUT.tmp`` and renames it to ``OUT`` when done (an
existing index is replaced only then), and ``OUT`` is locked while it runs.

A BM25 build reads the corpus as a stream, ``chunk_size`` passages at a time (memory is set by the chunk, not the
corpus: docs/scale.md), into ``OUT.build/``; a killed build rerun with the same command resumes after the last
finished chunk and writes the same index an uninterrupted build would. ``--bm25_scoring elasticsearch`` scores as
DRAGIN's Elasticsearch index did (title and body fields, Elasticsearch's English analyzer, k1 1.2, ``best_fields``
with tie breaker 0.5: docs/bm25_elasticsearch.md); ``--kind lucene`` builds that index with Lucene itself.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config, save_config
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage
from data_builders.passage_stream import fingerprint, iter_passages
from data_builders.readers import read_corpus
from data_builders.world import WorldConfig, build_world
from retrieval_adapt.bm25 import BM25Retriever
from retrieval_adapt.bm25_stream import StreamSettings, build_streamed
from retrieval_adapt.corpus_store import index_writer
from retrieval_adapt.es_bm25 import ElasticsearchBM25Retriever
from retrieval_adapt.lucene import LuceneRetriever


@dataclass
class IndexConfig:
    corpus: str = field(default="world", metadata={"help": "passage JSONL, DPR TSV, or 'world'"})
    corpus_format: str | None = field(default=None, metadata={
        "help": "force a corpus format (passages_jsonl, dpr_tsv, flashrag_jsonl, hf_dataset)"})
    output_dir: str = field(default="runs/index/world-bm25", metadata={"help": "index folder to write",
                                                                  "aliases": ["--out"]})
    kind: Literal["bm25", "dense", "lucene"] = "bm25"
    bm25_scoring: Literal["bm25s", "elasticsearch"] = field(default="bm25s", metadata={
        "help": "BM25 scoring: bm25s (one field, k1 1.5) or elasticsearch (DRAGIN's: title and body fields, "
                "Elasticsearch's English analyzer, k1 1.2, best_fields)"})
    encoder: str = field(default="minilm", metadata={"help": "dense passage encoder: minilm, hub id or path"})
    faiss: Literal["flat", "ivf", "hnsw"] = "flat"
    batch_size: int = 64
    max_length: int = 256
    world_seed: int = 0
    # BM25: passages tokenized per chunk; peak memory grows with it (about 0.5 GB at 100k of DPR-length passages)
    chunk_size: int = 100_000

    def __post_init__(self):
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")
        if self.chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {self.chunk_size}")
        if self.kind == "dense" and self.bm25_scoring != "bm25s":
            raise ValueError("bm25_scoring applies to BM25 indexes, not to --kind dense")


def load_corpus(cfg: IndexConfig):
    if cfg.corpus == "world":
        return build_world(WorldConfig(seed=cfg.world_seed)).passages
    return read_corpus(cfg.corpus, format=cfg.corpus_format)


def stream_corpus(cfg: IndexConfig) -> tuple[Iterable[Passage], dict[str, object]]:
    """The corpus as a stream, and what identifies it (a resumed build checks it is the same corpus)."""
    if cfg.corpus == "world":
        return build_world(WorldConfig(seed=cfg.world_seed)).passages, {"corpus": "world", "seed": cfg.world_seed}
    path = Path(cfg.corpus)
    if not path.exists():
        raise DataError("no such file", source=cfg.corpus)
    return iter_passages(path, cfg.corpus_format), {**fingerprint(path), "format": cfg.corpus_format}


def build_bm25(cfg: IndexConfig) -> BM25Retriever | ElasticsearchBM25Retriever:
    passages, source = stream_corpus(cfg)
    start = time.perf_counter()
    settings = StreamSettings(chunk_size=cfg.chunk_size, scoring=cfg.bm25_scoring)
    meta = build_streamed(passages, cfg.output_dir, settings=settings, source=source,
                          add_files=lambda folder: save_config(folder / "config.yaml", cfg))
    print(f"built bm25 index ({cfg.bm25_scoring} scoring) over {meta['num_passages']} passages in "
          f"{time.perf_counter() - start:.1f}s -> {cfg.output_dir}")
    return BM25Retriever.load(cfg.output_dir)


def build_lucene(cfg: IndexConfig):
    passages, _ = stream_corpus(cfg)
    start = time.perf_counter()
    with index_writer(cfg.output_dir) as tmp:
        meta = LuceneRetriever.build_into(tmp, passages, show_progress=True)
        save_config(tmp / "config.yaml", cfg)
    print(f"built lucene index over {meta['num_passages']} passages in {time.perf_counter() - start:.1f}s -> "
          f"{cfg.output_dir}")
    return LuceneRetriever.load(cfg.output_dir)


def build(cfg: IndexConfig):
    """Build the index and publish ``cfg.output_dir`` whole: the files go to ``OUT.tmp`` and replace ``OUT`` (an
    existing index included) only once complete; ``OUT`` is locked meanwhile, so two builds of it cannot interleave."""
    if cfg.kind == "bm25":
        return build_bm25(cfg)
    if cfg.kind == "lucene":
        return build_lucene(cfg)
    passages = load_corpus(cfg)
    if not passages:  # checked before anything is written
        raise DataError("the corpus holds no passages (every text empty?); nothing was written", source=cfg.corpus)
    start = time.perf_counter()
    with index_writer(cfg.output_dir) as tmp:
        # lazy: they import torch and faiss (~3.5 s), which a BM25 build and --help never need
        from retrieval_adapt.dense import DenseRetriever, FaissOptions
        from retrieval_adapt.encoders import MeanPoolingEncoder

        encoder = MeanPoolingEncoder.from_name(cfg.encoder, max_length=cfg.max_length)
        retriever = DenseRetriever.build(passages, encoder, faiss_options=FaissOptions(kind=cfg.faiss),
                                         batch_size=cfg.batch_size)
        retriever.write_to(tmp)
        save_config(tmp / "config.yaml", cfg)
    print(f"built {cfg.kind} index over {len(passages)} passages in {time.perf_counter() - start:.1f}s "
          f"-> {cfg.output_dir}")
    return retriever


def main(argv: list[str] | None = None) -> None:
    (cfg,) = parse_config((IndexConfig,), argv, prog="python -m retrieval_adapt.build_index")
    build(cfg)


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_cli(main, resume_hint="the index folder is as it was (a build is published only when complete); "
                                     "rerun the same command: a BM25 build resumes after its last finished chunk")


if __name__ == "__main__":
    sys.exit(cli())
