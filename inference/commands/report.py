"""Results people can look at: a table (Markdown and CSV), figures (PNG) and one self-contained HTML page.

    python -m inference.commands.report runs/sweeps/world --output_dir runs/reports/world
    python -m inference.commands.report runs/eval/dragin runs/eval/flare runs/adapt_llm_demo/model/eval \\
        --output_dir runs/report

Each RUN_DIR is searched recursively for: evaluation folders (``config.yaml`` with ``metrics.json`` or
``predictions.jsonl``, as ``python -m inference.commands.evaluate`` writes them, one per point of a sweep), ADAPT-LLM
evaluations of ``training/adapt_llm.py`` (an evaluation folder with ``summary.json``: its NR / AR / ADAPT-LLM rows;
before, ``summary.json`` + ``records.jsonl``) and distillation logs
(``metrics.jsonl`` of ``retrieval_adapt/distill.py``). ``--output_dir`` gets ``results.md``, ``results.csv``, a PNG per
figure that has data (``frontier.png``: quality against retrievals per question; ``iterations.png``:
Iter-RetGen per iteration; ``gate_thresholds.png``: the gate against its thresholds; ``distillation.png``: loss
and recall over steps) and ``report.html`` (the table and figures in one file; links to trace views found in the
run folders).

Run folders are read without being touched (a run may still be writing): a torn last line is left out and said on
stderr with its size, a run without ``metrics.json`` is scored from its records as its ``config.yaml`` says and
marked (unfinished), with a note (``inference.commands.eval_folder.read_run``).
"""

from __future__ import annotations

import base64
import csv
import html
import json
import logging
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaptive_rag.plumbing.bootstrap import metric_intervals
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.record_log import RecordLog
from adaptive_rag.plumbing.records import PredictionRecord
from adaptive_rag.plumbing.scoring import score_record, summarise
from inference.adapt_gate.gate import GateConfig, redecide, summarize
from inference.commands import eval_folder
from inference.commands.eval_folder import torn_note
from inference.dynamic_rag.dragin_settings import published

logger = logging.getLogger(__name__)

# (key in results.csv, header in results.md)
COLUMNS = (("run", "run"), ("method", "method"), ("knobs", "knobs"), ("n", "n"), ("em", "EM"), ("f1", "F1"),
           ("acc", "accuracy"), ("retrievals_per_question", "retrievals/q"),
           ("llm_forward_passes_per_question", "LLM passes/q"), ("generated_tokens_per_question", "tokens/q"),
           ("seconds_per_question", "s/q"))
# shown when some run has them: a gate run's share; bootstrap 95% intervals over questions
# (adaptive_rag.plumbing.bootstrap)
OPTIONAL_COLUMNS = (("paper_em", "paper EM"), ("paper_f1", "paper F1"), ("paper_retrievals", "paper retrievals/q"),
                    ("retrieval_share", "retrieval share"), ("em_ci", "EM 95% CI"), ("f1_ci", "F1 95% CI"),
                    ("acc_ci", "accuracy 95% CI"), ("retrievals_ci", "retrievals/q 95% CI"),
                    ("retrieval_share_ci", "retrieval share 95% CI"))
CI_COLUMNS = {"em_ci": "em", "f1_ci": "f1", "acc_ci": "acc", "retrievals_ci": "retrieval_calls",
              "retrieval_share_ci": "retrieved"}
FROM_METRICS = {"n": "n", "em": "em", "f1": "f1", "acc": "acc", "retrievals_per_question": "retrieval_calls",
                "llm_forward_passes_per_question": "llm_forward_passes",
                "generated_tokens_per_question": "generated_tokens", "seconds_per_question": "seconds_per_question",
                "retrieval_share": "retrieval_share"}
# Config keys never shown as knobs: where the run went, how it was scheduled, and the method (its own column).
NOT_KNOBS = frozenset({"output_dir", "show_progress", "chunk_size", "device", "method"})


@dataclass
class EvalRun:
    name: str
    folder: Path
    config: dict[str, Any]
    metrics: dict[str, Any]
    knobs: dict[str, Any] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> bootstrap 95% interval

    @property
    def method(self) -> str:
        method = self.metrics.get("method") or self.config.get("method", "?")
        inner = self.config.get("gate_inner", "single")
        return f"{method} ({inner})" if method in ("adapt-llm", "ar", "popularity") and inner != "single" else method

    # the run's predictions and their scores, each made once: a report and the claims read them per metric
    _records: list[PredictionRecord] | None = field(default=None, repr=False, compare=False)
    _scores: dict[str, dict[str, float]] | None = field(default=None, repr=False, compare=False)

    def records(self) -> list[PredictionRecord]:
        if self._records is None:
            self._records = read_predictions(self.folder)
        return self._records

    def scores(self) -> dict[str, dict[str, float]]:
        """Each question's EM, F1 and accuracy, its answer scored as the run scored it (:func:`scoring_mode`)."""
        if self._scores is None:
            mode = eval_folder.run_scoring(self.config)
            self._scores = {r.id: score_record(r, **mode) for r in self.records()}
        return self._scores


@dataclass
class GateEval:
    """An ADAPT-LLM evaluation of training/adapt_llm.py: NR / AR / ADAPT-LLM and a <RET> threshold sweep."""

    name: str
    folder: Path
    summary: dict[str, Any]

    @property
    def records_file(self) -> Path:
        """Every question's answers: predictions.jsonl, or records.jsonl in a folder written before."""
        new = self.folder / "predictions.jsonl"
        return new if new.is_file() else self.folder / "records.jsonl"


@dataclass
class DistillLog:
    name: str
    folder: Path
    rows: list[dict[str, Any]]


@dataclass
class Runs:
    evals: list[EvalRun] = field(default_factory=list)
    gates: list[GateEval] = field(default_factory=list)
    distills: list[DistillLog] = field(default_factory=list)


def read_jsonl(paths: list[Path]) -> list[dict[str, Any]]:
    """Records of JSONL files, read without touching them; a torn last line (a run killed mid-write, or still
    writing) is left out and said on stderr; a bad line elsewhere is a DataError naming it."""
    rows = []
    for path in paths:
        log = RecordLog(path, key=None)
        rows += log.read(repair=False)
        if log.torn_bytes:
            print(f"note: {torn_note(path.parent, {path.name: log.torn_bytes}, len(rows))}", file=sys.stderr)
    return rows


def read_predictions(folder: Path) -> list[PredictionRecord]:
    """The prediction records of an evaluation folder (every process's file, first record of each id); a torn
    last line is left out and said on stderr (:func:`inference.commands.eval_folder.read_predictions`)."""
    return eval_folder.read_predictions(folder)[0]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not valid JSON ({err})") from None


def scoring_mode(config: dict[str, Any]) -> dict[str, Any]:
    """The answer extraction a run's config.yaml recorded (:func:`inference.commands.eval_folder.run_scoring`
    without the normalisation)."""
    mode = eval_folder.run_scoring(config)
    mode.pop("normalisation")
    return mode


def load_eval_run(folder: Path, name: str) -> EvalRun:
    read = eval_folder.read_run(folder)
    config, records = read.config, read.records
    if read.finished:
        metrics = _read_json(folder / "metrics.json")
    else:  # an interrupted run: score what it has, as its config.yaml says
        metrics = summarise(records, **eval_folder.run_scoring(config))
        name += " (unfinished)"
    run = EvalRun(name, folder, config, metrics, _records=records)
    run.intervals = record_intervals(run)
    return run


def record_intervals(run: EvalRun) -> dict[str, tuple]:
    """Bootstrap 95% intervals of EM, F1, accuracy and retrievals per question (and, for a gate's records, the
    share that retrieved) over the run's questions, each answer scored as the run scored it
    (:meth:`EvalRun.scores`); empty without predictions."""
    scores, rows = run.scores(), []
    for rec in run.records():
        row = {**scores[rec.id], "retrieval_calls": len(rec.retrievals)}
        if rec.gate is not None:
            row["retrieved"] = float(rec.gate.retrieved)
        rows.append(row)
    return metric_intervals(rows, ("em", "f1", "acc", "retrieval_calls", "retrieved")) if rows else {}


def find_runs(paths: list[str]) -> Runs:
    """Every run below each path (recursively); a path with none is a DataError."""
    runs, seen = Runs(), set()
    for arg in paths:
        root = Path(arg)
        if not root.is_dir():
            raise ConfigError(f"{arg}: not a folder")
        for folder in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
            if folder.resolve() in seen:
                continue
            seen.add(folder.resolve())
            rel = folder.relative_to(root).as_posix()
            name = root.resolve().name + ("" if rel == "." else f"/{rel}")
            if (folder / "summary.json").is_file() and ((folder / "records.jsonl").is_file()
                                                        or (folder / "predictions.jsonl").is_file()):
                # the training job's evaluation: its rows are NR / AR / ADAPT-LLM from summary.json
                runs.gates.append(GateEval(name, folder, _read_json(folder / "summary.json")))
            elif (folder / "config.yaml").is_file() and ((folder / "metrics.json").is_file()
                                                         or any(folder.glob("predictions*.jsonl"))):
                runs.evals.append(load_eval_run(folder, name))
            if (folder / "metrics.jsonl").is_file():
                runs.distills.append(DistillLog(name, folder, read_jsonl([folder / "metrics.jsonl"])))
    if not (runs.evals or runs.gates or runs.distills):
        raise DataError(f"no runs in {', '.join(paths)}: expected evaluation folders (config.yaml with metrics.json "
                        "or predictions.jsonl), ADAPT-LLM evaluations (summary.json) or distillation logs "
                        "(metrics.jsonl)")
    set_knobs(runs.evals)
    return runs


def _shows(knob: str, config: dict[str, Any]) -> bool:
    from inference.commands.knobs import knob_applies

    if knob in ("trigger", "query"):  # resolved from the method unless the method is custom
        return config.get("method") == "custom"
    try:
        return knob_applies(knob, config)
    except (KeyError, ValueError):  # a config from an older version: show what differs
        return True


def set_knobs(runs: list[EvalRun]) -> None:
    """Each run's knobs: the settings that differ between the runs and that its method reads."""
    keys = list(dict.fromkeys(k for r in runs for k in r.config if k not in NOT_KNOBS))
    differ = [k for k in keys if len({json.dumps(r.config.get(k), default=str) for r in runs}) > 1]
    for r in runs:
        r.knobs = r.knobs or {k: r.config.get(k) for k in differ if _shows(k, r.config)}


def knob_text(knobs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items())


def table_rows(runs: Runs) -> list[dict[str, Any]]:
    rows = []
    for r in runs.evals:
        row = {"run": r.name, "method": r.method, "knobs": knob_text(r.knobs)}
        cis = {k: r.intervals[m] for k, m in CI_COLUMNS.items() if m in r.intervals}
        rows.append({**row, **{k: r.metrics.get(m) for k, m in FROM_METRICS.items()}, **cis, **paper_cells(r.config)})
    for g in runs.gates:  # NR / AR / ADAPT-LLM decided from one generation pass
        for policy, s in g.summary.get("summaries", {}).items():
            rows.append({"run": g.name, "method": policy, "knobs": "", "n": s.get("n"), "acc": s.get("accuracy"),
                         "retrieval_share": s.get("retrieval_share")})
    return rows


def paper_cells(config: dict[str, Any]) -> dict[str, float | None]:
    """DRAGIN's published numbers beside a run made as the authors ran that row (``dragin_profile: reference``)."""
    if config.get("dragin_profile") != "reference":
        return {}
    found = published(config.get("reference_config"), str(config.get("dataset", "")), str(config.get("demos", "")),
                      method=str(config.get("method")))
    return {} if found is None else dict(zip(("paper_em", "paper_f1", "paper_retrievals"), found))


def columns(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    extra = [c for c in OPTIONAL_COLUMNS if any(row.get(c[0]) is not None for row in rows)]
    return [*COLUMNS, *extra]


def _cell(key: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, tuple | list):  # a bootstrap interval
        return "[" + ", ".join(_cell(key.removesuffix("_ci"), v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.3f}" if key in ("em", "f1", "acc", "retrieval_share", "seconds_per_question", "paper_em",
                                         "paper_f1") else \
            f"{value:.2f}"
    return str(value)


def markdown(rows: list[dict[str, Any]], cols: list[tuple[str, str]]) -> str:
    lines = ["| " + " | ".join(label for _, label in cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(k, row.get(k)).replace("|", "\\|") for k, _ in cols) + " |")
    return "\n".join(lines)


def write_table(rows: list[dict[str, Any]], folder: Path, stem: str) -> str:
    """``stem.md`` and ``stem.csv`` in ``folder``; returns the Markdown."""
    cols = columns(rows)
    folder.mkdir(parents=True, exist_ok=True)
    table = markdown(rows, cols)
    (folder / f"{stem}.md").write_text(table + "\n", encoding="utf-8")
    with (folder / f"{stem}.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[k for k, _ in cols], extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: ("" if row.get(k) is None else row.get(k)) for k, _ in cols} for row in rows)
    return table


def write_summary(folder: Path, results: list) -> str:
    """A sweep's ``summary.md`` / ``summary.csv``: one row per point (``results`` from inference.commands.sweep)."""
    runs = Runs(evals=[EvalRun(p.name, Path(p.values["output_dir"]), p.values, m,
                               {k: v for k, v in p.knobs.items() if k != "method"})  # method: its own column
                       for p, m in results if m])
    return write_table(table_rows(runs), folder, "summary")


def gate_series(runs: Runs) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """(<RET> threshold series, popularity threshold series) from gate evaluations and gate runs of a sweep."""
    ret, pop = defaultdict(list), defaultdict(list)
    for g in runs.gates:
        ret[g.name] = [{"threshold": r["threshold"], "accuracy": r["accuracy"],
                        "retrieval_share": r["retrieval_share"]} for r in g.summary.get("sweep", [])]
        pop[g.name] = popularity_curve(g.records_file)
    for r in runs.evals:
        c, m = r.config, r.metrics
        if m.get("retrieval_share") is None:
            continue
        group = f"{c.get('model')} / {c.get('dataset')}"
        point = {"accuracy": m.get("acc", 0.0), "retrieval_share": m["retrieval_share"]}
        if c.get("method") == "adapt-llm" and c.get("gate_rule") == "threshold":
            ret[group].append({"threshold": c.get("ret_threshold"), **point})
        elif c.get("method") == "popularity":
            pop[group].append({"threshold": c.get("popularity_threshold"), **point})
    return dict(ret), {k: v for k, v in pop.items() if v}


def popularity_curve(path: Path, points: int = 40) -> list[dict]:
    """The popularity policy re-decided at up to ``points`` thresholds from a gate evaluation's records (every
    question's closed-book and context answers are there: ``predictions.jsonl``, or an older ``records.jsonl``);
    empty when the records carry no popularity."""
    from dataclasses import replace

    from inference.commands.popularity_threshold import read_records

    rows = read_jsonl([path])
    if not rows or any(r.get("popularity") is None for r in rows):  # not PopQA: no curve to draw
        return []
    try:
        records = read_records(path)
    except DataError as err:  # one figure less, not the whole report
        logger.warning("no popularity curve: %s", err)
        return []
    pops = sorted({float(r.popularity) for r in records})
    step = max(1, len(pops) // points)
    curve = []
    for t in [*pops[::step], pops[-1] * 1.01]:
        try:
            s = summarize(redecide(records, "popularity", replace(GateConfig(), popularity_threshold=t)))
        except ValueError:  # records without the answers a policy needs
            return []
        curve.append({"threshold": t, "accuracy": s["accuracy"], "retrieval_share": s["retrieval_share"]})
    return curve


def draw_figures(runs: Runs, out: Path) -> list[tuple[str, Path]]:
    from inference.commands import report_figures as figs

    ret, pop = gate_series(runs)
    drawn = []
    for title, stem, draw in (
            ("Quality against retrievals per question", "frontier", lambda p: figs.frontier(runs.evals, p)),
            ("Iter-RetGen per iteration", "iterations", lambda p: figs.iterations(runs.evals, p)),
            ("The gate against its thresholds", "gate_thresholds", lambda p: figs.gate_thresholds(ret, pop, p)),
            ("Retriever distillation", "distillation", lambda p: figs.distillation(runs.distills, p))):
        path = out / f"{stem}.png"
        if draw(path):
            drawn.append((title, path))
    return drawn


def trace_links(runs: Runs, out: Path) -> dict[str, list[str]]:
    """Trace views (``*.html`` in a run folder, e.g. ``python -m inference.commands.trace --out RUN/trace.html``)."""
    return {r.name: [os.path.relpath(p, out) for p in sorted(r.folder.glob("*.html"))
                     if p.name != "report.html"] for r in runs.evals}


def html_page(rows: list[dict[str, Any]], figures: list[tuple[str, Path]], traces: dict[str, list[str]]) -> str:
    cols = columns(rows)
    with_traces = any(traces.values())
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in cols) + ("<th>trace</th>" if with_traces else "")
    body = []
    for row in rows:
        cells = "".join(f"<td>{html.escape(_cell(k, row.get(k)))}</td>" for k, _ in cols)
        if with_traces:
            links = traces.get(row["run"], [])
            cells += "<td>" + " ".join(f'<a href="{html.escape(link)}">{html.escape(Path(link).name)}</a>'
                                       for link in links) + "</td>"
        body.append(f"<tr>{cells}</tr>")
    parts = ["<!doctype html><meta charset=utf-8><title>adaptive-rag report</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
             "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}td:nth-child(-n+3){text-align:left}"
             "img{max-width:100%}</style>",
             "<h1>Results</h1>", f"<table><tr>{head}</tr>{''.join(body)}</table>"]
    for title, path in figures:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f'<h2>{html.escape(title)}</h2><img alt="{html.escape(title)}" src="data:image/png;base64,'
                     f'{data}">')
    return "\n".join(parts) + "\n"


def make_report(paths: list[str], out_dir: str | Path) -> dict[str, Any]:
    """Write the table, the figures and report.html into ``out_dir``; returns what was written."""
    runs = find_runs(paths)
    out = Path(out_dir)
    rows = table_rows(runs)
    table = write_table(rows, out, "results")
    figures = draw_figures(runs, out)
    (out / "report.html").write_text(html_page(rows, figures, trace_links(runs, out)), encoding="utf-8")
    return {"table": table, "figures": [p for _, p in figures], "html": out / "report.html", "rows": rows}


@dataclass
class ReportConfig:
    runs: list[str] = field(default_factory=list, metadata={
        "help": "run folders (also given first, without --runs): evaluation or sweep folders, ADAPT-LLM "
                "evaluations, distillation outputs"})
    output_dir: str = field(default="runs/report", metadata={"help": "where the table, figures and report.html go",
                                                             "aliases": ["--out"]})


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    first_flag = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    if first_flag:  # RUN_DIR... before the flags
        argv = ["--runs", *argv[:first_flag], *argv[first_flag:]]
    (cfg,) = parse_config((ReportConfig,), argv, prog="python -m inference.commands.report")
    if not cfg.runs:
        raise ConfigError("give at least one run folder: "
                          "python -m inference.commands.report RUN_DIR... --output_dir DIR")
    result = make_report(cfg.runs, cfg.output_dir)
    print(result["table"])
    print(f"\n{len(result['figures'])} figure(s), report: {result['html']}")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return run_cli(main)


if __name__ == "__main__":
    sys.exit(cli())
