"""BM25 scored as DRAGIN's Elasticsearch index scored it, without a server: the ``elasticsearch`` setting of a BM25
index (``build_index --bm25_scoring elasticsearch``).

DRAGIN's ``prep_elastic.py`` indexes title and body as two fields, each analysed by Elasticsearch's ``english``
analyzer (:mod:`es_analysis`); a query is a ``multi_match`` of type ``best_fields`` over both with ``tie_breaker``
0.5, searched ``dfs_query_then_fetch`` (term statistics over the whole index), with BM25 at k1 1.2, b 0.75
(:mod:`es_scoring`). Here each field is a CSC score matrix in bm25s's file layout (``bm25/title/``,
``bm25/body/``, one vocabulary in ``bm25/vocab.json``), memory-mapped; a search adds up the columns of the query's
terms per field and combines the fields. Ties go to the passage earlier in the corpus, as Lucene's lower document id.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_rag.plumbing.records import Passage
from adaptive_rag.plumbing.retriever import Hit
from retrieval_adapt import es_scoring
from retrieval_adapt.bm25_stream import BM25_DIR, ES_VOCAB, FIELDS, es_matrices
from retrieval_adapt.corpus_store import damaged, index_writer, load_passages, save_store
from retrieval_adapt.es_analysis import EnglishAnalyzer

SCORING = "elasticsearch"
MATRIX_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")


class ElasticsearchBM25Retriever:
    """``search(queries, k)``; build in memory with :meth:`build` (or streamed: ``bm25_stream.build_streamed``
    with ``StreamSettings(scoring="elasticsearch")``), persist with :meth:`save`."""

    kind = "bm25"
    scoring = SCORING

    def __init__(self, vocab: dict[str, int], matrices: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                 params: dict[str, Any], passages):
        self.vocab = vocab
        self.matrices = matrices  # field -> (data, indices, indptr)
        self.params = params
        self.passages = passages
        self.analyzer = EnglishAnalyzer()
        self.tie_breaker = float(params.get("tie_breaker", es_scoring.TIE_BREAKER))

    @classmethod
    def build(cls, passages: list[Passage], *, show_progress: bool = False) -> ElasticsearchBM25Retriever:
        """All in memory, the same scores a streamed build of these passages writes."""
        if not passages:
            raise ValueError("cannot build a BM25 index over an empty corpus")
        vocab, matrices, params = es_matrices(passages)
        return cls(vocab, matrices, params, passages)

    def _field_entries(self, terms: Counter) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per field, the (document, score) entries of the query's terms, a term asked twice counting twice (as
        Lucene's BooleanQuery sums a repeated clause)."""
        out = []
        for data, indices, indptr in self.matrices.values():
            docs, values = [], []
            for term, count in terms.items():
                start, end = int(indptr[term]), int(indptr[term + 1])
                if start < end:
                    docs.append(np.asarray(indices[start:end]))
                    v = np.asarray(data[start:end])
                    values.append(v * np.float32(count) if count > 1 else v)
            out.append((np.concatenate(docs) if docs else np.zeros(0, np.int32),
                        np.concatenate(values) if values else np.zeros(0, np.float32)))
        return out

    def _rank(self, terms: Counter, k: int) -> list[Hit]:
        entries = self._field_entries(terms)
        docs, where = np.unique(np.concatenate([d for d, _ in entries]), return_inverse=True)
        if not len(docs):
            return []
        # each field's score: its clauses summed in double, as Lucene's disjunction does
        bounds = np.cumsum([0] + [len(d) for d, _ in entries])
        fields = [np.bincount(where[bounds[i]:bounds[i + 1]], weights=v.astype(np.float64), minlength=len(docs))
                  .astype(np.float32) for i, (_, v) in enumerate(entries)]
        scores = es_scoring.best_fields(fields, self.tie_breaker)
        if len(docs) > k:
            kth = np.partition(scores, len(docs) - k)[len(docs) - k]
            keep = np.flatnonzero(scores >= kth)
        else:
            keep = np.arange(len(docs))
        order = keep[np.lexsort((docs[keep], -scores[keep]))][:k]
        return [Hit(self.passages[int(docs[i])], float(scores[i])) for i in order if scores[i] > 0]

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        results = []
        for query in queries:
            # a query with no indexed term (all stopwords, or unseen words) has no ranking: no hits, as
            # Elasticsearch returns none
            terms = Counter(self.vocab[t] for t in self.analyzer.analyze(query) if t in self.vocab)
            results.append(self._rank(terms, k) if terms else [])
        return results

    def save(self, out_dir: str | Path) -> None:
        """Write the index folder whole or not at all (an existing index is replaced only once this one is done)."""
        with index_writer(out_dir) as tmp:
            self.write_to(tmp)

    def write_to(self, folder: Path) -> None:
        """The index files, in the layout a streamed build writes, into ``folder`` in place."""
        bm25 = folder / BM25_DIR
        for field, arrays in self.matrices.items():
            (bm25 / field).mkdir(parents=True, exist_ok=True)
            for name, array in zip(MATRIX_FILES, arrays):
                np.save(bm25 / field / name, np.asarray(array))
        (bm25 / ES_VOCAB).write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")
        (bm25 / "params.index.json").write_text(json.dumps(self.params, indent=4))
        save_store(folder, self.passages, {"kind": self.kind, "scoring": SCORING, "stemmer_language": "porter",
                                           "vocab_size": len(self.vocab),
                                           "nnz": sum(len(m[0]) for m in self.matrices.values())})

    @classmethod
    def load(cls, index_dir: str | Path, meta: dict[str, Any], *, mmap: bool = True) -> ElasticsearchBM25Retriever:
        passages = load_passages(index_dir, meta)
        folder = Path(index_dir) / BM25_DIR
        if not folder.is_dir():
            raise damaged(index_dir, f"{BM25_DIR}/ is missing")
        try:
            vocab = json.loads((folder / ES_VOCAB).read_text(encoding="utf-8"))
            params = json.loads((folder / "params.index.json").read_text())
            matrices = {field: tuple(np.load(folder / field / name, mmap_mode="r" if mmap else None)
                                     for name in MATRIX_FILES) for field in FIELDS[SCORING]}
        except (OSError, ValueError, EOFError) as err:  # a missing or cut-short file inside bm25/
            raise damaged(index_dir, f"{BM25_DIR}/ is unreadable ({type(err).__name__}: {str(err)[:120]})") from err
        if params.get("num_docs") != len(passages):
            raise damaged(index_dir, f"{BM25_DIR}/ indexes {params.get('num_docs')} documents for {len(passages)} "
                                     "passages")
        for field, (data, indices, indptr) in matrices.items():
            if len(indptr) != len(vocab) + 1 or len(data) != len(indices) or int(indptr[-1]) != len(data):
                raise damaged(index_dir, f"{BM25_DIR}/{field}/ does not match the vocabulary (a damaged copy?)")
        return cls(vocab, matrices, params, passages)

