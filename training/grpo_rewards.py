"""The reward, as three trl reward functions whose sum is the reward (trl adds them with weight 1 and logs each
under its name):

    r = correct(answer, golds) - λ · retrievals + format_reward · well_formed

``correct`` is the gate's judge (:func:`data_builders.adapt_llm.make_judge`: any gold answer contained, after SQuAD
normalisation, the project's ``acc``), applied to the answer the rollout produced (``answer``: the parametric answer,
the context prompt's answer after ``<RET>``, or the ``<answer>`` block of a search trajectory). ``retrievals`` and
``well_formed`` are what the rollout recorded. Each function reads the rollout's fields, which trl passes to reward
functions by name, and the dataset's ``answers`` column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from data_builders.adapt_llm import make_judge


class Correctness:
    """1.0 where the judge accepts the rollout's answer, else 0.0 (no answer: 0.0)."""

    __name__ = "correct"

    def __init__(self, judge: str = "contains", normalize: bool = True):
        self.judge = make_judge(judge, normalize)  # type: ignore[arg-type]

    def __call__(self, prompts=None, completions=None, *, answer: Sequence[str | None],
                 answers: Sequence[Sequence[str]], **_: Any) -> list[float]:
        return [float(a is not None and bool(self.judge(a, golds))) for a, golds in zip(answer, answers)]


class RetrievalCost:
    """−λ per retrieval the rollout made."""

    __name__ = "retrieval_cost"

    def __init__(self, penalty: float):
        self.penalty = penalty

    def __call__(self, prompts=None, completions=None, *, retrievals: Sequence[int], log_metric=None,
                 **_: Any) -> list[float]:
        if log_metric is not None and retrievals:  # trl's hook: the share is the figure a gate is judged by
            log_metric("retrieval_share", sum(n > 0 for n in retrievals) / len(retrievals))
            log_metric("retrievals", sum(retrievals) / len(retrievals))
        return [-self.penalty * float(n) for n in retrievals]


class FormatTerm:
    """``format_reward`` where the rollout kept the protocol, else 0."""

    __name__ = "format"

    def __init__(self, weight: float):
        self.weight = weight

    def __call__(self, prompts=None, completions=None, *, well_formed: Sequence[bool], **_: Any) -> list[float]:
        return [self.weight * float(bool(ok)) for ok in well_formed]


def reward_functions(judge: str, normalize: bool, penalty: float, format_reward: float) -> list:
    return [Correctness(judge, normalize), RetrievalCost(penalty), FormatTerm(format_reward)]


def total_reward(funcs: Sequence, **fields: Any) -> list[float]:
    """The summed reward of every completion (what trl computes with unit weights); for tests and reports."""
    parts = [f(**fields) for f in funcs]
    return [sum(col) for col in zip(*parts)]
