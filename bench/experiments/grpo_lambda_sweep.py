"""The λ sweep: one GRPO gate per retrieval penalty, each evaluated, drawn as accuracy against retrieval share.

    python bench/experiments/grpo_lambda_sweep.py training/configs/grpo_demo_cpu.yaml --lambdas 0 0.05 0.1 0.2 \\
        --output_dir runs/grpo/lambda --eval_dataset world-adapt-heldout
    python bench/experiments/grpo_lambda_sweep.py bench/experiments/grpo_knowing_gate.yaml --lambdas 0 0.05 0.2 \\
        --output_dir runs/knowing/seed0/claims/grpo/lambda --eval_dataset knowing-adapt \\
        --train_args "--base_model runs/knowing/seed0/model --index runs/knowing/seed0/bm25" \\
        --eval_args "--index runs/knowing/seed0/bm25 --gate_max_passage_words 40"

Per λ: ``training/grpo.py RECIPE --retrieval_penalty λ --output_dir OUT/lambda_<λ>``, then the evaluate command's
gate method on ``--eval_dataset`` into ``OUT/lambda_<λ>/eval``. Both resume, so an interrupted sweep reruns with the
same line. Writes ``OUT/sweep.json`` (λ, accuracy, retrieval share per run) and ``OUT/accuracy_vs_retrieval.png``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path


def run_dir(out: Path, lam: float) -> Path:
    return out / f"lambda_{lam:g}"


def commands(recipe: str, lambdas: list[float], out: Path, eval_dataset: str, train_args: str = "",
             eval_args: str = "") -> list[list[str]]:
    """The training and evaluation command of every λ, in order."""
    cmds = []
    for lam in lambdas:
        folder = run_dir(out, lam)
        cmds.append([sys.executable, "training/grpo.py", recipe, "--retrieval_penalty", f"{lam:g}",
                     "--output_dir", str(folder), *shlex.split(train_args)])
        cmds.append([sys.executable, "-m", "inference.commands.evaluate", "--method", "adapt-llm", "--model",
                     str(folder), "--dataset", eval_dataset, "--output_dir", str(folder / "eval"),
                     "--show_progress", "false", *shlex.split(eval_args)])
    return cmds


def collect(out: Path, lambdas: list[float]) -> list[dict[str, float]]:
    """λ, accuracy and retrieval share of each finished evaluation (``metrics.json``)."""
    rows = []
    for lam in lambdas:
        path = run_dir(out, lam) / "eval" / "metrics.json"
        if path.is_file():
            m = json.loads(path.read_text())
            rows.append({"lambda": lam, "acc": m["acc"], "retrieval_share": m["retrieval_share"]})
    return rows


def plot(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot([r["retrieval_share"] for r in rows], [r["acc"] for r in rows], "o-")
    for r in rows:
        ax.annotate(f"λ={r['lambda']:g}", (r["retrieval_share"], r["acc"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    ax.set_xlabel("retrieval share")
    ax.set_ylabel("accuracy (any gold answer contained)")
    ax.set_xlim(-0.05, 1.05)
    ax.set_title("GRPO gate: accuracy against retrieval share")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recipe", help="a training/grpo.py YAML (task: gate)")
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--eval_dataset", default="world-adapt-heldout")
    parser.add_argument("--train_args", default="", help="more training/grpo.py flags, one quoted string")
    parser.add_argument("--eval_args", default="", help="more evaluate flags, one quoted string")
    args = parser.parse_args(argv)
    if any(lam < 0 for lam in args.lambdas):
        print("error: --lambdas must be >= 0", file=sys.stderr)
        return 2
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    for cmd in commands(args.recipe, args.lambdas, out, args.eval_dataset, args.train_args, args.eval_args):
        print("+ " + shlex.join(cmd), flush=True)
        if subprocess.run(cmd).returncode:
            print(f"error: step failed: {shlex.join(cmd)} (rerun this sweep to resume)", file=sys.stderr)
            return 1
    rows = collect(out, args.lambdas)
    (out / "sweep.json").write_text(json.dumps(rows, indent=2) + "\n")
    plot(rows, out / "accuracy_vs_retrieval.png")
    for r in rows:
        print(f"λ {r['lambda']:<6g} accuracy {r['acc']:.3f}  retrieval share {r['retrieval_share']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
