"""FLARE: the tentative sentence with its uncertain tokens (p ≤ ``flare_mask_prob``) blanked out."""

from __future__ import annotations

from dataclasses import dataclass

from inference.dynamic_rag import signals
from inference.dynamic_rag.queries import QueryFormer, register_query


@register_query("flare_masked")
class FlareMasked(QueryFormer):
    @dataclass
    class Knobs:
        flare_mask_prob: float = 0.4  # FLARE's look_ahead_mask_prob: tokens this unsure leave the query

    def form(self, view, event, cfg) -> str:
        s, end = view.sentence_start(event.token), view.sentence_end(event.token)
        return signals.flare_masked_query(view.pieces[s:end], view.probs[s:end], cfg.flare_mask_prob)
