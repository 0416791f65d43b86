"""The records every part of the pipeline speaks: a QA example and a passage going in, a prediction record (with its
retrieval records) coming out.

Canonical JSONL (one object per line) is the on-disk form of all of them:

* passage: ``{"id": str, "title": str, "text": str}``
* QA example: ``{"id": str, "question": str, "answers": [str, ...],
  "gold_passages": [passage, ...], "metadata": {...}}`` (the last two optional)
* prediction (``predictions.jsonl``): :class:`PredictionRecord` (its docstring lists the keys)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.metrics import extract_answer


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


# --- what a method returns per question: the prediction record (one line of predictions.jsonl) -----------------


@dataclass
class RetrievalRecord:
    """One retrieval a question made: in which round, with which query, what came back. ``position`` (answer tokens
    written before it) and ``trigger_score`` exist for the engine's methods only; the gate and Iter-RetGen leave
    them ``None`` and they are not written. ``stopword_hits``: every word above θ was a stopword (QFS then read
    those); written only when true."""

    round: int
    query: str
    doc_ids: list[str]
    position: int | None = None
    trigger_score: float | None = None
    stopword_hits: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"round": self.round}
        if self.position is not None:
            d["position"] = self.position
        if self.trigger_score is not None:
            d["trigger_score"] = self.trigger_score
        d.update(query=self.query, doc_ids=list(self.doc_ids))
        if self.stopword_hits:
            d["stopword_hits"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RetrievalRecord:
        return cls(round=d["round"], query=d["query"], doc_ids=list(d["doc_ids"]), position=d.get("position"),
                   trigger_score=d.get("trigger_score"), stopword_hits=bool(d.get("stopword_hits", False)))


@dataclass
class IterationScore:
    """Iter-RetGen's iteration t of one question: its extracted answer and metrics (answer_recall, gold_recall where
    there are gold passages, em, f1, precision, recall, acc), written as one flat object."""

    answer: str
    metrics: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"answer": self.answer, **self.metrics}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IterationScore:
        return cls(answer=d.get("answer", ""), metrics={k: v for k, v in d.items() if k != "answer"})


@dataclass
class GateDecision:
    """What ADAPT-LLM's gate (and NR / AR / popularity) adds to a prediction: the policy, whether it retrieved and
    which output answered, p(<RET> first), the question's popularity, every prompt's output (``None`` where that
    prompt was not asked), and the record of the inner method that answered the retrieval path, if one did. Every
    field is written, ``None`` included."""

    policy: str
    retrieved: bool
    answered_by: str
    p_ret: float | None = None
    popularity: float | None = None
    parametric_output: str | None = None
    closed_book_output: str | None = None
    context_output: str | None = None
    inner: PredictionRecord | None = None


# Keys of a prediction record that do not belong to the record of an inner method (the gate's own record has them).
_OUTER_KEYS = ("id", "question", "answers", "answer")


@dataclass
class PredictionRecord:
    """One question's provenance as every runner returns it (the engine's methods, Iter-RetGen, the gate) and the
    scorer reads it; ``to_dict`` is one line of ``predictions.jsonl``.

    ``llm_forward_passes``: model calls the question's prompts took part in; ``generated_tokens``: every token
    generated for it, kept or discarded; ``output_tokens`` (engine only): tokens of the final output.
    ``batch_mean_seconds`` is *not* this question's own time: questions decode together, so the wall time of the
    batch (chunk) the question ran in is divided evenly among that batch's questions; the mean over a run is the
    run's seconds per question. Files written before it had its name call it ``seconds``, which still reads.
    Optional parts, written only where present: ``rounds`` (engine, Iter-RetGen), ``signals`` (the engine with
    ``keep_signals``), ``iterations`` (Iter-RetGen), ``gate`` (the gate methods; its fields sit at the top level of
    the line). ``answer``, the answer extracted from ``output``, is written with every line.
    """

    id: str
    question: str
    answers: list[str]
    output: str
    retrievals: list[RetrievalRecord]
    llm_forward_passes: int
    generated_tokens: int
    batch_mean_seconds: float
    output_tokens: int | None = None
    rounds: int | None = None
    signals: list[dict[str, Any]] = field(default_factory=list)
    iterations: list[IterationScore] | None = None
    gate: GateDecision | None = None

    @property
    def answer(self) -> str:
        return extract_answer(self.output)

    def to_dict(self) -> dict[str, Any]:
        g = self.gate
        d: dict[str, Any] = {"id": self.id, "question": self.question, "answers": list(self.answers),
                             "output": self.output}
        if g is not None:
            d.update(policy=g.policy, retrieved=g.retrieved, answered_by=g.answered_by, p_ret=g.p_ret,
                     popularity=g.popularity)
        d["retrievals"] = [r.to_dict() for r in self.retrievals]
        if g is not None:
            d.update(parametric_output=g.parametric_output, closed_book_output=g.closed_book_output,
                     context_output=g.context_output)
        if self.iterations is not None:
            d["iterations"] = [it.to_dict() for it in self.iterations]
        d.update(llm_forward_passes=self.llm_forward_passes, generated_tokens=self.generated_tokens)
        if self.output_tokens is not None:
            d["output_tokens"] = self.output_tokens
        if self.rounds is not None:
            d["rounds"] = self.rounds
        if self.signals:
            d["signals"] = self.signals
        d["batch_mean_seconds"] = self.batch_mean_seconds
        if g is not None and g.inner is not None:
            d["inner"] = {k: v for k, v in g.inner.to_dict().items() if k not in _OUTER_KEYS}
        d["answer"] = self.answer
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str | None = None) -> PredictionRecord:
        """A line of ``predictions.jsonl``, as written now or before (``seconds`` for ``batch_mean_seconds``; counts
        missing from early files read as 0)."""
        if not isinstance(d, dict):
            raise DataError(f"expected an object, got {type(d).__name__}", source=source)
        for key in ("id", "question", "answers"):
            if key not in d:
                raise DataError("missing", source=source, record=d.get("id"), field=key)
        gate = None
        if "policy" in d or "retrieved" in d:  # a gate method's record
            inner = d.get("inner")
            gate = GateDecision(
                policy=d.get("policy", ""), retrieved=bool(d.get("retrieved", False)),
                answered_by=d.get("answered_by", ""),
                p_ret=d.get("p_ret"), popularity=d.get("popularity"), parametric_output=d.get("parametric_output"),
                closed_book_output=d.get("closed_book_output"), context_output=d.get("context_output"),
                inner=None if inner is None else cls.from_dict(
                    {**inner, **{k: d[k] for k in ("id", "question", "answers")}}, source=source))
        iterations = d.get("iterations")
        seconds = d.get("batch_mean_seconds", d.get("seconds"))
        return cls(id=d["id"], question=d["question"], answers=list(d["answers"]), output=d.get("output") or "",
                   retrievals=[RetrievalRecord.from_dict(r) for r in d.get("retrievals") or []],
                   llm_forward_passes=d.get("llm_forward_passes") or 0, generated_tokens=d.get("generated_tokens") or 0,
                   batch_mean_seconds=seconds or 0.0, output_tokens=d.get("output_tokens"), rounds=d.get("rounds"),
                   signals=list(d.get("signals") or []),
                   iterations=None if iterations is None else [IterationScore.from_dict(i) for i in iterations],
                   gate=gate)
