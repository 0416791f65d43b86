"""wo-RAG: never retrieve."""

from __future__ import annotations

from inference.dynamic_rag.triggers import Trigger, register_trigger


@register_trigger("never")
class Never(Trigger):
    retrieves = False

    def check(self, view, cfg, *, final):
        return None
