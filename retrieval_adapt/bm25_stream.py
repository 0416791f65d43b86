"""BM25 built from a stream of passages, with memory set by the chunk size, and resumable after a kill.

Scores are exact BM25 over the whole corpus, the same as one in-memory ``bm25s`` index: the corpus is read in
chunks of ``chunk_size`` passages; each chunk is tokenized with bm25s's tokenizer into one growing vocabulary, and its
term counts (as (term, document) pairs sorted by term), document lengths and passages go to a chunk folder beside the
output (``OUT.build/chunk-00007/``). Once the stream ends, the global document frequencies and average length are
known, and the columns of bm25s's CSC score matrix are assembled in passes over ranges of terms, each pass as large
as one chunk, with bm25s's own idf and term-frequency formulas. The result is bm25s's ``BM25.save`` layout, which
``bm25s.BM25.load(..., mmap=True)`` reads.

The ``elasticsearch`` scoring (:mod:`retrieval_adapt.es_bm25`) goes the same way with two fields, title and body,
each tokenized by Elasticsearch's English analyzer into the one vocabulary, each with its own arrays in the chunk
(``chunk-00007/title/``) and its own score matrix, computed with that field's statistics (:mod:`es_scoring`).

A chunk folder is written under a temporary name and renamed; ``manifest.json`` (written atomically after it) lists
the finished chunks. A rerun of the same build reads the manifest, skips the records of finished chunks and goes on;
chunk boundaries are fixed by record count, so the final index is byte for byte the one an uninterrupted build
writes. The build folder is removed once the index is published.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import Stemmer
from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer
from tqdm.auto import tqdm

from adaptive_rag.plumbing.atomic_files import recover, remove, write_text_atomic
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.progress import bar_options
from adaptive_rag.plumbing.record_log import FolderLock
from adaptive_rag.plumbing.records import Passage
from data_builders.passage_stream import corpus_format, iter_passages
from data_builders.readers_release import iter_dpr_passages_tsv
from data_builders.source_files import iter_jsonl
from retrieval_adapt import es_scoring
from retrieval_adapt.corpus_store import (
    META,
    StoreWriter,
    check_replaceable,
    check_sample,
    index_writer,
    passage_line,
)
from retrieval_adapt.es_analysis import EnglishAnalyzer

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
BM25_DIR = "bm25"
ES_VOCAB = "vocab.json"  # an elasticsearch index's one vocabulary, beside its title/ and body/ matrices
# The arrays of one field of a chunk: (term, document) pairs sorted by term, then document; term runs; lengths.
FIELD_ARRAYS = ("rows", "tf", "ucols", "colptr", "doc_len")
# and of its passages
DOC_ARRAYS = ("id_hash", "line_ends")
SCORINGS = ("bm25s", "elasticsearch")
# The fields each scoring indexes: bm25s one (title and text joined, its arrays at the chunk's top), Elasticsearch
# (DRAGIN's prep_elastic.py) the title and the body apart.
FIELDS = {"bm25s": ("",), "elasticsearch": ("title", "body")}
DEFAULT_K1 = {"bm25s": 1.5, "elasticsearch": es_scoring.K1}


@dataclass
class StreamSettings:
    """Everything that decides the index's bytes: a resumed build must use the same."""

    chunk_size: int = 100_000
    k1: float | None = None  # None: the scoring's own (bm25s 1.5, Elasticsearch's 1.2)
    b: float = 0.75
    method: str = "lucene"
    stemmer_language: str | None = "english"
    scoring: str = "bm25s"

    def __post_init__(self):
        if self.chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {self.chunk_size}")
        if self.scoring not in SCORINGS:
            raise ValueError(f"scoring must be {' or '.join(SCORINGS)}, got '{self.scoring}'")
        if self.k1 is None:
            self.k1 = DEFAULT_K1[self.scoring]
        if self.scoring == "elasticsearch":
            if self.method != "lucene":
                raise ValueError("the elasticsearch scoring is Lucene's BM25: method must be lucene")
            self.stemmer_language = "porter"  # part of Elasticsearch's english analyzer, not a choice
        if self.method not in ("lucene", "robertson", "atire"):  # bm25l/bm25+ need a non-occurrence array
            raise ValueError(f"method must be lucene, robertson or atire, got '{self.method}'")


def build_dir(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    return out.with_name(out.name + ".build")


class _State:
    """What the finished chunks add up to: the vocabulary (token -> id, in order of first use; one for all fields),
    each field's document frequencies, document and token counts."""

    def __init__(self, fields: tuple[str, ...] = ("",)) -> None:
        self.vocab: dict[str, int] = {}
        self.dfs = {f: np.zeros(0, dtype=np.int64) for f in fields}
        self.n_docs = 0
        self.n_tokens = 0

    @property
    def df(self) -> np.ndarray:
        """The document frequencies of a one-field (bm25s) index."""
        return self.dfs[""]

    def add_tokens(self, tokens: Iterable[str]) -> None:
        for t in tokens:
            self.vocab[t] = len(self.vocab)

    def add_df(self, ucols: np.ndarray, counts: np.ndarray, field: str = "") -> None:
        df = self.dfs[field]
        if len(self.vocab) > len(df):
            df = self.dfs[field] = np.concatenate([df, np.zeros(max(len(self.vocab) - len(df), len(df) // 2),
                                                                dtype=np.int64)])
        df[ucols] += counts  # each term once per chunk: no repeated index to lose


def _field_arrays(ids: np.ndarray, lens: np.ndarray, state: _State, field: str = "") -> dict[str, np.ndarray]:
    """One field's arrays from its global term ids (documents one after the other, ``lens`` terms each); the
    field's document frequencies in ``state`` are updated (its document count is not)."""
    doc = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
    # (term, doc) pairs, sorted by term then document: a chunk's slice of bm25s's CSC column order.
    keys, tf = np.unique((ids << 32) | doc, return_counts=True)
    cols = keys >> 32
    ucols, counts = np.unique(cols, return_counts=True)
    state.add_df(ucols, counts, field)
    return {"rows": ((keys & 0xFFFFFFFF) + state.n_docs).astype(np.int32), "tf": tf.astype(np.int32),
            "ucols": ucols.astype(np.int32), "colptr": np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            "doc_len": lens.astype(np.int32)}


def _doc_arrays(passages: list[Passage]) -> dict[str, Any]:
    lines = [passage_line(p) for p in passages]
    return {"id_hash": np.array([id_hash(p.id) for p in passages], dtype=np.uint64),
            "line_ends": np.cumsum([len(x) for x in lines], dtype=np.int64),
            "_lines": lines}


def _tokenize_chunk(passages: list[Passage], state: _State, stemmer) -> tuple[dict[str, Any], list[str]]:
    """One chunk's arrays, the tokens it adds to the vocabulary (``state`` is updated)."""
    tok = bm25s.tokenize([p.contents for p in passages], stopwords="en", stemmer=stemmer, return_ids=True,
                         show_progress=False)
    n = len(passages)
    lens = np.fromiter(map(len, tok.ids), dtype=np.int64, count=n)
    flat = np.fromiter(chain.from_iterable(tok.ids), dtype=np.int64, count=int(lens.sum()))
    local = [""] * len(tok.vocab)
    for token, i in tok.vocab.items():
        local[i] = token
    # Global ids are handed out in order of first use in the text (bm25s numbers its vocabulary in set order, which
    # changes with the process's hash seed): deterministic, so a resumed build writes the same index.
    used, first = np.unique(flat, return_index=True)
    l2g = np.full(len(local), -1, dtype=np.int64)
    new: list[str] = []
    for i in used[np.argsort(first)]:
        g = state.vocab.get(local[i])
        if g is None:
            g = len(state.vocab)
            state.vocab[local[i]] = g
            new.append(local[i])
        l2g[i] = g
    arrays = {"fields": {"": _field_arrays(l2g[flat], lens, state)}, **_doc_arrays(passages)}
    state.n_docs += n
    state.n_tokens += int(lens.sum())
    return arrays, new


def tokenize_fields(passages: list[Passage], state: _State, analyzer: EnglishAnalyzer) -> tuple[dict[str, Any],
                                                                                             list[str]]:
    """:func:`_tokenize_chunk` for the ``elasticsearch`` scoring: title and body analysed apart, into one vocabulary
    numbered in order of first use (title, body, next passage: the same numbering whatever the chunk size)."""
    before = len(state.vocab)
    number = state.vocab.setdefault
    ids: dict[str, list[int]] = {"title": [], "body": []}
    lens = {f: np.zeros(len(passages), dtype=np.int64) for f in ids}
    for i, p in enumerate(passages):
        for field, text in (("title", p.title), ("body", p.text)):
            terms = analyzer.analyze(text)
            lens[field][i] = len(terms)
            ids[field] += [number(t, len(state.vocab)) for t in terms]
    new = list(islice(reversed(state.vocab), len(state.vocab) - before))[::-1]  # from the end: O(new tokens)
    arrays = {"fields": {f: _field_arrays(np.asarray(ids[f], dtype=np.int64), lens[f], state, f) for f in ids},
              **_doc_arrays(passages)}
    state.n_docs += len(passages)
    state.n_tokens += sum(len(v) for v in ids.values())
    return arrays, new


def id_hash(pid: str) -> int:
    """8 bytes of a passage id, for the duplicate check a stream can afford."""
    return int.from_bytes(hashlib.blake2b(pid.encode("utf-8"), digest_size=8).digest(), "little")


def _write_chunk(folder: Path, arrays: dict[str, Any], new_tokens: list[str]) -> None:
    tmp = folder.with_name(folder.name + ".tmp")
    remove(tmp)
    tmp.mkdir(parents=True)
    for field, field_arrays in arrays["fields"].items():
        (tmp / field).mkdir(exist_ok=True)
        for name in FIELD_ARRAYS:
            np.save(tmp / field / f"{name}.npy", field_arrays[name])
    for name in DOC_ARRAYS:
        np.save(tmp / f"{name}.npy", arrays[name])
    (tmp / "passages.jsonl").write_bytes(b"".join(arrays["_lines"]))
    (tmp / "tokens.txt").write_text("\n".join(new_tokens), encoding="utf-8")
    remove(folder)
    tmp.rename(folder)


def _read_chunk(folder: Path, field: str | None = None) -> dict[str, np.ndarray]:
    """A chunk's per-passage arrays, or with ``field`` that field's arrays."""
    if field is None:
        return {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in DOC_ARRAYS}
    return {name: np.load(folder / field / f"{name}.npy", mmap_mode="r") for name in FIELD_ARRAYS}


def _chunk_tokens(folder: Path) -> list[str]:
    text = (folder / "tokens.txt").read_text(encoding="utf-8")
    return text.split("\n") if text else []


class _Manifest:
    def __init__(self, work: Path, settings: dict[str, Any]):
        self.path = work / MANIFEST
        self.work = work
        self.data: dict[str, Any] = {"settings": settings, "chunks": [], "complete": False}
        if self.path.is_file():
            try:
                found = json.loads(self.path.read_text())
            except (OSError, ValueError):
                found = None
            if isinstance(found, dict) and found.get("settings") == settings:
                self.data = found
            else:
                logger.warning("%s: another build's chunks (other settings or corpus); starting over", work)
                remove(work)
        work.mkdir(parents=True, exist_ok=True)

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return self.data["chunks"]

    def save(self) -> None:
        write_text_atomic(self.path, json.dumps(self.data, indent=1))


def stream_chunks(passages: Iterable[Passage], work: Path, settings: StreamSettings, source: dict[str, Any],
                  show_progress: bool = True) -> tuple[_Manifest, _State]:
    """Tokenize the stream into chunk folders under ``work``, resuming after the last finished chunk."""
    manifest = _Manifest(work, {**asdict(settings), "source": source})
    fields = FIELDS[settings.scoring]
    state = _State(fields)
    for entry in manifest.chunks:  # the vocabulary and frequencies of the chunks a killed run finished
        folder = work / entry["name"]
        state.add_tokens(_chunk_tokens(folder))
        for field in fields:
            arrays = _read_chunk(folder, field)
            state.add_df(np.asarray(arrays["ucols"]), np.diff(arrays["colptr"]), field)
        state.n_docs += entry["docs"]
        state.n_tokens += entry["tokens"]
    if manifest.data["complete"]:
        return manifest, state
    stream = iter(passages)
    done = sum(c["records"] for c in manifest.chunks)
    if done:
        logger.info("resuming: %d chunks (%d records) already done", len(manifest.chunks), done)
        for _ in islice(stream, done):
            pass
    if settings.scoring == "elasticsearch":
        tokenizer, tokenize = EnglishAnalyzer(), tokenize_fields
    else:
        tokenizer = Stemmer.Stemmer(settings.stemmer_language) if settings.stemmer_language else None
        tokenize = _tokenize_chunk
    # Bars on a terminal only; a log file gets one line per chunk instead.
    bar = tqdm(desc="BM25 chunks", unit="passage", initial=done, **bar_options(inner=True, disable=not show_progress))
    while records := list(islice(stream, settings.chunk_size)):
        kept = [p for p in records if p.text.strip()]  # as read_corpus: an empty passage is no passage
        name = f"chunk-{len(manifest.chunks):05d}"
        entry = {"name": name, "records": len(records), "docs": len(kept), "empty": len(records) - len(kept),
                 "tokens": 0, "entries": 0}
        if kept:
            before = state.n_tokens
            arrays, new = tokenize(kept, state, tokenizer)
            entry.update(tokens=state.n_tokens - before,
                         entries=sum(len(a["rows"]) for a in arrays["fields"].values()))
            _write_chunk(work / name, arrays, new)
        else:
            _write_chunk(work / name, _empty_arrays(fields), [])
        manifest.chunks.append(entry)
        manifest.save()
        bar.update(len(records))
        logger.info("chunk %s: %d passages, vocabulary %d", name, done + len(records), len(state.vocab))
        done += len(records)
    bar.close()
    manifest.data["complete"] = True
    manifest.save()
    return manifest, state


def _empty_arrays(fields: tuple[str, ...]) -> dict[str, Any]:
    field: dict[str, Any] = {name: np.zeros(0, dtype=np.int32) for name in FIELD_ARRAYS}
    field["colptr"] = np.zeros(1, dtype=np.int64)
    out: dict[str, Any] = {name: np.zeros(0, dtype=np.int32) for name in DOC_ARRAYS}
    out["fields"] = {f: field for f in fields}
    out["_lines"] = []
    return out


def _write_npy_header(f, dtype: np.dtype, n: int) -> None:
    np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                             "fortran_order": False, "shape": (n,)})


def _duplicate_id(work: Path, chunks: list[dict[str, Any]]) -> tuple[str, int] | None:
    """The first id two passages share and the number of records the stream had read by its last copy's chunk, or
    None: a sort of 8-byte id hashes (168 MB at 21M passages), then the chunks' passages holding a repeated hash."""
    hashes = np.concatenate([np.asarray(_read_chunk(work / c["name"])["id_hash"]) for c in chunks])
    hashes.sort()
    repeated = hashes[1:][hashes[1:] == hashes[:-1]]
    del hashes
    if not len(repeated):
        return None
    ids: list[str] = []
    read = last = 0
    for c in chunks:
        read += c["records"]
        where = np.flatnonzero(np.isin(_read_chunk(work / c["name"])["id_hash"], repeated[:1]))
        if len(where):
            lines = (work / c["name"] / "passages.jsonl").read_bytes().split(b"\n")
            ids += [json.loads(lines[i])["id"] for i in where]
            last = read
    return (ids[0], last) if len(set(ids)) < len(ids) else None  # a hash collision of distinct ids is no duplicate


def _id_places(source: dict[str, Any], pid: str, records: int) -> str:
    """Where passage id ``pid`` occurs among the corpus's first ``records`` records: the lines of a JSONL or TSV
    file, the rows of a saved dataset; "" for a stream without a file (one more pass over that part of the corpus,
    taken only when a build fails)."""
    path = source.get("path")
    if not path:
        return ""
    fmt = corpus_format(path, source.get("format"))
    if fmt in ("passages_jsonl", "flashrag_jsonl"):
        located = ((loc.line, str(rec.get("id")) if isinstance(rec, dict) else None) for loc, rec in iter_jsonl(path))
        unit = "lines"
    elif fmt == "dpr_tsv":
        located = ((loc.line, passage.id) for loc, passage in iter_dpr_passages_tsv(path))
        unit = "lines"
    else:
        located = ((n, passage.id) for n, passage in enumerate(iter_passages(path, fmt), 1))
        unit = "records"
    places = [str(where) for where, found in islice(located, records) if found == pid]
    return f" (on {unit} {', '.join(places[:-1])} and {places[-1]})" if len(places) > 1 else ""


class _Slices:
    """Reads ranges of a chunk's ``.npy`` arrays with plain reads: a memory map would keep every page it touched
    counted in the process's memory until the end of the build."""

    def __init__(self, folder: Path, names: tuple[str, ...] = ("rows", "tf")):
        self.files = {}
        for name in names:
            f = (folder / f"{name}.npy").open("rb")
            version = np.lib.format.read_magic(f)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            _, _, dtype = header(f)
            self.files[name] = (f, f.tell(), dtype)
        self.ucols = np.load(folder / "ucols.npy")
        self.colptr = np.load(folder / "colptr.npy")

    def read(self, name: str, start: int, end: int) -> np.ndarray:
        f, offset, dtype = self.files[name]
        f.seek(offset + start * dtype.itemsize)
        return np.fromfile(f, dtype=dtype, count=end - start)

    def close(self) -> None:
        for f, _, _ in self.files.values():
            f.close()


def assemble(work: Path, manifest: _Manifest, state: _State, settings: StreamSettings, out: Path,
             show_progress: bool = True) -> dict[str, Any]:
    """Write the score matrices and the passage store into ``out`` (an empty staging folder); returns meta."""
    chunks = [c for c in manifest.chunks if c["docs"]]
    n_docs = sum(c["docs"] for c in chunks)
    if not n_docs:
        raise DataError("the corpus holds no passages (every text empty?); nothing was written",
                        source=str(manifest.data["settings"]["source"].get("path")))
    dup = _duplicate_id(work, chunks)
    if dup is not None:
        source = manifest.data["settings"]["source"]
        raise DataError(f"passage id '{dup[0]}' appears more than once{_id_places(source, *dup)}; a streamed build "
                        "needs distinct ids (deduplicate the corpus)", source=str(source.get("path")))
    if n_docs >= 2**31:
        raise DataError(f"{n_docs} passages: bm25s's int32 document ids stop at 2**31", source=str(work))
    n_vocab = len(state.vocab)
    budget = max(max(c["entries"] for c in chunks), 1)
    folder = out / BM25_DIR
    folder.mkdir()
    nnz = 0
    field_stats = {}
    for field in FIELDS[settings.scoring]:
        df = state.dfs[field][:n_vocab]
        if len(df) < n_vocab:  # a field no chunk has a term in
            df = np.concatenate([df, np.zeros(n_vocab - len(df), dtype=np.int64)])
        doc_len = np.concatenate([np.asarray(_read_chunk(work / c["name"], field)["doc_len"]) for c in chunks])
        if settings.scoring == "elasticsearch":
            values, field_stats[field] = es_values(df, doc_len, settings)
        else:
            values = _bm25s_values(df, doc_len, settings)
        opened = [_Slices(work / c["name"] / field) for c in chunks]
        (folder / field).mkdir(exist_ok=True)
        nnz += _write_matrix(folder / field, opened, df, values, budget, f"BM25 assemble {field}".rstrip(),
                             show_progress)
        for ch in opened:
            ch.close()
    if settings.scoring == "elasticsearch":
        (folder / ES_VOCAB).write_text(json.dumps(state.vocab, ensure_ascii=False), encoding="utf-8")
        params = es_params(settings, n_docs, field_stats)
    else:
        vocab = dict(state.vocab)
        vocab[""] = n_vocab  # bm25s adds the empty token after the others, outside the matrix
        (folder / "vocab.index.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        params = {"k1": settings.k1, "b": settings.b, "delta": 0.5, "method": settings.method,
                  "idf_method": settings.method, "dtype": "float32", "int_dtype": "int32", "num_docs": n_docs,
                  "version": bm25s.__version__, "backend": "numpy"}
    (folder / "params.index.json").write_text(json.dumps(params, indent=4))
    writer = StoreWriter(out)
    for c in chunks:
        writer.add_lines((work / c["name"] / "passages.jsonl").read_bytes(),
                         np.asarray(_read_chunk(work / c["name"])["line_ends"]))
    n, digest = writer.close()
    return {"kind": "bm25", "scoring": settings.scoring, "stemmer_language": settings.stemmer_language,
            "num_passages": n, "passages_sha256": digest, "empty_skipped": sum(c["empty"] for c in manifest.chunks),
            "vocab_size": n_vocab, "nnz": nnz}


ValueFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _bm25s_values(df: np.ndarray, doc_len: np.ndarray, settings: StreamSettings) -> ValueFn:
    """bm25s's score of each (term, document) entry, from its term ids, document ids and term frequencies."""
    n_docs = len(doc_len)
    # bm25s: np.array(lengths).mean(), an exact integer sum (below 2**53) divided once
    avg_len = np.float64(int(doc_len.astype(np.int64).sum())) / n_docs
    idf_fn = _select_idf_scorer(settings.method)
    values, inverse = np.unique(df, return_inverse=True)
    # bm25s computes each term's idf with math.log on Python numbers into a float32 array: the same per distinct df
    idf = np.array([idf_fn(int(v), N=n_docs) if v else 0.0 for v in values], dtype=np.float32)[inverse]
    tfc_fn = _select_tfc_scorer(settings.method)

    def score(cols: np.ndarray, rows: np.ndarray, tf: np.ndarray) -> np.ndarray:
        tfc = tfc_fn(tf_array=tf.astype(np.float32), l_d=doc_len[rows].astype(np.float64), l_avg=avg_len,
                     k1=settings.k1, b=settings.b, delta=0.5)
        return (idf[cols] * tfc).astype(np.float32)

    return score


def es_field_stats(doc_len: np.ndarray) -> dict[str, Any]:
    """Lucene's statistics of one field: documents with a term in it, and the sum of their lengths."""
    return {"doc_count": int(np.count_nonzero(doc_len)), "sum_total_term_freq": int(doc_len.astype(np.int64).sum())}


def es_values(df: np.ndarray, doc_len: np.ndarray, settings: StreamSettings) -> tuple[ValueFn, dict[str, Any]]:
    """Elasticsearch's score of each entry in one field (:mod:`es_scoring`), and the field's statistics."""
    stats = es_field_stats(doc_len)
    avgdl = es_scoring.avg_length(stats["sum_total_term_freq"], stats["doc_count"])
    idf = es_scoring.idf(df, stats["doc_count"])

    def score(cols: np.ndarray, rows: np.ndarray, tf: np.ndarray) -> np.ndarray:
        return es_scoring.entry_scores(tf, doc_len[rows], idf[cols], avgdl, settings.k1, settings.b)

    return score, {**stats, "avgdl": float(avgdl)}


def es_matrices(passages: list[Passage]) -> tuple[dict[str, int], dict[str, tuple], dict[str, Any]]:
    """The ``elasticsearch`` scoring of ``passages`` all in memory: the vocabulary, each field's CSC matrix (data,
    indices, indptr) and the index parameters, equal to what a streamed build of them writes."""
    settings = StreamSettings(scoring="elasticsearch")
    state = _State(FIELDS["elasticsearch"])
    arrays, _ = tokenize_fields(passages, state, EnglishAnalyzer())
    n_vocab = len(state.vocab)
    matrices, stats = {}, {}
    for field, a in arrays["fields"].items():
        df = np.zeros(n_vocab, dtype=np.int64)
        df[: len(state.dfs[field])] = state.dfs[field][:n_vocab]
        values, stats[field] = es_values(df, np.asarray(a["doc_len"]), settings)
        # one chunk: its (term, document) entries are already in CSC order
        cols = np.repeat(np.arange(n_vocab), df)
        matrices[field] = (values(cols, a["rows"], a["tf"]), a["rows"],
                           np.concatenate([[0], np.cumsum(df)]).astype(np.int64))
    return dict(state.vocab), matrices, es_params(settings, len(passages), stats)


def es_params(settings: StreamSettings, n_docs: int, field_stats: dict[str, Any]) -> dict[str, Any]:
    return {"scoring": settings.scoring, "k1": settings.k1, "b": settings.b, "tie_breaker": es_scoring.TIE_BREAKER,
            "analyzer": EnglishAnalyzer.name, "num_docs": n_docs, "fields": field_stats}


def _write_matrix(folder: Path, opened: list[_Slices], df: np.ndarray, values: ValueFn, budget: int, desc: str,
                  show_progress: bool) -> int:
    """One field's CSC score matrix in bm25s's file names, in passes over term ranges of at most ``budget``
    entries (one term at least, however frequent); returns its number of entries."""
    indptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
    nnz = int(indptr[-1])
    n_vocab = len(df)
    with (folder / "data.csc.index.npy").open("wb") as fdata, (folder / "indices.csc.index.npy").open("wb") as fidx:
        _write_npy_header(fdata, np.float32, nnz)
        _write_npy_header(fidx, np.int32, nnz)
        c0 = 0
        bar = tqdm(total=nnz, desc=desc, unit="entry",
                   **bar_options(inner=True, disable=not show_progress))
        while c0 < n_vocab:
            c1 = max(c0 + 1, int(np.searchsorted(indptr, indptr[c0] + budget, side="right")) - 1)
            c1 = min(c1, n_vocab)
            rows, tf = _gather_columns(opened, indptr, c0, c1)
            cols = np.repeat(np.arange(c0, c1), df[c0:c1])
            fdata.write(values(cols, rows, tf).tobytes())
            fidx.write(rows.tobytes())
            bar.update(len(rows))
            c0 = c1
        bar.close()
    np.save(folder / "indptr.csc.index.npy", indptr)
    return nnz


def _gather_columns(chunks: list[_Slices], indptr: np.ndarray, c0: int, c1: int) -> tuple[np.ndarray, np.ndarray]:
    """The (document, tf) entries of terms c0..c1-1 in CSC order: term by term, documents ascending (chunks are
    in document order, and each chunk's entries are sorted by term, then document)."""
    size = int(indptr[c1] - indptr[c0])
    rows = np.empty(size, dtype=np.int32)
    tf = np.empty(size, dtype=np.int32)
    cursor = (indptr[c0:c1] - indptr[c0]).astype(np.int64)  # next free slot of each term in this pass
    for ch in chunks:
        i0, i1 = np.searchsorted(ch.ucols, [c0, c1])
        if i0 == i1:
            continue
        ptr = ch.colptr[i0:i1 + 1]
        e0, e1 = int(ptr[0]), int(ptr[-1])
        counts = np.diff(ptr)
        local = ch.ucols[i0:i1].astype(np.int64) - c0
        dest = np.repeat(cursor[local] - (ptr[:-1] - e0), counts) + np.arange(e1 - e0)
        rows[dest] = ch.read("rows", e0, e1)
        tf[dest] = ch.read("tf", e0, e1)
        cursor[local] += counts
    return rows, tf


def build_streamed(passages: Iterable[Passage], out_dir: str | Path, *, settings: StreamSettings | None = None,
                   source: dict[str, Any] | None = None, add_files: Callable[[Path], None] | None = None,
                   show_progress: bool = True) -> dict[str, Any]:
    """Build (or resume building) the BM25 index folder ``out_dir`` from ``passages``; returns its meta.

    ``source`` identifies the stream (a corpus fingerprint): a build folder left by another corpus or other
    settings is started over, never resumed into. ``add_files(folder)`` writes more files into the index folder.
    """
    settings = settings or StreamSettings()
    out = Path(out_dir)
    work = build_dir(out)
    recover(out)
    with FolderLock(out):  # the chunks too: two builds of one folder must not interleave them
        check_replaceable(out)
        try:
            manifest, state = stream_chunks(passages, work, settings, source or {}, show_progress=show_progress)
            with index_writer(out) as tmp:
                meta = assemble(work, manifest, state, settings, tmp, show_progress=show_progress)
                meta["check_sample"] = check_sample(tmp, meta["num_passages"])
                (tmp / META).write_text(json.dumps(meta, indent=2))
                if add_files is not None:
                    add_files(tmp)
        except DataError:  # the corpus must change before a rerun (which then starts over): keep no chunks
            remove(work)
            raise
        remove(work)
    return meta
