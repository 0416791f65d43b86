"""Check an index folder against what its build recorded, and against its corpus.

    python -m retrieval_adapt.check_index runs/index/wiki-bm25
    python -m retrieval_adapt.check_index runs/index/wiki-bm25 --corpus psgs_w100.tsv

Checks, in order (the first failure is one line, exit status 2): every file the build listed is there with its size;
the passage count of the store, the search index and the build agree; the sha256 of ``passages.jsonl`` is the one
recorded at build time; with ``--corpus``, the corpus (read as the build read it: empty texts skipped) holds the same
passages in the same order; and a sample of passages, recorded at build time, is found by the index when searched
with its own text (a truncated or mismatched index loses them). An index that fills the disk or is cut short cannot
pass, unlike a count that is only looked at.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from tqdm.auto import tqdm

from adaptive_rag.plumbing.cli import OneLineArgumentParser, run_cli
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.progress import bar_options
from data_builders.passage_stream import iter_passages
from data_builders.question_loader import file_hash
from retrieval_adapt.corpus_store import PASSAGES, damaged, load_meta, load_passages, passage_line
from retrieval_adapt.loading import load_retriever


def check_corpus(index_dir: Path, corpus: str, corpus_format: str | None, meta: dict) -> None:
    """The corpus streamed as the build streamed it: same count, same bytes; names the first passage that differs."""
    store = load_passages(index_dir, meta)
    digest = hashlib.sha256()
    n = 0
    first_diff = None
    for p in tqdm(iter_passages(corpus, corpus_format), desc="corpus", unit="passage", **bar_options(inner=True)):
        if not p.text.strip():
            continue
        line = passage_line(p)
        digest.update(line)
        if first_diff is None and (n >= len(store) or passage_line(store[n]) != line):
            first_diff = (n, p.id)
        n += 1
    if n != len(store):
        raise DataError(f"the corpus holds {n} passages, the index {len(store)}: the index does not cover this "
                        "corpus (rebuild it from this file)", source=str(index_dir))
    if digest.hexdigest() != meta.get("passages_sha256") or first_diff is not None:
        where = f"; first difference at passage {first_diff[0]} (id {first_diff[1]})" if first_diff else ""
        raise DataError(f"the corpus differs from the indexed passages{where}: rebuild the index from this file",
                        source=str(index_dir))


def check_sample(index_dir: Path, meta: dict, k: int) -> int:
    """Search each recorded sample passage by its own text; returns how many were checked."""
    sample = meta.get("check_sample") or []
    if not sample:
        return 0
    retriever = load_retriever(index_dir)
    store = retriever.passages
    passages = []
    for pos, pid in sample:
        if pos >= len(store) or store[pos].id != pid:
            raise damaged(index_dir, f"passage {pos} should be id {pid} (recorded at build time)")
        passages.append(store[pos])
    hits = retriever.search([p.contents for p in passages], k)
    lost = [p.id for p, row in zip(passages, hits) if p.id not in {h.passage.id for h in row}]
    if lost:
        raise damaged(index_dir, f"{len(lost)} of {len(passages)} sampled passages are not found by their own text "
                                 f"(first: id {lost[0]}); the search index does not match its passages")
    return len(passages)


def check(index_dir: str | Path, corpus: str | None = None, corpus_format: str | None = None, k: int = 10) -> str:
    """All checks; returns the summary line, raises a one-line ``DataError`` on the first failure."""
    folder = Path(index_dir)
    meta = load_meta(folder)  # every listed file there, with its size
    store = load_passages(folder, meta)  # count of the store == count indexed
    recorded = meta.get("passages_sha256")
    if recorded is None:
        raise damaged(folder, f"{folder / 'meta.json'} records no content hash (built before check_index existed)")
    actual = file_hash(folder / PASSAGES)
    if actual != recorded:
        raise damaged(folder, f"{PASSAGES} has sha256 {actual[:12]}..., the build wrote {recorded[:12]}... "
                              "(changed after the build)")
    if corpus is not None:
        check_corpus(folder, corpus, corpus_format, meta)
    found = check_sample(folder, meta, k)
    against = f", matches {corpus}" if corpus else ""
    return (f"ok: {folder}: {len(store)} passages, sha256 {recorded[:12]}...{against}; {found} sampled passages "
            "found by their own text")


def main(argv: list[str] | None = None) -> None:
    parser = OneLineArgumentParser(prog="python -m retrieval_adapt.check_index",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("index", help="index folder written by retrieval_adapt.build_index")
    parser.add_argument("--corpus", default=None, help="the corpus the index should cover (file or dataset folder)")
    parser.add_argument("--corpus_format", default=None, help="force the corpus format (as build_index)")
    parser.add_argument("--top_k", "-k", type=int, default=10,
                        help="a sampled passage must be among the top k for its text")
    args = parser.parse_args(argv)
    print(check(args.index, args.corpus, args.corpus_format, args.top_k))


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return run_cli(main, resume_hint="nothing was written")


if __name__ == "__main__":
    sys.exit(cli())
