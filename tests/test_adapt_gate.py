"""The ADAPT-LLM gate and its comparison policies with a stub generator and a fake retriever, the summary
table with hand-computed values, the offline threshold sweep, and one end-to-end run with the real SmolLM2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from adaptive_rag.lm.generation import Generation
from adaptive_rag.plumbing.records import Passage, QAExample
from adaptive_rag.plumbing.retriever import Hit
from data_builders.adapt_llm_prompts import context_prompt, never_retrieve_prompt, parametric_prompt
from inference.adapt_gate.gate import (
    AdaptGate,
    GateConfig,
    GateRecord,
    format_table,
    redecide,
    summarize,
    sweep_threshold,
)

ROOT = Path(__file__).resolve().parents[1]
# question id -> (parametric output, p(<RET>), NR output, context output)
SCRIPT = {
    "a": ("Paris", 0.05, "Paris", "Paris"),  # knows it, retrieval agrees
    "b": ("<RET>", 0.90, "Lyon", "Toulouse"),  # asks; context right
    "c": ("Rome", 0.40, "Rome", "Milan"),  # knows it; the retrieved passage misleads
    "d": ("<RET>", 0.30, "Oslo", "Bergen"),  # asks, with low confidence; context wrong
}
GOLD = {"a": "Paris", "b": "Toulouse", "c": "Rome", "d": "Tromso"}
POP = {"a": 9e6, "b": 10.0, "c": 5e6, "d": 2e3}


def _examples() -> list[QAExample]:
    return [QAExample(id=q, question=f"Question {q}?", answers=[GOLD[q]], metadata={"popularity": POP[q]})
            for q in SCRIPT]


class StubGenerator:
    """Answers by prompt: which of the three prompts it is, and for which question."""

    def __init__(self):
        self.prompts: list[str] = []

    def generate(self, prompts):
        self.prompts += prompts
        out = []
        for p in prompts:
            q = p.split("Q: Question ")[1][0]
            param, p_ret, nr, ctx = SCRIPT[q]
            text = ctx if "given the context C" in p else param if "<RET>" in p else nr
            out.append(Generation(text=text, num_tokens=2, first_token_probs={"<RET>": p_ret}))
        return out


class FakeRetriever:
    def __init__(self):
        self.queries: list[str] = []

    def search(self, queries, k):
        self.queries += queries
        return [[Hit(Passage(f"doc-{q[-2]}-{i}", "", f"text {q[-2]} {i}"), 1.0 / (i + 1)) for i in range(k)]
                for q in queries]


def _gate(**cfg):
    gen, ret = StubGenerator(), FakeRetriever()
    return AdaptGate(gen, ret, GateConfig(**cfg)), gen, ret


def _by_id(records):
    return {r.question_id: r for r in records}


def test_adapt_token_rule_retrieves_on_ret_only():
    gate, gen, ret = _gate(top_k=2)
    recs = _by_id(gate.run(_examples(), "adapt_llm"))
    assert [q for q, r in recs.items() if r.retrieved] == ["b", "d"]
    assert ret.queries == ["Question b?", "Question d?"]  # retrieval queries with the question
    assert recs["b"].doc_ids == ["doc-b-0", "doc-b-1"] and recs["a"].doc_ids == []
    assert (recs["a"].output, recs["b"].output, recs["c"].output, recs["d"].output) == ("Paris", "Toulouse", "Rome",
                                                                                        "Bergen")
    assert [r.correct for r in recs.values()] == [True, True, True, False]
    assert recs["b"].p_ret == 0.90 and recs["a"].closed_book_output is None
    assert gen.prompts[:4] == [parametric_prompt(f"Question {q}?") for q in "abcd"]
    passages = [Passage("doc-b-0", "", "text b 0"), Passage("doc-b-1", "", "text b 1")]
    assert gen.prompts[4] == context_prompt("Question b?", passages, max_passage_words=200)


class BanningStubGenerator(StubGenerator):
    """Writes <RET> as the context answer unless the call bans it, as an RL-trained adapter did."""

    def __init__(self):
        super().__init__()
        self.bans: list[tuple[str, ...]] = []

    def generate(self, prompts, banned_tokens=()):
        self.bans.append(tuple(banned_tokens))
        out = super().generate(prompts)
        return [Generation("<RET>", 1, g.first_token_probs) if "given the context C" in p and "<RET>" not in
                banned_tokens else g for p, g in zip(prompts, out)]


@pytest.mark.parametrize("ban", [False, True])
def test_context_ban_ret_keeps_ret_out_of_the_context_answer_only(ban):
    gen = BanningStubGenerator()
    gate = AdaptGate(gen, FakeRetriever(), GateConfig(context_ban_ret=ban))
    recs = _by_id(gate.run(_examples(), "adapt_llm"))
    # the parametric prompt is never banned from <RET> (it is the decision); the context prompt only when asked
    assert gen.bans == [(), ("<RET>",) if ban else ()]
    assert (recs["b"].output, recs["b"].correct) == (("Toulouse", True) if ban else ("<RET>", False))


def test_adapt_threshold_rule_and_its_nr_fallback():
    gate, gen, _ = _gate(gate_rule="threshold", ret_threshold=0.35)
    recs = _by_id(gate.run(_examples(), "adapt_llm"))
    assert [q for q, r in recs.items() if r.retrieved] == ["b", "c"]
    # d said <RET> but p(<RET>) 0.30 <= 0.35: answered with the NR prompt, as the authors' script does
    assert recs["d"].output == "Oslo" and never_retrieve_prompt("Question d?") in gen.prompts
    assert recs["c"].output == "Milan" and not recs["c"].correct


def test_never_always_popularity():
    gate, gen, ret = _gate()
    nr = _by_id(gate.run(_examples(), "never_retrieve"))
    assert not any(r.retrieved for r in nr.values()) and ret.queries == []
    assert [r.output for r in nr.values()] == ["Paris", "Lyon", "Rome", "Oslo"]
    ar = _by_id(gate.run(_examples(), "always_retrieve"))
    assert all(r.retrieved for r in ar.values()) and [r.output for r in ar.values()] == [
        "Paris", "Toulouse", "Milan", "Bergen"]
    gate.cfg.popularity_threshold = 1e4
    pop = _by_id(gate.run(_examples(), "popularity"))
    assert [q for q, r in pop.items() if r.retrieved] == ["b", "d"]
    with pytest.raises(ValueError, match="popularity"):
        gate.run([QAExample(id="a", question="Question a?", answers=["Paris"])], "popularity")


def test_same_record_type_and_fields_for_every_policy():
    gate, _, _ = _gate()
    for policy in ("adapt_llm", "never_retrieve", "always_retrieve", "popularity", "sweep"):
        recs = gate.run(_examples(), policy)
        assert all(type(r) is GateRecord for r in recs)
        assert set(recs[0].__dict__) == set(GateRecord("x", "q", ["a"]).__dict__)


def test_sweep_redecides_like_separate_runs():
    gate, _, _ = _gate(popularity_threshold=1e4)
    sweep = gate.run(_examples(), "sweep")
    assert all(r.parametric_output and r.closed_book_output and r.context_output for r in sweep)
    for policy in ("adapt_llm", "never_retrieve", "always_retrieve", "popularity"):
        direct = gate.run(_examples(), policy)
        offline = redecide(sweep, policy, gate.cfg)
        assert [(r.output, r.retrieved, r.correct) for r in offline] == [(r.output, r.retrieved, r.correct)
                                                                           for r in direct]
    with pytest.raises(ValueError, match="run the gate with policy 'sweep'"):
        redecide(gate.run(_examples(), "never_retrieve"), "always_retrieve")


def test_summary_by_hand():
    gate, _, _ = _gate()
    s = summarize(gate.run(_examples(), "adapt_llm"))  # retrieved b (right), d (wrong); a, c right without
    assert s == {"n": 4, "accuracy": 0.75, "retrieval_share": 0.5, "n_retrieved": 2, "accuracy_retrieved": 0.5,
                 "accuracy_not_retrieved": 1.0}
    nr = summarize(gate.run(_examples(), "never_retrieve"))
    assert nr["accuracy_retrieved"] is None and nr["accuracy"] == 0.5
    table = format_table({"NR": nr, "ADAPT": s})
    assert "ADAPT" in table and "75.0" in table and "    -" in table


def test_threshold_sweep_offline():
    gate, gen, _ = _gate()
    sweep = gate.run(_examples(), "sweep")
    n_prompts = len(gen.prompts)
    rows = sweep_threshold(sweep, [0.0, 0.35, 0.95])
    assert len(gen.prompts) == n_prompts  # nothing generated again
    assert [r["n_retrieved"] for r in rows] == [4, 2, 0]
    # t=0.35: retrieve b, c -> Toulouse (right), Milan (wrong); a Paris right; d falls back to NR "Oslo" (wrong)
    assert rows[1]["accuracy"] == 0.5 and rows[1]["threshold"] == 0.35
    assert rows[2]["accuracy"] == 0.5  # nothing retrieved: a, c right; b, d via NR wrong


def test_bad_gate_config_and_missing_retriever():
    with pytest.raises(ValueError, match="ret_threshold"):
        GateConfig(ret_threshold=1.5)
    with pytest.raises(ValueError, match="policy"):
        GateConfig(policy="sometimes")
    gate = AdaptGate(StubGenerator(), None, GateConfig())
    with pytest.raises(ValueError, match="no retriever"):
        gate.run(_examples(), "always_retrieve")
    assert len(gate.run(_examples(), "never_retrieve")) == 4


@pytest.mark.slow
def test_end_to_end_real_smollm2(tmp_path, capsys):
    """Builder (real closed-book answers) + one training step + the gate, on a handful of world questions."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("adapt_llm_script", ROOT / "training" / "adapt_llm.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    config = tmp_path / "e2e.yaml"
    config.write_text(yaml.safe_dump({
        "data_dir": str(tmp_path / "data"), "dataset": "world-adapt-train", "limit": 6, "world_common_fraction": 0.5,
        "closed_book_max_new_tokens": 8, "closed_book_batch_size": 6, "validation_fraction": 0.0,
        "max_passage_words": 40, "output_dir": str(tmp_path / "model"), "micro_batch_size": 4,
        "effective_batch_size": 4, "max_steps": 1, "max_length": 192, "warmup_steps": 0, "eval_steps": None,
        "eval_limit": 4, "eval_max_new_tokens": 6}))
    from adaptive_rag.plumbing.cli import run_cli

    assert run_cli(script.main, argv=[str(config)]) == 0
    stats = json.loads((tmp_path / "data" / "stats.json").read_text())
    assert stats["questions"] == 6 and stats["base_model"] == "smollm2-135m"
    assert stats["instances"] == stats["correct"] + stats["ret_instances"] + stats["context_instances"]
    lines = (tmp_path / "model" / "eval" / "predictions.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 4 and all(0.0 <= r["p_ret"] <= 1.0 for r in records)
    assert all(r["context_output"] is not None and r["closed_book_output"] is not None for r in records)
    assert "ADAPT-LLM (token)" in capsys.readouterr().out
