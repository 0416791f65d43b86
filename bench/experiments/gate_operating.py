"""Where a gate loses: its decision split, its operating curve, and a threshold chosen on another half.

    python bench/experiments/gate_operating.py \\
        --gate rl=G/sft_rl_v4/eval,G/cause/eval/rl/memory,G/cause/eval/rl/ar \\
        --gate supervised=G/supervised_ban,G/cause/eval/supervised/memory,G/ar_ban \\
        --tune rl=G/cause/tune/rl/gate,G/cause/tune/rl/memory,G/cause/tune/rl/ar \\
        --tune supervised=G/cause/tune/supervised/gate,G/cause/tune/supervised/memory,G/cause/tune/supervised/ar \\
        --ar K/claims/adapt/ar --nr K/claims/adapt/nr --out G/cause/operating.md --plot G/cause/operating.png

Each ``--gate NAME=GATE,MEMORY,AR`` names three evaluation folders of the evaluate command on the same questions: the
gate (``--method adapt-llm``, which records the first-step ``<RET>`` probability) and the same model's own two answers:
from memory (``--method adapt-llm --gate_rule threshold --ret_threshold 1.0``, which never retrieves: the parametric
prompt's answer, or the NR prompt's where that is ``<RET>``) and after a retrieval (``--method ar``). Any threshold
on the probability can then be re-decided without another run. Tables:

* the decision split: on the questions the gate retrieves for and on those it answers from memory, their count, the
  gate's accuracy, the reference AR's and NR's (``--ar``, ``--nr``) on the same questions, the share of unknown facts;
* the operating curve: accuracy against retrieval share as the threshold varies (retrieve when p > threshold);
* with ``--tune NAME=...`` (the same three folders on another half): the threshold with the best accuracy there
  among those with a share at most ``--max_share`` (ties: the higher threshold), applied here, with paired bootstrap
  intervals against the reference AR and against each gate's own decisions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpo_arms import labels_of, per_question

from adaptive_rag.plumbing.bootstrap import bootstrap_ci, paired_diff_ci

Gate = dict[str, dict[str, float]]  # question id -> score, retrieved, acc (the gate's), memory, ar (its own answers)


def gate_answers(gate: dict[str, dict[str, float]], memory: dict[str, dict[str, float]],
                 ar: dict[str, dict[str, float]]) -> Gate:
    """A gate's decisions beside its own answers from memory and after a retrieval, where all three answered."""
    ids = sorted(set(gate) & set(memory) & set(ar))
    return {i: {**gate[i], "memory": memory[i]["acc"], "ar": ar[i]["acc"]} for i in ids}


def mismatches(gate: Gate) -> int:
    """Questions whose recorded accuracy is not that of the gate's own answer for its decision (should be 0)."""
    return sum(row["acc"] != (row["ar"] if row["retrieved"] else row["memory"]) for row in gate.values())


def decide(gate: Gate, threshold: float) -> dict[str, tuple[bool, float]]:
    """Each question's (retrieved, accuracy) when the gate retrieves at p(<RET>) > threshold."""
    return {i: (row["score"] > threshold, row["ar"] if row["score"] > threshold else row["memory"])
            for i, row in gate.items()}


def curve(gate: Gate) -> list[tuple[float, float, float]]:
    """(threshold, retrieval share, accuracy) for every distinct decision, from retrieving always to never."""
    points = []
    for threshold in [-1.0, *sorted({row["score"] for row in gate.values()})]:
        decided = decide(gate, threshold).values()
        points.append((threshold, sum(r for r, _ in decided) / len(gate), sum(a for _, a in decided) / len(gate)))
    return points


def best_point(points: list[tuple[float, float, float]], max_share: float) -> tuple[float, float, float]:
    """The point of the best accuracy among shares <= max_share; ties go to the higher threshold."""
    return max((p for p in points if p[1] <= max_share + 1e-12), key=lambda p: (p[2], p[0]))


def choose_threshold(points: list[tuple[float, float, float]], max_share: float) -> float:
    return best_point(points, max_share)[0]


def split_rows(name: str, gate: Gate, ar: dict, nr: dict, labels: dict[str, str]) -> list[str]:
    rows = []
    for kind, want in (("retrieved", 1.0), ("from memory", 0.0)):
        ids = [i for i, row in gate.items() if row["retrieved"] == want and i in ar and i in nr]
        if not ids:
            rows.append(f"| {name} | {kind} | 0 | - | - | - | - |")
            continue
        unknown = [labels[i] == "unknown" for i in ids if i in labels]
        rows.append(f"| {name} | {kind} | {len(ids)} | {_mean([gate[i]['acc'] for i in ids]):.3f} | "
                    f"{_mean([ar[i]['acc'] for i in ids]):.3f} | {_mean([nr[i]['acc'] for i in ids]):.3f} | "
                    + (f"{_mean(unknown):.3f} |" if unknown else "- |"))
    return rows


def _mean(values) -> float:
    return sum(values) / len(values)


def _ci(values: list[float]) -> str:
    return f"{sum(values) / len(values):.3f} [{', '.join(f'{x:.3f}' for x in bootstrap_ci(values))}]"


def _diff(a: list[float], b: list[float]) -> str:
    mean, lo, hi = paired_diff_ci(a, b)
    return f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def curve_rows(name: str, points: list[tuple[float, float, float]], shares=(0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)):
    """The curve read at the points nearest each share (the full curve is in the plot)."""
    rows = []
    for target in shares:
        t, share, acc = min(points, key=lambda p: (abs(p[1] - target), -p[2]))
        rows.append(f"| {name} | {target:.1f} | {share:.3f} | {acc:.3f} | {t:.4f} |")
    return rows


def report(gates: dict[str, Gate], tunes: dict[str, Gate], ar: dict, nr: dict, labels: dict[str, str],
           max_share: float) -> tuple[list[str], dict[str, list[tuple[float, float, float]]]]:
    lines = ["## Decision split", "",
             "| gate | decision | questions | gate's accuracy | AR's there | NR's there | unknown share |",
             "|---|---|---|---|---|---|---|"]
    for name, gate in gates.items():
        lines += split_rows(name, gate, ar, nr, labels)
    lines += ["", "Recorded answers scored unlike the gate's own answer for its decision: "
              + ", ".join(f"{name} {mismatches(gate)} of {len(gate)}" for name, gate in gates.items()), ""]
    curves = {name: curve(gate) for name, gate in gates.items()}
    lines += ["## Operating curve (nearest point to each share)", "",
              "| gate | share wanted | share | accuracy | threshold |", "|---|---|---|---|---|"]
    for name, points in curves.items():
        lines += curve_rows(name, points)
    for name, points in curves.items():
        best = best_point(points, max_share)
        lines.append(f"\n{name}: the curve's best accuracy at a share <= {max_share:g} is {best[2]:.3f} (share "
                     f"{best[1]:.3f}); read on this half, an upper bound, not a result.")
    if tunes:
        ids = sorted(set(ar).intersection(*(set(g) for g in gates.values())))
        ar_acc = [ar[i]["acc"] for i in ids]
        lines += ["", f"## Threshold chosen on the tuning half (share <= {max_share:g} there)", "",
                  f"{len(ids)} questions", "",
                  "| gate | threshold | tuning share | tuning accuracy | share | accuracy | − AR, paired | "
                  "− its greedy decision, paired |", "|---|---|---|---|---|---|---|---|"]
        for name, tune in tunes.items():
            if name not in gates:
                raise ValueError(f"--tune {name}: no --gate {name} to apply it to")
            t, t_share, t_acc = best_point(curve(tune), max_share)
            decided = decide(gates[name], t)
            acc = [decided[i][1] for i in ids]
            share = [float(decided[i][0]) for i in ids]
            greedy = [gates[name][i]["acc"] for i in ids]
            lines.append(f"| {name} | {t:.4f} | {t_share:.3f} | {t_acc:.3f} | {_ci(share)} | {_ci(acc)} | "
                         f"{_diff(acc, ar_acc)} | {_diff(acc, greedy)} |")
    return lines, curves


def plot(curves: dict[str, list[tuple[float, float, float]]], refs: dict[str, tuple[float, float]], path: Path,
         greedy: dict[str, tuple[float, float]] | None = None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name, points in curves.items():
        (line,) = ax.plot([p[1] for p in points], [p[2] for p in points], marker=".", markersize=3, label=name)
        if greedy and name in greedy:  # where the gate's own greedy decisions put it
            ax.scatter(*greedy[name], s=60, facecolors="none", edgecolors=line.get_color(), zorder=4)
    for name, (share, acc) in refs.items():
        ax.scatter([share], [acc], marker="s", zorder=3)
        ax.annotate(name, (share, acc), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("retrieval share")
    ax.set_ylabel("accuracy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _three(spec: str, flag: str) -> tuple[str, list[Path]]:
    name, _, rest = spec.partition("=")
    folders = [Path(p) for p in rest.split(",")] if rest else []
    if len(folders) != 3 or not all((f / "config.yaml").is_file() for f in folders):
        raise ValueError(f"{flag} {spec}: expected NAME=GATE,MEMORY,AR, three evaluation folders with config.yaml")
    return name, folders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gate", action="append", required=True, help="NAME=GATE,MEMORY,AR folders (repeat)")
    parser.add_argument("--tune", action="append", default=[], help="NAME=GATE,MEMORY,AR on the half that chooses")
    parser.add_argument("--ar", required=True, help="the reference AR's evaluation folder")
    parser.add_argument("--nr", required=True, help="the reference NR's evaluation folder")
    parser.add_argument("--max_share", type=float, default=0.7)
    parser.add_argument("--out", help="also write the tables here (Markdown)")
    parser.add_argument("--plot", help="draw the operating curves here (PNG)")
    args = parser.parse_args(argv)
    try:
        specs = {flag: [_three(spec, flag) for spec in specs] for flag, specs in (("--gate", args.gate),
                                                                                 ("--tune", args.tune))}
        for flag, folder in (("--ar", args.ar), ("--nr", args.nr)):
            if not (Path(folder) / "config.yaml").is_file():
                raise ValueError(f"{flag} {folder}: not an evaluation folder (no config.yaml)")
        gates, tunes = ({name: gate_answers(*(per_question(f) for f in folders)) for name, folders in specs[flag]}
                        for flag in ("--gate", "--tune"))
        ar, nr = per_question(Path(args.ar)), per_question(Path(args.nr))
        lines, curves = report(gates, tunes, ar, nr, labels_of(Path(args.ar)), args.max_share)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    if args.plot:
        refs = {"AR": (1.0, _mean([r["acc"] for r in ar.values()])),
                "NR": (0.0, _mean([r["acc"] for r in nr.values()]))}
        greedy = {name: (_mean([r["retrieved"] for r in gate.values()]), _mean([r["acc"] for r in gate.values()]))
                  for name, gate in gates.items()}
        plot(curves, refs, Path(args.plot), greedy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
