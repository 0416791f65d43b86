"""The report of ``python -m inference.commands.reproduce``: a paper's table with our numbers beside the paper's.

    python -m inference.commands.reproduce dragin-table2 --output_dir runs/reproduce --datasets hotpotqa --report_only

Takes the reproduce command's options (the last step of every table is that command with ``--report_only``),
reads the table's run folders without touching them (a torn last line is left out and said; an unfinished run is
scored from its records and marked), and writes ``<output_dir>/<table>/<model>/report.md``, which it also prints.
Each cell reads **ours [95% interval] | paper | difference**: the interval is a bootstrap over the questions
(:mod:`adaptive_rag.plumbing.bootstrap`); the paper's number is one this project checked in the paper, "—" where
it has none (never guessed); the difference is ours minus the paper's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from adaptive_rag.plumbing.bootstrap import bootstrap_ci
from inference.commands.reproduce_plan import Options, Step, option_args
from inference.commands.reproduce_tables import (
    ADAPT_MODES,
    ITER_RECIPE,
    TABLES,
    Table,
    adapt_recipe,
    dragin_family,
    dragin_recipe,
)
from inference.dynamic_rag.dragin_settings import published

# ADAPT-LLM's PopQA table: the text in shared/papers is a summary of the paper that gives no cell of its PopQA table
# (it names 83.99% retrieval use without the training set, and "about 14 points" between NR-LLM and the others), so no
# cell is entered: each shows "—". (mode -> (accuracy, share retrieved))
ADAPT_LLM_PAPER: dict[str, tuple[float | None, float | None]] = {}
# Iter-RetGen's HotpotQA rows: the text in shared/papers is a section-by-section summary without its tables' cells
# (docs/papers.md quotes Acc† T=1 65.5, T=2 71.2, a text-davinci-003 judge's accuracy, which that text does not
# show), so no cell is entered. (iteration -> (EM, F1, accuracy))
ITER_RETGEN_PAPER: dict[int, tuple[float | None, float | None, float | None]] = {}
DASH = "—"
# settings that change how a run is shown or scheduled, never its numbers: not differences from the paper
NOT_RESULTS = frozenset({"show_progress", "chunk_size", "device", "report_to", "run_name", "logging_steps",
                         "save_steps", "save_total_limit"})


def fmt(value: float | None, digits: int = 3) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def cell(ours: float | None, interval: tuple[float, float] | None, paper: float | None, digits: int = 3) -> list[str]:
    """``ours [low, high]``, the paper's value and ours minus it: three Markdown cells."""
    shown = fmt(ours, digits) + (f" [{fmt(interval[0], digits)}, {fmt(interval[1], digits)}]" if interval else "")
    diff = DASH if ours is None or paper is None else f"{ours - paper:+.{digits}f}"
    return [shown, fmt(paper, digits), diff]


def header(metrics: Sequence[str], first: Sequence[str]) -> list[str]:
    cols = [*first, "n", *(f"{m} {part}" for m in metrics for part in ("ours [95%]", "paper", "diff"))]
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]


def _interval(values: list[float]) -> tuple[float, float] | None:
    return bootstrap_ci(values) if values else None


def _eval_run(step: Step):
    """The run of a step as the report command reads it, or None where the folder holds no run yet."""
    from inference.commands.report import load_eval_run

    folder = Path(step.folder)
    if not (folder / "config.yaml").is_file():
        return None
    return load_eval_run(folder, step.name)


# --- the three tables' rows ---------------------------------------------------------------------------------------

def dragin_rows(steps: list[Step]) -> list[str]:
    lines = header(("EM", "F1", "retrievals/q"), ("dataset", "method"))
    for step in steps:
        dataset, method = step.name.split("/")
        run = _eval_run(step)
        if run is None:
            lines.append(f"| {dataset} | {method} | 0 | " + " | ".join([DASH] * 9) + " |")
            continue
        c, m, ci = run.config, run.metrics, run.intervals
        paper = published(c.get("reference_config"), str(c.get("dataset", "")), str(c.get("demos", "")),
                          method=method) or (None, None, None)
        cells = [*cell(m.get("em"), ci.get("em"), paper[0]), *cell(m.get("f1"), ci.get("f1"), paper[1]),
                 *cell(m.get("retrieval_calls"), ci.get("retrieval_calls"), paper[2], digits=2)]
        shown = run.method + ("" if (Path(step.folder) / "metrics.json").is_file() else " (unfinished)")
        lines.append(f"| {dataset} | {shown} | {m.get('n', 0)} | " + " | ".join(cells) + " |")
    return lines


def iter_retgen_rows(steps: list[Step]) -> list[str]:
    lines = header(("EM", "F1", "accuracy"), ("iterations T",))
    run = _eval_run(steps[0])
    records = run.records() if run is not None else []
    depth = max((len(r.iterations or []) for r in records), default=0)
    for t in range(depth):
        reached = [r.iterations[t].metrics for r in records if len(r.iterations or []) > t]
        paper = ITER_RETGEN_PAPER.get(t + 1, (None, None, None))
        cells = []
        for i, key in enumerate(("em", "f1", "acc")):
            values = [float(s[key]) for s in reached if s.get(key) is not None]
            cells += cell(sum(values) / len(values) if values else None, _interval(values), paper[i])
        lines.append(f"| T={t + 1} | {len(reached)} | " + " | ".join(cells) + " |")
    if not depth:
        lines.append("| (not run yet) | 0 | " + " | ".join([DASH] * 9) + " |")
    return lines


def _gate_records(folder: Path, policy: str) -> list[bool] | None:
    """Each question's correctness under ``policy``, decided again from the evaluation's records as the job decided
    it (its judge and gate rule, from the model folder's config.yaml); None where they cannot be read."""
    from inference.adapt_gate.gate import GateConfig, redecide
    from inference.adapt_gate.gate_eval import gate_record
    from inference.commands.eval_folder import read_predictions

    try:
        config = yaml.safe_load((folder.parent / "config.yaml").read_text(encoding="utf-8")) or {}
        cfg = GateConfig(gate_rule=config.get("gate_rule", "token"),
                         ret_threshold=float(config.get("ret_threshold", 0.5)), judge=config.get("judge", "contains"),
                         judge_normalize=bool(config.get("judge_normalize", True)))
        records = [gate_record(r) for r in read_predictions(folder)[0]]
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return [r.correct for r in redecide(records, policy, cfg)]


def adapt_rows(steps: list[Step]) -> list[str]:
    import json

    lines = header(("accuracy", "share retrieved"), ("row", "model trained as"))
    policies = {"nr": "never_retrieve", "ar": "always_retrieve", "adapt": "adapt_llm"}
    for (mode, label), step in zip(ADAPT_MODES, steps):
        folder = Path(step.folder)
        try:
            summaries = list(json.loads((folder / "summary.json").read_text(encoding="utf-8"))["summaries"].values())
        except (OSError, ValueError, KeyError):
            lines.append(f"| {label} | {mode} | 0 | " + " | ".join([DASH] * 6) + " |")
            continue
        row = summaries[[*policies].index(mode)]  # the job's rows: NR, AR, ADAPT-LLM, in that order
        correct = _gate_records(folder, policies[mode])
        # the interval only when the records give the job's own accuracy back (the same judge and decisions)
        agrees = correct is not None and len(correct) == row["n"] and \
            abs(sum(correct) / max(1, len(correct)) - row["accuracy"]) < 1e-9
        paper = ADAPT_LLM_PAPER.get(mode, (None, None))
        cells = [*cell(row["accuracy"], _interval([float(c) for c in correct]) if agrees else None, paper[0]),
                 *cell(row["retrieval_share"], None, paper[1])]
        lines.append(f"| {label} | {mode} | {row['n']} | " + " | ".join(cells) + " |")
    return lines


ROWS = {"dragin-table2": dragin_rows, "iter-retgen-hotpotqa": iter_retgen_rows, "adapt-llm-popqa": adapt_rows}


# --- what differs from the paper, and the runs ------------------------------------------------------------------

def default_model(table: Table, opts: Options) -> str:
    if table.name == "dragin-table2":
        return dragin_recipe(dragin_family(opts.model), (opts.datasets or ["hotpotqa"])[0])[1]["model"]
    if table.name == "adapt-llm-popqa":
        return adapt_recipe()["base_model"]
    return yaml.safe_load(ITER_RECIPE.read_text(encoding="utf-8"))["model"]


def differences(table: Table, opts: Options) -> list[str]:
    """Every setting of these runs that is not the paper's, then what differs whatever the options."""
    out = []
    if opts.model and opts.model != default_model(table, opts):
        out.append(f"model: {opts.model} (paper: {table.paper_model})")
    elif table.name == "iter-retgen-hotpotqa":
        out.append(f"model: {default_model(table, opts)} (paper: {table.paper_model})")
    if opts.limit is not None and (table.paper_limit is None or opts.limit < table.paper_limit):
        out.append(f"questions: the first {opts.limit} of each evaluation (paper: {table.paper_questions})")
    if opts.train_limit is not None:
        out.append(f"training questions: the first {opts.train_limit} of SQuAD train (paper: all)")
    if opts.index_kind and opts.index_kind != table.paper_index:
        out.append(f"index kind: {opts.index_kind} (paper: {table.paper_index})")
    if opts.datasets:
        out.append(f"datasets: only {', '.join(opts.datasets)}")
    if opts.methods:
        out.append(f"methods: only {', '.join(opts.methods)}")
    out += [f"{key}: {value} (set with --set)" for key, value in opts.sets.items() if key not in NOT_RESULTS]
    if table.name == "adapt-llm-popqa" and not opts.cuda:
        out.append("precision: full (auto) without an 8-bit base: no CUDA here (the authors: 8-bit base, fp16)")
    return [*out, *table.notes]


def run_links(steps: list[Step], where: Path) -> list[str]:
    lines = []
    for step in steps:
        folder = Path(step.folder)
        state = "finished" if (folder / "metrics.json").is_file() or (folder / "summary.json").is_file() else \
            "unfinished" if folder.is_dir() else "not run"
        lines.append(f"- {step.name}: [{os.path.relpath(folder, where)}]({os.path.relpath(folder, where)}) "
                     f"({state})")
    return lines


def build_report(opts: Options) -> str:
    table = TABLES[opts.table]
    steps = table.steps(opts)
    runs = [s for s in steps if s.kind == "run"]
    where = opts.runs_dir(default_model(table, opts))
    command = " ".join(["python -m inference.commands.reproduce", *option_args(opts)])
    parts = [f"# {table.title}", "", f"Made {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `{command}`.",
             "", "Each cell: ours [95% bootstrap interval over the questions] | the paper's | ours minus the paper's "
             "(\"—\": no published number this project has checked).", "",
             *ROWS[table.name](runs), "", "## Settings that differ from the paper's", "",
             *(f"- {line}" for line in differences(table, opts)), "", "## Runs", "", *run_links(runs, where)]
    return "\n".join(parts) + "\n"


def write_report(opts: Options) -> Path:
    """``report.md`` beside the table's runs, also printed; returns its path."""
    text = build_report(opts)
    path = opts.runs_dir(default_model(TABLES[opts.table], opts)) / "report.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(text + f"\nreport: {path}")
    return path
