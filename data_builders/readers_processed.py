"""Parsers for the processed formats the development files in ``shared/data`` come in (see its
SOURCES.md): IRCoT jsonl, MuSiQue, PopQA json with paragraphs (HippoRAG 2 subset) or
``input``/``output`` (model_collaboration), StrategyQA with its evidence paragraphs, FlashRAG
passage jsonl and ``{title, text}`` paragraph lists.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders.readers_release import popqa_example
from data_builders.source_files import (
    Loc,
    Parsed,
    Record,
    answer_list,
    load_json_records,
    make_passage,
    passage_id,
    require,
    require_list,
    require_str,
)

_MUSIQUE_HOPS = re.compile(r"^(\d+hop\d*)__")


def musique_hop_type(qid: str) -> str | None:
    """MuSiQue ids start with the hop structure: ``2hop__…``, ``3hop1__…``, ``4hop3__…``."""
    m = _MUSIQUE_HOPS.match(qid)
    return m.group(1) if m else None


def _flagged_paragraphs(items: list[Any], loc: Loc, key: str, text_key: str) -> tuple[list[Passage], list[Passage]]:
    """``(all, gold)`` from ``[{title, <text_key>, is_supporting}, ...]``."""
    paragraphs, gold = [], []
    for i, item in enumerate(items):
        ploc = loc.sub(f"{key} {i}")
        title = item.get("title") if isinstance(item, dict) else None
        p = make_passage(title if isinstance(title, str) else "", require_str(item, text_key, ploc, nonempty=False))
        paragraphs.append(p)
        if item.get("is_supporting"):
            gold.append(p)
    return paragraphs, gold


def _ircot_answers(objects: list[Any], loc: Loc) -> list[str]:
    """IRCoT ``answers_objects``: DROP-style ``{number, date{day, month, year}, spans}``."""
    answers: list[str] = []
    for obj in objects:
        if not isinstance(obj, dict):
            raise loc.error("expected a list of objects", field="answers_objects")
        answers += [s for s in obj.get("spans") or [] if isinstance(s, str)]
        if str(obj.get("number") or "").strip():
            answers.append(str(obj["number"]))
        date = obj.get("date") or {}
        parts = [str(date.get(k) or "").strip() for k in ("day", "month", "year")] if isinstance(date, dict) else []
        if any(parts):
            answers.append(" ".join(p for p in parts if p))
    return answer_list(answers, loc, "answers_objects")


def parse_ircot(records: list[Record], source: str) -> Iterator[Parsed]:
    """IRCoT processed jsonl (``question_id``, ``question_text``, ``answers_objects``, ``contexts``
    with ``is_supporting`` flags). ``source`` is the dataset: IRCoT keeps ``processed_data/<dataset>/``."""
    for loc, rec in records:
        qid = str(require(rec, "question_id", loc))
        paragraphs, gold = _flagged_paragraphs(rec.get("contexts") or [], loc, "contexts", "paragraph_text")
        metadata: dict[str, Any] = {"source": source}
        if musique_hop_type(qid):
            metadata["hop_type"] = musique_hop_type(qid)
        example = QAExample(
            id=qid,
            question=require_str(rec, "question_text", loc),
            answers=_ircot_answers(require_list(rec, "answers_objects", loc), loc),
            gold_passages=gold,
            metadata=metadata,
        )
        yield Parsed(example, paragraphs)


def parse_musique(records: list[Record]) -> Iterator[Parsed]:
    """MuSiQue (``answer``, ``answer_aliases``, ``paragraphs`` with ``is_supporting``). MuSiQue-Full's
    unanswerable questions (``answerable: false``) are skipped and counted."""
    for loc, rec in records:
        qid = str(require(rec, "id", loc))
        paragraphs, gold = _flagged_paragraphs(
            require_list(rec, "paragraphs", loc), loc, "paragraphs", "paragraph_text"
        )
        if rec.get("answerable") is False:
            yield Parsed(None, paragraphs, skip_reason="unanswerable (answerable: false)")
            continue
        aliases = rec.get("answer_aliases") or []
        if not isinstance(aliases, list):
            raise loc.error("expected a list", field="answer_aliases")
        metadata: dict[str, Any] = {"source": "musique"}
        if musique_hop_type(qid):
            metadata["hop_type"] = musique_hop_type(qid)
        answers = answer_list([require_str(rec, "answer", loc), *aliases], loc, "answer_aliases")
        yield Parsed(QAExample(qid, require_str(rec, "question", loc), answers, gold, metadata), paragraphs)


def parse_popqa_json(records: list[Record]) -> Iterator[Parsed]:
    """PopQA json: the HippoRAG 2 subset (``question``, ``possible_answers``, ``s_pop``, ``paragraphs``
    with ``is_supporting``) or model_collaboration's ``{dev: [...], test: [...]}`` of
    ``input``/``output`` records (``metadata["split"]`` says which)."""
    for loc, rec in records:
        if isinstance(rec, dict) and isinstance(rec.get("dev"), list):
            for split in ("dev", "test"):
                for i, sub in enumerate(rec.get(split) or []):
                    yield _popqa_record(loc.sub(f"{split} {i}"), sub, split)
        else:
            yield _popqa_record(loc, rec, None)


def parse_adapt_llm_popqa(records: list[Record]) -> Iterator[Parsed]:
    """The ADAPT-LLM authors' PopQA evaluation file (``popqa_test_test.json``, 3,567 questions): one object keyed by
    question id, each with ``question``, ``possible_answers``, ``s_pop`` and the precomputed ``contriever_passage``
    (its title run into the text), which becomes ``metadata["context_passage"]`` (``--gate_context_source file``)."""
    for loc, top in records:
        if not isinstance(top, dict):
            raise loc.error("expected one object keyed by question id")
        for qid, rec in top.items():
            sub = loc.sub(f"question {qid}")
            if not isinstance(rec, dict):
                raise sub.error("expected an object")
            example = popqa_example(rec, sub, str(qid), "question", "possible_answers")
            passage = rec.get("contriever_passage")
            if not isinstance(passage, str):
                raise sub.error("expected a string", field="contriever_passage")
            example.metadata["context_passage"] = passage
            yield Parsed(example)


def _popqa_record(loc: Loc, rec: Any, split: str | None) -> Parsed:
    question_key = "question" if isinstance(rec, dict) and "question" in rec else "input"
    answers_key = "possible_answers" if isinstance(rec, dict) and "possible_answers" in rec else "output"
    example = popqa_example(rec, loc, str(require(rec, "id", loc)), question_key, answers_key)
    paragraphs, gold = _flagged_paragraphs(rec.get("paragraphs") or [], loc, "paragraphs", "text")
    example.gold_passages = gold
    if split:
        example.metadata["split"] = split
    return Parsed(example, paragraphs)


def load_strategyqa_paragraphs(path: str | Path) -> list[tuple[Loc, str, Passage]]:
    """StrategyQA evidence paragraphs (``title``, ``para_index``, ``contents``) as
    ``(loc, evidence_id, passage)``; the evidence id is ``"<title>-<para_index>"``."""
    out = []
    for loc, rec in load_json_records(path):
        title = require_str(rec, "title", loc, nonempty=False)
        index = require(rec, "para_index", loc)
        out.append((loc, f"{title}-{index}", make_passage(title, require_str(rec, "contents", loc, nonempty=False))))
    return out


def _evidence_ids(evidence: Any) -> list[str]:
    """Paragraph ids in StrategyQA's nested ``evidence`` (annotators -> steps -> ids), first-seen
    order, without the ``operation`` / ``no_evidence`` markers."""
    if isinstance(evidence, str):
        return [] if evidence in ("operation", "no_evidence") else [evidence]
    if isinstance(evidence, list):
        return list(dict.fromkeys(i for e in evidence for i in _evidence_ids(e)))
    return []


def _yes_no(value: Any, loc: Loc) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str) and value.strip().lower() in ("yes", "no", "true", "false"):
        return "yes" if value.strip().lower() in ("yes", "true") else "no"
    raise loc.error(f"expected a boolean or yes/no, got {value!r}", field="answer")


def parse_strategyqa(records: list[Record], evidence: dict[str, Passage] | None) -> Iterator[Parsed]:
    """StrategyQA: boolean ``answer`` -> ``"yes"``/``"no"``. With the evidence paragraphs (``evidence``
    maps ``"<title>-<para_index>"`` to a passage) the referenced ones become gold passages."""
    for loc, rec in records:
        answer = _yes_no(require(rec, "answer", loc), loc)
        gold = [evidence[i] for i in _evidence_ids(rec.get("evidence")) if i in evidence] if evidence else []
        metadata: dict[str, Any] = {"source": "strategyqa"}
        for key in ("facts", "decomposition", "term"):
            if rec.get(key):
                metadata[key] = rec[key]
        example = QAExample(str(require(rec, "qid", loc)), require_str(rec, "question", loc), [answer], gold, metadata)
        yield Parsed(example, gold)


def strategyqa_missing_evidence(records: list[Record], evidence: dict[str, Passage]) -> int:
    """How many evidence ids the questions cite that the paragraph file lacks (logged by the reader)."""
    cited = {i for _, rec in records if isinstance(rec, dict) for i in _evidence_ids(rec.get("evidence"))}
    return len(cited - evidence.keys())


def flashrag_passage(rec: Any, loc: Loc) -> Passage:
    """FlashRAG / DPR jsonl: ``contents`` = ``'"Title"\\n' + text`` (quotes not always present)."""
    contents = require_str(rec, "contents", loc, nonempty=False)
    title, sep, text = contents.partition("\n")
    if not sep:
        title, text = "", contents
    if len(title) >= 2 and title.startswith('"') and title.endswith('"'):
        title = title[1:-1]
    return Passage(id=str(require(rec, "id", loc)), title=title.strip(), text=text.strip())


def title_text_passage(rec: Any, loc: Loc) -> Passage:
    """``{title, text}`` paragraph lists (HippoRAG corpora); the id is the content hash unless given."""
    text = require_str(rec, "text", loc, nonempty=False)
    title = rec.get("title") or ""
    if not isinstance(title, str):
        raise loc.error(f"expected a string, got {type(title).__name__}", field="title")
    return Passage(id=str(rec.get("id") or passage_id(title, text)), title=title, text=text)
