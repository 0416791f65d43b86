"""Each paper's claim on the knowing model, with paired bootstrap 95% intervals (docs/knowing_world.md).

    python -m inference.commands.knowing_claims runs/knowing/seed0/claims \\
        --output_file runs/knowing/seed0/claims/claims.md

Reads the evaluation folders below the given paths (as ``inference.commands.report`` finds them) and checks, per
dataset:

* ADAPT-LLM: runs of methods ``nr``, ``ar`` and ``adapt-llm``: accuracy of each, ADAPT-LLM minus the better of NR and
  AR (paired over questions), retrieval shares, and the gate's precision and recall for "retrieve" against the
  knowing model's recorded label (``metadata.label`` of each question: ``unknown`` should retrieve); the oracle gate
  (AR's answer where the label is ``unknown``, NR's elsewhere) and the AUROC of the gate's ``<RET>`` probability.
* The trigger against the truth, on single-hop questions that carry the label: for DRAGIN runs saved with
  ``keep_signals``, the AUROC against ``unknown`` of the answer's highest RIND score (what DRAGIN compares to θ), of
  its highest word entropy and of FLARE's signal (1 − its lowest token probability); and, given ``wo-rag`` and
  ``sr-rag`` runs, each triggered method (``dragin``, ``flare``, ...) as a gate: accuracy and retrieval share
  against not retrieving and always retrieving, and its precision and recall against the label.
* DRAGIN vs the baselines (``wo-rag``, ``sr-rag``, ``fl-rag``, ``fs-rag``, ``flare``, ``dragin``): F1 and retrievals per
  question; DRAGIN's F1 minus the best baseline's; and where retrievals fired on bridges with an unknown hop: the
  share of questions whose first retrieval came before the output stated the unknown hop's answer.
* Iter-RetGen: ``iterations`` 2 minus 1 in F1, paired.
* Retrieval adaptation: recall@k of the base and the adapted query encoder (``report.json`` of
  ``training.evaluate_adapted``).
"""

from __future__ import annotations

import functools
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaptive_rag.lm.models import load_tokenizer
from adaptive_rag.plumbing.bootstrap import auroc_ci, bootstrap_ci, paired_diff_ci
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.question_set import QuestionSet
from data_builders.question_loader import WorldOptions, read_set
from inference.commands.report import EvalRun, find_runs
from inference.dynamic_rag.signals import has_text

DYNAMIC = ("wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin")


def _fmt(mean: float, lo: float, hi: float) -> str:
    return f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


def _per_question(run: EvalRun, metric: str) -> dict[str, float]:
    if metric == "retrievals":
        return {r.id: float(len(r.retrievals)) for r in run.records()}
    if metric == "retrieved":
        return {r.id: float(bool(r.gate and r.gate.retrieved)) for r in run.records()}
    return {i: float(s[metric]) for i, s in run.scores().items()}  # as the run's own metrics.json scored it


def _mean_ci(values: dict[str, float]) -> str:
    vals = list(values.values())
    return _fmt(sum(vals) / len(vals), *bootstrap_ci(vals))


def _paired(a: dict[str, float], b: dict[str, float]) -> str:
    ids = sorted(set(a) & set(b))
    return _fmt(*paired_diff_ci([a[i] for i in ids], [b[i] for i in ids]))


def _labels(run: EvalRun) -> dict[str, dict[str, Any]]:
    """Each question's metadata (its knowing label, hop labels), from the run's dataset (read once per set)."""
    cfg = run.config
    return _set_metadata(cfg["dataset"], cfg.get("dataset_format"), cfg.get("world_seed", 0))


@functools.lru_cache(maxsize=16)  # cleared by each report: a set's name may point to another build next time
def _set_metadata(dataset: str, fmt: str | None, world_seed: int) -> dict[str, dict[str, Any]]:
    return {ex.id: ex.metadata for ex in read_set(QuestionSet(dataset), fmt=fmt, world=WorldOptions(seed=world_seed))}


def _labelled(run: EvalRun) -> bool:
    """Whether the run's questions are single-hop ones carrying the knowing model's label."""
    labels = _labels(run)
    return bool(labels) and all("label" in m for m in labels.values())


def gate_agreement(retrieved: dict[str, float], labels: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Precision and recall of "retrieve" against the label ``unknown`` (questions without a label are skipped)."""
    pairs = [(bool(retrieved[i]), labels[i]["label"] == "unknown") for i in retrieved if "label" in labels.get(i, {})]
    tp = sum(r and u for r, u in pairs)
    n_ret, n_unknown = sum(r for r, _ in pairs), sum(u for _, u in pairs)
    return {"n": len(pairs), "unknown_share": n_unknown / len(pairs) if pairs else None,
            "precision": tp / n_ret if n_ret else None, "recall": tp / n_unknown if n_unknown else None}


def _auroc_line(name: str, scores: dict[str, float], labels: dict[str, dict[str, Any]]) -> str:
    ids = [i for i in scores if "label" in labels.get(i, {})]
    got = auroc_ci([scores[i] for i in ids], [labels[i]["label"] == "unknown" for i in ids]) if ids else None
    missing = "- (no labelled question)" if not ids else "- (one class only)"
    return f"| {name} | {_fmt(*got) if got else missing} |"


def _oracle(no_ret: dict[str, float], ret: dict[str, float], labels: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The best any gate over these two answers can do: the retrieving answer exactly where the model does not
    know the fact (labelled questions both runs answered, in a fixed order for the bootstrap)."""
    return {i: ret[i] if labels[i]["label"] == "unknown" else no_ret[i]
            for i in sorted(set(no_ret) & set(ret)) if "label" in labels.get(i, {})}


def _unknown(ids, labels: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {i: float(labels[i]["label"] == "unknown") for i in ids}


def adapt_claim(runs: dict[str, EvalRun]) -> list[str]:
    acc = {m: _per_question(runs[m], "acc") for m in ("nr", "ar", "adapt-llm")}
    share = {m: _per_question(runs[m], "retrieved") for m in ("nr", "ar", "adapt-llm")}
    best = max(("nr", "ar"), key=lambda m: sum(acc[m].values()))
    labels = _labels(runs["adapt-llm"])
    gate = gate_agreement(share["adapt-llm"], labels)
    lines = [f"| {m} | {_mean_ci(acc[m])} | {_mean_ci(share[m])} |" for m in ("nr", "ar", "adapt-llm")]
    oracle = _oracle(acc["nr"], acc["ar"], labels)
    if oracle:
        unknown = _unknown(oracle, labels)
        lines.append(f"| oracle gate (retrieve = unknown) | {_mean_ci(oracle)} | {_mean_ci(unknown)} |")
    out = ["| policy | accuracy [95% CI] | retrieval share [95% CI] |", "|---|---|---|", *lines, "",
           f"ADAPT-LLM − {best.upper()} (the better baseline), paired: {_paired(acc['adapt-llm'], acc[best])}",
           f"gate vs the recorded label (retrieve = unknown): {json.dumps(gate)}"]
    if oracle:
        out.append(f"oracle gate − {best.upper()}, paired: {_paired(oracle, acc[best])}")
    p_ret = {r.id: r.gate.p_ret for r in runs["adapt-llm"].records() if r.gate and r.gate.p_ret is not None}
    if p_ret:
        out += ["", "| signal | AUROC against `unknown` [95% CI] |", "|---|---|",
                _auroc_line("the gate's <RET> probability", p_ret, labels)]
    return out


def answer_signals(record) -> dict[str, float] | None:
    """The first round's highest RIND score (the value DRAGIN compares to θ), highest word entropy and FLARE's
    signal (1 − the lowest token probability), from a record saved with ``keep_signals``; None without signals."""
    if not record.signals:
        return None
    words = [w for w in record.signals[0]["words"] if has_text(w["text"])]
    if not words:  # an empty answer: nothing to doubt
        return {"rind": 0.0, "entropy": 0.0, "low_prob": 0.0}
    return {"rind": max(w["score"] for w in words), "entropy": max(w["entropy"] for w in words),
            "low_prob": 1.0 - min(w["min_prob"] for w in words)}


SIGNAL_NAMES = {"rind": "highest RIND score (DRAGIN's trigger)", "entropy": "highest word entropy",
                "low_prob": "1 − lowest token probability (FLARE's trigger)"}


def hindsight_gate(scores: dict[str, float], no_ret: dict[str, float],
                   ret: dict[str, float]) -> tuple[float, float] | None:
    """(accuracy, retrieval share) of the best threshold on ``scores`` chosen on these very questions, taking the
    always-retrieving run's answer above it and the never-retrieving run's below: a bound on what a gate thresholding
    this signal could reach, not a result (the threshold sees the answers it is scored on). Over the questions all
    three cover; None when they share none."""
    ids = sorted(set(scores) & set(no_ret) & set(ret), key=lambda i: scores[i])
    if not ids:
        return None
    # raise the threshold past one question at a time: each passed question takes the never-retrieving answer
    acc = sum(ret[i] for i in ids)
    best = (acc, -len(ids))  # below every score: retrieve for all; ties go to fewer retrievals
    for k, i in enumerate(ids):
        acc += no_ret[i] - ret[i]
        if k + 1 == len(ids) or scores[ids[k + 1]] > scores[i]:  # a threshold can sit between distinct scores only
            best = max(best, (acc, -(len(ids) - k - 1)))
    return best[0] / len(ids), -best[1] / len(ids)


def signal_claim(runs: list[EvalRun], baselines: dict[str, EvalRun] | None = None) -> list[str]:
    """AUROC of each answer signal against the label ``unknown``, one row per signal and DRAGIN profile; with
    ``wo-rag`` and ``sr-rag`` runs of the same questions, the best threshold gate on the signal in hindsight."""
    acc = {m: _per_question(r, "acc") for m, r in (baselines or {}).items()}
    hindsight = {"wo-rag", "sr-rag"} <= set(acc)
    lines = ["| run | signal | AUROC against `unknown` [95% CI] |"
             + (" best threshold in hindsight: accuracy (retrieval share) |" if hindsight else ""),
             "|---|---|---|" + ("---|" if hindsight else "")]
    for run in runs:
        labels = _labels(run)
        per_q = {r.id: s for r in run.records() if (s := answer_signals(r)) is not None}
        profile = run.config.get("dragin_profile", "paper")
        for key, name in SIGNAL_NAMES.items():
            scores = {i: s[key] for i, s in per_q.items()}
            row = f"| {run.method} ({profile}) |{_auroc_line(name, scores, labels)[1:]}"
            if hindsight:
                got = hindsight_gate(scores, acc["wo-rag"], acc["sr-rag"])
                row += f" {got[0]:.3f} ({got[1]:.2f}) |" if got else " - (no question in common) |"
            lines.append(row)
    return lines


def policy_name(run: EvalRun) -> str:
    """A run's name in the gate table: DRAGIN's profile is part of it (both profiles can run on one set), and so is
    an answer extraction set against the profile's."""
    if run.method != "dragin":
        return run.method
    profile = run.config.get("dragin_profile", "paper")
    extraction = run.config.get("answer_extraction") or "project"
    if extraction != ("dragin" if profile == "reference" else "project"):  # a switch set against the profile
        return f"dragin ({profile}, answers as {extraction} extracts them)"
    return f"dragin ({profile})"


def policy_claim(runs: dict[str, EvalRun]) -> list[str]:
    """Triggered methods as gates on single-hop labelled questions, against not retrieving (``wo-rag``) and always
    retrieving (``sr-rag``): accuracy, retrieval share, the paired difference to the better of the two, and the
    trigger's precision and recall against the label ``unknown``."""
    acc = {m: _per_question(r, "acc") for m, r in runs.items()}
    share = {m: {i: float(v > 0) for i, v in _per_question(r, "retrievals").items()} for m, r in runs.items()}
    best = max(("wo-rag", "sr-rag"), key=lambda m: sum(acc[m].values()))
    labels = _labels(runs["wo-rag"])
    lines = ["| policy | accuracy [95% CI] | retrieval share [95% CI] | − the better of wo-rag and sr-rag, paired | "
             "precision / recall for `unknown` |", "|---|---|---|---|---|"]
    for m in sorted(runs, key=lambda m: (m not in ("wo-rag", "sr-rag"), m)):
        gate = gate_agreement(share[m], labels)
        pr = " / ".join("-" if gate[k] is None else f"{gate[k]:.2f}" for k in ("precision", "recall"))
        diff = "-" if m == best else _paired(acc[m], acc[best])
        lines.append(f"| {m} | {_mean_ci(acc[m])} | {_mean_ci(share[m])} | {diff} | {pr} |")
    oracle = _oracle(acc["wo-rag"], acc["sr-rag"], labels)
    if not oracle:
        return [*lines, "", f"the better baseline: {best}; wo-rag and sr-rag share no labelled question"]
    unknown = _unknown(oracle, labels)
    lines.append(f"| oracle gate (retrieve = unknown) | {_mean_ci(oracle)} | {_mean_ci(unknown)} | "
                 f"{_paired(oracle, acc[best])} | 1.00 / 1.00 |")
    share_unknown = sum(unknown.values()) / len(unknown)
    return [*lines, "", f"the better baseline: {best}; share of the questions labelled unknown: {share_unknown:.2f}"]


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


def _is_signals_run(run: EvalRun) -> bool:
    """A DRAGIN run that kept its signals and never retrieved (θ out of reach): it measures the signals on the
    answers the model gives without retrieval. Other runs with ``keep_signals`` are ordinary runs of their method."""
    return (run.method == "dragin" and bool(run.config.get("keep_signals"))
            and not run.metrics.get("retrieval_calls", 0))


def _one_each(runs: list[EvalRun], key, dataset: str) -> dict[str, EvalRun]:
    """The runs by ``key(run)``, or a DataError naming the folders that compete for one row of a claim's table."""
    named: dict[str, list[EvalRun]] = defaultdict(list)
    for r in runs:
        named[key(r)].append(r)
    for name, same in named.items():
        if len(same) > 1:
            raise DataError(f"{len(same)} runs of '{name}' on {dataset}: "
                            f"{', '.join(str(r.folder) for r in same)}; give the folders of one run each")
    return {name: same[0] for name, same in named.items()}


def claims_report(paths: list[str]) -> str:
    _set_metadata.cache_clear()
    reports = [r for path in paths for r in sorted(Path(path).rglob("report.json"))]
    try:
        runs = find_runs(paths).evals
    except DataError:
        if not reports:  # a folder with a retrieval-adaptation report alone is a claim too
            raise
        runs = []
    by_dataset: dict[str, list[EvalRun]] = defaultdict(list)
    unfinished = []
    for r in runs:
        if "(unfinished)" in r.name:
            unfinished.append(r)
        else:
            by_dataset[str(r.config.get("dataset"))].append(r)
    parts = ["# Claims on the knowing model (paired bootstrap 95% intervals over questions)"]
    # A claim silently missing a row reads as a claim about fewer runs: say which folders were not used.
    parts += [f"left out (no metrics.json): {r.folder}" for r in unfinished]
    for dataset, group in sorted(by_dataset.items()):
        if dataset.endswith("-tune"):  # a tuning half chose a setting; the claims are on the evaluation half
            continue
        with_signals = [r for r in group if _is_signals_run(r)]
        group = [r for r in group if not _is_signals_run(r)]
        named = _one_each([r for r in group if r.method != "iter-retgen"], policy_name, dataset)
        if {"nr", "ar", "adapt-llm"} <= set(named):
            parts += [f"\n## ADAPT-LLM on {dataset}\n", *adapt_claim(named)]
        if with_signals:
            baselines = {m: r for m, r in named.items() if m in ("wo-rag", "sr-rag")}
            parts += [f"\n## The trigger's signals against the truth on {dataset}\n",
                      *signal_claim(with_signals, baselines)]
        dynamic = [r for r in named.values() if r.method in DYNAMIC]
        if {"wo-rag", "sr-rag"} <= set(named) and _labelled(named["wo-rag"]):
            policies = {policy_name(r): r for r in dynamic}
            parts += [f"\n## Triggers as gates on {dataset}\n", *policy_claim(policies)]
        elif dynamic:  # one row per method: two DRAGIN profiles on the same bridges compete for one row
            by_method = _one_each(dynamic, lambda r: r.method, dataset)
            parts += [f"\n## DRAGIN and the baselines on {dataset}\n", *dynamic_claim(by_method)]
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
    output_file: str | None = field(default=None, metadata={"help": "also write the Markdown here",
                                                           "aliases": ["--out"]})


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    first_flag = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    if first_flag:
        argv = ["--runs", *argv[:first_flag], *argv[first_flag:]]
    (cfg,) = parse_config((ClaimsConfig,), argv, prog="python -m inference.commands.knowing_claims")
    if not cfg.runs:
        raise ConfigError("give at least one folder of evaluation runs")
    text = claims_report(cfg.runs)
    if cfg.output_file:
        Path(cfg.output_file).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.output_file).write_text(text, encoding="utf-8")
    print(text)


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return run_cli(main)


if __name__ == "__main__":
    sys.exit(cli())
