"""Bootstrap 95% intervals over questions: for a run's mean metrics and for paired differences between two runs.

Percentile bootstrap (Efron): resample the questions with replacement ``n_resamples`` times, take the mean each
time, and report the 2.5th and 97.5th percentiles. Seeded, so a report is reproducible. A paired interval
resamples the same questions for both runs, which is what "method A beats method B on these questions" needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

N_RESAMPLES = 1000
INTERVAL_METRICS = ("em", "f1", "acc", "retrieval_calls")


def _resample_means(values: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_resamples, len(values)))  # (R, N)
    return values[idx].mean(axis=1)


def bootstrap_ci(values: Sequence[float], *, n_resamples: int = N_RESAMPLES, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of the mean of ``values`` (one value per question)."""
    if len(values) == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    means = _resample_means(np.asarray(values, dtype=float), n_resamples, seed)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def paired_diff_ci(a: Sequence[float], b: Sequence[float], **kwargs) -> tuple[float, float, float]:
    """(mean of a - b, low, high) over paired questions: ``a[i]`` and ``b[i]`` are the same question."""
    if len(a) != len(b):
        raise ValueError(f"paired values need the same questions: {len(a)} vs {len(b)}")
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    lo, hi = bootstrap_ci(diff, **kwargs)
    return float(diff.mean()), lo, hi


def metric_intervals(rows: Sequence[Mapping[str, float]], metrics: Sequence[str] = INTERVAL_METRICS,
                     **kwargs) -> dict[str, tuple[float, float]]:
    """``{metric: (low, high)}`` for each metric every row has (rows: one per question)."""
    out = {}
    for m in metrics:
        if rows and all(m in r for r in rows):
            out[m] = bootstrap_ci([float(r[m]) for r in rows], **kwargs)
    return out


def auroc(scores: Sequence[float], positives: Sequence[bool]) -> float | None:
    """The area under the ROC curve of ``scores`` for telling positives from negatives: the chance that a random
    positive scores above a random negative, ties counting half (Mann-Whitney U ÷ n_pos·n_neg). None without both
    classes."""
    s, p = np.asarray(scores, dtype=float), np.asarray(positives, dtype=bool)
    if len(s) != len(p):
        raise ValueError(f"auroc needs one label per score: {len(s)} scores, {len(p)} labels")
    n_pos, n_neg = int(p.sum()), int((~p).sum())
    if not n_pos or not n_neg:
        return None
    greater = (s[p][:, None] > s[~p][None, :]).sum()
    ties = (s[p][:, None] == s[~p][None, :]).sum()
    return float((greater + 0.5 * ties) / (n_pos * n_neg))


def auroc_ci(scores: Sequence[float], positives: Sequence[bool], *, n_resamples: int = N_RESAMPLES, seed: int = 0,
             level: float = 0.95) -> tuple[float, float, float] | None:
    """(AUROC, low, high): percentile bootstrap over questions. Resamples holding one class only are skipped; when
    more than half are, the bounds are NaN (too few questions of a class for an interval)."""
    s, p = np.asarray(scores, dtype=float), np.asarray(positives, dtype=bool)
    point = auroc(s, p)
    if point is None:
        return None
    rng = np.random.default_rng(seed)
    draws = [auroc(s[idx], p[idx]) for idx in rng.integers(0, len(s), size=(n_resamples, len(s)))]
    draws = [d for d in draws if d is not None]
    if len(draws) < n_resamples / 2:  # most resamples lost a class: too few questions of it for an interval
        return point, float("nan"), float("nan")
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(draws, [tail, 100 - tail])
    return point, float(lo), float(hi)
