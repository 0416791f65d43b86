"""The report command renders recorded runs (fixture files written here; no model): table rows, CSV columns,
valid PNGs, one self-contained HTML page; figures without data are skipped; bad input is one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import save_config
from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.records import PredictionRecord
from adaptive_rag.plumbing.scoring import summarise
from inference.adapt_gate.gate_eval import GateMethodConfig
from inference.commands import report
from inference.commands.evaluate import EvalConfig
from inference.commands.report_figures import iteration_curve, pareto
from inference.dynamic_rag.engine import EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptConfig

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def record(i: int, right: bool, retrievals: int, **extra) -> dict:
    return {"id": f"q{i}", "question": f"Q{i}?", "answers": ["Paris"],
            "output": "So the answer is Paris." if right else "So the answer is Rome.",
            "retrievals": [{"round": r + 1, "query": "q", "doc_ids": ["d"]} for r in range(retrievals)],
            "llm_forward_passes": 10 + retrievals, "generated_tokens": 8, "seconds": 0.25, **extra}


def write_run(folder: Path, records: list[dict], metrics: bool = True, **knobs) -> Path:
    """An evaluation folder as inference.commands.evaluate leaves it."""
    eval_keys = {"dataset", "limit", "model"}
    cfg = EvalConfig(output_dir=str(folder), **{k: v for k, v in knobs.items() if k in eval_keys})
    gate_keys = {"gate_rule", "ret_threshold", "gate_inner", "popularity_threshold"}
    method = MethodConfig(**{k: v for k, v in knobs.items() if k not in eval_keys | gate_keys})
    gate = GateMethodConfig(**{k: v for k, v in knobs.items() if k in gate_keys})
    save_config(folder / "config.yaml", cfg, method, PromptConfig(), EngineConfig(), gate)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if metrics:
        m = summarise([PredictionRecord.from_dict(r) for r in records])
        m.update({"method": method.method, "model": cfg.model, "dataset": cfg.dataset})
        (folder / "metrics.json").write_text(json.dumps(m))
    return folder


@pytest.fixture()
def runs(tmp_path) -> Path:
    """A sweep (wo-rag; DRAGIN at two θ), an Iter-RetGen run, two gate runs at two <RET> thresholds, an ADAPT-LLM
    evaluation of training/adapt_llm.py and a distillation log."""
    root = tmp_path / "runs"
    sw = root / "sweep"
    write_run(sw / "method=wo-rag", [record(0, False, 0), record(1, False, 0)], method="wo-rag")
    write_run(sw / "method=dragin,theta=0.3", [record(0, True, 3), record(1, True, 2)], method="dragin", theta=0.3)
    dragin = write_run(sw / "method=dragin,theta=0.8", [record(0, True, 1), record(1, False, 0)], method="dragin",
                       theta=0.8)
    (dragin / "trace.html").write_text("<html>trace</html>")
    its = [[{"answer": "Rome", "em": 0.0, "f1": 0.0, "acc": 0.0, "answer_recall": 0.5},
            {"answer": "Paris", "em": 1.0, "f1": 1.0, "acc": 1.0, "answer_recall": 1.0}],
           [{"answer": "Paris", "em": 1.0, "f1": 1.0, "acc": 1.0, "answer_recall": 1.0},
            {"answer": "Paris", "em": 1.0, "f1": 1.0, "acc": 1.0, "answer_recall": 1.0}]]
    write_run(root / "iter", [record(0, True, 2, iterations=its[0]), record(1, True, 2, iterations=its[1])],
              method="iter-retgen")
    for t, retrieved in ((0.2, [True, True]), (0.6, [True, False])):
        recs = [record(i, i == 0, int(r), retrieved=r) for i, r in enumerate(retrieved)]
        write_run(root / f"gate-{t}", recs, method="adapt-llm", gate_rule="threshold", ret_threshold=t)
    adapt = root / "adapt_llm" / "eval"
    adapt.mkdir(parents=True)
    summary = {"summaries": {"NR (never retrieve)": {"n": 4, "accuracy": 0.25, "retrieval_share": 0.0},
                             "AR (always retrieve)": {"n": 4, "accuracy": 0.75, "retrieval_share": 1.0}},
               "sweep": [{"threshold": t, "accuracy": a, "retrieval_share": s}
                         for t, a, s in ((0.1, 0.75, 1.0), (0.5, 0.5, 0.5), (0.9, 0.25, 0.0))]}
    (adapt / "summary.json").write_text(json.dumps(summary))
    gate_recs = [{"question_id": f"q{i}", "question": "Q?", "answers": ["Paris"], "popularity": pop,
                  "parametric_output": "Rome", "closed_book_output": "Rome", "context_output": "Paris"}
                 for i, pop in enumerate((10.0, 100.0, 1000.0, 10000.0))]
    (adapt / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gate_recs))
    distill = root / "distill"
    distill.mkdir()
    log = [{"step": 0, "val_loss": 1.0, "best_val_loss": 1.0}, {"step": 10, "loss": 0.9, "kl": 0.9},
           {"step": 20, "loss": 0.7, "kl": 0.7}, {"step": 20, "val_loss": 0.8, "best_val_loss": 0.8,
                                                  "val_recall@5": 0.6}]
    (distill / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    return root


def test_report_renders_every_kind_of_run(runs, tmp_path):
    out = tmp_path / "report"
    result = report.make_report([str(runs)], out)
    rows = {r["run"]: r for r in result["rows"]}
    # DRAGIN's paper profile truncates at the token, which the other runs (no trigger that judges text) do not read
    assert rows["runs/sweep/method=dragin,theta=0.3"]["knobs"] == "truncation=token, theta=0.3"
    assert rows["runs/sweep/method=wo-rag"]["knobs"] == ""  # theta differs between runs, but wo-rag never reads it
    assert rows["runs/sweep/method=dragin,theta=0.3"]["f1"] == 1.0
    assert rows["runs/sweep/method=dragin,theta=0.3"]["retrievals_per_question"] == 2.5
    gate = rows["runs/gate-0.6"]  # gate_rule differs from the other runs' and the gate reads it
    assert gate["knobs"] == "gate_rule=threshold, ret_threshold=0.6" and gate["retrieval_share"] == 0.5
    assert {r["method"] for r in result["rows"]} >= {"NR (never retrieve)", "AR (always retrieve)", "iter-retgen"}
    md = (out / "results.md").read_text()
    assert md.startswith("| run | method | knobs | n | EM | F1 | accuracy | retrievals/q | LLM passes/q | tokens/q |"
                         " s/q | retrieval share |")
    assert ("| runs/sweep/method=dragin,theta=0.3 | dragin | truncation=token, theta=0.3 | 2 | 1.000 | 1.000 | 1.000 "
            "| 2.50 |") in md
    header = (out / "results.csv").read_text().splitlines()[0]
    assert header == ("run,method,knobs,n,em,f1,acc,retrievals_per_question,llm_forward_passes_per_question,"
                      "generated_tokens_per_question,seconds_per_question,retrieval_share,em_ci,f1_ci,acc_ci,"
                      "retrievals_ci,retrieval_share_ci")
    dragin = rows["runs/sweep/method=dragin,theta=0.3"]
    assert dragin["f1_ci"] == (1.0, 1.0)  # both questions score 1: every resample's mean is 1
    assert 2.0 <= dragin["retrievals_ci"][0] <= 2.5 <= dragin["retrievals_ci"][1] <= 3.0
    assert "| [1.000, 1.000] |" in md
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == ["distillation.png", "frontier.png", "gate_thresholds.png", "iterations.png"]
    for p in out.glob("*.png"):
        assert p.read_bytes().startswith(PNG_MAGIC) and p.stat().st_size > 5000
    page = (out / "report.html").read_text()
    assert "<table>" in page and "theta=0.3" in page
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,[A-Za-z0-9+/=]{100,}">', page)) == 4
    assert '<a href="../runs/sweep/method=dragin,theta=0.8/trace.html">trace.html</a>' in page


def test_figures_without_data_are_skipped(runs, tmp_path):
    out = tmp_path / "report"
    result = report.make_report([str(runs / "sweep" / "method=wo-rag")], out)
    assert [p.name for p in result["figures"]] == ["frontier.png"]
    assert sorted(p.name for p in out.glob("*.png")) == ["frontier.png"]
    assert result["rows"][0]["run"] == "method=wo-rag" and result["rows"][0]["knobs"] == ""
    assert "retrieval share" not in (out / "results.md").read_text()


def test_an_unfinished_run_is_scored_from_its_predictions(tmp_path):
    write_run(tmp_path / "r", [record(0, True, 1), record(1, False, 1)], metrics=False, method="sr-rag")
    (row,) = report.make_report([str(tmp_path / "r")], tmp_path / "o")["rows"]
    assert row["run"] == "r (unfinished)" and row["em"] == 0.5 and row["n"] == 2


def test_frontier_and_iteration_curve_by_hand():
    assert pareto([(0, 0.2), (1, 0.5), (2, 0.4), (3, 0.6), (1, 0.3)]) == [(0, 0.2), (1, 0.5), (3, 0.6)]
    recs = [{"iterations": [{"em": 0.0, "f1": 0.5}, {"em": 1.0, "f1": 1.0}]}, {"iterations": [{"em": 1.0, "f1": 0.0}]}]
    recs = [PredictionRecord.from_dict({"id": "q", "question": "?", "answers": ["a"], **r}) for r in recs]
    assert iteration_curve(recs) == {"em": [0.5, 1.0], "f1": [0.25, 1.0]}


def test_popularity_curve_from_gate_records(runs):
    curve = report.popularity_curve(runs / "adapt_llm" / "eval" / "records.jsonl")
    # retrieve when popularity < threshold; only the context answer ("Paris") is right
    assert [(c["threshold"], c["accuracy"], c["retrieval_share"]) for c in curve] == [
        (10.0, 0.0, 0.0), (100.0, 0.25, 0.25), (1000.0, 0.5, 0.5), (10000.0, 0.75, 0.75),
        (pytest.approx(10100.0), 1.0, 1.0)]


def test_bad_input_is_one_line(tmp_path, capsys):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(DataError, match="no runs in .*empty: expected evaluation folders"):
        report.find_runs([str(tmp_path / "empty")])
    with pytest.raises(ConfigError, match="missing: not a folder"):
        report.find_runs([str(tmp_path / "missing")])
    assert run_cli(report.main, argv=[str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no runs in") and err.count("\n") == 1
    assert run_cli(report.main, argv=["--out", str(tmp_path / "o")]) == 2
    assert "give at least one run folder" in capsys.readouterr().err
    bad = write_run(tmp_path / "bad", [record(0, True, 0)], method="wo-rag")
    (bad / "metrics.json").write_text("{not json")
    with pytest.raises(DataError, match=r"bad/metrics.json: not valid JSON"):
        report.find_runs([str(bad)])
    (bad / "config.yaml").write_text("[unclosed")
    with pytest.raises(DataError, match=r"bad/config.yaml: not valid YAML"):
        report.find_runs([str(bad)])


def test_cli_writes_the_report(runs, tmp_path, capsys):
    assert run_cli(report.main, argv=[str(runs / "sweep"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "| sweep/method=dragin,theta=0.8 | dragin | truncation=token, theta=0.8 |" in out and "report.html" in out
    assert (tmp_path / "o" / "frontier.png").read_bytes().startswith(PNG_MAGIC)


def test_intervals_score_answers_as_the_run_did(tmp_path):
    """A run under DRAGIN's eval.py (reference profile) is scored on the text after its first "the answer is": the
    interval must be of that metric, not of the project's whole-output containment."""
    recs = [dict(record(i, True, 1), output="Paris So the answer is Rome") for i in range(3)]
    folder = write_run(tmp_path / "ref", recs, method="dragin", dragin_profile="reference", dataset="world-two-hop")
    run = report.load_eval_run(folder, "ref")
    assert run.config["answer_extraction"] == "dragin"
    assert run.intervals["acc"] == (0.0, 0.0)  # "Rome" is the answer the run scored
    project = report.load_eval_run(write_run(tmp_path / "paper", recs, method="dragin"), "paper")
    assert project.intervals["acc"] == (1.0, 1.0)  # the whole output contains "Paris"
