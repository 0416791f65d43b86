"""The batch that fits the machine: a row's bytes by hand, the plan under a budget, the user's number, and an
out-of-memory error that halves the batch and still gives every answer a batch of 1 gives."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_llama

from adaptive_rag.plumbing.config import config_dict, parse_config
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.records import Passage, QAExample
from adaptive_rag.plumbing.retriever import Hit
from inference.commands import evaluate as ev
from inference.dynamic_rag import batch_plan as bp
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig

SHAPE = bp.ModelShape(layers=2, heads=4, kv_heads=2, head_dim=8, hidden=32, intermediate=64, vocab=100, dtype_bytes=4)
CPU, CUDA = torch.device("cpu"), torch.device("cuda")
QUESTIONS = [QAExample(f"q{i}", f"Who founded the city number {i} of the old kingdom?", ["x"]) for i in range(5)]


def test_kv_bytes_per_token_by_hand():
    assert SHAPE.kv_bytes_per_token == 2 * 2 * 2 * 8 * 4 == 256
    llama2_7b = bp.ModelShape(layers=32, heads=32, kv_heads=32, head_dim=128, hidden=4096, intermediate=11008,
                              vocab=32000, dtype_bytes=2)
    # the figure: a 512-token shared head expanded to 64 rows of a 7B model in bf16 is about 17 GB
    assert llama2_7b.kv_bytes_per_token == 524288 and 64 * 512 * llama2_7b.kv_bytes_per_token == 17_179_869_184


def test_row_bytes_by_hand():
    tokens = bp.RowTokens(head=10, own=20, new=5)
    # prefill KV 256·30 = 7680; running KV 256·25·1.5 = 9600, twice = 19200; activations 20·(4·32 + 3·64)·4 = 25600;
    # logits 3·100·4 = 1200
    assert bp.row_bytes(SHAPE, tokens, device_type="cuda", head_in_cache=False) == 53680
    # a copy of the head per row in the running cache: 256·35·1.5 = 13440, twice = 26880
    assert bp.row_bytes(SHAPE, tokens, device_type="cuda", head_in_cache=True) == 53680 - 19200 + 26880
    # CPU adds the prefill's scores 4·20·30·4 = 9600 and the kept attention rows 5·35·4 = 700 (heads reduced)
    assert bp.row_bytes(SHAPE, tokens, device_type="cpu", head_in_cache=False) == 53680 + 9600 + 700
    assert bp.row_bytes(SHAPE, tokens, device_type="cpu", head_in_cache=False, captured_heads=4) == 53680 + 9600 + 2800


def test_plan_fits_the_budget():
    tokens = bp.RowTokens(head=10, own=20, new=5)
    per_row = bp.row_bytes(SHAPE, tokens, device_type="cpu", head_in_cache=False)
    plan = bp.plan_batch("auto", SHAPE, tokens, CPU, budget_gb=2.5 * per_row / bp.GIB)
    assert (plan.size, plan.row_bytes, plan.chosen_by) == (2, per_row, f"memory_budget_gb {2.5 * per_row / bp.GIB:g}")
    assert bp.plan_batch("auto", SHAPE, tokens, CPU, budget_gb=1e-9).size == 1  # never below one row
    assert bp.plan_batch("auto", SHAPE, tokens, CPU, budget_gb=100).size == bp.AUTO_CAP["cpu"]
    assert bp.plan_batch("auto", SHAPE, tokens, CUDA, budget_gb=100).size == bp.AUTO_CAP["cuda"]
    # bf16 below 32 rows keeps a copy of the head per row (adaptive_rag.lm.decoder.head_scored_once): fewer fit
    copies = bp.row_bytes(SHAPE, tokens, device_type="cpu", head_in_cache=True)
    plan = bp.plan_batch("auto", SHAPE, tokens, CPU, budget_gb=3.5 * copies / bp.GIB, head_scored_once=lambda r: False)
    assert (plan.size, plan.row_bytes) == (3, copies)
    user = bp.plan_batch("7", SHAPE, tokens, CPU)
    assert (user.size, user.chosen_by, user.record()) == (7, "batch_size", {"batch_size": 7, "chosen_by": "batch_size"})


def test_cuda_budget_is_the_free_memory(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * bp.GIB, 80 * bp.GIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 * bp.GIB)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 * bp.GIB)
    budget, source = bp.memory_budget(CUDA)
    assert (budget, source) == (int(11 * bp.GIB * bp.CUDA_USABLE), "free CUDA memory")
    assert bp.memory_budget(CUDA, 4) == (4 * bp.GIB, "memory_budget_gb 4")
    monkeypatch.setattr(bp, "available_ram", lambda: 8 * bp.GIB)
    assert bp.memory_budget(CPU) == (4 * bp.GIB, "half the available RAM")


@pytest.mark.parametrize("value, expected", [("auto", "auto"), ("AUTO", "auto"), ("8", 8), (8, 8)])
def test_batch_size_values(value, expected):
    assert bp.parse_batch_size(value) == expected


@pytest.mark.parametrize("value", ["0", -2, "many", 2.5, True, None, [4]])
def test_bad_batch_size_is_one_line(value):
    with pytest.raises(ValueError, match="batch_size must be auto or a positive whole number"):
        bp.parse_batch_size(value)


def test_batch_size_from_flags_and_yaml(tmp_path):
    types = (EngineConfig,)
    assert parse_config(types, [])[0].batch_size == "auto"
    assert parse_config(types, ["--batch_size", "8", "--memory_budget_gb", "1.5"])[0].batch_size == 8
    recipe = tmp_path / "r.yaml"
    recipe.write_text("batch_size: 12\n")
    assert parse_config(types, [str(recipe)])[0].batch_size == 12
    with pytest.raises(ConfigError, match="batch_size must be auto or a positive whole number, got '0'"):
        parse_config(types, ["--batch_size", "0"])
    recipe.write_text("batch_size: [4, 8]\n")
    with pytest.raises(ConfigError, match=r"batch_size must be auto or a positive whole number, got \[4, 8\]"):
        parse_config(types, [str(recipe)])
    with pytest.raises(ConfigError, match="argument --batch_size.*: batch_size must be auto or a positive whole"):
        parse_config(types, ["--batch_size", "lots"])


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                   RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't "
                                                "allocate memory: you tried to allocate 8589934592 bytes.")])
def test_out_of_memory_errors(error):
    assert bp.is_out_of_memory(error)


def test_other_errors_are_not_out_of_memory():
    assert not bp.is_out_of_memory(RuntimeError("shape mismatch")) and not bp.is_out_of_memory(ValueError("memory"))


class QueryKeyedRetriever:
    """One passage per query, named after the query (the order of searches, which the batch changes, does not
    matter)."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [[Hit(Passage(f"doc-{q}", "Doc", f"About {q}."), 1.0)] for q in queries]


def _engine(tokenizer, batch_size, **engine):
    # FL-RAG retrieving with the question, then every 4 tokens: every question has rounds in flight to cut short
    method = MethodConfig(method="fl-rag", top_k=1, fixed_length=4, fixed_question_first=True)
    return DynamicRAGEngine(tiny_llama(len(tokenizer)), tokenizer, QueryKeyedRetriever(), PromptBuilder(tokenizer,
                            PromptConfig(prompt_style="paper", num_demos=1)), method,
                            EngineConfig(batch_size=batch_size, max_new_tokens=10, **engine))


def _failing(fn, calls: set[int]):
    """``fn`` that runs out of memory on the listed calls (counted from 1), as a batch that does not fit would."""
    count = [0]

    def call(*args, **kwargs):
        count[0] += 1
        if count[0] in calls:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return fn(*args, **kwargs)
    return call


def _answers(records):
    return [(r.id, r.output, [(x.query, x.position, x.doc_ids) for x in r.retrievals], r.generated_tokens,
             r.llm_forward_passes, r.rounds) for r in records]


def test_small_budget_plans_one_or_two_rows(smol_tokenizer):
    engine = _engine(smol_tokenizer, "auto")
    assert engine.batch.chosen_by == "half the available RAM" and engine.batch_size == bp.AUTO_CAP["cpu"]
    row_gb = engine.batch.row_bytes / bp.GIB
    small = _engine(smol_tokenizer, "auto", memory_budget_gb=1.5 * row_gb)
    assert small.batch_size == 1 and small.decoder.max_batch == 1
    assert _engine(smol_tokenizer, "auto", memory_budget_gb=2.5 * row_gb).batch_size == 2


def test_out_of_memory_halves_and_answers_as_batch_one(smol_tokenizer, caplog):
    expected = _answers(_engine(smol_tokenizer, 1).run(QUESTIONS, show_progress=False))
    engine = _engine(smol_tokenizer, 4)
    engine.decoder.admit = _failing(engine.decoder.admit, {1})  # the first batch's prefill does not fit
    seen = {}
    answer, step = engine._answer, engine.decoder.step
    engine._answer = lambda states, bar: (seen.update(states=states), answer(states, bar))[1]

    def step_at_two():  # at batch 2, once a question is answered, a decode step meets the CPU allocator's error
        if engine.batch_size == 2 and any(st.output is not None for st in seen["states"]):
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes")
        return step()

    engine.decoder.step = step_at_two
    with caplog.at_level("WARNING"):
        records = engine.run(QUESTIONS, show_progress=False)
    assert _answers(records) == expected
    assert engine.batch.halvings[0] == {"from": 4, "to": 2, "questions_answered": 0}
    assert engine.batch.halvings[1]["from"] == 2 and engine.batch.halvings[1]["to"] == 1
    assert 0 < engine.batch.halvings[1]["questions_answered"] < len(QUESTIONS)  # those answered were kept
    assert engine.batch.record()["halvings"] == engine.batch.halvings and engine.batch_size == 1
    assert "out of memory at batch 4: halved to 2; 0 answered questions kept, the other 5 run again" in caplog.text


def test_out_of_memory_at_batch_one_is_raised(smol_tokenizer):
    engine = _engine(smol_tokenizer, 1)
    engine.decoder.admit = _failing(engine.decoder.admit, {1})
    with pytest.raises(torch.OutOfMemoryError):
        engine.run(QUESTIONS[:1], show_progress=False)


def test_other_errors_are_not_retried(smol_tokenizer):
    engine = _engine(smol_tokenizer, 2)
    engine.decoder.step = lambda: (_ for _ in ()).throw(RuntimeError("shape mismatch"))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        engine.run(QUESTIONS[:2], show_progress=False)
    assert engine.batch.halvings == []


def test_metrics_record_the_batch(tmp_path, smol_tokenizer, monkeypatch):
    """evaluate's metrics.json says which batch ran and how it was chosen; a resumed run on another plan goes on."""
    from adaptive_rag.lm import models

    monkeypatch.setattr(models, "load_causal_lm", lambda name, opts=None: (tiny_llama(len(smol_tokenizer)),
                                                                           smol_tokenizer))
    out = tmp_path / "run"
    cfg = ev.EvalConfig(dataset="world-two-hop", limit=2, output_dir=str(out), show_progress=False)
    metrics = ev.evaluate(cfg, MethodConfig(method="fl-rag"), PromptConfig(),
                          EngineConfig(max_new_tokens=4, memory_budget_gb=1e-6))
    assert metrics["batching"] == {"batch_size": 1, "chosen_by": "memory_budget_gb 1e-06",
                                   "budget_gib": 0.0, "row_gib": metrics["batching"]["row_gib"]}
    cfg = ev.EvalConfig(dataset="world-two-hop", limit=3, output_dir=str(out), show_progress=False)
    metrics = ev.evaluate(cfg, MethodConfig(method="fl-rag"), PromptConfig(), EngineConfig(batch_size=3,
                                                                                           max_new_tokens=4))
    assert metrics["n"] == 3 and metrics["batching"] == {"batch_size": 3, "chosen_by": "batch_size"}


def test_out_of_memory_while_forcing_answers_reruns_those_questions(smol_tokenizer):
    """answer_extraction dragin forces an answer after " So the answer is" in a second pass; an error there reruns
    the questions whose forced answer is not written yet, from their start, and keeps the others."""
    def engine(batch_size):
        method = MethodConfig(method="fl-rag", top_k=1, fixed_length=4, fixed_question_first=True,
                              answer_extraction="dragin")
        return DynamicRAGEngine(tiny_llama(len(smol_tokenizer)), smol_tokenizer, QueryKeyedRetriever(),
                                PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", num_demos=1)), method,
                                EngineConfig(batch_size=batch_size, max_new_tokens=10))

    expected = _answers(engine(1).run(QUESTIONS, show_progress=False))
    failing = engine(4)
    seen = {}
    answer, step = failing._answer, failing.decoder.step
    failing._answer = lambda states, bar: (seen.update(states=states), answer(states, bar))[1]

    def step_while_forcing():
        forced = [st for st in seen["states"] if st.regenerating]
        if forced and failing.batch_size == 4 and any(st.output is not None for st in forced):
            raise torch.OutOfMemoryError("CUDA out of memory")
        return step()

    failing.decoder.step = step_while_forcing
    records = failing.run(QUESTIONS, show_progress=False)
    assert _answers(records) == expected and failing.batch.halvings[0]["from"] == 4


def test_iter_retgen_takes_the_planned_batch(smol_tokenizer):
    model, method = tiny_llama(len(smol_tokenizer)), MethodConfig(method="iter-retgen", top_k=1, iterations=1)
    run = ev.iter_retgen_runner(model, smol_tokenizer, QueryKeyedRetriever(), method, PromptConfig(),
                                EngineConfig(max_new_tokens=4, memory_budget_gb=1e-6))
    assert (run.batch_plan.size, run.batch_plan.chosen_by) == (1, "memory_budget_gb 1e-06")
    assert len(run(QUESTIONS[:2])) == 2
    fixed = ev.iter_retgen_runner(model, smol_tokenizer, QueryKeyedRetriever(), method, PromptConfig(),
                                  EngineConfig(batch_size=3))
    assert fixed.batch_plan.record() == {"batch_size": 3, "chosen_by": "batch_size"}
    # a model whose config gives no shape (a custom model, a test double) runs at the old fixed batch
    assert bp.plan_generator_batch("auto", object(), prompt_tokens=10, top_k=1, new_tokens=4).size == bp.DEFAULT_CAP


def test_a_sweep_over_batch_sizes_is_checked_before_it_runs(tmp_path):
    from inference.commands import sweep

    types = ev.CONFIG_TYPES
    sweep.check_grid({"batch_size": [1, "auto", "4"]}, [], types, "r.yaml")  # numbers as YAML gives them, or text
    settings = {**config_dict(*(t() for t in types)), "output_dir": str(tmp_path)}
    assert [p.values["batch_size"] for p in sweep.expand(settings, {"batch_size": [2, "auto"]}, types)] == [2, "auto"]
    with pytest.raises(ConfigError, match="sweep point batch_size=0: batch_size must be auto or a positive whole"):
        sweep.expand(settings, {"batch_size": [2, 0]}, types)  # every point is built before the first runs
    assert not any(tmp_path.iterdir())
