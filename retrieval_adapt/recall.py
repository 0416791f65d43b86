"""Retrieval quality: recall@k of gold passages, and answer recall (a retrieved passage contains a gold answer)."""

from __future__ import annotations

from adaptive_rag.plumbing.metrics import contained_accuracy
from adaptive_rag.plumbing.records import QAExample
from adaptive_rag.plumbing.retriever import Hit, Retriever


def gold_recall(hits: list[Hit], example: QAExample, k: int) -> float:
    """Share of the example's gold passages found in the top k (1.0 for single-hop when found)."""
    gold = {p.id for p in example.gold_passages}
    if not gold:
        raise ValueError(f"example {example.id} has no gold passages")
    return len(gold & {h.passage.id for h in hits[:k]}) / len(gold)


def answer_recall(hits: list[Hit], example: QAExample, k: int) -> float:
    """1.0 when any of the top-k passages contains any gold answer: SQuAD-normalised text on word boundaries
    (:func:`adaptive_rag.plumbing.metrics.contained_accuracy`), so the gold "no" is not found inside "known" or
    "not"."""
    if not any(a.strip() for a in example.answers):
        return 0.0
    return float(any(contained_accuracy(h.passage.contents, example.answers) for h in hits[:k]))


def recall_table(retriever: Retriever, examples: list[QAExample], ks: tuple[int, ...] = (1, 3, 10),
                 batch_size: int = 256, per_question: dict[str, list[float]] | None = None) -> dict[str, float]:
    """Mean gold recall@k and answer recall@k over examples; one batched search per ``batch_size`` questions.
    ``per_question`` (a dict) receives each metric's value per example, in order (gold recall ``None`` for an
    example without gold passages), for intervals over questions."""
    if not examples:
        raise ValueError("no examples to evaluate")
    kmax = max(ks)
    rows: dict[str, list] = {f"{m}@{k}": [] for m in ("recall", "answer_recall") for k in ks}
    for s in range(0, len(examples), batch_size):
        chunk = examples[s:s + batch_size]
        for ex, hits in zip(chunk, retriever.search([e.question for e in chunk], kmax)):
            for k in ks:
                rows[f"recall@{k}"].append(gold_recall(hits, ex, k) if ex.gold_passages else None)
                rows[f"answer_recall@{k}"].append(answer_recall(hits, ex, k))
    if per_question is not None:
        per_question.update(rows)
    sums = {key: sum(v for v in values if v is not None) for key, values in rows.items()}
    n_gold = sum(1 for e in examples if e.gold_passages) or 1
    return {key: v / (n_gold if key.startswith("recall") else len(examples)) for key, v in sums.items()}
