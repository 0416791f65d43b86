"""The report's figures (matplotlib, Agg backend: no display needed). Each function draws one PNG from the runs
it is given and returns False without writing anything when they hold no data for it: a report never shows an
empty plot."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, never a window
import matplotlib.pyplot as plt  # noqa: E402

from adaptive_rag.plumbing.records import PredictionRecord  # noqa: E402

ITERATION_METRICS = ("em", "f1", "acc", "answer_recall", "gold_recall")


def _save(fig, path: Path) -> bool:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _short(knobs: dict[str, Any]) -> str:
    return ", ".join(f"{'θ' if k == 'theta' else k}={v}" for k, v in knobs.items())


def pareto(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats with fewer (or as many) retrievals and higher quality, by retrievals."""
    front, best = [], -math.inf
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if y > best:
            front.append((x, y))
            best = y
    return front


def _error_bars(ax, group: Sequence[Any], xs: list[float], ys: list[float], metric: str, colour) -> None:
    """Bootstrap 95% intervals (the run's ``intervals``) as error bars: quality vertically, retrievals across."""
    for r, x, y in zip(group, xs, ys):
        cis = getattr(r, "intervals", {}) or {}
        if metric not in cis and "retrieval_calls" not in cis:
            continue
        ylo, yhi = cis.get(metric, (y, y))
        xlo, xhi = cis.get("retrieval_calls", (x, x))
        ax.errorbar([x], [y], yerr=[[max(0.0, y - ylo)], [max(0.0, yhi - y)]],
                    xerr=[[max(0.0, x - xlo)], [max(0.0, xhi - x)]], fmt="none", ecolor=colour, elinewidth=0.8,
                    capsize=2, alpha=0.7)


def frontier(runs: Sequence[Any], path: Path) -> bool:
    """Quality (F1, accuracy) against retrievals per question, one colour per method, one row per dataset; bootstrap
    95% intervals as error bars where the runs have predictions."""
    runs = [r for r in runs if r.metrics.get("n") and r.metrics.get("retrieval_calls") is not None]
    if not runs:
        return False
    datasets = sorted({str(r.config.get("dataset", "")) for r in runs})
    methods = sorted({r.method for r in runs})
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    fig, axes = plt.subplots(len(datasets), 2, figsize=(11, 4.2 * len(datasets)), squeeze=False)
    for row, dataset in zip(axes, datasets):
        here = [r for r in runs if str(r.config.get("dataset", "")) == dataset]
        for ax, metric, label in zip(row, ("f1", "acc"), ("F1", "accuracy")):
            by_method = defaultdict(list)
            for r in here:
                by_method[r.method].append(r)
            for method, group in by_method.items():
                group.sort(key=lambda r: r.metrics["retrieval_calls"])
                xs = [r.metrics["retrieval_calls"] for r in group]
                ys = [r.metrics.get(metric, 0.0) for r in group]
                ax.plot(xs, ys, "o-" if len(group) > 1 else "o", color=colours[method], label=method)
                _error_bars(ax, group, xs, ys, metric, colours[method])
                for r, x, y in zip(group, xs, ys):  # name the knobs that tell this method's points apart
                    varies = {k: v for k, v in r.knobs.items() if len({str(g.knobs.get(k)) for g in group}) > 1}
                    if varies:
                        ax.annotate(_short(varies), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
            front = pareto([(r.metrics["retrieval_calls"], r.metrics.get(metric, 0.0)) for r in here])
            if len(here) > 1:
                ax.step(*zip(*front), where="post", color="grey", ls="--", lw=1, label="frontier")
            top = max(r.metrics.get(metric, 0.0) for r in here)
            ax.set_ylim(-0.02, min(1.02, max(0.1, 1.1 * top)))  # quality is in [0, 1]: no negative axis
            ax.set_xlabel("retrievals per question")
            ax.set_ylabel(label)
            ax.set_title(f"{label} vs retrievals — {dataset}", fontsize=10)
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=8)
    return _save(fig, path)


def iteration_curve(records: Sequence[PredictionRecord]) -> dict[str, list[float]]:
    """Mean of each metric at iteration t = 1..T over the records that reached t (Iter-RetGen's ``iterations``)."""
    depth = max((len(r.iterations or []) for r in records), default=0)
    curve: dict[str, list[float]] = {}
    for metric in ITERATION_METRICS:
        means = []
        for t in range(depth):
            vals = [r.iterations[t].metrics[metric] for r in records
                    if len(r.iterations or []) > t and r.iterations[t].metrics.get(metric) is not None]
            means.append(sum(vals) / len(vals) if vals else math.nan)
        if means and not all(math.isnan(m) for m in means):
            curve[metric] = means
    return curve


def iterations(runs: Sequence[Any], path: Path) -> bool:
    """Iter-RetGen: each metric per iteration, one line per run."""
    curves = {r.name: c for r in runs if (c := iteration_curve(r.records()))}
    metrics = [m for m in ITERATION_METRICS if any(m in c for c in curves.values())]
    if not metrics:
        return False
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for name, curve in curves.items():
            if metric in curve:
                ax.plot(range(1, len(curve[metric]) + 1), curve[metric], "o-", label=name)
        ax.set_title(metric, fontsize=10)
        ax.set_xlabel("iteration")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return _save(fig, path)


def gate_thresholds(ret_series: dict[str, list[dict]], pop_series: dict[str, list[dict]], path: Path) -> bool:
    """Accuracy and retrieval share against the ``<RET>`` threshold and the popularity threshold. Each series is
    a list of ``{"threshold", "accuracy", "retrieval_share"}``; series of fewer than two thresholds are left out."""
    panels = [(title, {k: v for k, v in s.items() if len({p["threshold"] for p in v}) > 1})
              for title, s in (("p(<RET>) threshold", ret_series), ("popularity threshold", pop_series))]
    panels = [(t, s) for t, s in panels if s]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (title, series) in zip(axes[0], panels):
        for i, (name, points) in enumerate(series.items()):
            points = sorted(points, key=lambda p: p["threshold"])
            xs = [p["threshold"] for p in points]
            colour = plt.get_cmap("tab10")(i % 10)
            ax.plot(xs, [p["accuracy"] for p in points], "o-", color=colour, label=f"{name}: accuracy")
            ax.plot(xs, [p["retrieval_share"] for p in points], "s--", color=colour, label=f"{name}: retrieval share")
        if title.startswith("popularity") and min(p["threshold"] for s in series.values() for p in s) > 0:
            ax.set_xscale("log")
        ax.set_xlabel(title)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"gate vs {title}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def distillation(logs: Sequence[Any], path: Path) -> bool:
    """Distillation: training and validation loss over steps, and any recall the log carries."""
    logs = [g for g in logs if any("loss" in r or "val_loss" in r for r in g.rows)]
    if not logs:
        return False
    recall_keys = sorted({k for g in logs for r in g.rows for k in r if "recall" in k})
    fig, axes = plt.subplots(1, 2 if recall_keys else 1, figsize=(11 if recall_keys else 6, 4), squeeze=False)
    ax = axes[0][0]
    for g in logs:
        for key, style in (("loss", "-"), ("val_loss", "o--")):
            pts = [(r["step"], r[key]) for r in g.rows if key in r and "step" in r]
            if pts:
                ax.plot(*zip(*pts), style, label=f"{g.name}: {'training' if key == 'loss' else 'validation'} loss")
    ax.set_xlabel("step")
    ax.set_ylabel("KL loss")
    ax.set_title("distillation loss", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if recall_keys:
        ax = axes[0][1]
        for g in logs:
            for key in recall_keys:
                pts = [(r["step"], r[key]) for r in g.rows if key in r and "step" in r]
                if pts:
                    ax.plot(*zip(*pts), "o-", label=f"{g.name}: {key}")
        ax.set_xlabel("step")
        ax.set_title("validation recall", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)
