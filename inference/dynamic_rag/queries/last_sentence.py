"""FS-RAG: the last generated sentence."""

from __future__ import annotations

from inference.dynamic_rag.queries import QueryFormer, register_query


@register_query("last_sentence")
class LastSentence(QueryFormer):
    def form(self, view, event, cfg) -> str:
        if event.keep == len(view.pieces):
            return view.last_sentence()
        return "".join(view.pieces[view.sentence_start(event.token): event.token + 1])
