"""IIRC's release (``iirc_train_dev.tgz``: ``dev.json``, ``train.json``): a list of Wikipedia passages, each
with the questions written about it.

Answers as DRAGIN's loader takes them: a ``span`` answer is its spans' texts, ``value`` and ``binary`` answers
are ``answer_value`` (binary: yes / no), and ``none`` (unanswerable) questions are skipped, counted.
"""

from __future__ import annotations

from collections.abc import Iterator

from adaptive_rag.plumbing.records import QAExample
from data_builders.source_files import Loc, Parsed, Record, answer_list, require, require_list, require_str


def _answers(answer: dict, loc: Loc) -> list[str] | None:
    kind = require_str(answer, "type", loc)
    if kind == "none":
        return None
    if kind == "span":
        spans = require_list(answer, "answer_spans", loc)
        texts = [require_str(s, "text", loc.sub(f"span {i}")) for i, s in enumerate(spans)]
        return answer_list(texts, loc, "answer_spans")
    if kind in ("value", "binary"):
        return answer_list(str(require(answer, "answer_value", loc)), loc, "answer_value")
    raise loc.error(f"unknown answer type '{kind}' (span, value, binary, none)", field="type")


def parse_iirc(records: list[Record]) -> Iterator[Parsed]:
    for loc, passage in records:
        title = require_str(passage, "title", loc)
        for i, q in enumerate(require_list(passage, "questions", loc)):
            qloc = loc.sub(f"question {i}")
            answers = _answers(require(q, "answer", qloc), qloc)
            if answers is None:
                yield Parsed(None, skip_reason="unanswerable (answer type none)")
                continue
            qid = str(q.get("qid") or f"{title}-{i}")
            yield Parsed(QAExample(qid, require_str(q, "question", qloc), answers,
                                   metadata={"source": "iirc", "title": title}))
