"""Each paper's claim on the knowing model, with paired bootstrap 95% intervals (docs/knowing_world.md).

    python -m inference.commands.knowing_claims runs/knowing/seed0/claims --out runs/knowing/seed0/claims/claims.md

Reads the evaluation folders below the given paths (as ``inference.commands.report`` finds them) and checks, per
dataset:

* ADAPT-LLM: runs of methods ``nr``, ``ar`` and ``adapt-llm``: accuracy of each, ADAPT-LLM minus the better of NR and
  AR (paired over questions), retrieval shares, and the gate's precision and recall for "retrieve" against the
  knowing model's recorded label (``metadata.label`` of each question: ``unknown`` should retrieve).
* DRAGIN vs the baselines (``wo-rag``, ``sr-rag``, ``fl-rag``, ``fs-rag``, ``flare``, ``dragin``): F1 and retrievals per
  question; DRAGIN's F1 minus the best baseline's; and where retrievals fired on bridges with an unknown hop: the
  share of questions whose first retrieval came before the output stated the unknown hop's answer.
* Iter-RetGen: ``iterations`` 2 minus 1 in F1, paired.
* Retrieval adaptation: recall@k of the base and the adapted query encoder (``report.json`` of
  ``training.evaluate_adapted``).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaptive_rag.lm.models import load_tokenizer
from adaptive_rag.plumbing.bootstrap import bootstrap_ci, paired_diff_ci
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.question_set import QuestionSet
from adaptive_rag.plumbing.scoring import score_record
from data_builders.question_loader import WorldOptions, read_set
from inference.commands.report import EvalRun, find_runs

DYNAMIC = ("wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin")


def _fmt(mean: float, lo: float, hi: float) -> str:
    return f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


def _per_question(run: EvalRun, metric: str) -> dict[str, float]:
    norm = run.config.get("answer_normalisation", "official")
    if metric == "retrievals":
        return {r.id: float(len(r.retrievals)) for r in run.records()}
    if metric == "retrieved":
        return {r.id: float(bool(r.gate and r.gate.retrieved)) for r in run.records()}
    return {r.id: float(score_record(r, norm)[metric]) for r in run.records()}


def _mean_ci(values: dict[str, float]) -> str:
    vals = list(values.values())
    return _fmt(sum(vals) / len(vals), *bootstrap_ci(vals))


def _paired(a: dict[str, float], b: dict[str, float]) -> str:
    ids = sorted(set(a) & set(b))
    return _fmt(*paired_diff_ci([a[i] for i in ids], [b[i] for i in ids]))


def _labels(run: EvalRun) -> dict[str, dict[str, Any]]:
    """Each question's metadata (its knowing label, hop labels), from the run's dataset."""
    cfg = run.config
    qs = QuestionSet(cfg["dataset"])
    return {ex.id: ex.metadata for ex in read_set(qs, fmt=cfg.get("dataset_format"),
                                                   world=WorldOptions(seed=cfg.get("world_seed", 0)))}


def gate_agreement(retrieved: dict[str, float], labels: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Precision and recall of "retrieve" against the label ``unknown`` (questions without a label are skipped)."""
    pairs = [(bool(retrieved[i]), labels[i]["label"] == "unknown") for i in retrieved if "label" in labels.get(i, {})]
    tp = sum(r and u for r, u in pairs)
    n_ret, n_unknown = sum(r for r, _ in pairs), sum(u for _, u in pairs)
    return {"n": len(pairs), "unknown_share": n_unknown / len(pairs) if pairs else None,
            "precision": tp / n_ret if n_ret else None, "recall": tp / n_unknown if n_unknown else None}


def adapt_claim(runs: dict[str, EvalRun]) -> list[str]:
    acc = {m: _per_question(runs[m], "acc") for m in ("nr", "ar", "adapt-llm")}
    share = {m: _per_question(runs[m], "retrieved") for m in ("nr", "ar", "adapt-llm")}
    best = max(("nr", "ar"), key=lambda m: sum(acc[m].values()))
    gate = gate_agreement(share["adapt-llm"], _labels(runs["adapt-llm"]))
    lines = [f"| {m} | {_mean_ci(acc[m])} | {_mean_ci(share[m])} |" for m in ("nr", "ar", "adapt-llm")]
    return ["| policy | accuracy [95% CI] | retrieval share [95% CI] |", "|---|---|---|", *lines, "",
            f"ADAPT-LLM − {best.upper()} (the better baseline), paired: {_paired(acc['adapt-llm'], acc[best])}",
            f"gate vs the recorded label (retrieve = unknown): {json.dumps(gate)}"]


def unknown_hop_first(run: EvalRun, labels: dict[str, dict[str, Any]], tokenizer) -> dict[str, float]:
    """Per question with an unknown hop: 1 when the first retrieval fired before the output stated that hop's
    answer (or the output never states it and a retrieval fired), 0 when it fired later or never."""
    out = {}
    for rec in run.records():
        meta = labels.get(rec.id, {})
        target = meta.get("unknown_hop_answer")
        if not target:
            continue
        fired = [r.position for r in rec.retrievals if r.position is not None]
        at = rec.output.lower().find(str(target).lower())
        stated = len(tokenizer(rec.output[:at], add_special_tokens=False)["input_ids"]) if at >= 0 else None
        out[rec.id] = float(bool(fired) and (stated is None or min(fired) <= stated))
    return out


def dynamic_claim(runs: dict[str, EvalRun]) -> list[str]:

    f1 = {m: _per_question(r, "f1") for m, r in runs.items()}
    ret = {m: _per_question(r, "retrievals") for m, r in runs.items()}
    labels = _labels(next(iter(runs.values())))
    tokenizer = load_tokenizer(next(iter(runs.values())).config.get("model", "smollm2-135m"))
    lines = ["| method | F1 [95% CI] | retrievals/q [95% CI] | first retrieval before the unknown hop is stated |",
             "|---|---|---|---|"]
    for m in (m for m in DYNAMIC if m in runs):
        placed = unknown_hop_first(runs[m], labels, tokenizer)
        lines.append(f"| {m} | {_mean_ci(f1[m])} | {_mean_ci(ret[m])} | "
                     f"{_mean_ci(placed) if placed else '-'} |")
    if "dragin" in runs and len(runs) > 1:
        best = max((m for m in runs if m != "dragin"), key=lambda m: sum(f1[m].values()))
        lines += ["", f"DRAGIN − {best} (best baseline) in F1, paired: {_paired(f1['dragin'], f1[best])}"]
        for m in ("fl-rag", "fs-rag"):
            if m in runs:
                lines.append(f"DRAGIN − {m} in retrievals/q, paired: {_paired(ret['dragin'], ret[m])}")
    return lines


def iter_claim(runs: dict[int, EvalRun]) -> list[str]:
    f1 = {t: _per_question(r, "f1") for t, r in runs.items()}
    lines = [f"T={t}: F1 {_mean_ci(f1[t])}" for t in sorted(runs)]
    if 1 in runs and 2 in runs:
        lines.append(f"T=2 − T=1 in F1, paired: {_paired(f1[2], f1[1])}")
    return lines


def claims_report(paths: list[str]) -> str:
    reports = [r for path in paths for r in sorted(Path(path).rglob("report.json"))]
    try:
        runs = find_runs(paths).evals
    except DataError:
        if not reports:  # a folder with a retrieval-adaptation report alone is a claim too
            raise
        runs = []
    by_dataset: dict[str, list[EvalRun]] = defaultdict(list)
    for r in runs:
        if "(unfinished)" not in r.name:
            by_dataset[str(r.config.get("dataset"))].append(r)
    parts = ["# Claims on the knowing model (paired bootstrap 95% intervals over questions)"]
    for dataset, group in sorted(by_dataset.items()):
        by_method = {r.method: r for r in group}
        if {"nr", "ar", "adapt-llm"} <= set(by_method):
            parts += [f"\n## ADAPT-LLM on {dataset}\n", *adapt_claim(by_method)]
        dynamic = {m: r for m, r in by_method.items() if m in DYNAMIC}
        if dynamic:
            parts += [f"\n## DRAGIN and the baselines on {dataset}\n", *dynamic_claim(dynamic)]
        iters = {int(r.config.get("iterations", 2)): r for r in group if r.method == "iter-retgen"}
        if iters:
            parts += [f"\n## Iter-RetGen on {dataset}\n", *iter_claim(iters)]
    for report in reports:
        parts += distill_claim(report)
    return "\n".join(parts) + "\n"


def distill_claim(path: Path) -> list[str]:
    """Recall@k of the base and the adapted query encoder (training.evaluate_adapted's report.json), with bootstrap
    intervals and the paired difference where the report keeps per-question rows."""
    report = json.loads(path.read_text(encoding="utf-8"))
    recall = report.get("recall")
    if not isinstance(recall, dict) or not recall:
        return []
    rows = report.get("per_question") or {}
    lines = [f"\n## Retrieval adaptation ({path.parent})\n"]
    if not all(isinstance(rows.get(name), dict) for name in recall):  # a report from before per-question rows
        return lines + [f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items())
                        for name, row in recall.items()]
    keys = [k for k in next(iter(recall.values())) if k.endswith("@5")] or list(next(iter(recall.values())))
    for name in recall:
        lines.append(f"{name}: " + ", ".join(f"{k} {_mean_ci(_known(rows[name][k]))}" for k in keys))
    if {"base", "adapted"} <= set(recall):
        for k in keys:
            base, adapted = _known(rows["base"][k]), _known(rows["adapted"][k])
            lines.append(f"adapted − base in {k}, paired: {_paired(adapted, base)}")
    return lines


def _known(values: list[float | None]) -> dict[str, float]:
    """Per-question values by position (questions without gold passages, ``None``, left out)."""
    return {str(i): v for i, v in enumerate(values) if v is not None}


@dataclass
class ClaimsConfig:
    runs: list[str] = field(default_factory=list, metadata={"help": "folders holding the claims' evaluation runs"})
    out: str | None = None  # also write the Markdown here


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    first_flag = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    if first_flag:
        argv = ["--runs", *argv[:first_flag], *argv[first_flag:]]
    (cfg,) = parse_config((ClaimsConfig,), argv, prog="python -m inference.commands.knowing_claims")
    if not cfg.runs:
        raise ConfigError("give at least one folder of evaluation runs")
    text = claims_report(cfg.runs)
    if cfg.out:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_text(text, encoding="utf-8")
    print(text)


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return run_cli(main)


if __name__ == "__main__":
    sys.exit(cli())
