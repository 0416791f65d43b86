"""BM25 over passages with ``bm25s`` (sparse-matrix BM25, Lucene scoring), English stopwords and stemming.

This is the default scoring, ``bm25s``: one field (title and text joined), bm25s's tokenizer and English stopwords,
Snowball stemming, k1 1.5, b 0.75. The ``elasticsearch`` scoring (DRAGIN's index: two fields, Elasticsearch's
analyzer and BM25) is :mod:`retrieval_adapt.es_bm25`; :meth:`BM25Retriever.build` and :meth:`BM25Retriever.load`
return it when asked or when the index records it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import bm25s
import Stemmer

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.progress import show_inner_progress
from adaptive_rag.plumbing.records import Passage
from adaptive_rag.plumbing.retriever import Hit
from retrieval_adapt.corpus_store import damaged, index_writer, load_meta, load_passages, save_store
from retrieval_adapt.es_bm25 import ElasticsearchBM25Retriever

# bm25s sets its own logger to DEBUG on import, so "Building index from tokens" reached every log handler.
logging.getLogger("bm25s").setLevel(logging.WARNING)


class BM25Retriever:
    """``search(queries, k)`` over a fixed passage list; build with :meth:`build`, persist with :meth:`save`."""

    kind = "bm25"
    scoring = "bm25s"  # what an evaluation records: bm25s here, "elasticsearch" for ElasticsearchBM25Retriever

    def __init__(self, index: bm25s.BM25, passages: list[Passage], *, stemmer_language: str | None = "english"):
        self.index = index
        self.passages = passages
        self.stemmer_language = stemmer_language
        self._stemmer = Stemmer.Stemmer(stemmer_language) if stemmer_language else None

    @classmethod
    def build(cls, passages: list[Passage], *, k1: float = 1.5, b: float = 0.75, method: str = "lucene",
              stemmer_language: str | None = "english", show_progress: bool = True,
              scoring: str = "bm25s") -> BM25Retriever | ElasticsearchBM25Retriever:
        """``scoring="elasticsearch"``: DRAGIN's Elasticsearch scoring, whose parameters are fixed (k1, b, method
        and stemmer_language are for bm25s)."""
        if scoring == ElasticsearchBM25Retriever.scoring:
            return ElasticsearchBM25Retriever.build(passages, show_progress=show_progress)
        if scoring != cls.scoring:
            raise ValueError(f"scoring must be bm25s or elasticsearch, got '{scoring}'")
        if not passages:
            raise ValueError("cannot build a BM25 index over an empty corpus")
        self = cls(bm25s.BM25(k1=k1, b=b, method=method), passages, stemmer_language=stemmer_language)
        # bm25s draws seven bars of its own per build: on a terminal only, never into a log file
        show_progress = show_inner_progress(show_progress)
        tokens = self._tokenize([p.contents for p in passages], show_progress=show_progress)
        if not any(tokens):  # bm25s fails on an empty vocabulary with an assertion of its own
            raise DataError(f"none of the {len(passages)} passages has a word BM25 can index (all empty, stopwords "
                            "or single characters)")
        self.index.index(tokens, show_progress=show_progress)
        return self

    def _tokenize(self, texts: list[str], show_progress: bool = False) -> list[list[str]]:
        return bm25s.tokenize(texts, stopwords="en", stemmer=self._stemmer, return_ids=False,
                              show_progress=show_progress)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        if not queries:
            return []
        k = min(k, len(self.passages))
        tokens = self._tokenize(list(queries))
        results: list[list[Hit] | None] = [None] * len(queries)
        # A query with no indexed term (all stopwords, or unseen words) has no BM25 ranking: return no hits
        # rather than k arbitrary passages with score 0.
        vocab = self.index.vocab_dict
        live = [i for i, t in enumerate(tokens) if any(w in vocab for w in t)]
        for i in set(range(len(queries))) - set(live):
            results[i] = []
        if live:
            docs, scores = self.index.retrieve([[w for w in tokens[i] if w in vocab] for i in live], k=k,
                                               show_progress=False, n_threads=0)
            for row, i in enumerate(live):
                results[i] = [Hit(self.passages[int(d)], float(s)) for d, s in zip(docs[row], scores[row])
                              if s > 0]
        return results  # type: ignore[return-value]

    def save(self, out_dir: str | Path) -> None:
        """Write the index folder whole or not at all (an existing index is replaced only once this one is done)."""
        with index_writer(out_dir) as tmp:
            self.write_to(tmp)

    def write_to(self, folder: Path) -> None:
        """The index files, written into ``folder`` in place (:meth:`save` is the safe way)."""
        self.index.save(folder / "bm25", show_progress=False)
        save_store(folder, self.passages, {"kind": self.kind, "scoring": self.scoring,
                                           "stemmer_language": self.stemmer_language,
                                           "num_passages": len(self.passages)})

    @classmethod
    def load(cls, index_dir: str | Path, *, mmap: bool = True) -> BM25Retriever | ElasticsearchBM25Retriever:
        """The index's own scoring: meta.json's ``scoring`` (an index built before it existed is bm25s)."""
        meta = load_meta(index_dir)
        if meta.get("kind") != cls.kind:
            raise DataError(f"holds a '{meta.get('kind')}' index, not a BM25 one", source=str(index_dir))
        scoring = meta.get("scoring", cls.scoring)
        if scoring == ElasticsearchBM25Retriever.scoring:
            return ElasticsearchBM25Retriever.load(index_dir, meta, mmap=mmap)
        if scoring != cls.scoring:
            raise damaged(index_dir, f"meta.json names an unknown BM25 scoring '{scoring}' (bm25s, elasticsearch)")
        passages = load_passages(index_dir, meta)
        folder = Path(index_dir) / "bm25"
        if not folder.is_dir():
            raise damaged(index_dir, "bm25/ is missing")
        try:
            index = bm25s.BM25.load(folder, mmap=mmap, show_progress=False)
        except (OSError, ValueError, KeyError, EOFError) as err:  # a missing or cut-short file inside bm25/
            raise damaged(index_dir, f"bm25/ is unreadable ({type(err).__name__}: {str(err)[:120]})") from err
        n_docs = index.scores.get("num_docs", len(passages))
        if n_docs != len(passages):
            raise damaged(index_dir, f"bm25/ indexes {n_docs} documents for {len(passages)} passages")
        return cls(index, passages, stemmer_language=meta.get("stemmer_language"))

