"""Dynamic-RAG methods as "when to retrieve" (a trigger) × "what to query" (a query former).

Every method of the DRAGIN paper is one pair; any trigger combines with any query former (its Tables 4 and 6):

=========  ===================  ==========================
method     trigger              query
=========  ===================  ==========================
wo-rag     never                —
sr-rag     once, before         question
fl-rag     every n tokens       last window of n tokens
fs-rag     every sentence       last sentence
flare      low-probability tok  sentence minus uncertain tokens
dragin     RIND > θ             QFS top-n attended words
=========  ===================  ==========================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from inference import signals
from inference.text_units import split_sentences

TriggerName = Literal["never", "single", "fixed_length", "fixed_sentence", "flare", "rind"]
QueryName = Literal["question", "last_window", "last_sentence", "flare_masked", "qfs"]
Truncation = Literal["sentence", "token", "none"]


@dataclass
class RoundView:
    """What a strategy sees of one sequence: this round's generated tokens (all fed, so all have rows)."""

    question: str
    pieces: list[str]  # generated pieces this round
    probs: list[float]
    entropies: list[float]
    rows: list[torch.Tensor]  # rows[i]: last-layer attention of token i over prompt + round tokens[:i+1]
    prompt_pieces: list[str]
    eligible: list[bool]  # per prompt position: may QFS draw a word from it
    checked: int = 0  # tokens already cleared by the trigger in this round

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def sentence_starts(self) -> list[int]:
        """For each token, the index of the first token of its sentence (spaCy sentences; cached per length)."""
        cached = getattr(self, "_starts", None)
        if cached is not None and len(cached) == len(self.pieces):
            return cached
        offsets, pos = [], 0
        for p in self.pieces:
            offsets.append(pos)
            pos += len(p)
        span_starts = [s for s, _ in split_sentences(self.text)] or [0]
        starts, first_token, current = [], 0, -1
        for i, off in enumerate(offsets):
            # the sentence a token belongs to: the last span starting at or before the token's last character
            last_char = off + max(len(self.pieces[i]) - 1, 0)
            sent = max([k for k, s in enumerate(span_starts) if s <= last_char] or [0])
            if sent != current:
                current, first_token = sent, i
            starts.append(first_token)
        self._starts = starts
        return starts

    def sentence_start(self, token: int) -> int:
        return self.sentence_starts()[token]

    def last_sentence(self) -> str:
        spans = split_sentences(self.text)
        return self.text[spans[-1][0]:spans[-1][1]].strip() if spans else ""


@dataclass
class Event:
    """A decision to retrieve: at round token ``token`` with ``score``; keep ``keep`` tokens of this round."""

    token: int
    score: float
    keep: int


@dataclass
class MethodConfig:
    """All knobs of a dynamic-RAG method. Defaults follow the DRAGIN paper and its public configuration."""

    method: Literal["wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin", "custom", "iter-retgen", "adapt-llm",
                    "nr", "ar", "popularity"] = "dragin"
    trigger: TriggerName | None = None  # None: the method's own; set both for ablations ("custom")
    query: QueryName | None = None
    top_k: int = 3  # documents per retrieval (DRAGIN: 3 via BM25; FLARE used 2)
    max_rounds: int = 5  # retrieval rounds per question (cap)
    theta: float = 0.8  # RIND threshold (DRAGIN's HotpotQA value for Llama2-7b-chat; sweep for new models)
    rind_normalisation: Literal["paper", "reference"] = "paper"
    entropy_agg: signals.WordAgg = "mean"  # over a word's pieces (reference: mean)
    attention_agg: signals.WordAgg = "sum"  # over a word's pieces (reference: sum)
    qfs_top_n: int = 25  # reference keeps 25-35 words
    truncation: Truncation = "sentence"  # reference: cut at the start of the sentence holding the trigger
    fixed_length: int = 32  # FL-RAG window
    flare_threshold: float = 0.4  # a token with p ≤ this triggers (FlashRAG-style; FLARE's look-ahead 0.8)
    flare_mask_prob: float = 0.4  # FLARE: tokens with p ≤ this are dropped from the query
    query_max_words: int = 64  # BM25 query cut to its last 64 words (reference: 64 tokens)
    iterations: int = 2  # Iter-RetGen's T (its top_k is 5 in the paper: set --top_k 5)

    def __post_init__(self):
        defaults = {"wo-rag": ("never", "question"), "sr-rag": ("single", "question"),
                    "fl-rag": ("fixed_length", "last_window"), "fs-rag": ("fixed_sentence", "last_sentence"),
                    "flare": ("flare", "flare_masked"), "dragin": ("rind", "qfs"), "custom": (None, None),
                    # Iter-RetGen is a loop of whole generations (inference/iter_retgen.py), not a trigger
                    "iter-retgen": ("single", "question"),
                    # ADAPT-LLM's gate and its baselines (inference/gate_eval.py): at most one decision to retrieve
                    "adapt-llm": ("single", "question"), "nr": ("never", "question"), "ar": ("single", "question"),
                    "popularity": ("single", "question")}
        if self.method not in defaults:
            raise ValueError(f"unknown method '{self.method}' (known: {', '.join(defaults)})")
        trig, query = defaults[self.method]
        self.trigger = self.trigger or trig
        self.query = self.query or query
        if self.trigger is None or self.query is None:
            raise ValueError("method 'custom' needs both 'trigger' and 'query'")
        if self.top_k <= 0 or self.max_rounds < 0 or self.fixed_length <= 0 or self.qfs_top_n <= 0:
            raise ValueError("top_k, fixed_length and qfs_top_n must be positive; max_rounds non-negative")

    @property
    def retrieves_first(self) -> bool:
        """SR-RAG and FLARE retrieve with the question before generating."""
        return self.trigger in ("single", "flare")


def _keep(view: RoundView, token: int, cfg: MethodConfig) -> int:
    if cfg.truncation == "none":
        return len(view.pieces)
    return view.sentence_start(token) if cfg.truncation == "sentence" else token


def check_trigger(view: RoundView, cfg: MethodConfig, *, sentence_end: bool, final: bool) -> Event | None:
    """Decide whether to retrieve now. Called after every token; most triggers act at sentence ends."""
    n = len(view.pieces)
    if cfg.trigger in ("never", "single") or n == 0:
        return None
    if cfg.trigger == "fixed_length":
        return Event(n - 1, 1.0, n) if n >= cfg.fixed_length and not final else None
    if not (sentence_end or final):
        return None
    if cfg.trigger == "fixed_sentence":
        return None if final else Event(n - 1, 1.0, n)
    start = view.checked
    if cfg.trigger == "flare":
        low = [i for i in range(start, n) if view.probs[i] <= cfg.flare_threshold]
        return Event(low[0], 1.0 - view.probs[low[0]], _keep(view, low[0], cfg)) if low else None
    if cfg.trigger == "rind":
        return _rind_event(view, cfg, start)
    raise ValueError(f"unknown trigger '{cfg.trigger}'")


def _rind_event(view: RoundView, cfg: MethodConfig, start: int) -> Event | None:
    prompt_len = len(view.prompt_pieces)
    amax = signals.a_max(view.rows, prompt_len)
    words = signals.rind_word_scores(view.pieces, view.entropies, amax, entropy_agg=cfg.entropy_agg,
                                     attention_agg=cfg.attention_agg)
    if cfg.rind_normalisation == "reference":
        sentence_of = [view.sentence_start(w.tokens[0]) for w in words]
        words = signals.renormalise_like_reference(words, sentence_of)
    for w in words:
        if w.tokens[0] >= start and w.score > cfg.theta:
            return Event(w.tokens[0], w.score, _keep(view, w.tokens[0], cfg))
    return None


def form_query(view: RoundView, event: Event, cfg: MethodConfig) -> str:
    """The retrieval query for ``event``; falls back to the question when a former yields nothing."""
    q = ""
    if cfg.query == "question":
        q = view.question
    elif cfg.query == "last_window":
        q = "".join(view.pieces[max(0, event.token + 1 - cfg.fixed_length): event.token + 1])
    elif cfg.query == "last_sentence":
        q = view.last_sentence() if event.keep == len(view.pieces) else \
            "".join(view.pieces[view.sentence_start(event.token): event.token + 1])
    elif cfg.query == "flare_masked":
        s = view.sentence_start(event.token)
        end = _sentence_end(view, event.token)
        q = signals.flare_masked_query(view.pieces[s:end], view.probs[s:end], cfg.flare_mask_prob)
    elif cfg.query == "qfs":
        row = view.rows[event.token][:-1]  # over all positions before the triggering token
        pieces = view.prompt_pieces + view.pieces[: event.token]
        eligible = view.eligible + [True] * event.token
        q = signals.qfs_query(row, pieces, eligible, cfg.qfs_top_n)
    q = " ".join(q.split()[-cfg.query_max_words:])
    return q or view.question


def _sentence_end(view: RoundView, token: int) -> int:
    """One past the last token of the sentence holding ``token`` (the tentative sentence FLARE masks)."""
    starts = view.sentence_starts()
    return next((i for i in range(token + 1, len(starts)) if starts[i] != starts[token]), len(starts))
