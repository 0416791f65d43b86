"""Sweeps: grid expansion (deduplication, validation, folder names), skipping finished points, the evaluate hook,
and the bench recipes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import config_dict, save_config
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.records import PredictionRecord
from inference.commands import evaluate as ev
from inference.commands import knobs, sweep

ROOT = Path(__file__).resolve().parents[1]
TYPES = (ev.EvalConfig, ev.MethodConfig, ev.PromptConfig, ev.EngineConfig, ev.GateMethodConfig)


def defaults(**over) -> dict:
    """Every field at its dataclass default (what HfArgumentParser gives), with overrides."""
    parser_defaults = {}
    for cls in TYPES:
        for f in dataclasses.fields(cls):
            parser_defaults[f.name] = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    return {**parser_defaults, **over}


def test_methods_that_ignore_a_knob_run_once():
    grid = {"method": ["wo-rag", "sr-rag", "fs-rag", "flare", "dragin"], "theta": [0.3, 0.8, 1.5]}
    points = sweep.expand(defaults(output_dir="out"), grid, TYPES)
    assert [p.name for p in points] == ["method=wo-rag", "method=sr-rag", "method=fs-rag", "method=flare",
                                        "method=dragin,theta=0.3", "method=dragin,theta=0.8",
                                        "method=dragin,theta=1.5"]
    wo = points[0]
    # the recipe's value (unset: the profile fills it), not the grid's
    assert wo.knobs == {"method": "wo-rag"} and wo.values["theta"] is None
    assert wo.values["output_dir"] == str(Path("out") / "method=wo-rag")
    assert points[-1].knobs == {"method": "dragin", "theta": 1.5}


def test_each_knob_goes_with_its_method():
    grid = {"method": ["fl-rag", "flare", "iter-retgen"], "flare_threshold": [0.2, 0.5], "fixed_length": [16, 32],
            "iterations": [1, 2]}
    names = [p.name for p in sweep.expand(defaults(output_dir="o"), grid, TYPES)]
    assert names == ["method=fl-rag,fixed_length=16", "method=fl-rag,fixed_length=32",
                     "method=flare,flare_threshold=0.2", "method=flare,flare_threshold=0.5",
                     "method=iter-retgen,iterations=1", "method=iter-retgen,iterations=2"]
    # a knob with one value applies but does not name the folder; custom with a RIND trigger reads theta
    grid = {"method": ["custom"], "trigger": ["rind", "flare"], "query": ["qfs"], "theta": [0.5, 1.0]}
    names = [p.name for p in sweep.expand(defaults(output_dir="o"), grid, TYPES)]
    assert names == ["trigger=rind,theta=0.5", "trigger=rind,theta=1", "trigger=flare"]


def test_gate_knobs_follow_the_gate_and_its_inner_method():
    grid = {"method": ["nr", "adapt-llm"], "gate_inner": ["single", "dragin"], "theta": [0.3, 0.8]}
    names = [p.name for p in sweep.expand(defaults(output_dir="o"), grid, TYPES)]
    assert names == ["method=nr", "method=adapt-llm,gate_inner=single", "method=adapt-llm,gate_inner=dragin,theta=0.3",
                     "method=adapt-llm,gate_inner=dragin,theta=0.8"]
    grid = {"ret_threshold": [0.1, 0.5]}
    names = [p.name for p in sweep.expand(defaults(output_dir="o", method="adapt-llm", gate_rule="threshold"), grid,
                                          TYPES)]
    assert names == ["ret_threshold=0.1", "ret_threshold=0.5"]
    one = sweep.expand(defaults(output_dir="o", method="adapt-llm"), grid, TYPES)  # token rule: threshold unread
    assert [p.name for p in one] == ["default"]


def test_top_k_is_the_gates_context_depth_where_that_prompt_runs():
    grid = {"method": ["nr", "ar"], "top_k": [1, 2]}
    names = [p.name for p in sweep.expand(defaults(output_dir="o"), grid, TYPES)]
    assert names == ["method=nr", "method=ar,top_k=1", "method=ar,top_k=2"]  # NR asks no context prompt
    names = [p.name for p in sweep.expand(defaults(output_dir="o", gate_all_answers=True), grid, TYPES)]
    assert names == ["method=nr,top_k=1", "method=nr,top_k=2", "method=ar,top_k=1", "method=ar,top_k=2"]


def test_every_method_and_gate_knob_has_a_rule():
    """A new knob must say which methods read it: otherwise a sweep over it runs duplicates or merges runs."""
    method_knobs = {f.name for f in dataclasses.fields(ev.MethodConfig)} - {"method"}
    assert method_knobs == set(knobs.METHOD_KNOB_RULES) | knobs.READ_BY_EVERY_METHOD
    gate_knobs = {f.name for f in dataclasses.fields(ev.GateMethodConfig)}
    assert gate_knobs == set(knobs.GATE_KNOB_RULES) | knobs.READ_BY_EVERY_GATE


@pytest.mark.parametrize("grid, fixed, match", [
    ({"thetaa": [1.0]}, (), r"unknown sweep knob\(s\) thetaa; known: .*theta"),
    ({"theta": ["high"]}, (), r"sweep.theta value 'high' is not a float"),
    ({"truncation": ["word"]}, (), r"sweep.truncation value 'word' is not one of sentence, token, none"),
    ({"method": ["self-rag"]}, (), r"sweep.method value 'self-rag' is not one of wo-rag"),
    ({"top_k": [2.5]}, (), r"sweep.top_k value 2.5 is not an int"),
    ({"limit": [None, 8]}, (), None),
    ({"theta": 0.8}, (), r"sweep.theta must be a non-empty list"),
    ({"theta": []}, (), r"sweep.theta must be a non-empty list"),
    ({"theta": [0.8]}, ("theta",), r"theta set both in sweep and outside it"),
    ({"output_dir": ["a", "b"]}, (), r"output_dir cannot be swept"),
])
def test_grid_is_checked_against_the_dataclasses(grid, fixed, match):
    if match is None:
        sweep.check_grid(grid, fixed, TYPES, "r.yaml")
        return
    with pytest.raises(ConfigError, match=match):
        sweep.check_grid(grid, fixed, TYPES, "r.yaml")


def test_a_point_the_dataclasses_refuse_is_named():
    with pytest.raises(ConfigError, match=r"sweep point method=sr-rag,top_k=0: top_k"):
        sweep.expand(defaults(output_dir="o"), {"method": ["sr-rag"], "top_k": [3, 0]}, TYPES)


def test_folder_names_are_clean_and_distinct():
    assert sweep.point_name({"model": "runs/x y/model", "theta": 1e-5, "limit": None, "flag": True}) == \
        "model=runs_x_y_model,theta=1e-05,limit=none,flag=true"
    with pytest.raises(ConfigError, match="share a folder name"):
        sweep.expand(defaults(output_dir="o"), {"model": ["a/b", "a_b"]}, TYPES)


def prediction_line(question_id: str) -> str:
    rec = PredictionRecord(question_id, "?", ["a"], "a", [], llm_forward_passes=1, generated_tokens=1,
                           batch_mean_seconds=0.0)
    return json.dumps(rec.to_dict()) + "\n"


def fake_evaluate(calls: list[str], ids=sweep.dataset_ids):
    """Writes what evaluate writes (config.yaml, predictions, metrics.json) without a model."""
    def run(cfg, method, prompt, engine, gate):
        calls.append(Path(cfg.output_dir).name)
        out = Path(cfg.output_dir)
        save_config(out / "config.yaml", cfg, method, prompt, engine, gate)
        done = ids(config_dict(cfg, method, prompt, engine, gate))
        (out / "predictions.jsonl").write_text("".join(prediction_line(i) for i in done))
        metrics = {"n": len(done), "em": 0.5, "f1": 0.6, "acc": 0.7, "retrieval_calls": 1.0, "method": method.method}
        (out / "metrics.json").write_text(json.dumps(metrics))
        return metrics
    return run


def synthetic_ids(values: dict) -> list[str]:
    return [f"q{i}" for i in range(values["limit"])]


def test_finished_points_are_skipped(tmp_path):
    calls: list[str] = []
    ids = synthetic_ids
    grid = {"method": ["wo-rag", "dragin"], "theta": [0.3, 0.8]}
    points = sweep.expand(defaults(output_dir=str(tmp_path), limit=2), grid, TYPES)
    results = sweep.run_sweep(points, TYPES, fake_evaluate(calls, ids), ids, log=lambda m: None)
    assert calls == ["method=wo-rag", "method=dragin,theta=0.3", "method=dragin,theta=0.8"]
    assert [m["n"] for _, m in results] == [2, 2, 2]
    sweep.run_sweep(points, TYPES, fake_evaluate(calls, ids), ids, log=lambda m: None)
    assert len(calls) == 3  # all finished: nothing ran again
    # a point missing a prediction is handed to evaluate (which resumes it)
    (tmp_path / "method=wo-rag" / "predictions.jsonl").write_text(prediction_line("q0"))
    sweep.run_sweep(points, TYPES, fake_evaluate(calls, ids), ids, log=lambda m: None)
    assert calls[3:] == ["method=wo-rag"]
    # other settings (evaluate then refuses or resumes the folder) or more questions: handed to evaluate again
    other = sweep.expand(defaults(output_dir=str(tmp_path), limit=2, max_new_tokens=50), grid, TYPES)
    sweep.run_sweep(other[:1], TYPES, fake_evaluate(calls, ids), ids, log=lambda m: None)
    more = sweep.expand(defaults(output_dir=str(tmp_path), limit=3), grid, TYPES)
    sweep.run_sweep(more, TYPES, fake_evaluate(calls, ids), ids, log=lambda m: None)
    assert len(calls) == 8


def test_done_ids_read_the_predictions_through_the_record_log(tmp_path, capsys):
    """The sweep counts a point's finished questions as every reader of a run folder does: a torn last line (a kill
    mid-write) is not a finished question, is said on stderr and left for the evaluation that resumes the folder
    (under its lock) to cut: the check runs before the lock, while another process may still be writing."""
    whole = prediction_line("q0") + prediction_line("q1")
    torn = prediction_line("q2").replace('"output": "a"', '"output": "Zürich"').encode()
    body = whole.encode() + torn[:torn.index("ü".encode()) + 1]
    (tmp_path / "predictions.jsonl").write_bytes(body)
    (tmp_path / "predictions.rank1.jsonl").write_text(prediction_line("q3"))
    assert sweep._done_ids(tmp_path) == {"q0", "q1", "q3"}
    assert (tmp_path / "predictions.jsonl").read_bytes() == body
    assert "1 torn last line left out" in capsys.readouterr().err


def test_is_finished_ignores_scheduling_settings(tmp_path):
    (point,) = sweep.expand(defaults(output_dir=str(tmp_path), limit=2), {"theta": [0.5]}, TYPES)
    fake_evaluate([], synthetic_ids)(*sweep.build(point.values, TYPES))
    folder = Path(point.values["output_dir"])
    assert not sweep.is_finished(folder, point.values, ["q0", "q1"])  # evaluate wrote it, the sweep did not ask
    sweep.mark_finished(folder, point)
    assert sweep.is_finished(folder, {**point.values, "chunk_size": 8, "device": "cpu", "show_progress": False},
                             ["q0", "q1"])
    assert not sweep.is_finished(folder, {**point.values, "theta": 1.5}, ["q0", "q1"])
    assert not sweep.is_finished(folder, point.values, ["q0", "q1", "q2"])


def write_recipe(path: Path, **fields) -> str:
    path.write_text(yaml.safe_dump(fields, sort_keys=False))
    return str(path)


def test_sweep_command_runs_a_recipe_and_evaluate_points_to_it(tmp_path, monkeypatch, capsys):
    calls: list[str] = []
    monkeypatch.setattr(ev, "evaluate", fake_evaluate(calls))
    out = tmp_path / "sweep"
    recipe = write_recipe(tmp_path / "r.yaml", dataset="world-two-hop", limit=3, output_dir=str(out),
                          show_progress=False, sweep={"method": ["wo-rag", "dragin"], "theta": [0.3, 0.8]})
    sweep.main([recipe, "--limit", "2"])  # the command line wins over the recipe, as for one evaluation
    assert calls == ["method=wo-rag", "method=dragin,theta=0.3", "method=dragin,theta=0.8"]
    assert yaml.safe_load((out / "method=wo-rag" / "config.yaml").read_text())["limit"] == 2
    summary = (out / "summary.md").read_text()
    assert "| method=dragin,theta=0.3 | dragin | theta=0.3 | 2 | 0.500 | 0.600 |" in summary
    header = (out / "summary.csv").read_text().splitlines()[0]
    assert header.startswith("run,method,knobs,n,em,f1,acc,retrievals_per_question")
    sweep.main([recipe, "--limit", "2"])
    assert len(calls) == 3 and capsys.readouterr().out.count("finished, skipped") == 3
    assert run_cli(sweep.main, argv=[recipe, "--theta", "0.5"]) == 2
    assert "theta set both in sweep and outside it" in capsys.readouterr().err
    assert run_cli(sweep.main, argv=[recipe, "--thetaa", "0.5"]) == 2
    assert "unrecognized arguments: --thetaa 0.5" in capsys.readouterr().err
    bad = write_recipe(tmp_path / "bad.yaml", sweep={"tehta": [1.0]})
    assert run_cli(sweep.main, argv=[bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown sweep knob(s) tehta" in err
    assert run_cli(ev.main, argv=[recipe, "--limit", "2"]) == 2  # evaluate runs one configuration, not a grid
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"python -m inference.commands.sweep {recipe} --limit 2" in err


RECIPES = {"hotpotqa_tune.yaml": 8, "hotpotqa_six_methods.yaml": 6, "world_tune.yaml": 8,
           "world_six_methods.yaml": 6, "world_theta.yaml": 9}


@pytest.mark.parametrize("name, runs", RECIPES.items())
def test_bench_recipes_expand(name, runs):
    recipe, grid = sweep.load_recipe(ROOT / "bench" / "experiments" / name)
    sweep.check_grid(grid, recipe, TYPES, name)
    assert len(sweep.expand(defaults(**recipe), grid, TYPES)) == runs


def test_a_real_sweep_with_a_tiny_model_resumes(tmp_path, tiny_model, smol_tokenizer, capsys):
    """The hook and the real evaluate together: folders, summary, and a rerun that runs nothing."""
    model_dir = tmp_path / "tiny"
    tiny_model.save_pretrained(model_dir)
    smol_tokenizer.save_pretrained(model_dir)
    out = tmp_path / "sweep"
    recipe = write_recipe(tmp_path / "r.yaml", model=str(model_dir), dataset="world-two-hop", limit=2,
                          max_new_tokens=4, show_progress=False, output_dir=str(out),
                          sweep={"method": ["wo-rag", "dragin"], "theta": [1.0]})
    sweep.main([recipe])
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert folders == ["method=dragin", "method=wo-rag"]
    for name in folders:
        assert json.loads((out / name / "metrics.json").read_text())["n"] == 2
    rows = (out / "summary.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[1].startswith("method=wo-rag,wo-rag,,2,")
    capsys.readouterr()
    sweep.main([recipe])
    assert capsys.readouterr().out.count("finished, skipped") == 2
