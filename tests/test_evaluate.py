"""The evaluation command: output folder contents, resume without duplicates, trace rendering, user errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage, PredictionRecord, QAExample, RetrievalRecord
from adaptive_rag.plumbing.scoring import summarise
from data_builders.readers import write_qa_jsonl
from inference.commands import evaluate as ev
from inference.commands.trace import render
from inference.dynamic_rag.engine import EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptConfig

ROOT = Path(__file__).resolve().parents[1]


def fake_index(tmp_path: Path) -> str:
    """A folder that passes the index check; the fake runners never open it."""
    folder = tmp_path / "index"
    folder.mkdir(exist_ok=True)
    (folder / "meta.json").write_text('{"kind": "bm25"}')
    return str(folder)


def fake_runner(calls):
    def run(examples):
        calls.extend(e.id for e in examples)
        return [PredictionRecord(e.id, e.question, e.answers, f"So the answer is {e.answers[0]}.",
                                 [RetrievalRecord(1, e.question, ["d1"])], llm_forward_passes=3, generated_tokens=5,
                                 rounds=1, batch_mean_seconds=0.5) for e in examples]
    return run


def test_evaluate_writes_and_resumes(tmp_path, monkeypatch):
    data = tmp_path / "qa.jsonl"
    write_qa_jsonl([QAExample(f"q{i}", f"Question {i}?", [f"ans {i}"]) for i in range(5)], data)
    calls: list[str] = []
    monkeypatch.setattr(ev, "make_runner", lambda *a: fake_runner(calls))
    cfg = ev.EvalConfig(dataset=str(data), index=fake_index(tmp_path), output_dir=str(tmp_path / "out"), chunk_size=2,
                        limit=3, show_progress=False)
    metrics = ev.evaluate(cfg, MethodConfig(method="sr-rag"), PromptConfig(), EngineConfig())
    assert calls == ["q0", "q1", "q2"] and metrics["n"] == 3 and metrics["em"] == 1.0
    assert metrics["retrieval_calls"] == 1.0 and metrics["llm_forward_passes"] == 3
    # interrupted run: a torn last line is dropped and that question runs again; nothing runs twice
    pred = tmp_path / "out" / "predictions.jsonl"
    pred.write_text("\n".join(pred.read_text().splitlines()[:2]) + '\n{"id": "q2", "outp')
    cfg.limit = 5
    metrics = ev.evaluate(cfg, MethodConfig(method="sr-rag"), PromptConfig(), EngineConfig())
    assert calls == ["q0", "q1", "q2", "q2", "q3", "q4"] and metrics["n"] == 5
    ids = [json.loads(line)["id"] for line in pred.read_text().splitlines() if line.endswith("}")]
    assert sorted(set(ids)) == ["q0", "q1", "q2", "q3", "q4"]
    assert (tmp_path / "out" / "config.yaml").is_file() and (tmp_path / "out" / "metrics.json").is_file()
    # the same folder with other settings would mix two configurations in one metrics file: refused
    with pytest.raises(DataError, match="theta: 0.8 -> 1.5"):
        ev.evaluate(cfg, MethodConfig(method="sr-rag", theta=1.5), PromptConfig(), EngineConfig())
    assert calls == ["q0", "q1", "q2", "q2", "q3", "q4"]


def test_summarise_metrics():
    two = [RetrievalRecord(1, "q", ["d"]), RetrievalRecord(2, "q", ["d"])]
    recs = [PredictionRecord("a", "A?", ["Paris"], "It is Paris. So the answer is Paris.", two, llm_forward_passes=10,
                             generated_tokens=8, batch_mean_seconds=1.0),
            PredictionRecord("b", "B?", ["yes"], "No.", [], llm_forward_passes=2, generated_tokens=2,
                             batch_mean_seconds=3.0)]
    m = summarise(recs)
    assert m["em"] == 0.5 and m["retrieval_calls"] == 1.0 and m["seconds_per_question"] == 2.0
    assert m["yes_no_em"] == 0.0 and m["n_yes_no"] == 1  # over the one yes/no question only


def test_evaluate_cli_user_errors(tmp_path):
    cmd = [sys.executable, "-m", "inference.commands.evaluate", "--dataset", str(tmp_path / "missing.jsonl"),
           "--output_dir", str(tmp_path / "o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2 and "missing.jsonl" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "inference.commands.evaluate", "--method", "self-rag"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_engine_keeps_signals_and_trace_renders(tiny_model, smol_tokenizer, fake_retriever):
    from inference.dynamic_rag.engine import DynamicRAGEngine
    from inference.dynamic_rag.prompts import PromptBuilder

    eng = DynamicRAGEngine(tiny_model, smol_tokenizer, fake_retriever, PromptBuilder(smol_tokenizer),
                           MethodConfig(method="dragin", theta=0.0, max_rounds=1),
                           EngineConfig(batch_size=2, max_new_tokens=10, keep_signals=True))
    [rec] = eng.run([QAExample("q", "Where is Quarvik?", ["Tessna"], [Passage("p", "Q", "x")])], show_progress=False)
    assert rec.signals and all("score" in w for r in rec.signals for w in r["words"])
    page = render(rec)
    assert page.startswith("<!doctype html>") and "Where is Quarvik?" in page
    assert "class=legend" in page and "outlined" in page and "struck through" in page  # what shading means
    if rec.retrievals:
        assert "fired at token" in page


@pytest.mark.slow
def test_evaluate_end_to_end_smollm2(tmp_path):
    """The real model through the real command: DRAGIN on three embedded two-hop questions."""
    out = tmp_path / "e2e"
    cmd = [sys.executable, "-m", "inference.commands.evaluate", "--method", "dragin", "--theta", "0.3", "--dataset",
           "world-two-hop", "--limit", "3", "--max_new_tokens", "24", "--output_dir", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n"] == 3 and metrics["llm_forward_passes"] > 0
    records = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert all(r["output"] for r in records)


def test_iter_retgen_runner_record_shape(tiny_model, smol_tokenizer, fake_retriever):
    runner = ev.iter_retgen_runner(tiny_model, smol_tokenizer, fake_retriever,
                                   MethodConfig(method="iter-retgen", top_k=2, iterations=3), PromptConfig(),
                                   EngineConfig(max_new_tokens=6, batch_size=2))
    [rec] = runner([QAExample("q", "Where is Quarvik?", ["Tessna"])])
    assert len(rec.retrievals) == 3 and len(rec.iterations) == 3 and rec.rounds == 3
    assert rec.retrievals[0].query == "Where is Quarvik?"
    assert rec.retrievals[1].query.endswith("Where is Quarvik?")  # y1 joined to the question
    assert summarise([rec])["retrieval_calls"] == 3.0
    # this question's own generation: a random tiny model writes all 6 tokens in each of its 3 iterations
    assert rec.generated_tokens == 3 * 6 and rec.llm_forward_passes > 0


def test_config_yaml_records_the_dtype_the_model_computes_in(tmp_path, monkeypatch, tiny_model):
    """dtype auto resolves per machine: config.yaml says what it resolved to."""
    from inference.commands import evaluate as evaluate_module

    run = evaluate_module.with_dtype(lambda examples: [], tiny_model.to(torch.bfloat16))
    assert run.resolved_dtype == "bfloat16" and run([]) == []
    assert evaluate_module.with_dtype(lambda examples: [], "a test double").resolved_dtype is None
    tiny_model.to(torch.float32)
