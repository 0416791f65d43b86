"""What a trigger and a query former see of one sequence in one round, and what a trigger decides (an Event)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from inference.dynamic_rag.text_units import PROJECT_RULES, TextRules


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
    # attention_pass authors: per generated token, the attention it receives in a pass over the round's text alone
    authors_attention: torch.Tensor | None = None
    # attention_pass authors, set when a trigger fired: the QFS pass over question + text + the triggering sentence
    authors_qfs: Any = None  # inference.dynamic_rag.authors_pass.QfsPass
    rules: TextRules = PROJECT_RULES  # how sentences and content words are found (text_rules)
    ids: list[int] = field(default_factory=list)  # this round's token ids (as many as pieces)
    # word_text tokens: the reference code's words, raw token strings (inference/dynamic_rag/token_words.py)
    raw_words: Any = None  # inference.dynamic_rag.token_words.RawWords

    @property
    def text(self) -> str:
        """The round's text, extended by the pieces appended since the last call rather than joined anew."""
        cached = self.__dict__.get("_text")
        if cached is None or cached[0] is not self.pieces or cached[1] > len(self.pieces):
            cached = (self.pieces, 0, "")
        pieces, n, text = cached
        if n < len(pieces):
            text += "".join(pieces[n:])
            self._text = (pieces, len(pieces), text)
        return text

    def extend(self, pieces: list[str]) -> None:
        """Append the pieces of the tokens fed since the last step."""
        self.pieces.extend(pieces)

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` pieces (the answer ended before a stop marker)."""
        del self.pieces[n:]
        del self.ids[n:]
        self.__dict__.pop("_text", None)
        self.__dict__.pop("_sentences", None)

    def row(self, j: int) -> torch.Tensor:
        """Generated token j's row over all earlier positions, heads reduced (``head_reduce``)."""
        return reduce_heads(self.rows[j], self.head_reduce)

    def row_before(self, j: int) -> torch.Tensor | None:
        """The head-averaged row of the position before generated token j (the one that chose t_j), or None."""
        row = self.prompt_row if j == 0 else self.rows[j - 1]
        return None if row is None else reduce_heads(row, "mean")

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
        span_starts = [s for s, _ in self.rules.split(self.text)] or [0]
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

    def sentence_end(self, token: int) -> int:
        """One past the last token of the sentence holding ``token`` (the tentative sentence FLARE masks)."""
        starts = self.sentence_starts()
        return next((i for i in range(token + 1, len(starts)) if starts[i] != starts[token]), len(starts))

    def sentences(self) -> list[str]:
        """The round's sentences as text (stripped, none empty), as the reference code lists them; cached per length
        (the trigger, the QFS pass and the text kept before the firing sentence all read them)."""
        cached = self.__dict__.get("_sentences")
        if cached is None or cached[0] != len(self.pieces):
            text = self.text
            cached = (len(self.pieces), [text[a:b].strip() for a, b in self.rules.split(text) if text[a:b].strip()])
            self._sentences = cached
        return cached[1]

    def raw_tokens(self) -> list[str]:
        """word_text tokens: the round's tokens as ``convert_ids_to_tokens`` writes them (cached per length)."""
        cached = self.__dict__.get("_raw")
        if cached is None or len(cached) != len(self.ids):
            cached = self.raw_words.tokens(self.ids)
            self._raw = cached
        return cached

    def last_sentence(self) -> str:
        spans = self.rules.split(self.text)
        return self.text[spans[-1][0]:spans[-1][1]].strip() if spans else ""

    def first_unchecked(self, keep_sentence_after_retrieval: bool) -> int:
        """The first token a trigger may still fire on: past the tokens already cleared and, with the progress
        guarantee, past the first sentence after a retrieval."""
        protected = self.protected_end() if keep_sentence_after_retrieval else 0
        return max(self.checked, protected)


def reduce_heads(row: torch.Tensor, how: str) -> torch.Tensor:
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
    # word_text tokens (the reference code's modifier): the firing sentence's index among the round's sentences, its
    # raw words (their curr_tokens) and which of them are hits (their curr_hit, after the real-word filter)
    sentence: int | None = None
    current_words: list[str] | None = None
    current_hits: list[int] | None = None
    # the reference code's loops that write their query and kept text as strings (TokenRAG's curr, FS-RAG's first
    # sentence): the query, and the text kept before it (None: from the tokens)
    query: str | None = None
    kept_text: str | None = None


def keep_before(view: RoundView, token: int, cfg: Any) -> int:
    """How many tokens of the round survive a retrieval fired at ``token`` (``cfg.truncation``): the sentence holding
    it is cut (``sentence``), or only the token onwards (``token``), or nothing (``none``)."""
    if cfg.truncation == "none":
        return len(view.pieces)
    return view.sentence_start(token) if cfg.truncation == "sentence" else token
