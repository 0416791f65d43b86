"""FL-RAG: retrieve every ``fixed_length`` generated tokens (the reference's FixLengthRAG)."""

from __future__ import annotations

from dataclasses import dataclass

from inference.dynamic_rag.round_view import Event
from inference.dynamic_rag.triggers import Trigger, register_trigger


@register_trigger("fixed_length")
class FixedLength(Trigger):
    per_token = True
    reads = ("fixed_question_first",)

    @dataclass
    class Knobs:
        fixed_length: int = 32  # FL-RAG window (the reference's fix_length)

    def retrieves_first(self, cfg) -> bool:
        return bool(cfg.fixed_question_first)

    def round_tokens(self, cfg) -> int:
        return cfg.fixed_length  # their FixLengthRAG: generate(prompt, fix_length), no token more

    def validate(self, cfg) -> None:
        if cfg.fixed_length <= 0:
            raise ValueError("fixed_length must be positive")

    def check(self, view, cfg, *, final):
        n = len(view.pieces)
        if final:  # the authors' loop retrieves with a window that EOS cut short too, and goes on
            return Event(n - 1, 1.0, n) if getattr(cfg, "round_join", None) == "authors" else None
        return Event(n - 1, 1.0, n) if n >= cfg.fixed_length else None
