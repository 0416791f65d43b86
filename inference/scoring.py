"""Turn prediction records into the metrics table: answer quality and efficiency per question."""

from __future__ import annotations

from typing import Any

from inference.metrics import aggregate, score, yes_no_em

YES_NO_DATASETS = ("strategyqa",)


def score_record(rec: dict[str, Any]) -> dict[str, float]:
    """EM/F1/precision on the extracted answer; contained accuracy on the whole output (PopQA's metric)."""
    output = rec.get("output") or ""
    row = score(output, rec["answers"], extract=True)
    row["acc"] = score(output, rec["answers"], extract=False)["acc"]
    row["yes_no_em"] = yes_no_em(output, rec["answers"]) if _is_yes_no(rec["answers"]) else row["em"]
    return row


def _is_yes_no(answers: list[str]) -> bool:
    return all(a.strip().lower() in ("yes", "no", "true", "false") for a in answers)


def gate_columns(records: list[dict[str, Any]], rows: list[dict[str, float]]) -> dict[str, Any]:
    """ADAPT-LLM's table columns from records that say whether they ``retrieved``: the share of questions that
    retrieved, and accuracy (``acc``) with and without retrieval (``None`` when no question took that path)."""
    with_r = [row["acc"] for rec, row in zip(records, rows) if rec["retrieved"]]
    without = [row["acc"] for rec, row in zip(records, rows) if not rec["retrieved"]]
    return {"retrieval_share": len(with_r) / len(records), "n_retrieved": len(with_r),
            "acc_retrieved": sum(with_r) / len(with_r) if with_r else None,
            "acc_not_retrieved": sum(without) / len(without) if without else None}


def summarise(records: list[dict[str, Any]], dataset: str = "") -> dict[str, Any]:
    if not records:
        return {"n": 0}
    rows = [score_record(r) for r in records]
    quality = aggregate(rows)
    n = len(records)
    efficiency = {
        "retrieval_calls": sum(len(r.get("retrievals", [])) for r in records) / n,
        "llm_forward_passes": sum(r.get("llm_forward_passes") or 0 for r in records) / n,
        "generated_tokens": sum(r.get("generated_tokens", 0) for r in records) / n,
        "seconds_per_question": sum(r.get("seconds", 0.0) for r in records) / n,
    }
    gate = gate_columns(records, rows) if all("retrieved" in r for r in records) else {}
    return {**quality, **efficiency, **gate}
