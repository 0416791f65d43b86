"""Batches for retriever distillation: queries, candidate corpus positions and teacher scores, padded to K."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import torch

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.metrics import normalize_answer
from adaptive_rag.plumbing.retriever import join_query
from retrieval_adapt.dense import DenseRetriever

logger = logging.getLogger(__name__)

QueryInput = Literal["question", "question_y1"]
ScoreKind = Literal["log_probability", "logit"]
SCORE_KINDS = ("log_probability", "logit")


@dataclass
class DistillBatch:
    queries: list[str]  # B
    positions: torch.Tensor  # (B, K) rows of the index's embeddings.npy (padding: 0, masked)
    teacher_scores: torch.Tensor  # (B, K)
    mask: torch.Tensor  # (B, K) True = a real candidate


@dataclass
class DistillData:
    train: object  # datasets.Dataset
    validation: object
    retriever: object  # retrieval_adapt.dense.DenseRetriever: passages, embeddings.npy, a fresh query encoder
    score_kind: ScoreKind = "log_probability"  # what the stored teacher scores are (the data builder's stats.json)


def query_text(row: dict, query_input: QueryInput) -> str:
    """The retriever's input: q, or y1 joined to q the way Iter-RetGen's later iterations query."""
    return row["question"] if query_input == "question" else join_query(row["question"], row["y1"])


def relevance_probability(scores: torch.Tensor, kind: ScoreKind) -> torch.Tensor:
    """The re-ranker's relevance probability s of Eq. 3 from a stored score: exp of a log-probability (TART's
    relevant class, the LLM scorers), sigmoid of a one-logit cross-encoder's logit (trained as a binary classifier)."""
    if kind == "log_probability":
        return scores.exp()
    if kind == "logit":
        return torch.sigmoid(scores)
    raise ValueError(f"unknown teacher score kind '{kind}' ({', '.join(SCORE_KINDS)})")


def collate(rows: list[dict], query_input: QueryInput, prior_weight: float = 0.0,
            probability: ScoreKind | None = None) -> DistillBatch:
    """Pad to the largest K. ``probability``: the teacher scores become relevance probabilities (Eq. 3's s, read
    from scores of that kind); None keeps them as stored. ``prior_weight`` > 0 then adds the stored retriever
    scores to the teacher's (a retriever prior: see ``DistillConfig.teacher_prior``)."""
    k = max(len(r["candidate_positions"]) for r in rows)
    positions = torch.zeros(len(rows), k, dtype=torch.long)
    teacher = torch.zeros(len(rows), k)
    mask = torch.zeros(len(rows), k, dtype=torch.bool)
    for i, r in enumerate(rows):
        n = len(r["candidate_positions"])
        positions[i, :n] = torch.tensor(r["candidate_positions"])
        teacher[i, :n] = torch.tensor(r["teacher_scores"], dtype=torch.float)
        if probability is not None:
            teacher[i, :n] = relevance_probability(teacher[i, :n], probability)
        if prior_weight:
            teacher[i, :n] += prior_weight * torch.tensor(r["retriever_scores"], dtype=torch.float)
        mask[i, :n] = True
    return DistillBatch([query_text(r, query_input) for r in rows], positions, teacher, mask)


def make_loader(dataset, batch_size: int, query_input: QueryInput, *, shuffle: bool, prior_weight: float = 0.0,
                probability: ScoreKind | None = None):
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                                       collate_fn=partial(collate, query_input=query_input, prior_weight=prior_weight,
                                                          probability=probability))


def check_positions(dataset, passages, where: str) -> None:
    """Every candidate position must name the same passage id in this index (the data may come from another)."""
    for row in dataset:
        for pid, pos in zip(row["candidate_ids"], row["candidate_positions"]):
            if pos >= len(passages) or passages[pos].id != pid:
                raise DataError(f"candidate {pid} at position {pos} does not match the index; was the data built "
                                "with another index?", source=where, record=row["question_id"])


def without_answers(dataset, answers: list[str]):
    """``dataset`` less the questions whose every gold answer normalises to one of ``answers``."""
    drop = {normalize_answer(a) for a in answers}
    if not drop:
        return dataset
    # keep_in_memory: a filter of a saved dataset would otherwise write cache files into the user's data folder.
    def keep(row: dict) -> bool:
        return not row["answers"] or not all(normalize_answer(a) in drop for a in row["answers"])

    return dataset.filter(keep, keep_in_memory=True)


def load_distill_data(data_dir: str | Path, index_dir: str | Path, *, device: str = "auto",
                      exclude_answers: list[str] | None = None) -> DistillData:
    from datasets import load_from_disk

    path = Path(data_dir) / "dataset"
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist; build it with `python -m training.distill_set`")
    data = load_from_disk(str(path))
    if exclude_answers:
        kept = {split: without_answers(data[split], exclude_answers) for split in ("train", "validation")}
        logger.info("exclude_answers %s: %d of %d training and %d of %d validation questions kept", exclude_answers,
                    len(kept["train"]), len(data["train"]), len(kept["validation"]), len(data["validation"]))
        for split in ("train", "validation"):
            if len(data[split]) and not len(kept[split]):
                raise DataError(f"exclude_answers {exclude_answers} leaves no {split} question", source=str(path))
        data = kept
    if len(data["validation"]) == 0:
        raise DataError("the validation split is empty: the best checkpoint is chosen by validation loss; "
                        "rebuild with validation_fraction > 0", source=str(path))
    # use_gpu=False: training only reads embeddings.npy; the faiss index is loaded but never searched or written.
    retriever = DenseRetriever.load(index_dir, device=device, use_gpu=False)
    if retriever.embeddings is None:
        raise DataError("the index has no embeddings.npy; rebuild it with retrieval_adapt.build_index",
                        source=str(index_dir))
    for split in ("train", "validation"):
        check_positions(data[split], retriever.passages, f"{path}/{split}")
    return DistillData(data["train"], data["validation"], retriever, stored_score_kind(data_dir))


def stored_score_kind(data_dir: str | Path) -> ScoreKind:
    """The kind of teacher score the data builder stored (``stats.json``'s ``teacher_score_kind``); data built before
    it was recorded held log-probabilities unless a one-logit cross-encoder scored them, which it could not say."""
    import json

    stats = Path(data_dir) / "stats.json"
    kind = json.loads(stats.read_text(encoding="utf-8")).get("teacher_score_kind") if stats.is_file() else None
    if kind is None:
        logger.warning("%s records no teacher_score_kind: its scores are read as log-probabilities", data_dir)
        return "log_probability"
    if kind not in SCORE_KINDS:
        raise DataError(f"unknown teacher_score_kind '{kind}' ({', '.join(SCORE_KINDS)})", source=str(stats))
    return kind
