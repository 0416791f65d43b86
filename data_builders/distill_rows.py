"""Rows of the retrieval-adaptation data: the append-only resume log, the DatasetDict, the schema and stats."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from inference.core.record_log import RecordLog
from inference.core.records import DataError

# Per-candidate columns: all of one row's lists must be as long as its candidate_ids.
CANDIDATE_COLUMNS = ("candidate_ids", "candidate_positions", "teacher_scores", "retriever_scores")
COLUMNS = ("question_id", "question", "answers", "gold_ids", "y1", "y1_answer") + CANDIDATE_COLUMNS


def check_row(row: dict[str, Any], where: str = "row") -> None:
    missing = [c for c in COLUMNS if c not in row]
    if missing:
        raise DataError(f"missing column(s) {', '.join(missing)}", source=where, record=row.get("question_id"))
    n = len(row["candidate_ids"])
    for col in CANDIDATE_COLUMNS[1:]:
        if len(row[col]) != n:
            raise DataError(f"{len(row[col])} values for {n} candidates", source=where, record=row["question_id"],
                            field=col)
    if n < 1:
        raise DataError("no candidates", source=where, record=row["question_id"], field="candidate_ids")
    if not all(math.isfinite(float(s)) for s in row["teacher_scores"]):
        raise DataError("non-finite teacher score", source=where, record=row["question_id"], field="teacher_scores")


def _row_log(path: Path) -> RecordLog:
    return RecordLog(path, key="question_id", check=check_row)


def append_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append rows and flush them to disk before returning: what is written survives a crash."""
    _row_log(path).append(rows)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of the resume log, the first of each question id. A torn last line (a run killed mid-write, even
    inside a multi-byte character) is cut off, so appends stay valid."""
    return _row_log(path).read()


def split_ids(ids: list[str], validation_fraction: float, seed: int) -> set[str]:
    """Validation ids: a seeded shuffle of the sorted ids, so the split depends on the id set only (never on
    the order in which resumed runs finished questions)."""
    if validation_fraction <= 0 or len(ids) < 2:
        return set()
    order = sorted(ids)
    random.Random(seed).shuffle(order)
    n_val = min(len(order) - 1, max(1, round(validation_fraction * len(order))))
    return set(order[:n_val])


def to_dataset_dict(rows: list[dict[str, Any]], validation_fraction: float, seed: int):
    from datasets import Dataset, DatasetDict

    if not rows:
        raise DataError("no rows to write: the question slice is empty or nothing was built")
    val_ids = split_ids([r["question_id"] for r in rows], validation_fraction, seed)
    columns = {c: [r[c] for r in rows] for c in COLUMNS}
    full = Dataset.from_dict(columns)
    is_val = [r["question_id"] in val_ids for r in rows]
    return DatasetDict(train=full.select([i for i, v in enumerate(is_val) if not v]),
                       validation=full.select([i for i, v in enumerate(is_val) if v]))


def _entropy(scores: list[float]) -> float:
    m = max(scores)
    exp = [math.exp(s - m) for s in scores]
    z = sum(exp)
    return -sum(e / z * math.log(e / z) for e in exp if e > 0)


def row_stats(rows: list[dict[str, Any]]) -> dict[str, float]:
    """How good the candidates and the teacher are, measured on gold passages where the data has them.

    ``gold_in_candidates``: share of gold passages among the candidates; ``teacher_top1_gold`` /
    ``retriever_top1_gold``: share of questions whose top candidate by the re-ranker / by the retriever is gold;
    ``teacher_entropy``: mean entropy (nats) of softmax(teacher scores) at temperature 1.
    """
    n = len(rows)
    with_gold = [r for r in rows if r["gold_ids"]]

    def top1_gold(r: dict[str, Any], col: str) -> float:
        best = max(range(len(r[col])), key=lambda i: r[col][i])
        return float(r["candidate_ids"][best] in set(r["gold_ids"]))

    out: dict[str, float] = {"n_questions": n,
                             "mean_candidates": sum(len(r["candidate_ids"]) for r in rows) / max(n, 1),
                             "teacher_entropy": sum(_entropy(r["teacher_scores"]) for r in rows) / max(n, 1)}
    if with_gold:
        g = len(with_gold)
        out["gold_in_candidates"] = sum(len(set(r["gold_ids"]) & set(r["candidate_ids"])) / len(r["gold_ids"])
                                        for r in with_gold) / g
        out["teacher_top1_gold"] = sum(top1_gold(r, "teacher_scores") for r in with_gold) / g
        out["retriever_top1_gold"] = sum(top1_gold(r, "retriever_scores") for r in with_gold) / g
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}
