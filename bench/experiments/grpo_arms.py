"""The arms of the reinforcement addendum (docs/knowing_world.md) side by side, with paired bootstrap intervals.

    python bench/experiments/grpo_arms.py --arm nr=runs/knowing/seed0/claims/adapt/nr \\
        --arm ar=runs/knowing/seed0/claims/adapt/ar --arm supervised=runs/knowing/seed0/claims/adapt/adapt-llm \\
        --arm rl=runs/knowing/seed0/claims/grpo/gate/eval --out runs/knowing/seed0/claims/grpo/arms.md

Each ``--arm NAME=FOLDER`` is an evaluation folder of the evaluate command. Per arm: accuracy (``acc``), retrieval
share, and the AUROC against the recorded ``unknown`` label of the decision's score (a gate's first-step ``<RET>``
probability; otherwise whether the question retrieved); the oracle gate from ``nr`` and ``ar``; paired differences
of every arm against ``ar``, ``ar_base`` where given (AR answered by the knowing model itself, the answerer of the RL
gate's rollout) and ``supervised`` (1000 resamples, percentile; questions every arm answered); ``--ref NAME`` adds
another arm as a reference column. ``--queries`` adds, per arm that searched, the searches per question and the
share of searches whose query is the question itself (a search policy writes its own query).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adaptive_rag.plumbing.bootstrap import auroc_ci, bootstrap_ci, paired_diff_ci
from adaptive_rag.plumbing.question_set import QuestionSet
from data_builders.question_loader import WorldOptions, read_set
from inference.commands.report import load_eval_run


def per_question(folder: Path) -> dict[str, dict[str, float]]:
    """Each question's accuracy, whether it retrieved, and its decision score."""
    run = load_eval_run(folder, folder.name)
    scores = run.scores()
    out = {}
    for rec in run.records():
        retrieved = bool(rec.gate.retrieved) if rec.gate is not None else bool(rec.retrievals)
        p = rec.gate.p_ret if rec.gate is not None and rec.gate.p_ret is not None else float(retrieved)
        queries = [r.query for r in rec.retrievals]
        out[rec.id] = {"acc": scores[rec.id]["acc"], "retrieved": float(retrieved), "score": p,
                       "searches": float(len(queries)),
                       "question_queries": float(sum(q.strip() == rec.question.strip() for q in queries))}
    return out


def query_lines(arms: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """Per arm that retrieved: searches per question and the share of searches that searched the question itself."""
    lines = ["| arm | searches per question | queries that are the question |", "|---|---|---|"]
    for name, rows in arms.items():
        searches = sum(r.get("searches", 0.0) for r in rows.values())
        if searches:
            same = sum(r.get("question_queries", 0.0) for r in rows.values())
            lines.append(f"| {name} | {searches / len(rows):.3f} | {same / searches:.3f} ({int(same)} of "
                         f"{int(searches)}) |")
    return lines


def labels_of(folder: Path) -> dict[str, str]:
    cfg = load_eval_run(folder, folder.name).config
    examples = read_set(QuestionSet(cfg["dataset"]), fmt=cfg.get("dataset_format"),
                        world=WorldOptions(seed=cfg.get("world_seed", 0)))
    return {ex.id: ex.metadata["label"] for ex in examples if "label" in ex.metadata}


def _ci(mean: float, lo: float, hi: float) -> str:
    return f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


def table(arms: dict[str, dict[str, dict[str, float]]], labels: dict[str, str],
          extra_refs: tuple[str, ...] = ()) -> list[str]:
    ids = sorted(set.intersection(*(set(a) for a in arms.values())))
    if "nr" in arms and "ar" in arms and labels:
        arms = {**arms, "oracle": {i: {"acc": arms["ar" if labels.get(i) == "unknown" else "nr"][i]["acc"],
                                       "retrieved": float(labels.get(i) == "unknown"), "score": 0.0} for i in ids}}
    # ar_base: AR answered by the knowing model itself, the answerer the RL gate's rollout uses
    refs = (("ar", "ar_base", "supervised") if "ar_base" in arms else ("ar", "supervised")) + extra_refs
    names = {"ar": "− AR", "ar_base": "− AR (knowing model)", "supervised": "− supervised",
             **{r: f"− {r}" for r in extra_refs}}
    lines = [f"{len(ids)} questions every arm answered", "",
             "| arm | accuracy | retrieval share | AUROC vs unknown | "
             + " | ".join(f"{names[r]}, paired" for r in refs) + " |",
             "|---|---|---|---|" + "---|" * len(refs)]
    for name, rows in arms.items():
        acc = [rows[i]["acc"] for i in ids]
        share = [rows[i]["retrieved"] for i in ids]
        cells = [_ci(sum(acc) / len(acc), *bootstrap_ci(acc)), _ci(sum(share) / len(share), *bootstrap_ci(share))]
        known = [i for i in ids if i in labels]
        scores = [rows[i]["score"] for i in known]
        # a decision that is the same for every question (NR, AR, a gate that never retrieves) ranks nothing
        auc = auroc_ci(scores, [labels[i] == "unknown" for i in known]) \
            if known and name != "oracle" and len(set(scores)) > 1 else None
        cells.append(_ci(*auc) if auc else "-")
        for ref in refs:
            cells.append(_ci(*paired_diff_ci(acc, [arms[ref][i]["acc"] for i in ids]))
                         if ref in arms and ref != name else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arm", action="append", required=True, help="NAME=EVALUATION_FOLDER (repeat)")
    parser.add_argument("--ref", action="append", default=[], help="another arm's NAME as a reference column (repeat)")
    parser.add_argument("--queries", action="store_true", help="also tabulate each searching arm's queries")
    parser.add_argument("--out", help="also write the table here (Markdown)")
    args = parser.parse_args(argv)
    folders = {}
    for spec in args.arm:
        name, _, folder = spec.partition("=")
        if not folder or not (Path(folder) / "config.yaml").is_file():
            print(f"error: --arm {spec}: expected NAME=FOLDER, an evaluation folder with config.yaml", file=sys.stderr)
            return 2
        folders[name] = Path(folder)
    unknown = [r for r in args.ref if r not in folders]
    if unknown:
        print(f"error: --ref {unknown[0]}: not one of the arms ({', '.join(folders)})", file=sys.stderr)
        return 2
    arms = {name: per_question(folder) for name, folder in folders.items()}
    lines = table(arms, labels_of(next(iter(folders.values()))), tuple(r for r in args.ref if r not in
                                                                       ("ar", "ar_base", "supervised")))
    if args.queries:
        lines += ["", *query_lines(arms)]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
