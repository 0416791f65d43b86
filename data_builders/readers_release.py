"""Parsers for the datasets' original release formats: PopQA tsv, HotpotQA / 2WikiMultihopQA json,
SQuAD v1.1/v2 json, NQ-open jsonl and plain question/answer json, DPR question tsv (TriviaQA
topics) and DPR passage tsv (``psgs_w100.tsv``).

Each ``parse_*`` takes the records a loader in :mod:`readers_common` produced and yields
:class:`Parsed` items; :mod:`data_builders.readers` wires them to format names.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders.source_files import (
    Loc,
    Parsed,
    Record,
    answer_list,
    as_int,
    iter_tsv,
    json_list_string,
    make_passage,
    require,
    require_list,
    require_str,
)

# 2WikiMultihopQA question types that HotpotQA ("bridge" / "comparison") does not use: they tell the
# two apart when sniffing a file, as do 2Wiki's "evidences" and HotpotQA's "level".
TWOWIKI_ONLY_TYPES = frozenset({"compositional", "inference", "bridge_comparison"})


def popqa_example(rec: dict[str, Any], loc: Loc, qid: str, question_key: str, answers_key: str) -> QAExample:
    """A PopQA question; ``s_pop`` (monthly Wikipedia page views of the subject) becomes popularity."""
    metadata: dict[str, Any] = {"source": "popqa"}
    if "s_pop" in rec:
        metadata["popularity"] = as_int(rec["s_pop"], loc, "s_pop")
    for key, name in (("prop", "relation"), ("subj", "subject"), ("obj", "object")):
        if rec.get(key):
            metadata[name] = rec[key]
    return QAExample(
        id=qid,
        question=require_str(rec, question_key, loc),
        answers=json_list_string(require(rec, answers_key, loc), loc, answers_key),
        metadata=metadata,
    )


def load_popqa_tsv(path: str | Path) -> list[Record]:
    """Rows of the original ``popQA.tsv`` as dicts keyed by the header."""
    records: list[Record] = []
    for loc, row, header in iter_tsv(path):
        assert header is not None
        if len(row) != len(header):
            raise loc.error(f"expected {len(header)} tab-separated columns, got {len(row)}")
        records.append((loc, dict(zip(header, row, strict=True))))
    return records


def parse_popqa_tsv(records: list[Record]) -> Iterator[Parsed]:
    for loc, rec in records:
        require(rec, "s_pop", loc)  # the reason to read PopQA at all: popularity-stratified results
        yield Parsed(popqa_example(rec, loc, require_str(rec, "id", loc), "question", "possible_answers"))


def _context_paragraphs(rec: dict[str, Any], loc: Loc) -> list[Passage]:
    """HotpotQA / 2Wiki ``context``: a list of ``[title, [sentence, ...]]``."""
    paragraphs = []
    for i, item in enumerate(require_list(rec, "context", loc)):
        ok = isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], list)
        if not ok or not all(isinstance(s, str) for s in item[1]):
            raise loc.sub(f"context {i}").error("expected [title, [sentence, ...]]", field="context")
        # HotpotQA sentences carry their leading space, 2Wiki's do not: strip and join with one space.
        paragraphs.append(make_passage(item[0], " ".join(s.strip() for s in item[1] if s.strip())))
    return paragraphs


def _supporting_titles(rec: dict[str, Any], loc: Loc) -> set[str]:
    facts = rec.get("supporting_facts") or []
    if not isinstance(facts, list) or not all(isinstance(f, list) and f and isinstance(f[0], str) for f in facts):
        raise loc.error("expected a list of [title, sentence_id]", field="supporting_facts")
    return {f[0] for f in facts}


def parse_hotpot_like(records: list[Record], source: str) -> Iterator[Parsed]:
    """HotpotQA / 2WikiMultihopQA: gold passages are the context paragraphs whose title appears in
    ``supporting_facts``. Records without ``context`` (some MIGRES 2Wiki rows) keep no passages."""
    for loc, rec in records:
        qid = str(require(rec, "_id", loc))
        paragraphs = _context_paragraphs(rec, loc) if "context" in rec else []
        titles = _supporting_titles(rec, loc) if paragraphs else set()
        metadata: dict[str, Any] = {"source": source}
        if isinstance(rec.get("type"), str):
            metadata["hop_type"] = rec["type"]
        if isinstance(rec.get("level"), str):
            metadata["level"] = rec["level"]
        example = QAExample(
            id=qid,
            question=require_str(rec, "question", loc),
            answers=answer_list(require(rec, "answer", loc), loc, "answer"),
            gold_passages=[p for p in paragraphs if p.title in titles],
            metadata=metadata,
        )
        yield Parsed(example, paragraphs)


def parse_squad(records: list[Record]) -> Iterator[Parsed]:
    """SQuAD json: ``data`` -> articles -> ``paragraphs`` -> ``qas``. The paragraph is the gold
    passage, titled with the article title. SQuAD v2 unanswerable questions are skipped (counted)."""
    for loc, top in records:
        for a, article in enumerate(require_list(top, "data", loc)):
            aloc = loc.sub(f"data {a}")
            title = str(article.get("title") or "").replace("_", " ") if isinstance(article, dict) else ""
            for j, para in enumerate(require_list(article, "paragraphs", aloc)):
                yield from _squad_paragraph(para, aloc.sub(f"paragraph {j}"), title)


def _squad_paragraph(para: Any, loc: Loc, title: str) -> Iterator[Parsed]:
    passage = make_passage(title, require_str(para, "context", loc))
    qas = require_list(para, "qas", loc)
    if not qas:  # no question, but the paragraph still belongs in a pooled corpus
        yield Parsed(None, [passage], skip_reason="paragraph without questions")
    for k, qa in enumerate(qas):
        qloc = loc.sub(f"qa {k}")
        texts = [require_str(ans, "text", qloc, nonempty=False) for ans in require_list(qa, "answers", qloc)]
        if not any(t.strip() for t in texts) and qa.get("is_impossible"):
            yield Parsed(None, [passage], skip_reason="unanswerable (is_impossible)")
            continue
        example = QAExample(
            id=str(require(qa, "id", qloc)),
            question=require_str(qa, "question", qloc),
            answers=answer_list(texts, qloc, "answers"),
            gold_passages=[passage],
            metadata={"source": "squad", "title": title},
        )
        yield Parsed(example, [passage])


ID_KEYS = ("id", "_id", "qid", "question_id", "test_id")


def parse_plain_qa(records: list[Record], source: str) -> Iterator[Parsed]:
    """Question/answer records (NQ-open, Bamboogle, QA-only HotpotQA/2Wiki/MuSiQue files): ``question``
    and ``answer`` or ``answers`` (a string or aliases); ``type`` becomes the hop type."""
    for i, (loc, rec) in enumerate(records):
        question = require_str(rec, "question", loc)
        key = "answer" if "answer" in rec else "answers"
        answers = answer_list(require(rec, key, loc), loc, key)
        qid = next((str(rec[k]) for k in ID_KEYS if rec.get(k) is not None), f"{source}-{i}")
        metadata: dict[str, Any] = {"source": source}
        if isinstance(rec.get("type"), str):
            metadata["hop_type"] = rec["type"]
        yield Parsed(QAExample(qid, question, answers, metadata=metadata))


def load_dpr_qa_tsv(path: str | Path) -> list[Record]:
    """DPR/Anserini question files (``topics.dpr.trivia.test.txt``): no header, question then a
    Python-literal list of answers."""
    records: list[Record] = []
    for loc, row, _ in iter_tsv(path, header=False):
        if len(row) != 2:
            raise loc.error(f"expected 2 tab-separated columns (question, answers), got {len(row)}")
        try:
            answers = ast.literal_eval(row[1])
        except (ValueError, SyntaxError) as e:
            raise loc.error(f"not a Python list literal ({e.__class__.__name__})", field="answers") from e
        records.append((loc, {"question": row[0], "answers": answers}))
    return records


def iter_dpr_passages_tsv(path: str | Path) -> Iterator[tuple[Loc, Passage]]:
    """DPR ``psgs_w100.tsv``, one passage at a time: header ``id\\ttext\\ttitle`` (column order taken from the
    header). A stream, so the 21M-passage file never sits in memory (data_builders.passage_stream)."""
    for loc, row, header in iter_tsv(path):
        assert header is not None
        missing = [c for c in ("id", "text", "title") if c not in header]
        if missing:
            raise loc.error(f"header {header} lacks column(s) {missing}; expected id, text, title", field=missing[0])
        if len(row) != len(header):
            raise loc.error(f"expected {len(header)} tab-separated columns, got {len(row)}")
        rec = dict(zip(header, row, strict=True))
        yield loc, Passage(id=require_str(rec, "id", loc), title=rec["title"], text=rec["text"])


def load_dpr_passages_tsv(path: str | Path) -> list[tuple[Loc, Passage]]:
    """DPR ``psgs_w100.tsv`` as a list (:func:`iter_dpr_passages_tsv`)."""
    return list(iter_dpr_passages_tsv(path))
