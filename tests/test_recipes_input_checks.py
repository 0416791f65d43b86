"""Recipes and commands refuse a user's mistake in one line before they write anything: a query encoder of
another size than the index (retrieval-adaptation data and evaluation), a sweep recipe's fixed value of the wrong
shape; the claims say which runs they left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from adaptive_rag.plumbing.cli import run_cli


def _no_weights(monkeypatch):
    from retrieval_adapt import dense

    def refuse(*args, **kwargs):
        raise AssertionError("no encoder may load before the inputs are checked")

    monkeypatch.setattr(dense.MeanPoolingEncoder, "from_name", refuse)


@pytest.mark.parametrize("module", ["training.evaluate_adapted", "training.distill_set"])
def test_a_query_encoder_of_another_size_leaves_no_folder(module, dense_index, wide_encoder, tmp_path, capsys,
                                                           monkeypatch):
    import importlib

    _no_weights(monkeypatch)
    program = importlib.import_module(module)
    out = tmp_path / "runs" / "out"
    argv = ["--index_dir", str(dense_index), "--query_encoder", str(wide_encoder), "--out", str(out),
            "--generator", str(wide_encoder)]
    if module == "training.distill_set":
        argv += ["--reranker", "cross_encoder", "--reranker_model", str(wide_encoder)]
    assert run_cli(program.main, argv=argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "makes 24-dimensional vectors" in err and "16-dimensional" in err
    assert not (tmp_path / "runs").exists()  # no config.yaml binding a later, correct run


def test_a_sweep_recipe_with_a_list_where_a_number_goes_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    from inference.commands import evaluate as ev
    from inference.commands import sweep

    def no_run(*args, **kwargs):
        raise AssertionError("no point may run")

    monkeypatch.setattr(ev, "evaluate", no_run)
    out = tmp_path / "runs" / "sweep"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"dataset": "world-two-hop", "top_k": [3, 5], "output_dir": str(out),
                                      "sweep": {"method": ["wo-rag", "dragin"]}}))
    assert run_cli(sweep.main, argv=[str(recipe)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{recipe}: field 'top_k' expects a whole number" in err
    assert not (tmp_path / "runs").exists()


def test_claims_list_the_runs_they_left_out(tmp_path):
    from adaptive_rag.plumbing.records import PredictionRecord
    from inference.commands.knowing_claims import claims_report

    def run(name: str, metrics: bool) -> Path:
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        rec = PredictionRecord(id="q1", question="q", answers=["Osk"], output="So the answer is Osk.",
                               retrievals=[], llm_forward_passes=1, generated_tokens=1, batch_mean_seconds=0.1)
        (folder / "predictions.jsonl").write_text(json.dumps(rec.to_dict()) + "\n")
        (folder / "config.yaml").write_text(yaml.safe_dump({"method": "wo-rag", "dataset": "world-two-hop"}))
        if metrics:
            (folder / "metrics.json").write_text(json.dumps({"n": 1, "em": 1.0, "f1": 1.0}))
        return folder

    run("done", metrics=True)
    cut = run("cut", metrics=False)
    text = claims_report([str(tmp_path / "runs")])
    assert f"left out (no metrics.json): {cut}" in text
    assert text.count("left out (no metrics.json)") == 1
