"""The evaluation's default output folder: README's commands run one after another without --output_dir, and
each gets its own folder (they once shared runs/eval/latest, so the second refused to run)."""

from __future__ import annotations

from pathlib import Path

import yaml

from adaptive_rag.plumbing.records import PredictionRecord, QAExample
from data_builders.readers import write_qa_jsonl
from inference.commands import evaluate as ev
from inference.commands import sweep
from inference.dynamic_rag.engine import EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptConfig


def test_default_output_dir_names_method_and_dataset():
    assert ev.default_output_dir("dragin", "world-two-hop") == "runs/eval/dragin-world-two-hop"
    assert ev.default_output_dir("fs-rag", "PATH/hotpotqa.jsonl") == "runs/eval/fs-rag-hotpotqa"
    assert ev.default_output_dir("nr", "../shared/data/squad/dev-v1.1.json") == "runs/eval/nr-dev-v1.1"
    assert ev.default_output_dir("ar", "data/popqa.jsonl.gz") == "runs/eval/ar-popqa"
    assert ev.default_output_dir("wo-rag", "akariasai/PopQA") == "runs/eval/wo-rag-PopQA"  # a hub dataset
    given = ev.EvalConfig(output_dir="mine")
    assert ev.resolve_output_dir(given, MethodConfig(method="flare")) is given


def test_two_commands_without_output_dir_both_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "qa.jsonl"
    write_qa_jsonl([QAExample(f"q{i}", f"Question {i}?", [f"ans {i}"]) for i in range(3)], data)
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "meta.json").write_text('{"kind": "bm25"}')

    def runner(examples):
        return [PredictionRecord(e.id, e.question, e.answers, e.answers[0], [], llm_forward_passes=1,
                                 generated_tokens=1, rounds=1, batch_mean_seconds=0.1) for e in examples]

    monkeypatch.setattr(ev, "make_runner", lambda *a: runner)
    for method in ("wo-rag", "sr-rag"):
        cfg = ev.EvalConfig(dataset=str(data), index="index", show_progress=False)
        assert ev.evaluate(cfg, MethodConfig(method=method), PromptConfig(), EngineConfig())["n"] == 3
    for method in ("wo-rag", "sr-rag"):
        folder = tmp_path / "runs" / "eval" / f"{method}-qa"
        assert (folder / "metrics.json").is_file()
        assert yaml.safe_load((folder / "config.yaml").read_text())["output_dir"] == f"runs/eval/{method}-qa"


def test_a_sweep_recipe_without_output_dir_gets_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = []

    def fake_evaluate(cfg, method, *rest):
        calls.append(cfg.output_dir)
        Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
        return {"n": 1, "em": 0.0, "f1": 0.0, "method": method.method}

    recipe = tmp_path / "grid.yaml"
    recipe.write_text(yaml.safe_dump({"dataset": "world-two-hop", "limit": 1, "sweep": {"method": ["wo-rag"]}}))
    monkeypatch.setattr(ev, "evaluate", fake_evaluate)
    sweep.main([str(recipe)])
    assert calls == [str(Path("runs/sweeps/grid") / "method=wo-rag")]
