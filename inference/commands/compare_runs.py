"""How far apart are two evaluation runs of the same questions? Where retrieval fired, what it asked, what came out.

    python -m inference.commands.compare_runs runs/eval/in_flight runs/eval/authors
    python -m inference.commands.compare_runs BASE OTHER [OTHER ...] --json runs/compare.json

The first folder is the base; every other is compared with it on the questions both answered (by id): retrievals
per question, the share of questions whose trigger positions are the same (every retrieval's position, in order),
whose first query (and every query) is the same, whose output is the same, and the mean F1 and EM of each, each run
scored as its own ``config.yaml`` says (answer normalisation and extraction), finished or not. A torn last line (a
run killed mid-write, or one still writing) is left out and said on stderr.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaptive_rag.plumbing.atomic_files import write_text_atomic
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.records import PredictionRecord
from adaptive_rag.plumbing.scoring import score_record
from inference.commands.eval_folder import read_run, run_scoring


@dataclass
class CompareConfig:
    runs: list[str] = field(default_factory=list)  # evaluation folders; the first is the base
    json: str | None = None  # also write the rows here


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def mode_text(mode: dict[str, Any]) -> str:
    kind = f", {mode['dataset_kind']} rule" if mode.get("dataset_kind") else ""
    return f"answer_extraction {mode['extraction']}{kind}, normalisation {mode['normalisation']}"


def compare(base: list[PredictionRecord], other: list[PredictionRecord], base_mode: dict[str, Any],
            other_mode: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row: the other run against the base, on the questions both hold; each scored with its own mode
    (:func:`inference.commands.eval_folder.run_scoring`; ``other_mode`` defaults to the base's)."""
    mine = {r.id: r for r in other}
    pairs = [(b, mine[b.id]) for b in base if b.id in mine]
    if not pairs:
        raise ConfigError("the runs share no question id: compare runs of the same questions")

    def positions(r: PredictionRecord) -> list[int | None]:
        return [x.position for x in r.retrievals]

    def queries(r: PredictionRecord) -> list[str]:
        return [x.query for x in r.retrievals]

    other_mode = other_mode or base_mode
    scores = [(score_record(b, **base_mode), score_record(o, **other_mode)) for b, o in pairs]
    both_retrieved = [(b, o) for b, o in pairs if b.retrievals and o.retrievals]
    return {
        "questions": len(pairs),
        "retrievals_per_q_base": _mean([len(b.retrievals) for b, _ in pairs]),
        "retrievals_per_q": _mean([len(o.retrievals) for _, o in pairs]),
        "same_trigger_positions": _mean([positions(b) == positions(o) for b, o in pairs]),
        "same_first_position": _mean([b.retrievals[0].position == o.retrievals[0].position
                                      for b, o in both_retrieved]),
        "same_first_query": _mean([b.retrievals[0].query == o.retrievals[0].query for b, o in both_retrieved]),
        "both_retrieved": len(both_retrieved),
        "same_queries": _mean([queries(b) == queries(o) for b, o in pairs]),
        "same_output": _mean([b.output == o.output for b, o in pairs]),
        "f1_base": _mean([s[0]["f1"] for s in scores]), "f1": _mean([s[1]["f1"] for s in scores]),
        "em_base": _mean([s[0]["em"] for s in scores]), "em": _mean([s[1]["em"] for s in scores]),
    }


COLUMNS = ("questions", "retrievals_per_q_base", "retrievals_per_q", "same_trigger_positions", "same_first_position",
           "same_first_query", "same_queries", "same_output", "f1_base", "f1", "em_base", "em")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    folders = []
    while argv and not argv[0].startswith("--"):
        folders.append(argv.pop(0))
    (cfg,) = parse_config((CompareConfig,), argv, prog="python -m inference.commands.compare_runs")
    folders += cfg.runs
    if len(folders) < 2:
        raise ConfigError("give at least two evaluation folders: the base first")
    paths = [Path(f) for f in folders]
    for path in paths:
        if not path.is_dir() or not any(path.glob("predictions*.jsonl")):
            raise ConfigError(f"{path}: not an evaluation folder (no predictions.jsonl)")
    runs = [read_run(p) for p in paths]  # every config.yaml is read before any scoring
    modes = [run_scoring(r.config) for r in runs]
    rows = [{"run": str(r.folder), "scoring": mode_text(mode), **compare(runs[0].records, r.records, modes[0], mode)}
            for r, mode in zip(runs[1:], modes[1:])]
    print(f"base: {paths[0]} (answers scored with {mode_text(modes[0])})")
    for row in rows:
        if row["scoring"] != mode_text(modes[0]):
            print(f"{row['run']}: answers scored with {row['scoring']}, as its config.yaml says")
    print("| run | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for row in rows:
        print(f"| {row['run']} | " + " | ".join(str(row[c]) for c in COLUMNS) + " |")
    if cfg.json:
        write_text_atomic(Path(cfg.json), json.dumps(rows, indent=2) + "\n")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return run_cli(main)


if __name__ == "__main__":
    sys.exit(cli())
