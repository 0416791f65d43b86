"""Iter-RetGen's retrieval adaptation with Eq. 3's candidates and teacher against this project's earlier default:
recall@k of the adapted query encoder on the same held-out questions.

    python bench/distill_candidates.py --json runs/bench/distill_candidates.json
    python bench/distill_candidates.py --arms y1q+eq3 q16+softmax      # the two defaults only

Two candidate pools, each built once (``python -m training.distill_set``, y1 and the re-ranker's scores):
``y1q`` retrieves D_{y1‖q} (``candidate_query question_y1`` and the data config's ``num_candidates``, null in
data_world.yaml: top_k of them, Eq. 3 and the present default); ``q16`` retrieves 16 with the question alone
(``candidate_query question``, ``num_candidates 16``, the earlier default). Two teachers on each
(``training/distill_retriever.py``): ``eq3`` (``teacher_distribution eq3``, the present default) and ``softmax``
(``teacher_distribution softmax``, ``teacher_temperature 1.0``, the earlier teacher, which the CPU recipe still
uses). Every other setting is the recipe's YAML (default: the world recipe, ``data_world.yaml``,
``distill_world_cpu.yaml``, ``evaluate_world.yaml``: 100 training and 50 held-out two-hop questions).
Each arm is evaluated by ``python -m training.evaluate_adapted`` without Iter-RetGen.

Printed: recall@k and answer recall@k of the base and each adapted encoder with 95% percentile bootstrap intervals
over questions, each arm − base paired, and the candidates' quality (gold share, the teacher's and the retriever's
top-1). Headline ``difference``: recall@K (``--recall_k``, 5) of ``y1q+eq3`` − ``q16+softmax``, paired over the held-out
questions. Every step resumes (the commands' own resuming); an arm's outputs are ``OUT/data_POOL``,
``OUT/distill_ARM``, ``OUT/eval_ARM``. The dense index is built into ``--index`` when it is not there.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from harness import add_json_arg, add_threads_arg, format_table, load_1min, set_threads, write_json

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "retrieval_adapt" / "configs"
# y1q keeps the data config's num_candidates (null in data_world.yaml: top_k, Eq. 3's D); the command line
# cannot set a field back to null
POOLS = {"y1q": ["--candidate_query", "question_y1"],
         "q16": ["--candidate_query", "question", "--num_candidates", "16"]}
TEACHERS = {"eq3": ["--teacher_distribution", "eq3"],
            "softmax": ["--teacher_distribution", "softmax", "--teacher_temperature", "1.0"]}
ARMS = tuple(f"{p}+{t}" for p in POOLS for t in TEACHERS)
PRESENT, EARLIER = "y1q+eq3", "q16+softmax"
STAT_KEYS = ("mean_candidates", "gold_in_candidates", "teacher_top1_gold", "retriever_top1_gold", "teacher_entropy")


def fail(message: str):
    """A mistake in one line, exit status 2, as the project's commands end."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def run(main, argv: list[str], what: str) -> dict[str, float]:
    """One of the project's commands in this process: its wall time and the load average around it."""
    from adaptive_rag.plumbing.cli import run_cli

    print(f"== {what}: {' '.join(argv)}", flush=True)
    load_before, start = load_1min(), time.perf_counter()
    rc = run_cli(main, argv=argv)
    if rc:
        sys.exit(rc)  # the command printed its one line
    return {"wall_s": round(time.perf_counter() - start, 1), "load_before": load_before, "load_after": load_1min()}


def check_arguments(data_argv: dict, distill_argv: dict, eval_argv: dict, recall_k: int) -> None:
    """Every command's arguments parsed before the first one runs: a mistake in ``--data_args`` or a ``--recall_k``
    the evaluation does not compute ends in one line at once, not after the index and the candidates are built."""
    from adaptive_rag.plumbing.config import parse_config
    from adaptive_rag.plumbing.errors import user_errors
    from data_builders.question_loader import QuestionsConfig
    from retrieval_adapt.distill_config import DistillConfig
    from training.distill_set import RetrievalAdaptDataConfig
    from training.evaluate_adapted import EvaluateAdaptedConfig

    planned = [((QuestionsConfig, RetrievalAdaptDataConfig), "--data_args", argv) for argv in data_argv.values()]
    planned += [((DistillConfig,), "--distill_args", argv) for argv in distill_argv.values()]
    planned += [((QuestionsConfig, EvaluateAdaptedConfig), "--eval_args", argv) for argv in eval_argv.values()]
    for types, flag, argv in planned:
        try:
            parsed = parse_config(types, list(argv))
        except user_errors() as err:
            fail(f"{flag} or its config: {err}")
        if isinstance(parsed[-1], EvaluateAdaptedConfig) and recall_k not in parsed[-1].recall_ks:
            fail(f"--recall_k {recall_k}: the evaluation computes recall at {parsed[-1].recall_ks} (recall_ks)")


def parse_arms(names: list[str]) -> list[str]:
    bad = [a for a in names if a not in ARMS]
    if bad:
        fail(f"--arms: unknown {', '.join(bad)} (choose from {', '.join(ARMS)})")
    return list(dict.fromkeys(names))


def per_question(report: dict, name: str, key: str) -> list[float]:
    """One retriever's ``key`` per held-out question (gold recall is None for a question without gold passages:
    such questions are left out, for every arm alike)."""
    return [float(v) for v in report["per_question"][name][key] if v is not None]


def figures(report: dict, name: str, keys: list[str], resamples: int) -> dict[str, float]:
    from adaptive_rag.plumbing.bootstrap import bootstrap_ci

    out = {}
    for key in keys:
        values = per_question(report, name, key)
        lo, hi = bootstrap_ci(values, n_resamples=resamples)
        out.update({key: sum(values) / len(values), f"{key}_lo": lo, f"{key}_hi": hi})
    return out


def paired(a: list[float], b: list[float], resamples: int) -> tuple[float, float, float]:
    from adaptive_rag.plumbing.bootstrap import paired_diff_ci

    return paired_diff_ci(a, b, n_resamples=resamples)


def ci(mean: float, lo: float, hi: float, signed: bool = False) -> str:
    f = "+.3f" if signed else ".3f"
    return f"{mean:{f}} [{lo:{f}}, {hi:{f}}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", default="runs/index/world-minilm",
                        help="the dense index (built here over the world with MiniLM when absent)")
    parser.add_argument("--output_dir", "--out", default="runs/bench/distill_candidates")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), help=f"of {', '.join(ARMS)}")
    parser.add_argument("--data_config", "--data-config", default=str(CONFIGS / "data_world.yaml"))
    parser.add_argument("--distill_config", "--distill-config", default=str(CONFIGS / "distill_world_cpu.yaml"))
    parser.add_argument("--eval_config", "--eval-config", default=str(CONFIGS / "evaluate_world.yaml"))
    parser.add_argument("--data_args", "--data-args", default="", help="more switches for distill_set, one string")
    parser.add_argument("--distill_args", "--distill-args",
                        default="", help="more switches for distill_retriever, one string")
    parser.add_argument("--eval_args", "--eval-args", default="", help="more switches for evaluate_adapted, one string")
    parser.add_argument("--earlier_candidates", "--earlier-candidates", type=int, default=16,
                        help="the q16 pool's size (the earlier default's num_candidates)")
    parser.add_argument("--recall_k", "--k",
                        type=int, default=5, help="the headline's recall@k (one of the eval config's ks)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    add_threads_arg(parser)
    add_json_arg(parser)
    args = parser.parse_args()
    arms = parse_arms(args.arms)
    set_threads(args.threads)
    from retrieval_adapt import build_index
    from training import distill_retriever, distill_set, evaluate_adapted

    out, index = Path(args.output_dir), args.index
    pools = dict(POOLS, q16=[*POOLS["q16"][:-1], str(args.earlier_candidates)])
    used = list(dict.fromkeys(a.split("+")[0] for a in arms))
    data_argv = {pool: [args.data_config, "--index", index, "--output_dir", str(out / f"data_{pool}"), *pools[pool],
                        *shlex.split(args.data_args)] for pool in used}
    distill_argv = {arm: [args.distill_config, "--data_dir", str(out / f"data_{arm.split('+')[0]}"), "--index", index,
                          "--output_dir", str(out / f"distill_{arm}"), *TEACHERS[arm.split("+")[1]],
                          *shlex.split(args.distill_args)] for arm in arms}
    eval_argv = {arm: [args.eval_config, "--index", index, "--query_encoder",
                       str(out / f"distill_{arm}" / "query_encoder"), "--output_dir", str(out / f"eval_{arm}"),
                       "--run_iter_retgen", "false", *shlex.split(args.eval_args)] for arm in arms}
    check_arguments(data_argv, distill_argv, eval_argv, args.recall_k)

    timings: dict[str, dict] = {}
    if not (Path(index) / "embeddings.npy").is_file():
        timings["index"] = run(build_index.main, ["--corpus", "world", "--kind", "dense", "--encoder", "minilm",
                                                  "--output_dir", index], "dense index")
    stats = {}
    for pool in used:
        timings[f"data_{pool}"] = run(distill_set.main, data_argv[pool], f"candidates {pool}")
        stats[pool] = json.loads((out / f"data_{pool}" / "stats.json").read_text())
    reports, best = {}, {}
    for arm in arms:
        timings[f"distill_{arm}"] = run(distill_retriever.main, distill_argv[arm], f"distill {arm}")
        best[arm] = json.loads((out / f"distill_{arm}" / "query_encoder" / "best.json").read_text())
        timings[f"eval_{arm}"] = run(evaluate_adapted.main, eval_argv[arm], f"evaluate {arm}")
        reports[arm] = json.loads((out / f"eval_{arm}" / "report.json").read_text())

    first = reports[arms[0]]
    ids = first["per_question"]["ids"]
    if any(r["per_question"]["ids"] != ids for r in reports.values()):
        fail("the arms were evaluated on different questions: give them the same --eval_config and --eval_args")
    keys = [k for k in first["recall"]["base"] if not k.endswith("_lo") and not k.endswith("_hi")]
    head = f"recall@{args.recall_k}"
    results: dict = {"index": index, "n_questions": len(ids), "resamples": args.resamples, "k": args.recall_k,
                     "data_args": args.data_args, "distill_args": args.distill_args, "eval_args": args.eval_args}
    rows = {"base": figures(first, "base", keys, args.resamples)}
    rows.update({arm: figures(reports[arm], "adapted", keys, args.resamples) for arm in arms})
    shown = [k for k in keys if k.startswith("recall") or k == f"answer_{head}"]
    table_rows = []
    base_q = per_question(first, "base", head)
    for name, fig in rows.items():
        delta = "-" if name == "base" else ci(*paired(per_question(reports[name], "adapted", head), base_q,
                                                      args.resamples), signed=True)
        table_rows.append([name, *[ci(fig[k], fig[f"{k}_lo"], fig[f"{k}_hi"]) for k in shown], delta,
                           "-" if name == "base" else best[name].get("step", best[name].get("best_step"))])
        results.update({f"{name}_{k}": v for k, v in fig.items()})
    print(f"\nHeld-out questions: {len(ids)}, query = the question; 95% bootstrap intervals over questions")
    print(format_table(["encoder", *shown, f"{head} - base (paired)", "best step"], table_rows))
    print("\nCandidate pools (training questions):")
    print(format_table(["pool", *STAT_KEYS], [[p, *[s.get(k) for k in STAT_KEYS]] for p, s in stats.items()],
                       floats=".3f"))
    for pool, s in stats.items():
        results.update({f"pool_{pool}_{k}": s.get(k) for k in STAT_KEYS})
    for what, t in timings.items():
        results.update({f"{what}_{k}": v for k, v in t.items()})
    print("\n" + "; ".join(f"{w} {t['wall_s']:.0f} s (load {t['load_before']} -> {t['load_after']})"
                           for w, t in timings.items()))
    if PRESENT in reports and EARLIER in reports:
        present = per_question(reports[PRESENT], "adapted", head)
        earlier = per_question(reports[EARLIER], "adapted", head)
        mean, lo, hi = paired(present, earlier, args.resamples)
        results.update({"difference": mean, "difference_lo": lo, "difference_hi": hi})
        # the bench convention's headline: the present default's recall over the earlier one's, measured in this run
        results["ratio"] = sum(present) / sum(earlier) if sum(earlier) else None
        print(f"\ndifference ({head}, {PRESENT} - {EARLIER}, paired): {ci(mean, lo, hi, signed=True)}")
    results["load_end"] = load_1min()
    write_json(args.json, results)


if __name__ == "__main__":
    main()
