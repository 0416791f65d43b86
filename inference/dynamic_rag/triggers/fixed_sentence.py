"""FS-RAG: retrieve after every sentence. Under ``round_join: authors`` as their FixLengthRAG does it: the round is
written to its end and its first sentence kept and searched with (a sentence end seen while streaming may not be
where their sentencizer splits the whole round)."""

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
        if getattr(cfg, "round_join", None) == "authors":
            return authors_first_sentence(view) if final else None
        return None if final else Event(n - 1, 1.0, n)


def authors_first_sentence(view) -> Event | None:
    """Their FixLengthRAG's fix-sentence round: written whole (to EOS or the budget), stripped, split by their
    sentencizer; the first sentence is kept and searched with. No sentence: their loop ends (None)."""
    text = view.text.strip()
    spans = view.rules.split(text)
    if not spans:
        return None
    first = text[spans[0][0]:spans[0][1]].strip()
    n = len(view.pieces)
    return Event(n - 1, 1.0, n, query=first, kept_text=first)
