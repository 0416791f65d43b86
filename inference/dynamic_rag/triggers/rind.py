"""DRAGIN's RIND: retrieve when a word's entropy × the attention later tokens pay it (× s_i) exceeds θ.

The knobs that differ between the paper's reading and the authors' code are filled by ``dragin_profile``
(inference/dynamic_rag/methods.py, PROFILES)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from inference.dynamic_rag import signals
from inference.dynamic_rag.dragin_settings import PAPER
from inference.dynamic_rag.round_view import Event, RoundView, keep_before
from inference.dynamic_rag.token_words import authors_modifier
from inference.dynamic_rag.triggers import Trigger, register_trigger


@register_trigger("rind")
class Rind(Trigger):
    judges_content = True

    @dataclass
    class Knobs:
        # RIND's θ. 0.8 is the reference's HotpotQA value for Llama2-7b-chat (SPEC.md) and belongs to the reference's
        # scale (rind_normalisation reference: attention renormalised per sentence × its word count, so a typical
        # word has a ≈ 1); on the paper's scale (raw a_max, mostly ≤ 0.1 on SmolLM2) the same θ fires far less.
        # None: the profile's (paper 0.8; reference: the authors' config for the model and dataset,
        # inference/dynamic_rag/dragin_settings.py: Llama2-7b-chat 2Wiki 1.0, HotpotQA 0.8, IIRC 0.6, StrategyQA 0.75)
        theta: float | None = None
        rind_attention: Literal["paper", "reference"] | None = None  # None: the dragin_profile's
        rind_normalisation: Literal["paper", "reference"] | None = None  # None: the dragin_profile's
        content_filter: Literal["score", "after_threshold"] | None = None  # None: the dragin_profile's
        rind_scope: Literal["sentence", "round"] | None = None  # None: the dragin_profile's
        entropy_agg: signals.WordAgg = "mean"  # over a word's pieces (reference: mean)
        attention_agg: signals.WordAgg = "sum"  # over a word's pieces (reference: sum)

    def needs(self, cfg, head_reduce: str) -> frozenset[str]:
        # the reference takes the max over rows per head before averaging heads: rows must be kept per head
        return frozenset({"attention"} | ({"attention_per_head"} if cfg.rind_attention == "reference" else set()))

    def check(self, view: RoundView, cfg, *, final: bool) -> Event | None:
        if cfg.rind_scope == "round":  # the reference judges a whole round once it has ended
            protected = view.protected_end() if cfg.keep_sentence_after_retrieval else 0
            return _event(view, cfg, protected) if final else None
        return _event(view, cfg, view.first_unchecked(cfg.keep_sentence_after_retrieval))


    def trace(self, view: RoundView, cfg) -> dict:
        words = signals.round_word_signals(view, cfg)
        return {"theta": cfg.theta, "words": [
            {"text": "".join(view.pieces[i] for i in w.tokens), "first_token": w.tokens[0], "entropy": w.entropy,
             "attention": w.attention, "content": w.content,
             "score": w.score if cfg.content_filter == "score" else w.unfiltered_score,
             "min_prob": min(view.probs[i] for i in w.tokens)} for w in words]}


def _event(view: RoundView, cfg, start: int) -> Event | None:
    theta = PAPER.theta if cfg.theta is None else cfg.theta  # an unresolved config (a test, a notebook): the paper's
    if getattr(view, "raw_words", None) is not None and cfg.content_filter == "after_threshold":
        return _authors_event(view, cfg, start, theta)
    words = [w for w in signals.round_word_signals(view, cfg) if w.tokens[0] >= start]
    if cfg.content_filter == "score":  # the paper: s_i is a factor of the score
        first = next((w for w in words if w.score > theta), None)
        return None if first is None else Event(first.tokens[0], first.score, keep_before(view, first.tokens[0], cfg),
                                                hits=[first.tokens])
    # The reference: H·a above θ fires, stopword or not; the hits are every such word of that sentence, and the
    # content-word filter only chooses which of them QFS reads. A unit of punctuation or white space alone never
    # fires: the reference's words carry their punctuation, so it has no such unit to fire on.
    words = [w for w in words if signals.has_text(w.word)]
    first = next((w for w in words if w.unfiltered_score > theta), None)
    if first is None:
        return None
    sentence = view.sentence_start(first.tokens[0])
    hits = [w for w in words if w.unfiltered_score > theta and view.sentence_start(w.tokens[0]) == sentence]
    content = [w for w in hits if w.content]
    return Event(first.tokens[0], first.unfiltered_score, keep_before(view, first.tokens[0], cfg),
                 hits=[w.tokens for w in content or hits], stopword_hits=not content)


def _authors_event(view: RoundView, cfg, start: int, theta: float) -> Event | None:
    """``word_text: tokens`` under the reference's filter: their ``modifier`` over the round's raw words and its
    sentences (inference/dynamic_rag/token_words.py), punctuation words included; words before ``start`` (cleared
    or protected) cannot fire."""
    words = signals.round_word_signals(view, cfg, raw_only=True)
    weights = [w.entropy if w.tokens[0] >= start else 0.0 for w in words]
    firing = authors_modifier(view.sentences(), [w.word for w in words], [w.attention for w in words], weights,
                              theta, view.rules.real_words)
    if firing is None:
        return None
    token = words[firing.first].tokens[0]
    keep = words[firing.start].tokens[0] if cfg.truncation == "sentence" else keep_before(view, token, cfg)
    current = words[firing.start:firing.end]
    hits = [w.tokens for w, h in zip(current, firing.hits) if h]
    return Event(token, firing.score, keep, hits=hits or [w.tokens for w, a in zip(current, firing.above) if a],
                 stopword_hits=not hits, sentence=firing.sentence, current_words=[w.word for w in current],
                 current_hits=list(firing.hits))
