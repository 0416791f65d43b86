"""ADAPT-LLM's ``<RET>`` as one added special token (the paper's wording, ``ret_token special``) against plain text
learnt by LoRA alone (the authors' code, ``ret_token text``): the same job, data recipe and held-out questions.

    python bench/adapt_ret_token.py --json runs/bench/adapt_ret_token.json
    python bench/adapt_ret_token.py --output_dir runs/bench/adapt_ret_token --arms text   # one arm (resumable)

Each arm runs ``training/adapt_llm.py CONFIG --ret_token ARM`` (default: the CPU demo's YAML) into ``OUT/ARM/data``
and ``OUT/ARM/model``; an arm whose held-out evaluation is already there is read, not rerun (``--rerun`` runs the
job again; it resumes its own checkpoints). ``--job_args`` adds switches to both jobs (a smaller run, another base).

Printed per arm, from the evaluation's ``predictions.jsonl`` (every question's three answers): NR, AR and
ADAPT-LLM accuracy, ADAPT-LLM's retrieval share overall and per question kind (the world's fictional questions
need retrieval, its common-knowledge ones do not) and the AUROC of p(``<RET>``) for "the closed-book answer is
wrong", each with a 95% percentile bootstrap interval over questions (adaptive_rag/plumbing/bootstrap.py); then
text − special over the same questions, paired. Headline ``difference``: ADAPT-LLM accuracy, text − special.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from harness import add_json_arg, add_threads_arg, format_table, load_1min, set_threads, write_json

ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = ROOT / "training" / "configs" / "adapt_llm_demo_cpu.yaml"
ARMS = ("special", "text")
POLICIES = {"nr": "never_retrieve", "ar": "always_retrieve", "adapt": "adapt_llm"}


def fail(message: str):
    """A mistake in one line, exit status 2, as the project's commands end."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def arm_argv(config: str, out: Path, arm: str, job_args: list[str]) -> list[str]:
    return [config, "--ret_token", arm, "--data_dir", str(out / arm / "data"), "--output_dir",
            str(out / arm / "model"), *job_args]


def evaluated(out: Path, arm: str) -> bool:
    model = out / arm / "model"
    return (model / "train_results.json").is_file() and (model / "eval" / "summary.json").is_file()


def run_arm(argv: list[str]) -> dict[str, float]:
    """The ADAPT-LLM job on ``argv``, in this process: its wall time and the load average around it."""
    from adaptive_rag.plumbing.cli import run_cli
    from training import adapt_llm

    load_before, start = load_1min(), time.perf_counter()
    rc = run_cli(adapt_llm.main, argv=argv)
    if rc:
        sys.exit(rc)  # the job printed its one line
    return {"wall_s": round(time.perf_counter() - start, 1), "load_before": load_before, "load_after": load_1min()}


def per_question(argv: list[str]) -> dict[str, list]:
    """Every held-out question of the arm's evaluation, in the evaluation's order: correctness under NR, AR and
    ADAPT-LLM, whether ADAPT-LLM retrieved, p(<RET>) and the question's kind, re-decided from the saved answers with
    the job's own judge (what the job's table shows)."""
    from inference.adapt_gate.gate import redecide
    from inference.adapt_gate.gate_eval import gate_record
    from inference.commands.eval_folder import read_done
    from training.adapt_llm import parse
    from training.adapt_llm_eval import eval_questions, gate_config

    _, data_cfg, train_cfg, eval_cfg = parse(argv)
    examples = eval_questions(data_cfg, eval_cfg)
    done = read_done(Path(train_cfg.output_dir) / "eval")
    missing = [ex.id for ex in examples if ex.id not in done]
    if missing:
        fail(f"{train_cfg.output_dir}/eval lacks {len(missing)} of {len(examples)} held-out questions (first: "
             f"{missing[0]}): rerun with --rerun")
    records = [gate_record(done[ex.id]) for ex in examples]
    cfg = gate_config(data_cfg, eval_cfg)
    out: dict[str, list] = {name: [r.correct for r in redecide(records, policy, cfg)]
                            for name, policy in POLICIES.items()}
    out["retrieved"] = [r.retrieved for r in redecide(records, "adapt_llm", cfg)]
    out["p_ret"] = [r.p_ret if r.p_ret is not None else 0.0 for r in records]
    out["kind"] = [str(ex.metadata.get("kind", "all")) for ex in examples]
    out["ids"] = [ex.id for ex in examples]
    return out


def arm_figures(q: dict[str, list], resamples: int) -> dict[str, float | None]:
    """Means with their intervals, flat: ``nr``, ``nr_lo``, ``nr_hi``, ..."""
    from adaptive_rag.plumbing.bootstrap import auroc_ci, bootstrap_ci

    fig: dict[str, float | None] = {"n": len(q["ids"])}

    def mean_ci(name: str, values: list) -> None:
        if not values:
            fig.update({name: None, f"{name}_lo": None, f"{name}_hi": None})
            return
        lo, hi = bootstrap_ci([float(v) for v in values], n_resamples=resamples)
        fig.update({name: sum(map(float, values)) / len(values), f"{name}_lo": lo, f"{name}_hi": hi})

    for name in POLICIES:
        mean_ci(f"{name}_acc", q[name])
    mean_ci("retrieval_share", q["retrieved"])
    for kind in sorted(set(q["kind"])):
        mean_ci(f"retrieval_share_{kind}", [r for r, k in zip(q["retrieved"], q["kind"]) if k == kind])
    got = auroc_ci(q["p_ret"], [not c for c in q["nr"]], n_resamples=resamples)
    fig.update(dict(zip(("p_ret_auroc", "p_ret_auroc_lo", "p_ret_auroc_hi"), got or (None, None, None))))
    return fig


def paired(a: dict[str, list], b: dict[str, list], resamples: int) -> dict[str, float]:
    """a − b over the same questions, paired: ADAPT-LLM, NR and AR accuracy and the retrieval share."""
    from adaptive_rag.plumbing.bootstrap import paired_diff_ci

    if a["ids"] != b["ids"]:
        fail("the two arms evaluated different questions: rerun both with the same config and --rerun")
    out = {}
    for key in ("adapt", "nr", "ar", "retrieved"):
        mean, lo, hi = paired_diff_ci([float(x) for x in a[key]], [float(x) for x in b[key]], n_resamples=resamples)
        name = "retrieval_share" if key == "retrieved" else f"{key}_acc"
        out.update({f"diff_{name}": mean, f"diff_{name}_lo": lo, f"diff_{name}_hi": hi})
    return out


def _ci(fig: dict, name: str) -> str:
    if fig.get(name) is None:
        return "-"
    lo, hi = fig.get(f"{name}_lo"), fig.get(f"{name}_hi")
    interval = "" if lo is None or lo != lo else f" [{lo:.3f}, {hi:.3f}]"
    return f"{fig[name]:.3f}{interval}"


def table(figures: dict[str, dict]) -> str:
    kinds = sorted({k.removeprefix("retrieval_share_") for f in figures.values() for k in f
                    if k.startswith("retrieval_share_") and not k.endswith(("_lo", "_hi"))})
    header = ["ret_token", "n", "NR acc", "AR acc", "ADAPT-LLM acc", "retrieval share",
              *[f"share [{k}]" for k in kinds], "AUROC p(<RET>), NR wrong"]
    rows = [[arm, int(f["n"]), _ci(f, "nr_acc"), _ci(f, "ar_acc"), _ci(f, "adapt_acc"), _ci(f, "retrieval_share"),
             *[_ci(f, f"retrieval_share_{k}") for k in kinds], _ci(f, "p_ret_auroc")] for arm, f in figures.items()]
    return format_table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(DEMO_CONFIG), help="the ADAPT-LLM job's YAML (default: the CPU demo)")
    parser.add_argument("--output_dir", "--out",
                        default="runs/bench/adapt_ret_token", help="OUT/ARM/{data,model} per arm")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--job_args", "--job-args",
                        default="", help="more switches for both jobs, one string ('--limit 64')")
    parser.add_argument("--rerun", action="store_true", help="run the job even where an evaluation is there")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    add_threads_arg(parser)
    add_json_arg(parser)
    args = parser.parse_args()
    set_threads(args.threads)
    out, job_args = Path(args.output_dir), shlex.split(args.job_args)

    timings, questions, figures = {}, {}, {}
    for arm in args.arms:
        argv = arm_argv(args.config, out, arm, job_args)
        if args.rerun or not evaluated(out, arm):
            print(f"== ret_token {arm}: training/adapt_llm.py {' '.join(argv)}", flush=True)
            timings[arm] = run_arm(argv)
        else:
            print(f"== ret_token {arm}: evaluation found in {out / arm / 'model'}, read as is (--rerun to run it)")
        questions[arm] = per_question(argv)
        figures[arm] = arm_figures(questions[arm], args.resamples)

    print("\nHeld-out questions, 95% bootstrap intervals over questions:")
    print(table(figures))
    results: dict = {"config": args.config, "job_args": args.job_args, "resamples": args.resamples,
                     "load_end": load_1min()}
    for arm, fig in figures.items():
        results.update({f"{arm}_{k}": v for k, v in fig.items()})
    for arm, t in timings.items():
        results.update({f"{arm}_{k}": v for k, v in t.items()})
        print(f"{arm}: job {t['wall_s']:.0f} s (load {t['load_before']} -> {t['load_after']})")
    if set(ARMS) <= set(questions):
        diff = paired(questions["text"], questions["special"], args.resamples)
        results.update(diff)
        results["difference"] = diff["diff_adapt_acc"]
        # the bench convention's headline: ADAPT-LLM accuracy, text over special, both measured in this run
        base = results.get("special_adapt_acc") or 0.0
        results["ratio"] = results["text_adapt_acc"] / base if base else None
        print("\ntext - special, paired over the same questions:")
        print(format_table(["", "difference [95% CI]"], [
            [name, _ci({name: diff[f"diff_{name}"], f"{name}_lo": diff[f"diff_{name}_lo"],
                        f"{name}_hi": diff[f"diff_{name}_hi"]}, name)]
            for name in ("adapt_acc", "nr_acc", "ar_acc", "retrieval_share")]))
        print(f"difference (ADAPT-LLM accuracy, text - special): {results['difference']:+.3f}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
