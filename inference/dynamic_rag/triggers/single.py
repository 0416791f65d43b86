"""SR-RAG: retrieve once, with the question, before generating."""

from __future__ import annotations

from inference.dynamic_rag.triggers import Trigger, register_trigger


@register_trigger("single")
class Single(Trigger):
    def retrieves_first(self, cfg) -> bool:
        return True

    def check(self, view, cfg, *, final):
        return None
