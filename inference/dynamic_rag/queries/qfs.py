"""DRAGIN's QFS: the top-n words of the question and the answer so far by the attention of the triggering token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from inference.dynamic_rag import signals
from inference.dynamic_rag.dragin_settings import PAPER
from inference.dynamic_rag.queries import QueryFormer, register_query
from inference.dynamic_rag.round_view import Event, RoundView, reduce_heads
from inference.dynamic_rag.token_words import authors_qfs_query

PAPER_QFS_TOP_N = PAPER.qfs_top_n


@register_query("qfs")
class Qfs(QueryFormer):
    @dataclass
    class Knobs:
        qfs_attention: Literal["paper", "reference"] | None = None  # None: the dragin_profile's
        # None: the profile's (paper 25; reference: the authors' config for the model and dataset, 25 or 35,
        # inference/dynamic_rag/dragin_settings.py)
        qfs_top_n: int | None = None

    def needs(self, cfg, head_reduce: str) -> frozenset[str]:
        # the reference's QFS averages heads, which rows already reduced by max cannot give
        per_head = cfg.qfs_attention == "reference" and head_reduce != "mean"
        return frozenset({"attention"} | ({"attention_per_head"} if per_head else set()))

    def validate(self, cfg) -> None:
        if (cfg.qfs_top_n or 1) <= 0:
            raise ValueError("qfs_top_n must be positive")
        if getattr(cfg, "attention_pass", "in_flight") == "authors" and cfg.qfs_attention != "reference":
            raise ValueError("attention_pass 'authors' gives QFS the reference code's pass, read by its formula: "
                             "use qfs_attention reference (the reference profile's), or attention_pass in_flight")

    def form(self, view: RoundView, event: Event, cfg) -> str:
        top_n = cfg.qfs_top_n or PAPER_QFS_TOP_N
        if cfg.qfs_attention == "reference":
            return _reference(view, event, top_n)
        row = view.row(event.token)[:-1]  # over all positions before the triggering token
        pieces = view.prompt_pieces + view.pieces[: event.token]
        eligible = view.eligible + [True] * event.token
        return signals.qfs_query(row, pieces, eligible, top_n)


def qfs_text_end(view: RoundView, event: Event) -> int:
    """One past the last round token the reference's QFS reads: the end of the triggering sentence, or of the last
    hit word where a word runs on past it (a newline opens the word after it, across a sentence end)."""
    last_hit = max((t for word in event.hits for t in word), default=event.token)
    return max(view.sentence_end(event.token), last_hit + 1)


def _reference(view: RoundView, event: Event, top_n: int) -> str:
    """The reference's QFS over question + answer so far + this round up to the end of the triggering sentence;
    hit words whose preceding row is missing (token 0 without a prefill row) fall back to their own row."""
    end = qfs_text_end(view, event)
    hits = event.hits or [[event.token]]
    qp = view.authors_qfs
    rules = getattr(view, "rules", None)
    nlp = rules is not None and rules.nlp is not None
    if qp is not None and qp.ids is not None:  # word_text tokens: keep_real_words as written
        return authors_qfs_query(qp.ids, qp.pieces, qp.weights, len(event.current_words), event.current_hits,
                                 rules.real_words(qp.text) if nlp else None, top_n, view.raw_words)
    if qp is not None:  # attention_pass authors: the reference's own pass, without demos or documents
        rows = [[qp.weights[qp.offset + t - 1] for t in word] for word in hits]
        # every column normalises, the BOS's too, as keep_real_words does; the BOS is never a query word
        pieces = qp.pieces[:qp.offset + end]
        return signals.qfs_query_reference(rows, [qp.offset + word[0] for word in hits], pieces,
                                           [True] * (qp.offset + end),
                                           {qp.offset + t for word in hits for t in word} | set(range(qp.bos)), top_n,
                                           rules.real_words("".join(pieces).strip()) if nlp else None)
    p = len(view.prompt_pieces)
    rows_before = [[row if (row := view.row_before(t)) is not None else reduce_heads(view.rows[t], "mean")
                    for t in word] for word in hits]
    exclude = {p + t for word in hits for t in word}
    # the reference tags question + answer so far + this round (the prompt's demos and documents are not its text)
    text = "".join(piece for piece, ok in zip(view.prompt_pieces, view.eligible) if ok) + "".join(view.pieces[:end])
    real = rules.real_words(text.strip()) if nlp else None
    return signals.qfs_query_reference(rows_before, [p + word[0] for word in hits],
                                       view.prompt_pieces + view.pieces[:end], view.eligible + [True] * end,
                                       exclude, top_n, real)
