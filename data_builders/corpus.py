"""Build retrieval corpora: cut articles into DPR-style 100-word passages, or pool the paragraphs
that datasets ship into one deduplicated corpus.

    python -m data_builders.corpus --data_dir data --output_file runs/corpus.jsonl # a `data_builders.download` folder
    python -m data_builders.corpus ircot:dev_subsampled.jsonl wiki.tsv --output_file runs/corpus.jsonl

An input is ``PATH`` (format detected) or ``FORMAT:PATH`` with a format of
:func:`data_builders.readers.read_corpus`. Output is canonical passage JSONL.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from adaptive_rag.plumbing.cli import OneLineArgumentParser
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders.readers import CORPUS_FORMATS, QA_FORMATS, read_corpus, write_passages_jsonl
from data_builders.source_files import make_passage, norm_ws

logger = logging.getLogger(__name__)

# The development corpus of SPEC.md "Real data for development": every paragraph the question files
# of its table ship (gold and distractors) plus the generic Wikipedia passages. Paths are relative
# to shared/data; the second item is the read_corpus format.
SHARED_CORPUS_INPUTS: tuple[tuple[str, str], ...] = (
    ("hotpotqa/dev_subsampled.jsonl", "ircot"),
    ("2wikimultihopqa/migres/wikihop.json", "2wikimultihopqa"),
    ("musique/migres/musique.json", "musique"),
    ("strategyqa/migres/strategyQA_aug_context.jsonl", "strategyqa_paragraphs"),
    ("squad/dev-v1.1.json", "squad"),
    ("squad/test-v1.1.json", "squad"),
    ("popqa/hipporag2_subset_via_NeuroPath/popqa.json", "popqa_json"),
    ("wiki_corpus/sample_data.jsonl", "flashrag_jsonl"),
    ("wiki_corpus/2wikimultihopqa_corpus.json", "title_text_json"),
)


def split_into_passages(articles: Iterable[tuple[str, str]], words: int = 100) -> list[Passage]:
    """Cut ``(title, text)`` articles into passages of ``words`` whitespace tokens, as DPR built
    ``psgs_w100.tsv`` (the last passage of an article may be shorter). Ids are content hashes, so
    the same input always gives the same ids and pooling with other sources cannot collide."""
    if words < 1:
        raise ValueError(f"words must be >= 1, got {words}")
    passages = []
    for title, text in articles:
        tokens = text.split()
        for start in range(0, len(tokens), words):
            passages.append(make_passage(title, " ".join(tokens[start : start + words])))
    return passages


@dataclass
class PoolStats:
    """What pooling did: passages seen, kept, merged as duplicates, dropped for empty text."""

    seen: int = 0
    kept: int = 0
    duplicates: int = 0
    empty: int = 0


def pool_corpus_with_stats(sources: Iterable[Iterable[Passage | QAExample]]) -> tuple[list[Passage], PoolStats]:
    """Like :func:`pool_corpus`, also returning the counts."""
    stats = PoolStats()
    by_key: dict[tuple[str, str], Passage] = {}
    by_id: dict[str, tuple[str, str]] = {}
    for i, source in enumerate(sources):
        for item in source:
            for p in item.gold_passages if isinstance(item, QAExample) else [item]:
                stats.seen += 1
                key = (norm_ws(p.title), norm_ws(p.text))
                if not key[1]:
                    stats.empty += 1
                elif key in by_key:
                    stats.duplicates += 1
                elif by_id.setdefault(p.id, key) != key:
                    raise DataError(
                        f"id '{p.id}' names two different passages (titles '{by_id[p.id][0]}' and '{key[0]}')",
                        source=f"pool_corpus input {i}",
                        field="id",
                    )
                else:
                    by_key[key] = p
    stats.kept = len(by_key)
    if stats.empty:
        logger.warning("pool_corpus: skipped %d passages with empty text", stats.empty)
    return list(by_key.values()), stats


def pool_corpus(sources: Iterable[Iterable[Passage | QAExample]]) -> list[Passage]:
    """Pool passages from several sources into one corpus, first occurrence wins.

    A source is a list of passages (e.g. ``read_corpus(file)``, which gives all paragraphs a question
    file ships) or of QA examples (their gold passages only). Passages are the same when title and
    text match after collapsing whitespace; empty texts are dropped with a logged count. Two
    different passages with one id raise ``DataError``.
    """
    return pool_corpus_with_stats(sources)[0]


def find_shared_data_dir() -> Path | None:
    """``shared/data`` beside the project checkout (the development layout), if it exists."""
    candidate = Path(__file__).resolve().parents[2] / "shared" / "data"
    return candidate if candidate.is_dir() else None


def pooled_shared_corpus(shared_data_dir: str | Path) -> list[Passage]:
    """The SPEC.md development corpus from a ``shared/data`` directory (:data:`SHARED_CORPUS_INPUTS`)."""
    root = Path(shared_data_dir)
    if not root.is_dir():
        raise DataError("no such directory (the shared development data)", source=str(root))
    return pool_corpus(read_corpus(root / rel, fmt) for rel, fmt in SHARED_CORPUS_INPUTS)  # type: ignore[arg-type]


def downloaded_corpus_inputs(data_dir: str | Path) -> list[tuple[Path, str]]:
    """The paragraph files of a ``python -m data_builders.download`` folder (its ``manifest.json``): every
    paragraph its question files ship and its passage files, except the DPR Wikipedia split (21M passages: index
    ``dpr-wiki/psgs_w100.tsv`` directly rather than pooling it in memory)."""
    root = Path(data_dir)
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        raise DataError("no manifest.json: not a folder written by `python -m data_builders.download`",
                        source=str(root))
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    return [(root / rel, fmt) for entry in manifest.values() for rel, fmt in entry.get("corpus", [])
            if fmt != "dpr_tsv"]


def parse_input(spec: str) -> tuple[Path, str | None]:
    """``FORMAT:PATH`` or ``PATH``; only a known format name counts as a prefix."""
    head, sep, tail = spec.partition(":")
    if sep and head in CORPUS_FORMATS + QA_FORMATS:
        return Path(tail), head
    return Path(spec), None


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog="python -m data_builders.corpus",
        description="Pool passages and the paragraphs question files ship into one canonical corpus JSONL.",
    )
    parser.add_argument(
        "inputs",
        nargs="*",
        help=f"PATH or FORMAT:PATH; formats: {', '.join(CORPUS_FORMATS)} or a QA format that ships paragraphs",
    )
    parser.add_argument("--data_dir", "--data", type=Path,
                        help="add the paragraphs of a `python -m data_builders.download` folder")
    parser.add_argument("--shared_data_dir", "--shared-data", type=Path,
                        help="add the development corpus from a shared/data dir")
    parser.add_argument("--output_file", "-o", "--output", type=Path, required=True,
                        help="canonical passage JSONL to write")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    specs = [parse_input(s) for s in args.inputs]
    if args.shared_data_dir:
        specs += [(args.shared_data_dir / rel, fmt) for rel, fmt in SHARED_CORPUS_INPUTS]
    if args.data_dir:
        try:
            specs += downloaded_corpus_inputs(args.data_dir)
        except DataError as e:
            parser.exit(2, f"error: {e}\n")
    if not specs:
        parser.error("give at least one input, --data_dir or --shared_data_dir")
    if args.output_file.is_dir():  # checked before the inputs are read, which can take minutes
        parser.error(f"--output_file {args.output_file} is a folder; name the JSONL file to write")
    try:
        sources = []
        for path, fmt in specs:
            sources.append(read_corpus(path, fmt))  # type: ignore[arg-type]
            print(f"{len(sources[-1]):>7} passages  {path}" + (f"  ({fmt})" if fmt else ""))
        passages, stats = pool_corpus_with_stats(sources)
    except DataError as e:
        parser.exit(2, f"error: {e}\n")
    try:
        write_passages_jsonl(passages, args.output_file)
    except OSError as e:
        parser.exit(2, f"error: cannot write {args.output_file}: {e.strerror or e}\n")
    print(
        f"{stats.kept:>7} passages written to {args.output_file} "
        f"({stats.seen} read, {stats.duplicates} duplicates merged, {stats.empty} empty dropped)"
    )
    return 0


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return main()


if __name__ == "__main__":
    sys.exit(cli())
