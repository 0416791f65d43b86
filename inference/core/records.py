"""The two records every part of the pipeline speaks: a QA example and a passage.

Canonical JSONL (one object per line) is the on-disk form of both:

* passage: ``{"id": str, "title": str, "text": str}``
* QA example: ``{"id": str, "question": str, "answers": [str, ...],
  "gold_passages": [passage, ...], "metadata": {...}}`` (the last two optional)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


class DataError(ValueError):
    """Bad input data. The message names the file, the line or record, and the field."""

    def __init__(self, message: str, *, source: str | None = None, record: Any = None, field: str | None = None):
        where = []
        if source is not None:
            where.append(str(source))
        if record is not None:
            where.append(f"record {record}")
        if field is not None:
            where.append(f"field '{field}'")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)
        self.source, self.record, self.field = source, record, field


@dataclass(frozen=True)
class Passage:
    """One retrievable unit. ``contents`` is what encoders and BM25 see (Contriever: title + " " + text)."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        return f"{self.title} {self.text}".strip() if self.title else self.text

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "text": self.text}

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str | None = None, record: Any = None) -> Passage:
        if not isinstance(d, dict):
            raise DataError(f"expected an object, got {type(d).__name__}", source=source, record=record)
        for key in ("id", "text"):
            if key not in d:
                raise DataError("missing", source=source, record=record, field=key)
        text = d["text"]
        if not isinstance(text, str):
            raise DataError(f"expected a string, got {type(text).__name__}", source=source, record=record, field="text")
        title = d.get("title") or ""
        if not isinstance(title, str):
            raise DataError(f"expected a string, got {type(title).__name__}", source=source, record=record,
                            field="title")
        return cls(id=str(d["id"]), title=title, text=text)


@dataclass
class QAExample:
    """A question with its gold answers (aliases), optional gold passages and free-form metadata
    (``popularity``, ``hop_type``, ``source``, ...)."""

    id: str
    question: str
    answers: list[str]
    gold_passages: list[Passage] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gold_passages"] = [p.to_dict() for p in self.gold_passages]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str | None = None, record: Any = None) -> QAExample:
        if not isinstance(d, dict):
            raise DataError(f"expected an object, got {type(d).__name__}", source=source, record=record)
        for key in ("id", "question", "answers"):
            if key not in d:
                raise DataError("missing", source=source, record=record, field=key)
        question = d["question"]
        if not isinstance(question, str) or not question.strip():
            raise DataError("expected a non-empty string", source=source, record=record, field="question")
        answers = d["answers"]
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise DataError("expected a list of strings", source=source, record=record, field="answers")
        answers = [a for a in answers if a.strip()]
        if not answers:
            raise DataError("no non-empty answer", source=source, record=record, field="answers")
        golds = d.get("gold_passages") or []
        if not isinstance(golds, list):
            raise DataError("expected a list", source=source, record=record, field="gold_passages")
        metadata = d.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise DataError("expected an object", source=source, record=record, field="metadata")
        return cls(
            id=str(d["id"]),
            question=question,
            answers=answers,
            gold_passages=[Passage.from_dict(p, source=source, record=record) for p in golds],
            metadata=metadata,
        )
