"""Token pieces, words and sentences of generated text, for any tokenizer.

Word boundaries come from the tokenizer itself: byte-level BPE (GPT-2, SmolLM2, Llama-3) marks a leading space
with "Ġ", SentencePiece (Llama-2) with "▁"; pieces are decoded as continuations, so a word-initial piece begins
with a space on both (the marker itself is derived by tokenizing " word", never assumed).
Sentences come from spaCy's rule-based sentencizer (no model download), except that a full stop after an initial
or a common title ("Robert Z. Leonard", "Dr. Who", "Washington, D.C. is") does not end one: the sentencizer splits
there, which cut FS-RAG and DRAGIN sentence windows in the middle of names.
"""

from __future__ import annotations

import re
from functools import lru_cache

from adaptive_rag.lm.tokenization import continuation_ids, decode_continuation

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


# spaCy's part-of-speech tags that DRAGIN's reference keeps as "real words" (src/generate.py, check_real_words and
# keep_real_words)
REAL_WORD_TAGS = frozenset({"NOUN", "ADJ", "VERB", "PROPN", "NUM"})
SPACY_MODEL = "en_core_web_sm"
_MISSING_MODEL = (f"DRAGIN's reference splits sentences and picks real words with spaCy's {SPACY_MODEL} parser, "
                  "which is not installed (pip install -e '.[dragin]', or python -m spacy download "
                  "en_core_web_sm): the project's rules run instead (a rule-based sentencizer, spaCy's stopword list)")


@lru_cache(maxsize=1)
def spacy_pipeline():
    """``en_core_web_sm`` loaded once, or None when it is not installed."""
    try:
        import spacy

        return spacy.load(SPACY_MODEL)
    except (ImportError, OSError):
        return None


class TextRules:
    """How a round's sentences and content words are found: the project's rules (``nlp`` None), or a spaCy pipeline
    with a parser and a tagger (DRAGIN's reference: ``en_core_web_sm``), whose sentences are its parser's and whose
    content words are the words that contain one of its "real words" (:data:`REAL_WORD_TAGS`), as the reference's
    substring test has it."""

    def __init__(self, nlp=None, name: str | None = None):
        self.nlp = nlp
        self.name = name or ("rules" if nlp is None else SPACY_MODEL)

    def split(self, text: str) -> list[tuple[int, int]]:
        if self.nlp is None:
            return split_sentences(text)
        spans = []
        for sent in self.nlp(text).sents:  # their sentences are stripped and empty ones dropped
            stripped = sent.text.strip()
            if stripped:
                start = sent.start_char + sent.text.index(stripped)
                spans.append((start, start + len(stripped)))
        return spans

    def real_words(self, text: str) -> frozenset[str] | None:
        """The reference's real words of ``text`` (None under the project's rules)."""
        if self.nlp is None:
            return None
        return frozenset(token.text for token in self.nlp(text) if token.pos_ in REAL_WORD_TAGS)


PROJECT_RULES = TextRules()


def text_rules(which: str) -> TextRules:
    """``rules``: the project's; ``authors``: en_core_web_sm when installed, else the project's with one warning."""
    if which != "authors":
        return PROJECT_RULES
    nlp = spacy_pipeline()
    if nlp is None:
        import warnings

        warnings.warn(_MISSING_MODEL, stacklevel=2)
        return PROJECT_RULES
    return TextRules(nlp)


def contains_real_word(word: str, real: frozenset[str]) -> bool:
    """The reference's ``match``: a word is kept when one of the real words is a substring of it."""
    return any(r in word for r in real)


class TokenText:
    """Maps token ids to the text pieces they contribute, so that ``"".join(pieces(ids)) == decode(ids)`` with the
    leading space a SentencePiece decoder strips kept (:func:`adaptive_rag.lm.tokenization.decode_continuation`).

    A character split over several byte tokens (SentencePiece byte fallback, a byte-level BPE split inside a
    multi-byte character) belongs to the token that completes it; the ones before it contribute "" (a
    :class:`PieceStream` carries them across steps)."""

    def __init__(self, tokenizer, *, keep_special: bool = False):
        self.tokenizer = tokenizer
        # keep_special: special tokens contribute their text ("<|im_end|>", "</s>"), as DRAGIN's reference code
        # decodes a round (tokenizer.decode without skip_special_tokens)
        self.keep_special = keep_special
        probe = tokenizer.convert_ids_to_tokens(continuation_ids(tokenizer, " word"))
        self.marker = probe[0][0] if probe and probe[0][0] not in "w" else ""
        self.special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        self._cache: dict[int, str] = {}

    def piece(self, token_id: int) -> str:
        """One token's text in the middle of a text ("▁The" -> " The"); "" for a special token unless
        ``keep_special``."""
        if token_id not in self._cache:
            dropped = token_id in self.special_ids and not self.keep_special
            self._cache[token_id] = "" if dropped else self.decode([token_id])
        return self._cache[token_id]

    def decode(self, ids: list[int]) -> str:
        """``ids`` as text in the middle of a text: one decode, special tokens left out unless ``keep_special``."""
        return decode_continuation(self.tokenizer, list(ids), skip_special_tokens=not self.keep_special)

    def stream(self) -> PieceStream:
        return PieceStream(self)

    def pieces(self, ids: list[int]) -> list[str]:
        return self.stream().push(ids)


class PieceStream:
    """Pieces of a growing token sequence, fed a few ids at a time (the engine's rounds, step by step)."""

    MAX_HELD = 3  # a UTF-8 character has at most four bytes

    def __init__(self, text: TokenText):
        self.text, self.held = text, []

    def push(self, ids: list[int]) -> list[str]:
        out = []
        for token in ids:
            piece = self.text.piece(token) if not self.held else self.text.decode([*self.held, token])
            if piece.endswith("\ufffd") and len(self.held) < self.MAX_HELD:
                self.held.append(token)  # an incomplete character: the token that completes it carries it
                out.append("")
            else:
                self.held = []
                out.append(piece)
        return out


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
