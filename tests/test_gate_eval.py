"""ADAPT-LLM's gate through the evaluate command: adapt-llm / nr / ar / popularity with the stub generator and fake
retriever of test_adapt_gate.py (hand-checked records and table columns), resume, user errors as one line, and
the gate wrapping an inner method (DRAGIN, Iter-RetGen on a tiny model) that sees only the <RET> questions."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import FakeRetriever as EchoRetriever
from conftest import tiny_llama
from test_adapt_gate import GOLD, POP, SCRIPT, FakeRetriever, StubGenerator

import adaptive_rag.lm.models
import inference.adapt_gate.gate_eval
import inference.commands.eval_data
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.records import QAExample
from data_builders.readers import write_qa_jsonl
from inference.adapt_gate.gate_eval import GateMethodConfig, inner_method
from inference.commands import evaluate as ev
from inference.dynamic_rag.engine import EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptConfig


class RetTokenizer:
    name_or_path = "stub-with-ret"

    def get_vocab(self):
        return {"<RET>": 0}


class PlainTokenizer(RetTokenizer):
    name_or_path = "stub-base"

    def get_vocab(self):
        return {"a": 0}


@pytest.fixture()
def world(tmp_path, monkeypatch):
    """The four scripted questions as a QA file; model, retriever and generator stubbed behind make_runner."""
    data = tmp_path / "qa.jsonl"
    write_qa_jsonl([QAExample(q, f"Question {q}?", [GOLD[q]], metadata={"popularity": POP[q]}) for q in SCRIPT], data)
    stubs = {"gen": StubGenerator(), "ret": FakeRetriever(), "tokenizer": RetTokenizer(), "retrievers": 0}

    def load_retriever(*args, **kwargs):
        stubs["retrievers"] += 1
        return stubs["ret"]

    monkeypatch.setattr(adaptive_rag.lm.models, "load_causal_lm", lambda name, opts=None: ("model", stubs["tokenizer"]))
    monkeypatch.setattr(inference.commands.eval_data, "load_eval_retriever", load_retriever)
    monkeypatch.setattr(inference.adapt_gate.gate_eval, "model_generator", lambda *a, **k: stubs["gen"])
    stubs["data"] = data
    return stubs


def index_dir(tmp_path) -> str:
    """A folder that passes the evaluate command's index check; the stubbed retriever never opens it."""
    folder = tmp_path / "index"
    folder.mkdir(exist_ok=True)
    (folder / "meta.json").write_text('{"kind": "bm25"}')
    return str(folder)


def run(tmp_path, data, method: str, name: str = "out", limit: int | None = None, top_k: int = 1, **gate):
    cfg = ev.EvalConfig(dataset=str(data), index=index_dir(tmp_path), output_dir=str(tmp_path / name), chunk_size=3,
                        limit=limit, show_progress=False)
    metrics = ev.evaluate(cfg, MethodConfig(method=method, top_k=top_k), PromptConfig(), EngineConfig(),
                          GateMethodConfig(**gate))
    lines = (tmp_path / name / "predictions.jsonl").read_text().splitlines()
    return metrics, {r["id"]: r for r in map(json.loads, lines)}, len(lines)


def columns(metrics):
    return tuple(metrics[k] for k in ("acc", "retrieval_share", "n_retrieved", "acc_retrieved", "acc_not_retrieved"))


def test_adapt_llm_records_metrics_and_resume(tmp_path, world):
    metrics, recs, n = run(tmp_path, world["data"], "adapt-llm", limit=2, top_k=2)
    assert n == 2 and sorted(recs) == ["a", "b"]
    metrics, recs, n = run(tmp_path, world["data"], "adapt-llm", top_k=2)  # resume: only c and d run now
    assert n == 4 and sorted(recs) == ["a", "b", "c", "d"]
    asked = [p.split("Q: Question ")[1][0] for p in world["gen"].prompts]
    assert asked == ["a", "b", "b", "c", "d", "d"]  # parametric a, b; context b; then parametric c, d; context d
    # a, c answered from the parametric output (right); b retrieved, Toulouse (right); d retrieved, Bergen (wrong)
    assert [recs[q]["answered_by"] for q in "abcd"] == ["parametric", "context", "parametric", "context"]
    assert [recs[q]["output"] for q in "abcd"] == ["Paris", "Toulouse", "Rome", "Bergen"]
    assert recs["b"]["retrievals"] == [{"round": 1, "query": "Question b?", "doc_ids": ["doc-b-0", "doc-b-1"]}]
    assert recs["a"]["retrievals"] == [] and recs["a"]["retrieved"] is False and recs["b"]["p_ret"] == 0.90
    assert recs["b"]["answer"] == "Toulouse" and recs["b"]["policy"] == "adapt_llm" and "inner" not in recs["b"]
    assert columns(metrics) == (0.75, 0.5, 2, 0.5, 1.0)
    assert metrics["retrieval_calls"] == 0.5 and metrics["method"] == "adapt-llm" and metrics["gate_inner"] == "single"
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["acc_not_retrieved"] == 1.0
    saved = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    assert saved["method"] == "adapt-llm" and saved["top_k"] == 2 and saved["gate_rule"] == "token"


def test_threshold_rule(tmp_path, world):
    metrics, recs, _ = run(tmp_path, world["data"], "adapt-llm", gate_rule="threshold", ret_threshold=0.35)
    # p(<RET>) a .05, b .90, c .40, d .30: retrieve b (Toulouse, right), c (Milan, wrong); d said <RET> under the
    # threshold: the NR prompt answers (Oslo, wrong); a parametric (right)
    assert [recs[q]["answered_by"] for q in "abcd"] == ["parametric", "context", "context", "closed_book"]
    assert columns(metrics) == (0.5, 0.5, 2, 0.5, 0.5)


def test_nr_ar_popularity(tmp_path, world):
    metrics, recs, _ = run(tmp_path, world["data"], "nr", name="nr")
    assert [recs[q]["output"] for q in "abcd"] == ["Paris", "Lyon", "Rome", "Oslo"]
    assert columns(metrics) == (0.5, 0.0, 0, None, 0.5) and world["retrievers"] == 0  # NR loads no index
    metrics, recs, _ = run(tmp_path, world["data"], "ar", name="ar")
    assert [recs[q]["output"] for q in "abcd"] == ["Paris", "Toulouse", "Milan", "Bergen"]
    assert columns(metrics) == (0.5, 1.0, 4, 0.5, None) and metrics["retrieval_calls"] == 1.0
    # popularity a 9e6, b 10, c 5e6, d 2e3 under 1e4: retrieve b (right), d (wrong); a, c closed-book (right)
    metrics, recs, _ = run(tmp_path, world["data"], "popularity", name="pop", popularity_threshold=1e4)
    assert [recs[q]["answered_by"] for q in "abcd"] == ["closed_book", "context", "closed_book", "context"]
    assert recs["b"]["popularity"] == 10 and columns(metrics) == (0.75, 0.5, 2, 0.5, 1.0)


@pytest.mark.parametrize("method,gate", [("adapt-llm", {}), ("adapt-llm", {"gate_rule": "threshold"}),
                                         ("nr", {}), ("ar", {}), ("popularity", {"popularity_threshold": 1e4})])
def test_all_answers_decide_as_the_policy_alone(tmp_path, world, method, gate):
    """gate_all_answers generates every path for every question; the method's policy then answers exactly as it
    does alone, and the file holds what re-deciding any other policy offline needs."""
    metrics, recs, _ = run(tmp_path, world["data"], method, name="alone", **gate)
    every, all_recs, _ = run(tmp_path, world["data"], method, name="all", gate_all_answers=True, **gate)
    keys = ("output", "answered_by", "retrieved", "policy", "retrievals", "answer")
    assert [[all_recs[q][k] for k in keys] for q in "abcd"] == [[recs[q][k] for k in keys] for q in "abcd"]
    assert columns(every) == columns(metrics) and every["em"] == metrics["em"]
    assert all(all_recs[q][f] is not None for q in "abcd" for f in ("parametric_output", "closed_book_output",
                                                                      "context_output", "p_ret"))
    assert every["generated_tokens"] == 3 * 2  # three prompts of 2 tokens each (the stub), every question


def test_user_errors_are_one_line(tmp_path, world, capsys):
    plain = tmp_path / "plain.jsonl"
    write_qa_jsonl([QAExample("a", "Question a?", ["Paris"]), QAExample("b", "Question b?", ["Lyon"])], plain)
    config = tmp_path / "pop.yaml"
    config.write_text(yaml.safe_dump({"method": "popularity", "dataset": str(plain), "index": index_dir(tmp_path),
                                      "output_dir": str(tmp_path / "o1"), "show_progress": False}))
    assert run_cli(ev.main, argv=[str(config)]) == 2
    err = capsys.readouterr().err
    assert "popularity" in err and "2 of 2" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    world["tokenizer"] = PlainTokenizer()
    argv = ["--method", "adapt-llm", "--dataset", str(world["data"]), "--index", index_dir(tmp_path), "--output_dir",
            str(tmp_path / "o2"), "--show_progress", "false"]
    assert run_cli(ev.main, argv=argv) == 2
    err = capsys.readouterr().err
    assert "<RET>" in err and "stub-base" in err and len(err.strip().splitlines()) == 1
    # neither failed run leaves a folder that a rerun would take for a resume
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
    with pytest.raises(ValueError, match="gate_inner"):
        GateMethodConfig(gate_inner="adapt-llm")
    with pytest.raises(ValueError, match="ret_threshold"):
        GateMethodConfig(ret_threshold=2.0)


def test_inner_method_config():
    inner = inner_method(MethodConfig(method="adapt-llm", theta=0.3, top_k=4), GateMethodConfig(gate_inner="dragin"))
    assert (inner.method, inner.trigger, inner.query, inner.theta, inner.top_k) == ("dragin", "rind", "qfs", 0.3, 4)
    assert inner_method(MethodConfig(method="adapt-llm"), GateMethodConfig()) is None
    assert inner_method(MethodConfig(method="nr"), GateMethodConfig(gate_inner="dragin")) is None


@pytest.mark.parametrize("inner", ["dragin", "iter-retgen"])
def test_gate_wraps_inner_method(tmp_path, world, monkeypatch, inner):
    """Only the questions whose parametric output says <RET> (b, d) reach the inner method, on a real tiny model."""
    from adaptive_rag.lm.models import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<RET>"]})
    world["tokenizer"], world["ret"] = tokenizer, EchoRetriever()  # takes any query (DRAGIN's are words)
    monkeypatch.setattr(adaptive_rag.lm.models, "load_causal_lm", lambda name, opts=None: (tiny_llama(len(tokenizer)),
                                                                                     tokenizer))
    seen: list[str] = []
    real = ev.method_runner

    def spy(*args, **kwargs):
        runner = real(*args, **kwargs)
        return lambda examples: (seen.extend(e.id for e in examples), runner(examples))[1]

    monkeypatch.setattr(ev, "method_runner", spy)
    cfg = ev.EvalConfig(dataset=str(world["data"]), index=index_dir(tmp_path), output_dir=str(tmp_path / inner),
                        show_progress=False)
    method = MethodConfig(method="adapt-llm", theta=0.0, max_rounds=1, top_k=2, iterations=2)
    metrics = ev.evaluate(cfg, method, PromptConfig(), EngineConfig(max_new_tokens=6, batch_size=2),
                          GateMethodConfig(gate_inner=inner))
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / inner / "predictions.jsonl").read_text().splitlines())}
    assert seen == ["b", "d"]
    assert [recs[q]["answered_by"] for q in "abcd"] == ["parametric", inner, "parametric", inner]
    assert all(recs[q]["retrievals"] == [] and "inner" not in recs[q] for q in "ac")
    for q in "bd":
        assert recs[q]["output"] == recs[q]["context_output"]
        assert recs[q]["retrievals"] == recs[q]["inner"]["retrievals"] != []
        assert all(d.startswith("doc-") for r in recs[q]["retrievals"] for d in r["doc_ids"])
        assert recs[q]["inner"]["llm_forward_passes"] > 0  # the real tiny model ran: its passes are counted
        assert recs[q]["llm_forward_passes"] == recs[q]["inner"]["llm_forward_passes"]  # the gate's prompts: stub
    if inner == "iter-retgen":
        assert [r["query"] for r in recs["b"]["retrievals"]][0] == "Question b?" and len(recs["b"]["retrievals"]) == 2
    assert metrics["gate_inner"] == inner and metrics["n_retrieved"] == 2 and metrics["retrieval_share"] == 0.5
