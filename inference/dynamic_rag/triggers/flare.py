"""FLARE (jzbjyb/FLARE): retrieve when a token of the tentative sentence is uncertain, p ≤ ``flare_threshold``."""

from __future__ import annotations

from dataclasses import dataclass

from inference.dynamic_rag.round_view import Event, keep_before
from inference.dynamic_rag.triggers import Trigger, register_trigger


@register_trigger("flare")
class Flare(Trigger):
    judges_content = True

    @dataclass
    class Knobs:
        # FLARE (jzbjyb/FLARE): retrieve when a token of the tentative sentence has p ≤ look_ahead_filter_prob (0.8).
        # DRAGIN's FLARE baseline instead averages 1-p over a sentence (hallucination_threshold); FlashRAG's FLARE
        # triggers at p < 0.2.
        flare_threshold: float = 0.8

    def retrieves_first(self, cfg) -> bool:
        return True

    def check(self, view, cfg, *, final):
        start = view.first_unchecked(cfg.keep_sentence_after_retrieval)
        low = [i for i in range(start, len(view.pieces)) if view.probs[i] <= cfg.flare_threshold]
        return Event(low[0], 1.0 - view.probs[low[0]], keep_before(view, low[0], cfg)) if low else None
