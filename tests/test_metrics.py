"""Hand-computed checks for adaptive_rag.plumbing.metrics (SQuAD / HotpotQA / PopQA style answer metrics)."""

from __future__ import annotations

import re
import string
from collections import Counter

import pytest

from adaptive_rag.plumbing.metrics import (
    SCORE_KEYS,
    aggregate,
    contained_accuracy,
    exact_match,
    extract_answer,
    normalize_answer,
    score,
    token_f1_precision_recall,
    yes_no_em,
)

# --------------------------------------------------------------------------- normalize_answer


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Cat", "cat"),
        ("an apple a day", "apple day"),
        # articles only as whole words: "theater", "Anne", "Annals" survive
        ("Theater of Anne", "theater of anne"),
        ("Hello, World!", "hello world"),
        # punctuation is deleted, not turned into a space (as in the SQuAD script)
        ("don't", "dont"),
        ("  lots \t of\n space ", "lots of space"),
        # ASCII symbols from string.punctuation go too, though Unicode calls them S*, not P*
        ("$100+", "100"),
        ("", ""),
    ],
)
def test_normalize_ascii(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_normalize_unicode_robust() -> None:
    # accents are kept, only case is folded
    assert normalize_answer("Ångström", "robust") == "ångström"
    assert normalize_answer("São Paulo!", "robust") == "são paulo"
    # decomposed "A + combining ring ... o + combining diaeresis" composes to the same string
    assert normalize_answer("A\u030angstro\u0308m", "robust") == "ångström"
    # U+212B ANGSTROM SIGN canonically maps to U+00C5
    assert normalize_answer("\u212bngström", "robust") == "ångström"
    # Unicode punctuation (category P*): guillemets, inverted question mark, CJK comma
    assert normalize_answer("«São Paulo»", "robust") == "são paulo"
    assert normalize_answer("¿Qué?", "robust") == "qué"
    assert normalize_answer("東京、日本", "robust") == "東京日本"


def test_normalize_unicode_official_keeps_non_ascii_punctuation() -> None:
    # the SQuAD script removes string.punctuation only and never composes
    assert normalize_answer("São Paulo!") == "são paulo"
    assert normalize_answer("«São Paulo»") == "«são paulo»"
    assert normalize_answer("Paris – Lyon") == "paris – lyon"
    # no NFC: a combining ring is not a word character, so the decomposed "A" + ring is taken for the article "a"
    assert normalize_answer("A\u030angstro\u0308m") == "\u030angstro\u0308m"


def test_normalize_unknown_mode() -> None:
    with pytest.raises(ValueError, match="normalisation must be one of official, robust"):
        normalize_answer("x", "squad2")


# --------------------------------------------------------------------------- exact_match


def test_exact_match_basic() -> None:
    assert exact_match("The Eiffel Tower.", ["eiffel tower"]) == 1.0
    assert exact_match("Eiffel", ["Eiffel Tower"]) == 0.0
    assert exact_match("São Paulo", ["Sao Paulo"]) == 0.0  # no accent folding
    assert exact_match("Ångström", ["ångström"]) == 1.0
    assert exact_match("Ångström", ["ångström"], normalisation="robust") == 1.0


def test_exact_match_multiple_golds() -> None:
    assert exact_match("JFK", ["John F. Kennedy", "JFK"]) == 1.0
    assert exact_match("Kennedy", ["John F. Kennedy", "JFK"]) == 0.0


def test_exact_match_bare_string_gold_is_one_answer() -> None:
    # a str must not be iterated character by character
    assert exact_match("p", "paris") == 0.0
    assert exact_match("Paris", "paris") == 1.0


def test_exact_match_empty_prediction() -> None:
    assert exact_match("", ["Paris"]) == 0.0
    assert exact_match("", ["Paris"], normalisation="robust") == 0.0
    # official: plain equality, so "" == "" when the gold also normalises to nothing
    assert exact_match("the", ["The"]) == 1.0
    assert exact_match("!!", ["A."]) == 1.0
    # robust: an empty prediction never earns credit
    assert exact_match("the", ["The"], normalisation="robust") == 0.0
    assert exact_match("!!", ["A."], normalisation="robust") == 0.0


@pytest.mark.parametrize(
    ("prediction", "gold", "official", "robust"),
    [
        ("“Paris”", "Paris", 0.0, 1.0),  # typographic quotes stay under official
        ("Paris – Lyon", "Paris Lyon", 0.0, 1.0),  # en dash is a token of its own under official
        ("«Lisbon»", "Lisbon", 0.0, 1.0),
        ("A\u030angstro\u0308m", "Ångström", 0.0, 1.0),  # decomposed vs composed: NFC only under robust
        ("the", "The", 1.0, 0.0),  # both normalise to nothing
    ],
)
def test_exact_match_official_vs_robust(prediction: str, gold: str, official: float, robust: float) -> None:
    assert exact_match(prediction, [gold]) == official
    assert exact_match(prediction, [gold], normalisation="robust") == robust


# --------------------------------------------------------------------------- token F1


def test_f1_partial_overlap() -> None:
    # "the cat sat" -> [cat, sat]; "cat sat on mat" -> [cat, sat, on, mat]
    # common = 2; P = 2/2 = 1; R = 2/4 = 0.5; F1 = 2 * 1 * 0.5 / 1.5 = 2/3
    f1, p, r = token_f1_precision_recall("the cat sat", ["cat sat on mat"])
    assert p == pytest.approx(1.0)
    assert r == pytest.approx(0.5)
    assert f1 == pytest.approx(2 / 3)


def test_f1_counts_repeated_tokens_once_per_occurrence() -> None:
    # [cat, cat, dog] vs [cat, dog, dog]: common = min(2,1) cat + min(1,2) dog = 2
    # P = 2/3, R = 2/3, F1 = 2/3
    f1, p, r = token_f1_precision_recall("cat cat dog", ["cat dog dog"])
    assert (f1, p, r) == pytest.approx((2 / 3, 2 / 3, 2 / 3))


def test_f1_max_over_golds() -> None:
    # pred [barack, obama]
    # vs [obama]:                  common 1, P = 1/2, R = 1,   F1 = 2*(1/2)/(3/2) = 2/3
    # vs [barack, hussein, obama]: common 2, P = 1,   R = 2/3, F1 = 2*(2/3)/(5/3) = 4/5  <- best
    f1, p, r = token_f1_precision_recall("Barack Obama", ["Obama", "Barack Hussein Obama"])
    assert f1 == pytest.approx(0.8)
    assert p == pytest.approx(1.0)
    assert r == pytest.approx(2 / 3)


def test_f1_no_overlap_and_exact() -> None:
    assert token_f1_precision_recall("London", ["Paris"]) == (0.0, 0.0, 0.0)
    assert token_f1_precision_recall("The Paris.", ["paris"]) == pytest.approx((1.0, 1.0, 1.0))


def test_f1_hotpot_special_answers() -> None:
    # gold "yes" vs "yes it is": token overlap exists, but HotpotQA gives no partial credit on yes/no
    assert token_f1_precision_recall("yes it is", ["yes"]) == (0.0, 0.0, 0.0)
    assert token_f1_precision_recall("no", ["no way"]) == (0.0, 0.0, 0.0)
    assert token_f1_precision_recall("noanswer", ["no answer"]) == (0.0, 0.0, 0.0)
    assert token_f1_precision_recall("Yes.", ["yes"]) == pytest.approx((1.0, 1.0, 1.0))
    # a yes/no mismatch on one gold does not block another gold
    assert token_f1_precision_recall("yes", ["no", "Yes"]) == pytest.approx((1.0, 1.0, 1.0))


def test_f1_official_vs_robust() -> None:
    # official: [paris, –, lyon] vs [paris, lyon]: common 2, P = 2/3, R = 1, F1 = 2*(2/3)/(5/3) = 4/5
    assert token_f1_precision_recall("Paris – Lyon", ["Paris Lyon"]) == pytest.approx((0.8, 2 / 3, 1.0))
    # robust drops the dash: [paris, lyon] vs [paris, lyon] -> 1
    assert token_f1_precision_recall("Paris – Lyon", ["Paris Lyon"], normalisation="robust") == pytest.approx(
        (1.0, 1.0, 1.0))
    # official: [“paris”, france] vs [paris]: no common token -> 0; robust: common 1, P = 1/2, R = 1, F1 = 2/3
    assert token_f1_precision_recall("“Paris” France", ["Paris"]) == (0.0, 0.0, 0.0)
    assert token_f1_precision_recall("“Paris” France", ["Paris"], normalisation="robust") == pytest.approx(
        (2 / 3, 0.5, 1.0))


def test_f1_hotpot_rule_under_both_normalisations() -> None:
    for mode in ("official", "robust"):
        # [no, way] vs [no]: would be P = 1/2, R = 1, F1 = 2/3 without the rule
        assert token_f1_precision_recall("no way", ["no"], normalisation=mode) == (0.0, 0.0, 0.0)
        assert token_f1_precision_recall("No!", ["no"], normalisation=mode) == pytest.approx((1.0, 1.0, 1.0))
    # official keeps “ ”, so "“Yes”" is not the special answer "yes" and gets no credit; robust reads "yes"
    assert token_f1_precision_recall("“Yes”", ["yes"]) == (0.0, 0.0, 0.0)
    assert token_f1_precision_recall("“Yes”", ["yes"], normalisation="robust") == pytest.approx((1.0, 1.0, 1.0))


def test_f1_unicode() -> None:
    # [são, paulo, brazil] vs [são, paulo]: common 2, P = 2/3, R = 1, F1 = 2*(2/3)/(5/3) = 4/5
    f1, p, r = token_f1_precision_recall("São Paulo, Brazil", ["São Paulo"])
    assert (f1, p, r) == pytest.approx((0.8, 2 / 3, 1.0))


def test_f1_empty_prediction() -> None:
    assert token_f1_precision_recall("", ["Paris"]) == (0.0, 0.0, 0.0)
    # F1 has no token to share even when both normalise to nothing (the SQuAD script returns 0 here too)
    assert token_f1_precision_recall("the", ["The"]) == (0.0, 0.0, 0.0)


# --------------------------------------------------------------------------- contained_accuracy


def test_contained_normalised() -> None:
    assert contained_accuracy("He was born in Paris, France.", ["paris"]) == 1.0
    assert contained_accuracy("He was born in Lyon.", ["Paris", "Marseille"]) == 0.0
    assert contained_accuracy("Born in Lyon or Marseille", ["Paris", "Marseille"]) == 1.0
    # word boundaries: "1" is not inside "1990", "no" is not inside "nothing"; the raw mode is a plain substring test
    assert contained_accuracy("in 1990", ["1"]) == 0.0
    assert contained_accuracy("There is nothing", ["no"]) == 0.0
    assert contained_accuracy("No, it is not.", ["no"]) == 1.0
    assert contained_accuracy("in 1990", ["1"], normalize=False) == 1.0
    assert contained_accuracy("Il est né à São Paulo.", ["são paulo"]) == 1.0


def test_contained_raw_vs_normalised() -> None:
    # normalised: "us army" in "us army" -> 1; raw: "us army" not in "the u.s. army" -> 0
    assert contained_accuracy("The U.S. Army", ["US Army"], normalize=True) == 1.0
    assert contained_accuracy("The U.S. Army", ["US Army"], normalize=False) == 0.0
    # raw mode still ignores case
    assert contained_accuracy("born in PARIS", ["Paris"], normalize=False) == 1.0


def test_contained_skips_golds_empty_after_normalising() -> None:
    # "The" normalises to "", which is a substring of everything; it must not count
    assert contained_accuracy("anything", ["The"]) == 0.0


def test_contained_empty_prediction() -> None:
    assert contained_accuracy("", ["Paris"]) == 0.0
    assert contained_accuracy("", ["Paris"], normalize=False) == 0.0


# --------------------------------------------------------------------------- yes_no_em


@pytest.mark.parametrize(
    ("prediction", "golds", "expected"),
    [
        ("Yes, because the river flows north.", ["yes"], 1.0),
        ("yes", ["Yes"], 1.0),
        ("No.", ["yes"], 0.0),
        ("I think not; no, it cannot.", ["no"], 1.0),  # first yes/no *word*; "not" is not "no"
        ("No, not yes.", ["no"], 1.0),  # the first one decides
        ("Maybe", ["yes"], 0.0),
        ("Nobody knows", ["no"], 0.0),  # "nobody" is not "no"
        ("I don't know", ["no"], 0.0),  # "don't" -> "dont"
        ("yes", ["true"], 1.0),  # boolean-style gold
        ("no", [False], 1.0),  # StrategyQA stores booleans
        ("yes", ["Paris"], 0.0),  # non-yes/no gold never matches
        ("", ["yes"], 0.0),
    ],
)
def test_yes_no_em(prediction: str, golds: list, expected: float) -> None:
    assert yes_no_em(prediction, golds) == expected


# --------------------------------------------------------------------------- extract_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So the answer is Paris.", "Paris"),
        ("Paris is in France. So the answer is Paris.", "Paris"),
        ("SO THE ANSWER IS paris", "paris"),
        ("The answer is 1990.", "1990"),
        ("Answer: Lyon", "Lyon"),
        ("answer : yes", "yes"),
        ('So the answer is "Paris".', "Paris"),
        ("So the answer is “São Paulo”.", "São Paulo"),
        # cut at the first newline, ignore a following few-shot continuation
        ("Step one.\nSo the answer is Paris.\nQuestion: What is next?", "Paris"),
        # the last marker wins
        ("The answer is London? No, wait. So the answer is Paris.", "Paris"),
        # answer on the line after the marker
        ("The answer is:\nParis\nmore text", "Paris"),
        # no marker: first non-empty line, first sentence
        ("Paris. It is the capital of France.", "Paris"),
        ("\n\n  Paris  \nSecond line", "Paris"),
        ("Ångström", "Ångström"),
        # a leading dot may be part of the answer
        (".NET", ".NET"),
        ("", ""),
        ("   \n ", ""),
    ],
)
def test_extract_answer(text: str, expected: str) -> None:
    assert extract_answer(text) == expected


# --------------------------------------------------------------------------- score and aggregate


def test_score_extracts_by_default() -> None:
    result = score("Gustave Eiffel built it. So the answer is the Eiffel Tower.", ["Eiffel Tower"])
    assert set(result) == set(SCORE_KEYS)
    assert result == pytest.approx({"em": 1.0, "f1": 1.0, "precision": 1.0, "recall": 1.0, "acc": 1.0})


def test_score_without_extraction() -> None:
    # "It is in Paris. So the answer is Paris." normalises to
    # [it, is, in, paris, so, answer, is, paris] (8 tokens); gold [paris]
    # common = min(2, 1) = 1; P = 1/8; R = 1; F1 = 2*(1/8)/(9/8) = 2/9; contained -> acc 1; em 0
    result = score("It is in Paris. So the answer is Paris.", ["Paris"], extract=False)
    assert result == pytest.approx({"em": 0.0, "f1": 2 / 9, "precision": 1 / 8, "recall": 1.0, "acc": 1.0})


def test_score_empty_prediction() -> None:
    assert score("", ["Paris"]) == dict.fromkeys(SCORE_KEYS, 0.0)


def test_score_passes_normalisation_to_em_and_f1_only() -> None:
    official = score("So the answer is Paris – Lyon.", ["Paris Lyon"])
    robust = score("So the answer is Paris – Lyon.", ["Paris Lyon"], normalisation="robust")
    # official: [paris, –, lyon] vs [paris, lyon] -> P = 2/3, R = 1, F1 = 4/5;
    # containment is word-based on robust-normalised text under both options
    assert official == pytest.approx({"em": 0.0, "f1": 0.8, "precision": 2 / 3, "recall": 1.0, "acc": 1.0})
    assert robust == pytest.approx({"em": 1.0, "f1": 1.0, "precision": 1.0, "recall": 1.0, "acc": 1.0})


def test_aggregate_means() -> None:
    rows = [
        {"em": 1.0, "f1": 0.5, "precision": 1.0, "recall": 0.25, "acc": 1.0},
        {"em": 0.0, "f1": 1.0, "precision": 0.5, "recall": 0.75, "acc": 0.0},
    ]
    assert aggregate(rows) == pytest.approx(
        {"em": 0.5, "f1": 0.75, "precision": 0.75, "recall": 0.5, "acc": 0.5, "n": 2}
    )


def test_aggregate_extra_keys_averaged_over_rows_that_have_them() -> None:
    rows = [{"em": 1.0, "yes_no_em": 1.0}, {"em": 0.0}, {"em": 0.0, "yes_no_em": 0.0}]
    # em: (1 + 0 + 0) / 3; yes_no_em: (1 + 0) / 2
    assert aggregate(rows) == pytest.approx({"em": 1 / 3, "yes_no_em": 0.5, "n": 3})


def test_aggregate_empty() -> None:
    assert aggregate([]) == {"em": 0.0, "f1": 0.0, "precision": 0.0, "recall": 0.0, "acc": 0.0, "n": 0}


# --------------------------------------------------------------------------- empty golds


@pytest.mark.parametrize(
    "func",
    [
        exact_match,
        token_f1_precision_recall,
        contained_accuracy,
        yes_no_em,
        score,
    ],
)
@pytest.mark.parametrize("golds", [[], [""], ["  "], ""])
def test_empty_golds_raise(func, golds) -> None:
    with pytest.raises(ValueError, match="at least one non-empty gold answer"):
        func("Paris", golds)


# --------------------------------------------------------------------------- the official scripts as oracle
# Copied from the official SQuAD v1.1 evaluation script (evaluate-v1.1.py) and, for F1, HotpotQA's
# hotpot_evaluate_v1.py (same normalisation, plus the yes/no/noanswer rule).


def _squad_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def _hotpot_f1_score(prediction, ground_truth):
    normalized_prediction = _squad_normalize_answer(prediction)
    normalized_ground_truth = _squad_normalize_answer(ground_truth)
    zero_metric = (0, 0, 0)
    if normalized_prediction in ["yes", "no", "noanswer"] and normalized_prediction != normalized_ground_truth:
        return zero_metric
    if normalized_ground_truth in ["yes", "no", "noanswer"] and normalized_prediction != normalized_ground_truth:
        return zero_metric
    prediction_tokens = normalized_prediction.split()
    ground_truth_tokens = normalized_ground_truth.split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return zero_metric
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1, precision, recall


def _squad_exact_match_score(prediction, ground_truth):
    return _squad_normalize_answer(prediction) == _squad_normalize_answer(ground_truth)


def _metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    return max(metric_fn(prediction, gt) for gt in ground_truths)


TRICKY = [
    "The Eiffel Tower.", "eiffel tower", "the", "The", "A.", "!!", "an", "Anne of the Annals", "Theater",
    "“Paris”", "Paris", "«Lisbon»", "Paris – Lyon", "Paris Lyon", "Paris—Lyon", "don't", "dont", "U.S. Army",
    "US Army", "$1,000", "1000", "A\u030angstro\u0308m", "Ångström", "\u212bngström", "São Paulo", "東京、日本",
    "yes", "Yes.", "“Yes”", "no", "no way", "No, it is not", "noanswer", "no answer", "it is yes", "  a  b  ",
    "the the the", "cat cat dog", "cat dog dog", "1990s", "a 1990", "İstanbul", "ﬁsh", "Mr. Smith", "¿Qué?",
]


@pytest.mark.parametrize("prediction", TRICKY)
def test_official_matches_the_squad_and_hotpot_scripts(prediction: str) -> None:
    assert normalize_answer(prediction) == _squad_normalize_answer(prediction)
    for gold in TRICKY:
        assert exact_match(prediction, [gold]) == float(_squad_exact_match_score(prediction, gold)), gold
        assert token_f1_precision_recall(prediction, [gold]) == pytest.approx(_hotpot_f1_score(prediction, gold)), gold
    golds = ["Paris", "the", "“Yes”", "no", "Paris – Lyon"]
    assert exact_match(prediction, golds) == float(_metric_max_over_ground_truths(
        _squad_exact_match_score, prediction, golds))
    f1_oracle = _metric_max_over_ground_truths(lambda p, g: _hotpot_f1_score(p, g)[0], prediction, golds)
    assert token_f1_precision_recall(prediction, golds)[0] == pytest.approx(f1_oracle)
