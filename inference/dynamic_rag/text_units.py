"""Token pieces, words and sentences of generated text, for any tokenizer.

Word boundaries come from the tokenizer itself: byte-level BPE (GPT-2, SmolLM2, Llama-3) marks a leading space
with "Ġ", SentencePiece (Llama-2) with "▁"; the marker is derived by tokenizing " word", never assumed.
Sentences come from spaCy's rule-based sentencizer (no model download), except that a full stop after an initial
or a common title ("Robert Z. Leonard", "Dr. Who", "Washington, D.C. is") does not end one: the sentencizer splits
there, which cut FS-RAG and DRAGIN sentence windows in the middle of names.
"""

from __future__ import annotations

import re
from functools import lru_cache

SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s*$")
# A text ending like this has not ended a sentence: an initial ("Z.", "D.C.") or a title before a name.
_NOT_AN_END = re.compile(r"(?:\b[A-Z]\.|\b(?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|Gen|Col|Lt|Capt|Rev|Mt|vs|etc)\.)\s*$")


@lru_cache(maxsize=1)
def _sentencizer():
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the sentences of ``text``; newlines also end a sentence."""
    spans: list[tuple[int, int]] = []
    offset = 0
    for line in text.split("\n"):
        if line.strip():
            merge = False
            for sent in _sentencizer()(line).sents:
                if sent.text.strip():
                    start, end = offset + sent.start_char, offset + sent.end_char
                    if merge and spans:
                        start = spans.pop()[0]
                    spans.append((start, end))
                    merge = bool(_NOT_AN_END.search(sent.text))
        offset += len(line) + 1
    return spans


class TokenText:
    """Maps token ids to the text pieces they contribute, so that ``"".join(pieces(ids)) ≈ decode(ids)``."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        probe = tokenizer.convert_ids_to_tokens(tokenizer.encode(" word", add_special_tokens=False))
        self.marker = probe[0][0] if probe and probe[0][0] not in "w" else ""
        # SentencePiece decoders drop the leading space of a lone "▁word": put it back ourselves.
        self.decode_drops_space = not tokenizer.decode(tokenizer.encode(" word", add_special_tokens=False)[-1:]
                                                       ).startswith(" ")
        self.special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        self._cache: dict[int, str] = {}

    def piece(self, token_id: int) -> str:
        if token_id not in self._cache:
            if token_id in self.special_ids:
                text = ""
            else:
                text = self.tokenizer.decode([token_id])
                if self.decode_drops_space and self.marker:
                    raw = self.tokenizer.convert_ids_to_tokens(token_id)
                    if raw.startswith(self.marker) and not text.startswith(" "):
                        text = " " + text
            self._cache[token_id] = text
        return self._cache[token_id]

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.piece(i) for i in ids]


def ends_sentence(text_before: str, next_piece: str) -> bool:
    """True when ``text_before`` closes a sentence and ``next_piece`` starts a new one (white space/newline),
    or when a newline was just produced."""
    # Both patterns are anchored at the end and span a few characters plus trailing white space, so the last 64
    # characters decide (the whole text only when they are nearly all white space): the cost stays flat as the
    # answer grows.
    tail = text_before[-64:]
    if len(tail.strip()) >= 16:
        text_before = tail
    if "\n" in next_piece and text_before.strip():
        return True
    return (bool(SENTENCE_END.search(text_before)) and not _NOT_AN_END.search(text_before)
            and (not next_piece or next_piece[0].isspace()))
