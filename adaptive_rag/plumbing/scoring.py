"""Turn prediction records into the metrics table: answer quality and efficiency per question."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adaptive_rag.plumbing.dragin_eval import score_dragin
from adaptive_rag.plumbing.metrics import Normalisation, aggregate, contained_accuracy, score, yes_no_em
from adaptive_rag.plumbing.records import PredictionRecord

_YES_NO_GOLDS = ("yes", "no", "true", "false")


def score_record(rec: PredictionRecord, normalisation: Normalisation = "official", extraction: str = "project",
                 dataset_kind: str | None = None) -> dict[str, float]:
    """EM/F1/precision on the extracted answer; contained accuracy on the whole output (PopQA's metric).

    ``yes_no_em`` (the first yes/no word of the output) is added only for a question whose golds are all yes/no,
    so that it is averaged over those questions alone. ``extraction: dragin`` scores as DRAGIN's ``eval.py``
    (:mod:`adaptive_rag.plumbing.dragin_eval`; ``dataset_kind`` chooses its dataset's rule, yes/no golds StrategyQA's).
    """
    output, answers = rec.output, rec.answers
    if extraction == "dragin":

        kind = dataset_kind or ("strategyqa" if is_yes_no(answers) else None)
        row = score_dragin(output, answers, kind)  # type: ignore[arg-type]
        if is_yes_no(answers):
            row["yes_no_em"] = row["em"]
        return row
    row = score(output, answers, extract=True, normalisation=normalisation)
    row["acc"] = contained_accuracy(output, answers)
    if is_yes_no(answers):
        row["yes_no_em"] = yes_no_em(output, answers)
    return row


def is_yes_no(answers: list[Any]) -> bool:
    """True when every gold answer is yes/no (or true/false, as StrategyQA's booleans)."""
    return all(str(a).strip().lower() in _YES_NO_GOLDS for a in answers)


def gate_columns(records: Sequence[PredictionRecord], rows: list[dict[str, float]]) -> dict[str, Any]:
    """ADAPT-LLM's table columns from the gate's records (which say whether they retrieved): the share of questions
    that retrieved, and accuracy (``acc``) with and without retrieval (``None`` when no question took that path)."""
    with_r = [row["acc"] for rec, row in zip(records, rows) if rec.gate.retrieved]
    without = [row["acc"] for rec, row in zip(records, rows) if not rec.gate.retrieved]
    return {"retrieval_share": len(with_r) / len(records), "n_retrieved": len(with_r),
            "acc_retrieved": sum(with_r) / len(with_r) if with_r else None,
            "acc_not_retrieved": sum(without) / len(without) if without else None}


def summarise(records: Sequence[PredictionRecord], normalisation: Normalisation = "official",
              extraction: str = "project", dataset_kind: str | None = None) -> dict[str, Any]:
    """Mean quality metrics, efficiency per question, the gate's columns where every record is a gate's, and
    ``answer_normalisation`` (which EM/F1 normalisation produced the numbers). ``yes_no_em`` and ``n_yes_no``
    appear only when some question has yes/no golds; ``yes_no_em`` is the mean over those questions.
    ``extraction`` / ``dataset_kind``: see :func:`score_record` (recorded as ``answer_extraction``)."""
    if not records:
        return {"n": 0, "answer_normalisation": normalisation, "answer_extraction": extraction}
    rows = [score_record(r, normalisation, extraction, dataset_kind) for r in records]
    quality = aggregate(rows)
    n_yes_no = sum("yes_no_em" in row for row in rows)
    if n_yes_no:
        quality["n_yes_no"] = n_yes_no
    n = len(records)
    efficiency = {
        "retrieval_calls": sum(len(r.retrievals) for r in records) / n,
        "llm_forward_passes": sum(r.llm_forward_passes for r in records) / n,
        "generated_tokens": sum(r.generated_tokens for r in records) / n,
        # the mean of per-batch means, weighted by batch size: the run's wall time per question
        "seconds_per_question": sum(r.batch_mean_seconds for r in records) / n,
    }
    gate = gate_columns(records, rows) if all(r.gate is not None for r in records) else {}
    return {**quality, "answer_normalisation": normalisation, "answer_extraction": extraction, **efficiency, **gate}
