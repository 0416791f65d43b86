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

``dragin_profile`` chooses between two readings of DRAGIN (each setting is also a switch of its own; a switch set
explicitly wins over the profile). ``paper`` follows the paper's text; ``reference`` reproduces the authors' code
(oneal2000/DRAGIN ``src/generate.py``, ``AttnWeightRAG`` and ``FixLengthRAG``; SPEC.md):

========================  =====================================  ============================================
setting                   paper                                  reference
========================  =====================================  ============================================
rind_attention            heads reduced per row, then            per head the max over query rows j >= i
                          a_max(i) = max_{j>i} A[j, i]           (diagonal included), then the mean over heads
rind_normalisation        none                                   per sentence: attention / sum × word count
content_filter            ``score``: s_i inside the score        ``after_threshold``: H·a > θ fires (also on a
                                                                 stopword); stopwords are then dropped from
                                                                 the hits QFS averages
rind_scope                ``sentence``: each sentence judged     ``round``: the round is generated to its end,
                          when it ends                           then its sentences are judged in order
docs_scope                ``until_replaced``                     ``next_sentence``: the documents serve the
                                                                 one sentence after the retrieval; later
                                                                 rounds are prompted without them
qfs_attention             the triggering token's own row         rows of the positions before the hit words'
                                                                 tokens, averaged over the hits
qfs_top_n                 25                                     the reference's dataset configs: HotpotQA 35,
                                                                 2Wiki 25, IIRC 35, StrategyQA 35
fixed_question_first      no                                     FL-RAG and FS-RAG retrieve with the question
                                                                 before generating (Table 3 counts that call)
max_rounds                5                                      20 (the reference has no cap; the token budget
                                                                 ends its loop)
========================  =====================================  ============================================

Progress guarantee (both profiles, ``keep_sentence_after_retrieval``): after a retrieval fired by a trigger (RIND,
FLARE), the first sentence generated with the new documents is kept without being checked; the trigger may fire
again only after it. Without it a trigger that fires in the first sentence after every retrieval keeps nothing and
retrieves again at the same position until the retrieval cap (measured on HotpotQA with the paper prompt). The
reference code does this (it keeps the first sentence of the generation after a retrieval, unchecked), FLARE does
it (the regenerated sentence is accepted), and the paper implies it (a later trigger is at a *subsequent* position
j). One sentence, not one token: the sentence truncation would otherwise cut the kept token away again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import torch

from inference import signals
from inference.text_units import split_sentences

TriggerName = Literal["never", "single", "fixed_length", "fixed_sentence", "flare", "rind"]
QueryName = Literal["question", "last_window", "last_sentence", "flare_masked", "qfs"]
Truncation = Literal["sentence", "token", "none"]
Profile = Literal["paper", "reference"]

# Settings each DRAGIN profile gives to the switches left unset (None); see the module docstring.
PROFILES: dict[str, dict[str, object]] = {
    "paper": {"rind_attention": "paper", "rind_normalisation": "paper", "content_filter": "score",
              "rind_scope": "sentence", "docs_scope": "until_replaced", "qfs_attention": "paper",
              "fixed_question_first": False, "max_rounds": 5},
    "reference": {"rind_attention": "reference", "rind_normalisation": "reference", "content_filter": "after_threshold",
                  "rind_scope": "round", "docs_scope": "next_sentence", "qfs_attention": "reference",
                  "fixed_question_first": True, "max_rounds": 20},
}
PAPER_QFS_TOP_N = 25  # the paper gives no n; the low end of the reference's 25-35
# retrieve_keep_top_k in the reference's config/Llama2-7b-chat/<dataset>/DRAGIN.json
REFERENCE_QFS_TOP_N = {"hotpotqa": 35, "2wiki": 25, "iirc": 35, "strategyqa": 35}
REFERENCE_QFS_TOP_N_OTHER = 35


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
    after_retrieval: bool = False  # a trigger's retrieval preceded this round: its first sentence is kept unchecked
    prompt_row: torch.Tensor | None = None  # attention row of the last prompt position (it chose token 0)
    head_reduce: str = "mean"  # how to reduce rows kept per head (H, positions) for the paper's formulas

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def row(self, j: int) -> torch.Tensor:
        """Generated token j's row over all earlier positions, heads reduced (``head_reduce``)."""
        return _reduce(self.rows[j], self.head_reduce)

    def row_before(self, j: int) -> torch.Tensor | None:
        """The head-averaged row of the position before generated token j (the one that chose t_j), or None."""
        row = self.prompt_row if j == 0 else self.rows[j - 1]
        return None if row is None else _reduce(row, "mean")

    def protected_end(self) -> int:
        """Tokens at the start of the round that no trigger may fire on: the first sentence after a retrieval."""
        if not self.after_retrieval:
            return 0
        starts = self.sentence_starts()
        return next((i for i, s in enumerate(starts) if s != 0), len(starts))

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


def _reduce(row: torch.Tensor, how: str) -> torch.Tensor:
    if row.dim() == 1:
        return row
    return row.amax(dim=0) if how == "max" else row.mean(dim=0)


@dataclass
class Event:
    """A decision to retrieve: at round token ``token`` with ``score``; keep ``keep`` tokens of this round.

    ``hits`` are the words (round token indices) whose attention QFS reads; ``stopword_hits`` says that every word
    above θ was a stopword, so QFS reads those instead of none (the reference divides by zero there)."""

    token: int
    score: float
    keep: int
    hits: list[list[int]] = field(default_factory=list)
    stopword_hits: bool = False


@dataclass
class MethodConfig:
    """All knobs of a dynamic-RAG method. Defaults follow the DRAGIN paper and its public configuration."""

    method: Literal["wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin", "custom", "iter-retgen", "adapt-llm",
                    "nr", "ar", "popularity"] = "dragin"
    trigger: TriggerName | None = None  # None: the method's own; set both for ablations ("custom")
    query: QueryName | None = None
    top_k: int = 3  # documents per retrieval (DRAGIN: 3 via BM25; FLARE used 2)
    # Retrieval cap per question; None: the profile's (paper 5, reference 20 = no cap within a 100-token budget)
    max_rounds: int | None = None
    # RIND's θ. 0.8 is the reference's HotpotQA value for Llama2-7b-chat (SPEC.md) and belongs to the reference's
    # scale (rind_normalisation reference: attention renormalised per sentence × its word count, so a typical word
    # has a ≈ 1); on the paper's scale (raw a_max, mostly ≤ 0.1 on SmolLM2) the same θ fires far less. Sweep it.
    theta: float = 0.8
    dragin_profile: Profile = "paper"  # which reading of DRAGIN fills the switches left unset below
    rind_attention: Literal["paper", "reference"] | None = None
    rind_normalisation: Literal["paper", "reference"] | None = None
    content_filter: Literal["score", "after_threshold"] | None = None
    rind_scope: Literal["sentence", "round"] | None = None
    docs_scope: Literal["until_replaced", "next_sentence"] | None = None  # for retrievals a trigger fired
    qfs_attention: Literal["paper", "reference"] | None = None
    qfs_top_n: int | None = None  # None: the profile's (paper 25; reference by dataset, see REFERENCE_QFS_TOP_N)
    fixed_question_first: bool | None = None  # FL-RAG / FS-RAG retrieve with the question before generating
    keep_sentence_after_retrieval: bool = True  # the progress guarantee (module docstring)
    entropy_agg: signals.WordAgg = "mean"  # over a word's pieces (reference: mean)
    attention_agg: signals.WordAgg = "sum"  # over a word's pieces (reference: sum)
    truncation: Truncation = "sentence"  # reference: cut at the start of the sentence holding the trigger
    fixed_length: int = 32  # FL-RAG window (the reference's fix_length)
    # FLARE (jzbjyb/FLARE): retrieve when a token of the tentative sentence has p ≤ look_ahead_filter_prob (0.8),
    # and blank the tokens with p ≤ look_ahead_mask_prob (0.4) from the query. DRAGIN's FLARE baseline instead
    # averages 1-p over a sentence (hallucination_threshold); FlashRAG's FLARE triggers at p < 0.2.
    flare_threshold: float = 0.8
    flare_mask_prob: float = 0.4
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
        if self.dragin_profile not in PROFILES:
            raise ValueError(f"dragin_profile must be one of {', '.join(PROFILES)}, got '{self.dragin_profile}'")
        for name, value in PROFILES[self.dragin_profile].items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.top_k <= 0 or self.max_rounds < 0 or self.fixed_length <= 0 or (self.qfs_top_n or 1) <= 0:
            raise ValueError("top_k, fixed_length and qfs_top_n must be positive; max_rounds non-negative")

    @property
    def retrieves_first(self) -> bool:
        """SR-RAG and FLARE retrieve with the question before generating; FL-RAG and FS-RAG when
        ``fixed_question_first`` (the reference code)."""
        return self.trigger in ("single", "flare") or bool(
            self.fixed_question_first and self.trigger in ("fixed_length", "fixed_sentence"))

    @property
    def docs_for_next_sentence_only(self) -> bool:
        """After a retrieval a trigger fired, do the documents serve one sentence only (reference)?"""
        return self.docs_scope == "next_sentence" and self.trigger in ("rind", "flare")

    def keeps_heads(self, head_reduce: str) -> bool:
        """Does this method need attention rows per head? The reference's RIND takes the max over rows per head
        before averaging heads; its QFS averages heads, which rows reduced by max cannot give."""
        return (self.trigger == "rind" and self.rind_attention == "reference") or (
            self.query == "qfs" and self.qfs_attention == "reference" and head_reduce != "mean")

    def resolved(self, *dataset_hints: str | None) -> MethodConfig:
        """This config with ``qfs_top_n`` filled: the paper profile's 25, or the reference's value for the first
        hint (a dataset name or path, the demos' name) that names one of its datasets, else 35."""
        if self.qfs_top_n is not None:
            return self
        if self.dragin_profile == "paper":
            return replace(self, qfs_top_n=PAPER_QFS_TOP_N)
        for hint in dataset_hints:
            for key, n in REFERENCE_QFS_TOP_N.items():
                if hint and key in str(hint).lower():
                    return replace(self, qfs_top_n=n)
        return replace(self, qfs_top_n=REFERENCE_QFS_TOP_N_OTHER)


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
    protected = view.protected_end() if cfg.keep_sentence_after_retrieval else 0
    start = max(view.checked, protected)
    if cfg.trigger == "flare":
        low = [i for i in range(start, n) if view.probs[i] <= cfg.flare_threshold]
        return Event(low[0], 1.0 - view.probs[low[0]], _keep(view, low[0], cfg)) if low else None
    if cfg.trigger == "rind":
        if cfg.rind_scope == "round":  # the reference judges a whole round once it has ended
            return _rind_event(view, cfg, protected) if final else None
        return _rind_event(view, cfg, start)
    raise ValueError(f"unknown trigger '{cfg.trigger}'")


def rind_words(view: RoundView, cfg: MethodConfig) -> list[signals.WordScore]:
    """RIND's per-word entropy, attention and stopword flag for this round (attention per ``rind_attention``,
    renormalised per ``rind_normalisation``)."""
    n, prompt_len = len(view.pieces), len(view.prompt_pieces)
    if not view.rows:
        attention = torch.zeros(n)
    elif cfg.rind_attention == "reference":
        if view.rows[0].dim() != 2:
            raise ValueError("rind_attention 'reference' needs attention rows kept per head")
        attention = signals.a_max_reference(view.rows, prompt_len, n)
    else:
        attention = signals.a_max([view.row(j) for j in range(len(view.rows))], prompt_len, n)
    words = signals.rind_word_scores(view.pieces, view.entropies, attention, entropy_agg=cfg.entropy_agg,
                                     attention_agg=cfg.attention_agg)
    if cfg.rind_normalisation == "reference":
        words = signals.renormalise_like_reference(words, [view.sentence_start(w.tokens[0]) for w in words])
    return words


def _rind_event(view: RoundView, cfg: MethodConfig, start: int) -> Event | None:
    words = [w for w in rind_words(view, cfg) if w.tokens[0] >= start]
    if cfg.content_filter == "score":  # the paper: s_i is a factor of the score
        first = next((w for w in words if w.score > cfg.theta), None)
        return None if first is None else Event(first.tokens[0], first.score, _keep(view, first.tokens[0], cfg),
                                                hits=[first.tokens])
    # The reference: H·a above θ fires, stopword or not; the hits are every such word of that sentence, and the
    # content-word filter only chooses which of them QFS reads.
    first = next((w for w in words if w.unfiltered_score > cfg.theta), None)
    if first is None:
        return None
    sentence = view.sentence_start(first.tokens[0])
    hits = [w for w in words if w.unfiltered_score > cfg.theta and view.sentence_start(w.tokens[0]) == sentence]
    content = [w for w in hits if w.content]
    return Event(first.tokens[0], first.unfiltered_score, _keep(view, first.tokens[0], cfg),
                 hits=[w.tokens for w in content or hits], stopword_hits=not content)


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
        top_n = cfg.qfs_top_n or PAPER_QFS_TOP_N
        if cfg.qfs_attention == "reference":
            q = _qfs_reference(view, event, top_n)
        else:
            row = view.row(event.token)[:-1]  # over all positions before the triggering token
            pieces = view.prompt_pieces + view.pieces[: event.token]
            eligible = view.eligible + [True] * event.token
            q = signals.qfs_query(row, pieces, eligible, top_n)
    q = " ".join(q.split()[-cfg.query_max_words:])
    return q or view.question


def _qfs_reference(view: RoundView, event: Event, top_n: int) -> str:
    """The reference's QFS over question + answer so far + this round up to the end of the triggering sentence;
    hit words whose preceding row is missing (token 0 without a prefill row) fall back to their own row."""
    p = len(view.prompt_pieces)
    end = _sentence_end(view, event.token)
    hits = event.hits or [[event.token]]
    rows_before = [[view.row_before(t) if view.row_before(t) is not None else _reduce(view.rows[t], "mean")
                    for t in word] for word in hits]
    exclude = {p + t for word in hits for t in word}
    return signals.qfs_query_reference(rows_before, [p + word[0] for word in hits],
                                       view.prompt_pieces + view.pieces[:end], view.eligible + [True] * end,
                                       exclude, top_n)


def _sentence_end(view: RoundView, token: int) -> int:
    """One past the last token of the sentence holding ``token`` (the tentative sentence FLARE masks)."""
    starts = view.sentence_starts()
    return next((i for i in range(token + 1, len(starts)) if starts[i] != starts[token]), len(starts))
