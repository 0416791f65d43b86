"""DRAGIN's formulas against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from adaptive_rag.lm.decoder import _entropy_and_choice
from inference.dynamic_rag import signals


def test_entropy_hand_computed():
    # p = (0.5, 0.25, 0.25): H = -(0.5 ln 0.5 + 2 * 0.25 ln 0.25) = 0.5 ln 2 + ln 2 = 1.5 ln 2 ≈ 1.0397
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    token, prob, entropy = _entropy_and_choice(logits)
    assert int(token) == 0 and float(prob) == pytest.approx(0.5)
    assert float(entropy) == pytest.approx(1.5 * math.log(2), abs=1e-6)


def test_a_max_takes_later_tokens_only():
    # prompt of 2 positions; 3 generated tokens. rows[j] covers positions 0..2+j.
    rows = [torch.tensor([0.5, 0.2, 0.3]),            # t0 (its own row; never counts for t0)
            torch.tensor([0.1, 0.1, 0.6, 0.2]),       # t1 pays 0.6 to t0
            torch.tensor([0.1, 0.1, 0.3, 0.4, 0.1])]  # t2 pays 0.3 to t0, 0.4 to t1
    amax = signals.a_max(rows, prompt_len=2)
    # a_max(t0) = max(0.6, 0.3) = 0.6; a_max(t1) = 0.4; a_max(t2) = 0 (no later token)
    assert amax.tolist() == pytest.approx([0.6, 0.4, 0.0])


def test_group_words_merges_pieces_and_keeps_punctuation_attached():
    # the reference's rule: a word starts at token 0 and at a piece opening with white space, nowhere else; a
    # newline takes the word after it ("\nIt"), a lone space the number after it (" 1962"), and an empty piece (a
    # special or an incomplete byte token) joins the word before it
    pieces = [" Qu", "arv", "ik", " is", " big", ".", "\n", "It", " (", "19", "62", ").", "", "Ok", " ", "1", "9"]
    assert signals.group_words(pieces) == [[0, 1, 2], [3], [4, 5], [6, 7], [8, 9, 10, 11, 12, 13], [14, 15, 16]]
    assert signals.group_words(["A"]) == [[0]] and signals.group_words([]) == []


def test_content_words():
    assert signals.is_content_word("Quarvik")
    assert not signals.is_content_word(" the")
    assert not signals.is_content_word(".")
    assert signals.is_content_word("1962")


def test_rind_hand_computed():
    pieces = [" Qu", "arv", "ik", " is", " big"]
    entropies = [2.0, 1.0, 0.0, 3.0, 1.5]
    amax = torch.tensor([0.1, 0.2, 0.3, 0.9, 0.4])
    words = signals.rind_word_scores(pieces, entropies, amax)  # entropy mean, attention sum (reference)
    # Quarvik: H = (2+1+0)/3 = 1, a = 0.1+0.2+0.3 = 0.6 -> 0.6; "is": stopword -> 0; "big": 1.5*0.4 = 0.6
    assert [w.word for w in words] == ["Quarvik", "is", "big"]
    assert [w.score for w in words] == pytest.approx([0.6, 0.0, 0.6])
    maxed = signals.rind_word_scores(pieces, entropies, amax, entropy_agg="max", attention_agg="max")
    assert maxed[0].score == pytest.approx(2.0 * 0.3)


def test_reference_renormalisation():
    w = [signals.WordScore("a1", [0], 1.0, 0.2, True), signals.WordScore("b1", [1], 1.0, 0.6, True),
         signals.WordScore("c2", [2], 2.0, 0.5, True)]
    out = signals.renormalise_like_reference(w, [0, 0, 1])
    # sentence 0: attention 0.2/0.8*2 = 0.5, 0.6/0.8*2 = 1.5; sentence 1: 0.5/0.5*1 = 1
    assert [x.attention for x in out] == pytest.approx([0.5, 1.5, 1.0])


def test_qfs_picks_top_words_in_text_order():
    pieces = [" Who", " founded", " Kel", "mora", " Records", "?", " The", " founder"]
    row = torch.tensor([0.05, 0.10, 0.20, 0.15, 0.05, 0.02, 0.05, 0.10])
    eligible = [True] * 8
    # word attention: Who .05 (stopword), founded .10, Kelmora .35, Records? .07 (the mark stays attached, as in the
    # reference's words), The (stop), founder .10
    assert signals.qfs_query(row, pieces, eligible, top_n=2) in ("founded Kelmora", "Kelmora founder")
    assert signals.qfs_query(row, pieces, eligible, top_n=3) == "founded Kelmora founder"
    # ineligible positions (demos, template) never fill the query
    assert signals.qfs_query(row, pieces, [True, True, False, False, True, True, True, True], 3) == \
        "founded Records? founder"
    with pytest.raises(ValueError, match="must align"):
        signals.qfs_query(row, pieces[:-1], eligible, 2)


def test_flare_masked_query():
    pieces = [" Osk", " was", " born", " in", " 1962", "."]
    probs = [0.9, 0.95, 0.9, 0.9, 0.2, 0.99]
    assert signals.flare_masked_query(pieces, probs, mask_prob=0.4) == "Osk was born in ."


def test_flare_mask_blanks_tokens_with_a_space_like_flare():
    # FLARE replaces a masked token by " ": the pieces around a masked middle piece stay two words, not "Quarton"
    pieces = [" Quar", "vik", "ton", " is", " big"]
    probs = [0.9, 0.1, 0.9, 0.9, 0.3]
    assert signals.flare_masked_query(pieces, probs, mask_prob=0.4) == "Quar ton is"


def test_a_max_reference_max_per_head_then_mean():
    # 2 heads, prompt of 1 position, 2 generated tokens; rows[j] is (H, 1 + j + 1)
    rows = [torch.tensor([[0.5, 0.5], [0.9, 0.1]]),
            torch.tensor([[0.2, 0.3, 0.5], [0.1, 0.6, 0.3]])]
    # t0: head 0 max(0.5 own row, 0.3) = 0.5, head 1 max(0.1, 0.6) = 0.6 -> 0.55; t1: heads 0.5, 0.3 -> 0.4
    assert signals.a_max_reference(rows, prompt_len=1).tolist() == pytest.approx([0.55, 0.4])
    # the paper's order (heads averaged per row, later rows only): t0 gets mean(0.3, 0.6) = 0.45, t1 gets 0
    assert signals.a_max([r.mean(dim=0) for r in rows], prompt_len=1).tolist() == pytest.approx([0.45, 0.0])


def test_unfiltered_score_ignores_the_stopword_flag():
    w = signals.WordScore("the", [0], 2.0, 0.5, False)
    assert w.score == 0.0 and w.unfiltered_score == pytest.approx(1.0)


def test_qfs_query_reference_hand_computed():
    # positions: 0 Who, 1 founded, 2-3 Kel|mora, 4 ?, 5 Demo (not eligible), 6 Osk, 7 built, 8-9 Quar|vik (the hit)
    pieces = [" Who", " founded", " Kel", "mora", "?", " Demo", " Osk", " built", " Quar", "vik"]
    eligible = [True] * 5 + [False] + [True] * 4
    # the rows of positions 7 and 8 (they chose "Quar" and "vik"); read over positions 0..7 only
    row7 = torch.tensor([0.0625, 0.1875, 0.25, 0.125, 0.0, 0.5, 0.25, 0.125])
    row8 = torch.tensor([0.0, 0.375, 0.125, 0.125, 0.0, 0.5, 0.25, 0.125, 0.75])
    # eligible parts sum to 1 each; averaged: Who .03125 (stopword), founded .28125, Kelmora .1875+.125 = .3125,
    # Osk .25, built .125; Demo is not eligible and the hit word is left out
    q = signals.qfs_query_reference([[row7, row8]], [8], pieces, eligible, exclude={8, 9}, top_n=2)
    assert q == "founded Kelmora?"  # the question mark stays in the word, as in the reference's words
    assert signals.qfs_query_reference([[row7, row8]], [8], pieces, eligible, {8, 9}, 3) == "founded Kelmora? Osk"
    with pytest.raises(ValueError, match="at least one hit word"):
        signals.qfs_query_reference([], [], pieces, eligible, set(), 3)


def test_stopwords_are_spacys_list_without_importing_spacy():
    import subprocess
    import sys

    from spacy.lang.en.stop_words import STOP_WORDS as SPACY

    assert signals.STOP_WORDS == frozenset(SPACY)
    code = "import sys, inference.dynamic_rag.signals; print('spacy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


@pytest.mark.parametrize("bare", ["\n", " .", " --"])
def test_reference_rind_never_fires_on_a_unit_of_punctuation_or_white_space(bare):
    """Under content_filter after_threshold, H·a above θ fires even on a stopword, but a unit with no letter or digit
    cannot fire: the reference's words carry their punctuation, so it has none to fire on."""
    from inference.dynamic_rag.methods import MethodConfig
    from inference.dynamic_rag.round_view import RoundView
    from inference.dynamic_rag.triggers import check_trigger

    pieces = [" Osk", " wrote", bare, " it"]
    rows = [torch.tensor([[1.0]]), torch.tensor([[0.5, 0.5]]), torch.tensor([[0.1, 0.1, 0.8]]),
            torch.tensor([[0.1, 0.1, 0.7, 0.1]])]
    view = RoundView("q", pieces, [0.5] * 4, [0.2, 0.2, 5.0, 0.2], rows, [], [])
    cfg = MethodConfig(method="dragin", dragin_profile="reference", theta=1.0)
    words = signals.round_word_signals(view, cfg)
    assert words[2].tokens == [2] and words[2].unfiltered_score > 5.0  # the unit alone is far above θ
    assert max(w.unfiltered_score for w in words if w.tokens != [2]) < 1.0
    assert check_trigger(view, cfg, sentence_end=True, final=True) is None
