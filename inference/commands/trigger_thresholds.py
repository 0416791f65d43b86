"""Thresholds for a trigger, read from its own signals, and the best of a tuning sweep (docs/knowing_world.md, "The
trigger against the truth").

    # θ values at which DRAGIN would fire on 20%, 50% and 80% of a run's questions (a run saved with keep_signals)
    python -m inference.commands.trigger_thresholds quantiles runs/signals/dragin --shares 0.2,0.5,0.8
    # the θ of the most accurate run among these folders (ties: fewer retrievals per question)
    python -m inference.commands.trigger_thresholds best runs/tune/theta=*

A trigger fires on a question when its signal passes the threshold somewhere in the answer, so the threshold that
fires on a share q of questions is the (1 − q) quantile of each answer's highest signal. Choosing θ by the share it
fires on makes one grid serve both DRAGIN profiles, whose RIND scores live on different scales.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError, DataError
from inference.commands.knowing_claims import answer_signals
from inference.commands.report import read_predictions


def quantile_thresholds(highest: list[float], shares: list[float]) -> list[float]:
    """For each share q, the value θ such that about q of ``highest`` lie strictly above it: the (1 − q) quantile,
    taken as one of the values itself (numpy's ``lower``). The command prints θ to 6 significant figures, which
    can round it just below the value it was taken from, so that question fires too: the registered runs of
    docs/knowing_world.md were tuned with exactly these values."""
    if not highest:
        raise DataError("no answer carries signals: evaluate with --keep_signals true")
    for q in shares:
        if not 0 < q < 1:
            raise ConfigError(f"each share must be in (0, 1), got {q}")
    return [float(np.quantile(np.asarray(highest, dtype=float), 1 - q, method="lower")) for q in shares]


def best_run(folders: list[Path], metric: str = "acc") -> Path:
    """The folder whose run scored the most ``metric``; ties go to fewer retrievals per question."""
    scored = []
    for folder in folders:
        path = folder / "metrics.json"
        if not path.is_file():
            raise DataError(f"{folder} has no metrics.json: did its evaluation finish?")
        m = json.loads(path.read_text(encoding="utf-8"))
        if metric not in m:
            raise DataError(f"{path} has no '{metric}'")
        scored.append(((m[metric], -m.get("retrieval_calls", 0.0)), folder))
    if not scored:
        raise ConfigError("give at least one run folder")
    return max(scored, key=lambda s: s[0])[1]


@dataclass
class ThresholdsConfig:
    action: str = field(default="quantiles", metadata={"help": "quantiles (θ from a run's signals) or best"})
    runs: list[str] = field(default_factory=list, metadata={"help": "run folders"})
    signal: str = "rind"  # rind (DRAGIN), entropy, low_prob (FLARE's)
    shares: str = "0.2,0.35,0.5,0.65,0.8"  # the shares of questions to fire on
    metric: str = "acc"  # best: the metric to maximise
    knob: str = "theta"  # best: the setting of the winning run to print


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    positional = []
    while argv and not argv[0].startswith("-"):  # the recipe's form: the action and folders before any flag
        positional.append(argv.pop(0))
    if positional:
        argv = ["--action", positional[0], *(["--runs", *positional[1:]] if positional[1:] else []), *argv]
    (cfg,) = parse_config((ThresholdsConfig,), argv, prog="python -m inference.commands.trigger_thresholds")
    if not cfg.runs:
        raise ConfigError("give at least one run folder")
    if cfg.action == "quantiles":
        if len(cfg.runs) != 1:
            raise ConfigError("quantiles reads one run folder")
        folder = Path(cfg.runs[0])
        if not (folder / "predictions.jsonl").is_file():
            raise DataError(f"{folder}: no predictions.jsonl (not an evaluation folder, or it has not run)")
        signals = [s for r in read_predictions(folder) if (s := answer_signals(r)) is not None]
        if signals and cfg.signal not in signals[0]:
            raise ConfigError(f"signal must be one of {', '.join(signals[0])}, got '{cfg.signal}'")
        try:
            shares = [float(s) for s in cfg.shares.split(",") if s.strip()]
        except ValueError:
            raise ConfigError(f"shares must be fractions separated by commas (0.2,0.5), got '{cfg.shares}'") from None
        print(" ".join(f"{t:.6g}" for t in quantile_thresholds([s[cfg.signal] for s in signals], shares)))
    elif cfg.action == "best":
        folder = best_run([Path(r) for r in cfg.runs], cfg.metric)
        if not (folder / "config.yaml").is_file():
            raise DataError(f"{folder}: no config.yaml")
        config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8")) or {}
        if config.get(cfg.knob) is None:
            raise DataError(f"{folder / 'config.yaml'} sets no '{cfg.knob}'")
        print(config[cfg.knob])
    else:
        raise ConfigError(f"action must be quantiles or best, got '{cfg.action}'")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return run_cli(main)


if __name__ == "__main__":
    sys.exit(cli())
