"""Answer-quality metrics for the QA benchmarks (SPEC, "Datasets and metrics").

All metrics compare a *prediction* against one or more *gold* answers and take the best match over the golds,
as the official SQuAD / HotpotQA scripts do:

* ``exact_match`` and ``token_f1_precision_recall`` exactly as the official SQuAD v1.1 / HotpotQA scripts by
  default (HotpotQA variant for F1: a yes/no/noanswer mismatch scores zero instead of getting partial token
  credit); ``normalisation="robust"`` is a documented, more forgiving option (see :func:`normalize_answer`);
* ``contained_accuracy``: PopQA's "any gold answer appears in the generation", on word boundaries;
* ``yes_no_em``: StrategyQA-style, reading the first yes/no word of a free-form reply;
* ``extract_answer`` pulls the final answer out of a chain of thought ("So the answer is ...");
* ``score`` bundles these for one question, ``aggregate`` averages many.

Stdlib only, so it can be imported by evaluation code that must not pull in torch.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

__all__ = [
    "NORMALISATIONS",
    "Normalisation",
    "SCORE_KEYS",
    "aggregate",
    "contained_accuracy",
    "exact_match",
    "extract_answer",
    "normalize_answer",
    "score",
    "token_f1_precision_recall",
    "yes_no_em",
]

#: Keys returned by :func:`score` (and averaged by :func:`aggregate`).
SCORE_KEYS: tuple[str, ...] = ("em", "f1", "precision", "recall", "acc")

Normalisation = Literal["official", "robust"]
#: ``official``: the SQuAD v1.1 / HotpotQA scripts, the numbers papers report; ``robust``: see normalize_answer.
NORMALISATIONS: tuple[str, ...] = ("official", "robust")

# string.punctuation keeps the ASCII symbols SQuAD strips ($, +, <, ...), which are Unicode category S*, not P*.
_ASCII_PUNCT = frozenset(string.punctuation)
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b", re.UNICODE)
# HotpotQA's official F1 refuses partial credit when either side is one of these special answers.
_SPECIAL_ANSWERS = frozenset({"yes", "no", "noanswer"})
# Golds of yes/no datasets are sometimes stored as booleans (StrategyQA); str(True) normalises to "true".
_YES_NO_GOLD = {"yes": "yes", "true": "yes", "no": "no", "false": "no"}

# Chain-of-thought answer markers. "So the answer is" ends with "the answer is", so one alternative covers both;
# the *last* marker wins because few-shot style reasoning may mention intermediate answers first.
_MARKER_RE = re.compile(r"the\s+answer\s+is|answer\s*:", re.IGNORECASE)
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+")
# Characters stripped from the ends of an extracted answer: whitespace, colons left by "answer is: X",
# quotes (ASCII and typographic) and a trailing full stop.
_LEAD_STRIP = " \t\r\n:\"'“”‘’«»"
_TRAIL_STRIP = " \t\r\n.\"'“”‘’«»"


def _is_punct(ch: str) -> bool:
    """True for ASCII punctuation/symbols (SQuAD's set) and any Unicode punctuation (category P*)."""
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


def normalize_answer(s: str, normalisation: Normalisation = "official") -> str:
    """SQuAD-style normalisation: lowercase, drop punctuation, drop articles (a/an/the), collapse whitespace.

    ``official`` (default) is the SQuAD v1.1 script's ``normalize_answer`` character for character: only ASCII
    ``string.punctuation`` is deleted, so "–", "“" or "«" stay (glued to their word). ``robust`` also NFC-composes
    (a decomposed "A + combining ring" equals "Å") and deletes every Unicode punctuation character (category P*);
    with it (and only with it) :func:`exact_match` and token F1 also give an empty prediction no credit.
    Both keep accents ("São Paulo" -> "são paulo") and delete punctuation rather than replacing it with a space
    ("don't" -> "dont").
    """
    if normalisation == "official":
        text = "".join(ch for ch in s.lower() if ch not in _ASCII_PUNCT)
    elif normalisation == "robust":
        text = "".join(ch for ch in unicodedata.normalize("NFC", s).lower() if not _is_punct(ch))
    else:
        raise ValueError(f"normalisation must be one of {', '.join(NORMALISATIONS)}, got {normalisation!r}")
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


def _check_golds(golds: str | Sequence[str]) -> list[str]:
    """Return the gold answers as a list, rejecting an empty set.

    A bare string is taken as a single gold answer, because iterating it would silently score against its
    characters. Blank golds are dropped; if nothing is left the question cannot be scored, which is a data bug
    the caller should see rather than a silent zero.
    """
    gold_list = [golds] if isinstance(golds, str) else [str(g) for g in golds]
    gold_list = [g for g in gold_list if g.strip()]
    if not gold_list:
        raise ValueError("golds must contain at least one non-empty gold answer; got an empty list")
    return gold_list


def exact_match(prediction: str, golds: str | Sequence[str], *, normalisation: Normalisation = "official") -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0.

    ``official``: plain equality after normalisation, as the SQuAD script (so "the" against the gold "The" is 1:
    both normalise to nothing). ``robust``: an empty prediction (nothing left after normalisation) scores 0
    against every gold, so that a model that outputs nothing never earns credit.
    """
    gold_list = _check_golds(golds)
    pred = normalize_answer(prediction, normalisation)
    if not pred and normalisation == "robust":
        return 0.0
    return float(any(pred == normalize_answer(g, normalisation) for g in gold_list))


def _f1_single(pred: str, gold: str) -> tuple[float, float, float]:
    """HotpotQA's official ``f1_score`` on already-normalised strings: (f1, precision, recall)."""
    zero = (0.0, 0.0, 0.0)
    if (pred in _SPECIAL_ANSWERS or gold in _SPECIAL_ANSWERS) and pred != gold:
        return zero
    pred_tokens = pred.split()
    gold_tokens = gold.split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return zero
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def token_f1_precision_recall(
    prediction: str, golds: str | Sequence[str], *, normalisation: Normalisation = "official"
) -> tuple[float, float, float]:
    """Token-level (f1, precision, recall) against the gold with the highest F1 (first one on ties).

    Precision and recall are those of the best-F1 gold, not separate maxima, so the three numbers describe
    one comparison. An empty prediction shares no token with anything, so it scores 0 under both normalisations.
    """
    gold_list = _check_golds(golds)
    pred = normalize_answer(prediction, normalisation)
    best = (0.0, 0.0, 0.0)
    for gold in gold_list:
        cand = _f1_single(pred, normalize_answer(gold, normalisation))
        if cand[0] > best[0]:
            best = cand
    return best


def contained_accuracy(prediction: str, golds: str | Sequence[str], *, normalize: bool = True) -> float:
    """1.0 if any gold answer is contained in the prediction (PopQA's accuracy), else 0.0.

    No official script defines this metric, so it does not follow the EM/F1 ``normalisation`` option:
    ``normalize=True`` always compares *robust*-normalised strings (Unicode punctuation removed, so a word in
    "«Paris»" is still found) on word boundaries, so a short gold such as "no" does
    not match inside "not" or "nothing" (a plain substring test would credit "no" to most outputs).
    ``normalize=False`` reproduces ADAPT-LLM's evaluation, a raw case-insensitive substring test
    (``gold.lower() in prediction.lower()``), where punctuation and articles still have to match. Golds that are
    empty after normalisation are skipped because the empty
    string is contained in everything.
    """
    gold_list = _check_golds(golds)
    if normalize:
        pred = normalize_answer(prediction, "robust")
        cands = [normalize_answer(g, "robust") for g in gold_list]
    else:
        pred = prediction.lower()
        cands = [g.lower() for g in gold_list]
    if not pred:
        return 0.0
    if normalize:
        return float(any(c and f" {c} " in f" {pred} " for c in cands))
    return float(any(c and c in pred for c in cands))


def _first_yes_no(text: str) -> str | None:
    """The first word of ``text`` that is "yes" or "no" after (robust) normalisation, or None."""
    for token in normalize_answer(text, "robust").split():
        if token in ("yes", "no"):
            return token
    return None


def yes_no_em(prediction: str, golds: str | Sequence[str]) -> float:
    """Yes/no exact match: the prediction's first yes/no word must equal a yes/no gold.

    "Yes, because ..." reads as yes. A prediction with neither word scores 0. Golds "true"/"false" (or the
    booleans StrategyQA stores) count as yes/no; other golds can never match. Like containment it reads words
    after the robust normalisation ('“Yes,”' is yes), whatever the EM/F1 option.
    """
    gold_list = _check_golds(golds)
    label = _first_yes_no(prediction)
    if label is None:
        return 0.0
    gold_labels = {_YES_NO_GOLD.get(normalize_answer(g, "robust")) for g in gold_list}
    return float(label in gold_labels)


def extract_answer(text: str) -> str:
    """The final answer of a chain of thought.

    Takes the text after the *last* marker "So the answer is" / "the answer is" / "Answer:" (case-insensitive),
    up to the first newline, with surrounding quotes and a trailing full stop stripped. Leading whitespace is
    skipped before cutting, so "The answer is:\\nParis" still yields "Paris". Without a marker the first
    non-empty line's first sentence is returned, since short-form replies put the answer first.
    """
    if not text or not text.strip():
        return ""
    matches = list(_MARKER_RE.finditer(text))
    if matches:
        rest = text[matches[-1].end() :].lstrip(_LEAD_STRIP)
        answer = rest.split("\n", 1)[0]
    else:
        first_line = next(line for line in text.splitlines() if line.strip())
        answer = _SENTENCE_END_RE.split(first_line.strip(), maxsplit=1)[0]
    # rstrip, not strip: a leading "." may belong to the answer (".NET", ".5").
    return answer.rstrip(_TRAIL_STRIP).lstrip(_LEAD_STRIP)


def score(
    prediction: str, golds: str | Sequence[str], *, extract: bool = True, normalisation: Normalisation = "official"
) -> dict[str, float]:
    """All per-question metrics: ``em``, ``f1``, ``precision``, ``recall``, ``acc`` (contained, normalised).

    With ``extract=True`` the answer is first pulled out of a chain of thought by :func:`extract_answer`, and
    every metric (containment included) is computed on that answer; pass ``extract=False`` to score the whole
    generation, e.g. for PopQA accuracy over a free-form reply. ``normalisation`` applies to EM and F1.
    """
    gold_list = _check_golds(golds)
    answer = extract_answer(prediction) if extract else prediction
    f1, precision, recall = token_f1_precision_recall(answer, gold_list, normalisation=normalisation)
    return {
        "em": exact_match(answer, gold_list, normalisation=normalisation),
        "f1": f1,
        "precision": precision,
        "recall": recall,
        "acc": contained_accuracy(answer, gold_list),
    }


def aggregate(rows: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Mean of each metric over ``rows`` plus ``n`` (the number of rows).

    Keys are the union over rows; a key is averaged over the rows that have it, so rows from :func:`score`
    can be mixed with rows carrying extra metrics (e.g. ``yes_no_em``). An empty input gives zeros for the
    :data:`SCORE_KEYS` and ``n = 0`` so that reports keep a stable shape.
    """
    rows = list(rows)
    if not rows:
        return {**dict.fromkeys(SCORE_KEYS, 0.0), "n": 0}
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for row in rows:
        for key, value in row.items():
            if key == "n":  # a count, not a metric: aggregating aggregates should not average it
                continue
            sums[key] = sums.get(key, 0.0) + float(value)
            counts[key] = counts.get(key, 0) + 1
    result = {key: sums[key] / counts[key] for key in sums}
    result["n"] = len(rows)
    return result
