"""Passages of a corpus as a stream, one at a time, so that a corpus larger than memory can be indexed.

    for passage in iter_passages("psgs_w100.tsv"):          # DPR TSV (id, text, title), format detected
    for passage in iter_passages("corpus.jsonl"):           # canonical passage JSONL or FlashRAG ``contents``
    for passage in iter_passages("wiki_ds", format="hf_dataset")   # a datasets.Dataset saved with save_to_disk

:func:`read_corpus` reads a whole file into a list and merges repeated ids; a stream cannot remember 21M ids, so it
yields every record (empty texts included: the caller counts and drops them) and leaves repeated ids to the index
builder, which finds them with a sort of id hashes. Formats that only come whole (paragraphs shipped inside question
files) are read with :func:`read_corpus` and then streamed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage
from data_builders import readers_processed as proc
from data_builders.readers import CORPUS_FORMATS, detect_format, read_corpus
from data_builders.readers_release import iter_dpr_passages_tsv
from data_builders.source_files import Loc, existing_file, iter_jsonl

STREAM_FORMATS = ("passages_jsonl", "flashrag_jsonl", "dpr_tsv", "hf_dataset")


def corpus_format(path: str | Path, format: str | None = None) -> str:
    """The format named, or the one detected: a folder is a saved Hugging Face dataset."""
    if format:
        return format
    if Path(path).is_dir():
        return "hf_dataset"
    if Path(path).suffix == ".jsonl":  # detect_format reads a .jsonl whole; the first line tells as much
        with existing_file(path).open(encoding="utf-8-sig") as f:
            first = next((line for line in f if line.strip()), "")
        try:
            keys = set(json.loads(first)) if first else set()
        except (json.JSONDecodeError, TypeError):
            keys = set()
        if {"id", "contents"} <= keys and "text" not in keys:
            return "flashrag_jsonl"
        if {"id", "text"} <= keys:
            return "passages_jsonl"
    return detect_format(path)


def _iter_dpr_tsv(path: Path) -> Iterator[Passage]:
    return (passage for _, passage in iter_dpr_passages_tsv(path))


def _iter_hf_dataset(path: Path, batch: int = 10_000) -> Iterator[Passage]:
    import datasets  # lazy: importing it costs ~1 s, which the other formats never need

    try:
        ds = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as err:
        raise DataError(f"not a dataset saved with save_to_disk ({err})", source=str(path)) from err
    if isinstance(ds, datasets.DatasetDict):
        raise DataError(f"holds splits {list(ds)}; pass the folder of one split", source=str(path))
    cols = set(ds.column_names)
    if not ({"id", "text"} <= cols or {"id", "contents"} <= cols):
        raise DataError(f"columns {sorted(cols)}: expected id and text (title optional) or id and contents",
                        source=str(path))
    # Arrow batches keep memory at one batch whatever the dataset's size (the table itself is memory-mapped).
    for start in range(0, len(ds), batch):
        rows = ds[start:start + batch]
        for i in range(len(rows["id"])):
            if "text" in cols:
                yield Passage(id=str(rows["id"][i]), title=(rows["title"][i] or "") if "title" in cols else "",
                              text=rows["text"][i])
            else:
                yield proc.flashrag_passage({"id": rows["id"][i], "contents": rows["contents"][i]},
                                            Loc(str(path), record=start + i))


def iter_passages(path: str | Path, format: str | None = None) -> Iterator[Passage]:
    """Every passage record of a corpus, in file order, read as it is needed."""
    fmt = corpus_format(path, format)
    if fmt == "hf_dataset":
        yield from _iter_hf_dataset(Path(path))
        return
    p = existing_file(path)
    if fmt == "dpr_tsv":
        yield from _iter_dpr_tsv(p)
    elif fmt == "passages_jsonl":
        for loc, rec in iter_jsonl(p):
            yield Passage.from_dict(rec, source=loc.source, record=loc.record)
    elif fmt == "flashrag_jsonl":
        for loc, rec in iter_jsonl(p):
            yield proc.flashrag_passage(rec, loc)
    elif fmt in CORPUS_FORMATS or fmt:
        yield from read_corpus(p, format=fmt)  # formats that come whole: read, merged, then streamed


def fingerprint(path: str | Path) -> dict[str, object]:
    """What identifies a corpus file for a resumed build: a changed file must not be resumed into."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file())
        return {"path": str(p.resolve()), "bytes": sum(f.stat().st_size for f in files),
                "mtime": max((f.stat().st_mtime_ns for f in files), default=0)}
    st = p.stat()
    return {"path": str(p.resolve()), "bytes": st.st_size, "mtime": st.st_mtime_ns}
