"""The question itself (SR-RAG, and the first retrieval of FLARE and Iter-RetGen)."""

from __future__ import annotations

from inference.dynamic_rag.queries import QueryFormer, register_query


@register_query("question")
class Question(QueryFormer):
    def form(self, view, event, cfg) -> str:
        return view.question
