"""The row of the retrieval-adaptation data (one question: y1, its candidates and their scores): the columns, the
check every row passes, and the rows as the DatasetDict that distillation reads."""

from __future__ import annotations

import math
import random
from typing import Any

from datasets import Dataset, DatasetDict

from adaptive_rag.plumbing.errors import DataError

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


def split_ids(ids: list[str], validation_fraction: float, seed: int) -> set[str]:
    """Validation ids: a seeded shuffle of the sorted ids, so the split depends on the id set only (never on
    the order in which resumed runs finished questions)."""
    if validation_fraction <= 0 or len(ids) < 2:
        return set()
    order = sorted(ids)
    random.Random(seed).shuffle(order)
    n_val = min(len(order) - 1, max(1, round(validation_fraction * len(order))))
    return set(order[:n_val])


def to_dataset_dict(rows: list[dict[str, Any]], validation_fraction: float, seed: int) -> DatasetDict:
    if not rows:
        raise DataError("no rows to write: the question slice is empty or nothing was built")
    val_ids = split_ids([r["question_id"] for r in rows], validation_fraction, seed)
    columns = {c: [r[c] for r in rows] for c in COLUMNS}
    full = Dataset.from_dict(columns)
    is_val = [r["question_id"] in val_ids for r in rows]
    return DatasetDict(train=full.select([i for i, v in enumerate(is_val) if not v]),
                       validation=full.select([i for i, v in enumerate(is_val) if v]))
