"""Words as DRAGIN's reference code spells them (``word_text: tokens``): raw token strings, not decoded text.

Their ``generate_attn`` and ``keep_real_words`` (oneal2000/DRAGIN ``src/generate.py``) group the tokens that
``convert_ids_to_tokens`` returns: a word starts at the first token, at a token that begins with the word marker
("▁" for SentencePiece, "Ġ" for byte-level BPE), at the newline token (their constant 13, Llama-2's ``<0x0A>``), and
in ``generate_attn`` after a token written ``</s>``; the word's text is its tokens joined with the marker removed. So
a byte-level word keeps its byte characters ("Ċ1." for a newline before "1.", "Ã©" for "é"), and those strings are
what the rest of their code reads:

* RIND (``modifier``): the sentences of the decoded round are found among the words by a substring test on the words
  joined by one space, so a sentence whose text the raw words do not spell (a newline, an accented letter) gets no
  words and its words go to the next; a word is a content word when one of its sentence's real words is a substring
  of the raw string.
* QFS (``keep_real_words``): the raw words of the triggering sentence are joined by spaces behind question + answer
  so far + the sentences before, the whole text is encoded again, its words are grouped again, and the hit words are
  the last ones; the query is made of those re-encoded raw words ("ÄĬassistant" for the "Ċassistant" of a round).

The functions here are pure (no model): the engine feeds them tokens, attention and entropies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from inference.dynamic_rag.signals import is_content_word

AUTHORS_EOS_TEXT = "</s>"  # generate_attn opens a word after a token written "</s>" (Llama-2's EOS), literally


class RawWords:
    """How the reference code cuts a token sequence into words, for one tokenizer."""

    def __init__(self, tokenizer, marker: str):
        self.tokenizer = tokenizer
        self.marker = marker  # the tokenizer's own word marker (TokenText derives it from " word")
        # the id their constant 13 stands for (the harness of bench/agreement_authors.py maps it the same way)
        self.newline_id = tokenizer.encode("\n", add_special_tokens=False)[-1]

    def tokens(self, ids: list[int]) -> list[str]:
        return list(self.tokenizer.convert_ids_to_tokens(list(ids)))

    def decoded(self, ids: list[int]) -> list[str]:
        """Each token decoded alone, special tokens kept (their ``BasicGenerator.generate``'s ``tokens``)."""
        return [self.tokenizer.decode([i]) for i in ids]

    def groups(self, ids: list[int], tokens: list[str], *, after_eos: bool = True) -> list[list[int]]:
        """Token indices per word; ``after_eos``: ``generate_attn``'s rule that a word starts after ``</s>``
        (``keep_real_words`` has no such rule)."""
        words: list[list[int]] = []
        for i, t in enumerate(tokens):
            if i == 0 or t.startswith(self.marker) or ids[i] == self.newline_id \
                    or (after_eos and tokens[i - 1] == AUTHORS_EOS_TEXT):
                words.append([i])
            else:
                words[-1].append(i)
        return words

    def text(self, tokens: list[str], group: list[int]) -> str:
        return "".join(tokens[i] for i in group).replace(self.marker, "")


def sentence_word_ranges(sentences: list[str], words: list[str]) -> list[tuple[int, int]]:
    """``modifier``'s word range ``[tl, tr)`` of each sentence: the shortest run of words from where the last one
    ended whose space-joined text contains the sentence; the last sentence takes every word left. A sentence the run
    never spells gets an empty range and the next sentence starts where it did."""
    ranges, tid = [], 0
    for sid, sent in enumerate(sentences):
        tl = tr = tid
        if sid == len(sentences) - 1:
            tr = len(words)
        else:
            for i in range(tid + 1, len(words)):
                if sent in " ".join(words[tl:i]):
                    tr = i
                    break
            tid = tr
        ranges.append((tl, tr))
    return ranges


@dataclass
class AuthorsFiring:
    """What ``modifier`` returns when a sentence fires: its index, its word range, the words above θ (0/1 per word of
    the range) before and after the real-word filter, and the first word above θ with its value."""

    sentence: int
    start: int
    end: int
    above: list[int]
    hits: list[int]  # their curr_hit: all 0 when the filter cleared every word above θ
    first: int  # word index (in the round) of the first word above θ
    score: float


def authors_modifier(sentences: list[str], words: list[str], attentions: list[float], weights: list[float],
                     theta: float, real_words: Callable[[str], frozenset[str] | None]) -> AuthorsFiring | None:
    """``modifier``: per sentence in order, each word's attention renormalised over the sentence's words × its
    weight (entropy) × the sentence's word count; the first sentence with a value above ``theta`` fires. Its hits
    keep the words that contain one of ``real_words(sentence)`` (None: the project's stopword test on the word)."""
    for sid, (tl, tr) in enumerate(sentence_word_ranges(sentences, words)):
        total = sum(attentions[tl:tr])
        if tr <= tl or total <= 0:  # theirs: an empty array, or 0/0 (no value above θ)
            continue
        values = [attentions[i] / total * weights[i] * (tr - tl) for i in range(tl, tr)]
        above = [int(v > theta) for v in values]
        if not any(above):
            continue
        real = real_words(sentences[sid])
        hits = [int(a and (is_content_word(words[tl + k]) if real is None else any(r in words[tl + k] for r in real)))
                for k, a in enumerate(above)]
        first = above.index(1)
        return AuthorsFiring(sid, tl, tr, above, hits, tl + first, values[first])
    return None


def authors_qfs_query(ids: list[int], tokens: list[str], attention: torch.Tensor, n_current: int,
                      current_hits: list[int], real_words: frozenset[str] | None, top_k: int,
                      raw: RawWords) -> str:
    """``keep_real_words`` over one encoded text (question + answer so far + the sentences before + the triggering
    sentence's raw words joined by spaces): ``attention`` is its last layer averaged over heads (T, T). The hit words
    are the last ``n_current`` words where ``current_hits`` is 1. For each hit word starting at r0 and each of its
    tokens i > 0, row i-1 over the positions before r0, renormalised; averaged over the word's tokens, summed per
    word, averaged over the hit words. The ``top_k`` heaviest candidates (a real word is a substring; None: the
    project's stopword test), hit words left out, in text order; ties keep text order. With no hit word (the filter
    cleared them all) their average is 0/0, every weight NaN, and their stable sort keeps text order: the first
    ``top_k`` candidates."""
    groups = raw.groups(ids, tokens, after_eos=False)
    words = [raw.text(tokens, g) for g in groups]
    first_current = len(words) - n_current
    hit_words = [first_current + k for k, h in enumerate(current_hits) if h and 0 <= first_current + k < len(words)]
    forward = torch.zeros(len(words))
    for w in hit_words:
        group, r0 = groups[w], groups[w][0]
        att = torch.zeros(len(ids))
        for i in group:
            if i == 0 or r0 == 0:
                continue
            v = attention[i - 1][:r0].float()
            att[:r0] += v / v.sum()
        att /= len(group)
        forward += torch.stack([att[g[0]:g[-1] + 1].sum() for g in groups])
    forward = forward / len(hit_words) if hit_words else torch.zeros(len(words))  # NaN for all: text order
    excluded = set(hit_words)
    pairs = [(float(forward[i]), word, i) for i, word in enumerate(words)
             if i not in excluded and (is_content_word(word) if real_words is None
                                       else any(r in word for r in real_words))]
    pairs = sorted(pairs, key=lambda p: p[0], reverse=True)[:min(top_k, len(pairs))]
    return " ".join(word for _, word, _ in sorted(pairs, key=lambda p: p[2]))
