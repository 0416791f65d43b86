"""Read QA datasets and passage corpora into :class:`QAExample` / :class:`Passage` lists.

    examples = read_qa("shared/data/hotpotqa/dev_subsampled.jsonl")        # format detected
    examples = read_qa("popQA.tsv", format="popqa_tsv", limit=100)
    examples = read_qa("nq_open@validation", format="hf")                   # needs internet
    corpus = read_corpus("psgs_w100.tsv")                                   # DPR passages
    paragraphs = read_corpus("shared/data/musique/migres/musique.json")     # paragraphs it ships

Formats (``QAFormat``; the original release ones live in :mod:`readers_release`, the processed
ones of ``shared/data`` in :mod:`readers_processed`, the hub one in :mod:`readers_hf`):
``qa_jsonl`` (canonical), ``hf``, ``popqa_tsv``, ``popqa_json``, ``hotpotqa``, ``2wikimultihopqa``,
``musique``, ``ircot``, ``strategyqa``, ``squad``, ``nq_open``, ``qa_json`` (plain question/answer
records), ``dpr_qa_tsv``. Corpus formats (``CorpusFormat``): ``passages_jsonl`` (canonical), ``dpr_tsv``,
``flashrag_jsonl``, ``title_text_json``, ``strategyqa_paragraphs``; ``read_corpus`` also takes a
QA format that ships paragraphs (gold and distractors) and returns those paragraphs.

Paragraphs shipped inside question files get content-hash ids (:func:`passage_id`), so gold
passages match the pooled corpus of :mod:`data_builders.corpus`. Bad input raises ``DataError``
naming file, line/record and field; records skipped on purpose are counted in a warning.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, get_args

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders import readers_processed as proc
from data_builders import readers_release as rel
from data_builders.readers_hf import read_hf_qa
from data_builders.readers_iirc import parse_iirc
from data_builders.source_files import (
    Loc,
    Parsed,
    Record,
    collect,
    dataset_name,
    dedup_by_id,
    existing_file,
    iter_tsv,
    load_json_records,
    passage_id,
)

__all__ = [
    "CORPUS_FORMATS",
    "QA_FORMATS",
    "CorpusFormat",
    "QAFormat",
    "detect_format",
    "passage_id",
    "read_corpus",
    "read_hf_qa",
    "read_passages_jsonl",
    "read_qa",
    "write_passages_jsonl",
    "write_qa_jsonl",
]

logger = logging.getLogger(__name__)

QAFormat = Literal[
    "qa_jsonl",
    "hf",
    "popqa_tsv",
    "popqa_json",
    "hotpotqa",
    "2wikimultihopqa",
    "musique",
    "ircot",
    "strategyqa",
    "squad",
    "nq_open",
    "qa_json",
    "dpr_qa_tsv",
    "iirc",
    "adapt_llm_popqa",
]
CorpusFormat = Literal["passages_jsonl", "dpr_tsv", "flashrag_jsonl", "title_text_json", "strategyqa_paragraphs"]
QA_FORMATS: tuple[str, ...] = get_args(QAFormat)
CORPUS_FORMATS: tuple[str, ...] = get_args(CorpusFormat)
# QA formats whose files carry paragraphs, so read_corpus can pool them.
PARAGRAPH_FORMATS = ("qa_jsonl", "popqa_json", "hotpotqa", "2wikimultihopqa", "musique", "ircot", "strategyqa", "squad")
STRATEGYQA_EVIDENCE_FILE = "strategyQA_aug_context.jsonl"
TWO_WIKI_ALIASES_FILE = "id_aliases.json"  # the 2WikiMultihopQA release: one {"Q_id", "aliases"} object per line


# ---- canonical JSONL -------------------------------------------------------------------------


def _parse_canonical(records: list[Record]) -> Iterator[Parsed]:
    for loc, rec in records:
        example = QAExample.from_dict(rec, source=loc.source, record=loc.record)
        yield Parsed(example, example.gold_passages)


def write_qa_jsonl(examples: Iterable[QAExample], path: str | Path) -> Path:
    return _write_jsonl((e.to_dict() for e in examples), path)


def read_passages_jsonl(path: str | Path) -> list[Passage]:
    """Canonical passage JSONL; empty texts dropped (counted), a duplicate id with other text is an error."""
    items = [
        (loc, Passage.from_dict(rec, source=loc.source, record=loc.record)) for loc, rec in load_json_records(path)
    ]
    return dedup_by_id(items, str(path))


def write_passages_jsonl(passages: Iterable[Passage], path: str | Path) -> Path:
    return _write_jsonl((p.to_dict() for p in passages), path)


def _write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Written beside and renamed into place: an interrupted write never leaves half a file under ``path``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return p


# ---- format registry ---------------------------------------------------------------------------


def _strategyqa(path: Path, records: list[Record]) -> Iterator[Parsed]:
    """StrategyQA questions; evidence paragraphs come from ``strategyQA_aug_context.jsonl`` beside
    the file when it is there (MIGRES layout), otherwise questions carry no gold passages."""
    sibling = path.parent / STRATEGYQA_EVIDENCE_FILE
    evidence = {eid: p for _, eid, p in proc.load_strategyqa_paragraphs(sibling)} if sibling.is_file() else None
    if evidence is not None:
        missing = proc.strategyqa_missing_evidence(records, evidence)
        if missing:
            logger.warning("%s: %d cited evidence paragraphs are not in %s", path, missing, sibling.name)
    return proc.parse_strategyqa(records, evidence)


def load_two_wiki_aliases(path: Path) -> dict[str, list[str]]:
    """``id_aliases.json`` of the 2WikiMultihopQA release: Wikidata id -> the answer's aliases (JSON lines)."""
    aliases: dict[str, list[str]] = {}
    for loc, rec in load_json_records(path):
        if rec == {}:  # an empty file written as "{}"
            continue
        qid, names = rec.get("Q_id"), rec.get("aliases")
        if not isinstance(qid, str) or not isinstance(names, list) or not all(isinstance(a, str) for a in names):
            raise loc.error("expected {\"Q_id\": str, \"aliases\": [str, ...]}")
        aliases[qid] = names
    return aliases


def _two_wiki(path: Path, records: list[Record]) -> Iterator[Parsed]:
    """2WikiMultihopQA; with ``id_aliases.json`` beside the file (the release's), each question's golds are its answer
    and the aliases of its ``answer_id``, as the DRAGIN authors' evaluation scores it (``WikiMultiHopQA``)."""
    sibling = path.parent / TWO_WIKI_ALIASES_FILE
    aliases = load_two_wiki_aliases(sibling) if sibling.is_file() else {}
    answer_ids = {str(rec.get("_id")): rec.get("answer_id") for _, rec in records}
    for parsed in rel.parse_hotpot_like(records, "2wikimultihopqa"):
        ex = parsed.example
        answer_id = answer_ids.get(ex.id)
        if isinstance(answer_id, str) and answer_id:
            ex.metadata["answer_id"] = answer_id
            extra = [a.strip() for a in aliases.get(answer_id, []) if a.strip()]
            ex.answers = list(dict.fromkeys([*ex.answers, *extra]))
        yield parsed


Parser = Callable[[Path, list[Record]], Iterator[Parsed]]
_QA_PARSERS: dict[str, tuple[Callable[[Path], list[Record]], Parser]] = {
    "qa_jsonl": (load_json_records, lambda p, r: _parse_canonical(r)),
    "popqa_tsv": (rel.load_popqa_tsv, lambda p, r: rel.parse_popqa_tsv(r)),
    "popqa_json": (load_json_records, lambda p, r: proc.parse_popqa_json(r)),
    "hotpotqa": (load_json_records, lambda p, r: rel.parse_hotpot_like(r, "hotpotqa")),
    "2wikimultihopqa": (load_json_records, _two_wiki),
    "musique": (load_json_records, lambda p, r: proc.parse_musique(r)),
    "ircot": (load_json_records, lambda p, r: proc.parse_ircot(r, dataset_name(p))),
    "strategyqa": (load_json_records, _strategyqa),
    "squad": (load_json_records, lambda p, r: rel.parse_squad(r)),
    "nq_open": (load_json_records, lambda p, r: rel.parse_plain_qa(r, "nq")),
    "qa_json": (load_json_records, lambda p, r: rel.parse_plain_qa(r, dataset_name(p))),
    "dpr_qa_tsv": (rel.load_dpr_qa_tsv, lambda p, r: rel.parse_plain_qa(r, dataset_name(p))),
    "iirc": (load_json_records, lambda p, r: parse_iirc(r)),
    "adapt_llm_popqa": (load_json_records, lambda p, r: proc.parse_adapt_llm_popqa(r)),
}
_CORPUS_READERS: dict[str, Callable[[Path], list[tuple[Loc, Passage]]]] = {
    "passages_jsonl": lambda p: [
        (loc, Passage.from_dict(r, source=loc.source, record=loc.record)) for loc, r in load_json_records(p)
    ],
    "dpr_tsv": rel.load_dpr_passages_tsv,
    "flashrag_jsonl": lambda p: [(loc, proc.flashrag_passage(r, loc)) for loc, r in load_json_records(p)],
    "title_text_json": lambda p: [(loc, proc.title_text_passage(r, loc)) for loc, r in load_json_records(p)],
    "strategyqa_paragraphs": lambda p: [(loc, psg) for loc, _, psg in proc.load_strategyqa_paragraphs(p)],
}


def _unknown(path: Any, why: str) -> DataError:
    return DataError(
        f"{why}; pass format= one of QA formats {list(QA_FORMATS)} or corpus formats {list(CORPUS_FORMATS)}",
        source=str(path),
    )


def _sniff_record(obj: Any, suffix: str) -> str | None:
    """The format a first record's keys point to; order matters (specific shapes first)."""
    if not isinstance(obj, dict):
        return None
    keys = set(obj)
    first = next(iter(obj.values()), None)
    rules: list[tuple[bool, str]] = [
        (isinstance(first, dict) and {"possible_answers", "contriever_passage"} <= set(first), "adapt_llm_popqa"),
        (isinstance(obj.get("data"), list), "squad"),
        (isinstance(obj.get("dev"), list) or bool({"possible_answers", "s_pop"} & keys), "popqa_json"),
        ({"question_text", "answers_objects"} <= keys, "ircot"),
        ("question_decomposition" in keys or {"paragraphs", "answerable"} <= keys, "musique"),
        (
            {"_id", "supporting_facts"} <= keys
            and "level" not in keys
            and ("evidences" in keys or obj.get("type") in rel.TWOWIKI_ONLY_TYPES),
            "2wikimultihopqa",
        ),
        ({"_id", "supporting_facts"} <= keys, "hotpotqa"),
        ({"qid", "question"} <= keys and isinstance(obj.get("answer"), bool), "strategyqa"),
        ({"questions", "links", "title", "text"} <= keys, "iirc"),
        ({"id", "question", "answers"} <= keys, "qa_jsonl"),
        (suffix == ".jsonl" and {"question", "answer"} <= keys and isinstance(obj.get("answer"), list), "nq_open"),
        ("question" in keys and bool({"answer", "answers"} & keys), "qa_json"),
        ({"contents", "para_index"} <= keys, "strategyqa_paragraphs"),
        ({"id", "contents"} <= keys, "flashrag_jsonl"),
        ({"id", "text"} <= keys, "passages_jsonl"),
        ({"title", "text"} <= keys, "title_text_json"),
    ]
    return next((fmt for hit, fmt in rules if hit), None)


def _sniff_tsv(path: Path) -> str | None:
    first = next(iter_tsv(path, header=False), None)
    row = first[1] if first else []
    if {"id", "text", "title"} <= set(row):
        return "dpr_tsv"
    if {"question", "possible_answers"} <= set(row):
        return "popqa_tsv"
    if len(row) == 2 and row[1].lstrip().startswith("["):
        return "dpr_qa_tsv"
    return None


def detect_format(path: str | Path) -> str:
    """Guess a file's format from its extension and the shape of its first record."""
    p = existing_file(path)
    if p.stat().st_size == 0:
        raise DataError("empty file", source=str(p))
    fmt = None
    if p.suffix in (".tsv", ".txt", ".csv"):
        fmt = _sniff_tsv(p)
    elif p.suffix in (".json", ".jsonl"):
        records = load_json_records(p)
        if not records:
            raise DataError("empty file", source=str(p))
        fmt = _sniff_record(records[0][1], p.suffix)
    if fmt is None:
        raise _unknown(p, "cannot tell the format from the extension and first record")
    return fmt


# ---- dispatchers -------------------------------------------------------------------------------


def _parse_file(path: str | Path, fmt: str | None) -> Iterator[Parsed]:
    p = existing_file(path)
    fmt = fmt or detect_format(p)
    if fmt in CORPUS_FORMATS:
        raise DataError(f"format '{fmt}' holds passages, not questions; use read_corpus", source=str(p))
    if fmt not in _QA_PARSERS:
        raise _unknown(p, f"unknown format '{fmt}'")
    loader, parser = _QA_PARSERS[fmt]
    return parser(p, loader(p))


def read_qa(path_or_name: str | Path, format: QAFormat | None = None, limit: int | None = None) -> list[QAExample]:
    """Questions from a file (format given or detected) or, with ``format="hf"``, from the
    Hugging Face hub as ``"name"`` or ``"name@split"`` (default split ``validation``)."""
    if format == "hf":
        name, _, split = str(path_or_name).partition("@")
        return read_hf_qa(name, split or "validation", limit=limit)
    return collect(_parse_file(path_or_name, format), str(path_or_name), limit)


def read_corpus(path: str | Path, format: CorpusFormat | QAFormat | None = None) -> list[Passage]:
    """Distinct passages of a corpus file, or all paragraphs (gold and distractors) a question file
    ships. Empty passages are dropped with a logged count."""
    p = existing_file(path)
    fmt = format or detect_format(p)
    if fmt in _CORPUS_READERS:
        return dedup_by_id(_CORPUS_READERS[fmt](p), str(p))
    if fmt in PARAGRAPH_FORMATS:
        items = ((Loc(str(p), record=i), para) for i, par in enumerate(_parse_file(p, fmt)) for para in par.paragraphs)
        return dedup_by_id(items, str(p))
    if fmt in QA_FORMATS:
        raise DataError(f"format '{fmt}' ships no paragraphs", source=str(p))
    raise _unknown(p, f"unknown format '{fmt}'")
