"""What to retrieve with: one query former per file in this folder, registered by name with :func:`register_query`.

A query former is a class with ``form(view, event, cfg) -> str``; like a trigger
(inference/dynamic_rag/triggers/__init__.py)
it declares ``needs(cfg, head_reduce)`` and may own ``Knobs``. :func:`form_query` cuts every query to its last
``query_max_words`` words and falls back to the question when a former yields nothing.
"""

from __future__ import annotations

from typing import Any, ClassVar

from inference.dynamic_rag.registry import Registry
from inference.dynamic_rag.round_view import Event, RoundView


class QueryFormer:
    name: ClassVar[str]
    Knobs: ClassVar[type | None] = None
    reads: ClassVar[tuple[str, ...]] = ()  # settings it reads that it does not own (a sweep crosses them)

    def needs(self, cfg: Any, head_reduce: str) -> frozenset[str]:
        return frozenset()

    def validate(self, cfg: Any) -> None:
        """Raise ValueError for knob values this former cannot work with."""

    def resolve(self, cfg: Any, hints: tuple[str | None, ...]) -> dict[str, Any]:
        """Knob values to fill once the dataset is known (``hints``: its name or path, the demos' name)."""
        return {}

    def form(self, view: RoundView, event: Event, cfg: Any) -> str:
        raise NotImplementedError


QUERIES: Registry[QueryFormer] = Registry("query", __name__)
register_query = QUERIES.register


def form_query(view: RoundView, event: Event, cfg: Any, tokenizer: Any = None) -> str:
    """The retrieval query for ``event``, cut to its last ``query_max_words`` words, or (``query_cut: tokens``, the
    authors' BM25 class) to its last that many generator tokens, encoded and decoded back as theirs; falls back to
    the question when a former yields nothing (except under ``round_join: authors``, whose loops search with it)."""
    # a trigger that writes its query itself (the reference code's TokenRAG and FS-RAG loops) gives it in the event
    q = event.query if event.query is not None else QUERIES.get(cfg.query).form(view, event, cfg)
    if getattr(cfg, "query_cut", "words") == "tokens" and tokenizer is not None:
        ids = tokenizer(q, add_special_tokens=False)["input_ids"][-cfg.query_max_words:]
        q = tokenizer.decode(ids, skip_special_tokens=True)
        if getattr(cfg, "round_join", None) == "authors":
            return q  # their loops search with what they wrote, an empty query too (no documents come back)
    else:
        q = " ".join(q.split()[-cfg.query_max_words:])
    return q if q.strip() else view.question
