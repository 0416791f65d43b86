"""FL-RAG: the last ``fixed_length`` generated tokens (the window of the fixed_length trigger)."""

from __future__ import annotations

from inference.dynamic_rag.queries import QueryFormer, register_query


@register_query("last_window")
class LastWindow(QueryFormer):
    reads = ("fixed_length",)  # the fixed_length trigger's window

    def form(self, view, event, cfg) -> str:
        # stripped, as their FixLengthRAG searches with new_text.strip() (a leading space would cost a token of
        # the 64-token query cut)
        return "".join(view.pieces[max(0, event.token + 1 - cfg.fixed_length): event.token + 1]).strip()
