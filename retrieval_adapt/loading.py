"""Open any saved index folder as a :class:`~adaptive_rag.plumbing.retriever.Retriever`."""

from __future__ import annotations

from pathlib import Path

from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.retriever import Retriever
from retrieval_adapt.bm25 import BM25Retriever
from retrieval_adapt.corpus_store import damaged, load_meta
from retrieval_adapt.lucene import LuceneRetriever


def load_retriever(index_dir: str | Path, *, query_encoder: str | None = None, device: str = "auto") -> Retriever:
    """BM25, dense or Lucene by the folder's ``meta.json``; ``query_encoder`` swaps in an adapted dense query encoder.
    A missing, unfinished or damaged folder raises one clear error naming the folder and the rebuild command."""
    meta = load_meta(index_dir)
    kind = meta.get("kind")
    if kind == "bm25":
        if query_encoder:
            raise ConfigError(f"query_encoder applies to dense indexes only; {index_dir} holds a BM25 index")
        return BM25Retriever.load(index_dir)
    if kind == "dense":
        # lazy: retrieval_adapt.dense imports torch and faiss (~3.5 s), which a BM25 index never needs
        # (`python -m retrieval_adapt.search` over a BM25 index stays under a second)
        from retrieval_adapt.dense import DenseRetriever

        return DenseRetriever.load(index_dir, query_encoder=query_encoder, device=device)
    if kind == "lucene":  # the [lucene] extra: one line naming it when missing
        if query_encoder:
            raise ConfigError(f"query_encoder applies to dense indexes only; {index_dir} holds a Lucene index")
        return LuceneRetriever.load(index_dir)
    raise damaged(index_dir, f"meta.json names an unknown index kind '{kind}' (bm25, dense, lucene)")
