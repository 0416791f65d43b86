"""The one search interface every retriever implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from adaptive_rag.plumbing.records import Passage


@dataclass(frozen=True)
class Hit:
    """A retrieved passage with the retriever's score (higher is better)."""

    passage: Passage
    score: float


@runtime_checkable
class Retriever(Protocol):
    """``search(queries, k)`` returns, for each query, its top-k hits best first."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]: ...


def join_query(question: str, previous_output: str | None) -> str:
    """Iteration t's query: y_{t-1} concatenated with q (iteration 1, or an empty y: q alone)."""
    if previous_output is None or not previous_output.strip():
        return question
    return f"{previous_output.strip()} {question}"
