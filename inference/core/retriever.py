"""The one search interface every retriever implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from inference.core.records import Passage


@dataclass(frozen=True)
class Hit:
    """A retrieved passage with the retriever's score (higher is better)."""

    passage: Passage
    score: float


@runtime_checkable
class Retriever(Protocol):
    """``search(queries, k)`` returns, for each query, its top-k hits best first."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]: ...
