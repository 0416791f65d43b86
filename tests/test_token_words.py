"""``word_text: tokens``: words as DRAGIN's reference code spells them (raw token strings), its modifier's sentence
ranges and firing, and its keep_real_words, against hand-computed values; the words on all three tokenizer
families."""

from __future__ import annotations

import pytest
import torch
from tokenizer_matrix import shared_tokenizer

from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.text_units import TokenText
from inference.dynamic_rag.token_words import (
    RawWords,
    authors_modifier,
    authors_qfs_query,
    sentence_word_ranges,
)

TEXT = "Osk founded Kelmora.\n1. Then he left: 1970"


@pytest.mark.parametrize("family, newline_word", [
    ("bpe", "Ċ1."),  # byte-level BPE: the newline token is "Ċ", and the digits join it
    ("bpe_bos", "Ċ1."),
    ("sentencepiece", "<0x0A>1."),  # Llama-2: the byte token <0x0A> (their constant 13) opens the word
])
def test_raw_words_on_each_tokenizer_family(family, newline_word):
    tok = shared_tokenizer(family)
    raw = RawWords(tok, TokenText(tok).marker)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    tokens = raw.tokens(ids)
    words = [raw.text(tokens, g) for g in raw.groups(ids, tokens)]
    # "Kelmora." keeps its full stop, the lone marker before "1970" opens the number's word
    assert words == ["Osk", "founded", "Kelmora.", newline_word, "Then", "he", "left:", "1970"]


class _Stub:
    """A tokenizer with the two calls RawWords makes."""

    def encode(self, text, add_special_tokens=False):
        return [99]

    def convert_ids_to_tokens(self, ids):
        return [f"t{i}" for i in ids]


def test_a_word_opens_after_eos_only_in_generate_attn():
    raw = RawWords(_Stub(), "Ġ")
    tokens, ids = ["Ġa", "</s>", "b", "Ċ", "c"], [1, 2, 3, 99, 4]
    assert raw.groups(ids, tokens) == [[0, 1], [2], [3, 4]]
    assert raw.groups(ids, tokens, after_eos=False) == [[0, 1, 2], [3, 4]]  # keep_real_words has no such rule


def test_sentence_ranges_follow_the_substring_test():
    words = ["Osk", "founded", "it.", "A", "ĊB.", "C."]
    # "A\nB." is never spelled by the raw words joined with spaces ("A ĊB."): no words, the next sentence takes them
    assert sentence_word_ranges(["Osk founded it.", "A\nB.", "C."], words) == [(0, 3), (3, 3), (3, 6)]
    assert sentence_word_ranges(["Osk founded it.", "A ĊB. C."], words) == [(0, 3), (3, 6)]
    # a non-last sentence can never take the last word (their range stops one short)
    assert sentence_word_ranges(["Osk founded it. A ĊB. C.", "x"], words) == [(0, 0), (0, 6)]


def test_modifier_fires_on_the_first_sentence_above_theta():
    words = ["Osk", "founded", "it.", "Then", "left."]
    sentences = ["Osk founded it.", "Then left."]
    attn = [0.2, 0.6, 0.2, 0.5, 0.5]
    ent = [1.0, 0.5, 2.0, 0.1, 0.1]
    # sentence 0: a / sum(a) * H * 3 = 0.6, 0.9, 1.2 -> words 1 and 2 above 0.8; only "founded" holds a real word
    fired = authors_modifier(sentences, words, attn, ent, 0.8, lambda s: frozenset({"founded"}))
    assert (fired.sentence, fired.start, fired.end) == (0, 0, 3)
    assert fired.above == [0, 1, 1] and fired.hits == [0, 1, 0]
    assert fired.first == 1 and fired.score == pytest.approx(0.9)
    # no real word among them: their curr_hit is all 0
    assert authors_modifier(sentences, words, attn, ent, 0.8, lambda s: frozenset()).hits == [0, 0, 0]
    # the project's rules (no parser): the stopword test on the raw word ("it." is a stopword)
    assert authors_modifier(sentences, words, attn, ent, 0.8, lambda s: None).hits == [0, 1, 0]
    # sentence 1 alone above θ: 0.5 * 0.1 * 2 = 0.1
    assert authors_modifier(sentences, words, attn, ent, 1.5, lambda s: None) is None
    assert authors_modifier(sentences, words, attn, [0, 0, 0, 9.0, 0], 1.5, lambda s: None).sentence == 1


def _attention(rows: dict[int, list[float]], n: int) -> torch.Tensor:
    a = torch.zeros(n, n)
    for i, row in rows.items():
        a[i, :len(row)] = torch.tensor(row)
    return a


def test_keep_real_words_as_written():
    raw = RawWords(_Stub(), "Ġ")
    tokens = ["A", "Ġbig", "Ġcat", "Ġsat", "Ġdown"]
    ids = [1, 2, 3, 4, 5]
    # the hit word "sat" (word 3) reads row 2 over positions 0-2, renormalised: 0.2, 0.3, 0.5
    attention = _attention({2: [0.1, 0.15, 0.25]}, 5)
    # candidates: not a stopword ("A", "down" are), not a hit; by weight, then in text order
    assert authors_qfs_query(ids, tokens, attention, 2, [1, 0], None, 1, raw) == "cat"
    assert authors_qfs_query(ids, tokens, attention, 2, [1, 0], None, 35, raw) == "big cat"
    # real words as substrings of the raw words: "at" is in "cat" and "sat" (a hit, left out)
    assert authors_qfs_query(ids, tokens, attention, 2, [1, 0], frozenset({"at"}), 35, raw) == "cat"
    # no hit word: their 0/0 makes every weight NaN and the stable sort keeps text order
    assert authors_qfs_query(ids, tokens, attention, 2, [0, 0], None, 1, raw) == "big"


def test_keep_real_words_averages_a_word_over_its_tokens_and_the_hits():
    raw = RawWords(_Stub(), "Ġ")
    tokens = ["Q", "Ġold", "Ġnew", "york", "Ġcity"]
    ids = [1, 2, 3, 4, 5]
    # hit "newyork" (tokens 2-3, r0 = 2): rows 1 and 2 over positions 0-1, each renormalised, averaged:
    #   row 1 -> (0.5, 0.5), row 2 -> (0.9, 0.1): Q 0.7, old 0.3
    # hit "city" (token 4, r0 = 4): row 3 over 0-3 -> Q 0.1, old 0.1, newyork 0.8 (0.4 + 0.4)
    # averaged over the two hits: Q 0.4, old 0.2, newyork (a hit) -, city (a hit) -
    attention = _attention({1: [1.0, 1.0], 2: [0.9, 0.1], 3: [0.1, 0.1, 0.4, 0.4]}, 5)
    real = frozenset({"Q", "old"})
    assert authors_qfs_query(ids, tokens, attention, 2, [1, 1], real, 1, raw) == "Q"
    assert authors_qfs_query(ids, tokens, attention, 2, [1, 1], real, 35, raw) == "Q old"
    # one hit only ("city"): old 0.1 ties Q 0.1, and newyork is a candidate (0.8) when a real word is in it
    assert authors_qfs_query(ids, tokens, attention, 2, [0, 1], real | {"york"}, 1, raw) == "newyork"
    assert authors_qfs_query(ids, tokens, attention, 2, [0, 1], real, 1, raw) == "Q"


def test_profiles_set_the_switch():
    assert MethodConfig(method="dragin", dragin_profile="reference").word_text == "tokens"
    assert MethodConfig(method="dragin", dragin_profile="paper").word_text == "pieces"
    assert MethodConfig(method="dragin", dragin_profile="reference", word_text="pieces").word_text == "pieces"


NEWLINE_SCRIPT = " The city was founded in 1970.\n2) Its port opened!"


@pytest.mark.parametrize("family, tokens_query", [
    # keep_real_words encodes the raw word "Ċ2)" again: its "Ċ" (U+010A) is two bytes, written "ÄĬ"
    ("bpe", "city founded? city founded 1970. ÄĬ2) port"),
    # the BOS opens the first word ("<|begin_of_text|>When"), a candidate; the token cut's decode drops its text
    ("bpe_bos", "When city founded? city founded 1970. ÄĬ2) port"),
    # "<0x0A>2)" encoded again: this small vocabulary has no "<" or ">" piece, so they fall back to bytes; the
    # BOS is a word of its own, "<s>", a candidate whose text the token cut's decode drops (the leading space stays)
    ("sentencepiece", " city founded? city founded 1970. <0x3C>0x0A<0x3E>2) port"),
])
def test_the_engine_queries_with_their_raw_words_on_each_family(family, tokens_query):
    """The script's one unsure word, "opened", is the only one above θ 1. The first sentence ends at the newline,
    so the second fires, "opened" is its one hit, and the query's words are drawn from question + the sentence
    before + the firing sentence's raw words (fewer than the 35 it keeps: all of them, in text order)."""
    from test_tokenizer_paths import known_model, run

    tok = shared_tokenizer(family)
    model = known_model(tok, NEWLINE_SCRIPT, unsure=("opened",))
    queries = {}
    for word_text in ("tokens", "pieces"):
        method = MethodConfig(method="dragin", dragin_profile="reference", attention_pass="authors", theta=1.0,
                              max_rounds=1, answer_extraction="project", word_text=word_text)
        record, priors, queries[word_text] = run(tok, model, method)
        # their ptext: the sentence before the one that fired
        assert priors[1] == "The city was founded in 1970."
    assert queries["tokens"] == [tokens_query]
    assert queries["pieces"] == ["city founded? city founded 1970. 2) port"]
