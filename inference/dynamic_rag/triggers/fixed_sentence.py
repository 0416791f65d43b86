"""FS-RAG: retrieve after every sentence."""

from __future__ import annotations

from inference.dynamic_rag.round_view import Event
from inference.dynamic_rag.triggers import Trigger, register_trigger


@register_trigger("fixed_sentence")
class FixedSentence(Trigger):
    reads = ("fixed_question_first",)
    def retrieves_first(self, cfg) -> bool:
        return bool(cfg.fixed_question_first)

    def check(self, view, cfg, *, final):
        n = len(view.pieces)
        return None if final else Event(n - 1, 1.0, n)
