"""The benchmarks' shared pieces and the profile they print: exclusive section times, the tokenizer patch undone,
the baseline's replay unchanged by profiling. Speed is measured in bench/, never asserted here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from scripted_lm import scripted_llama

from adaptive_rag.lm import profiling
from adaptive_rag.lm.decoder import BatchDecoder, Sequence
from adaptive_rag.lm.profiling import Profile
from adaptive_rag.plumbing.records import QAExample
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_module(name: str):
    sys.path.insert(0, str(BENCH))  # as `python bench/NAME.py` has it
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_nested_sections_count_their_own_time_only(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(profiling.time, "perf_counter", clock)
    p = Profile()
    with p.section("outer"):
        clock.now += 2.0
        with p.section("inner"):
            clock.now += 3.0
        p.add("manual", 1.5)  # measured by the caller inside "outer"
        clock.now += 1.5  # (the caller's 1.5 s pass here)
        clock.now += 4.0
    with p.section("inner"):
        clock.now += 1.0
    assert dict(p.seconds) == {"outer": 2.0 + 4.0, "inner": 3.0 + 1.0, "manual": 1.5}
    p.count("tokens", 3)
    p.count("tokens")
    assert p.counts["tokens"] == 4


def test_format_table_aligns_columns():
    harness = bench_module("harness")
    text = harness.format_table(["run", "seconds"], [["reference", 12.345], ["engine", None]], floats=".1f")
    assert text.splitlines() == ["run        seconds", "reference     12.3", "engine           -"]


def test_write_json_keeps_figures_flat(tmp_path):
    harness = bench_module("harness")
    with pytest.raises(ValueError, match="must be flat, but profile hold objects"):
        harness.write_json(str(tmp_path / "x.json"), {"ratio": 2.0, "profile": {"prefill": 1.0}})
    harness.write_json(str(tmp_path / "sub" / "x.json"), {"ratio": 2.0, "runs": [1.0, 2.0]})
    assert (tmp_path / "sub" / "x.json").read_text().startswith("{")
    harness.write_json(None, {"ratio": 1.0})  # no --json: nothing written


def test_profiled_tokenizer_counts_calls_and_restores_the_class(smol_tokenizer):
    bench = bench_module("dynamic_rag")
    cls = type(smol_tokenizer)
    before = {name: cls.__dict__.get(name) for name in bench.TOKENIZER_METHODS}
    p = Profile()
    with bench.profiled_tokenizer(smol_tokenizer, p):
        ids = smol_tokenizer("Hello world")["input_ids"]
        assert smol_tokenizer.decode(ids) == "Hello world"
    assert p.seconds["tokenisation"] > 0
    assert {name: cls.__dict__.get(name) for name in bench.TOKENIZER_METHODS} == before


def test_decoder_profile_counts_prefill_and_decode(tiny_model, smol_tokenizer):
    dec = BatchDecoder(tiny_model, smol_tokenizer)
    dec.profile = p = Profile()
    dec.admit([Sequence(0, [5, 6, 7], max_new_tokens=2), Sequence(1, [8], max_new_tokens=2)])
    while dec.active:
        dec.step()
    assert p.counts["prefill_tokens"] == 4 and p.counts["prefill_padded_tokens"] == 6
    assert p.seconds["prefill"] > 0 and p.seconds["decode"] > 0 and p.seconds["cache"] > 0


def test_reference_replay_is_the_same_with_a_profile(smol_tokenizer, fake_retriever):
    ReferenceDragin = bench_module("dragin_reference").ReferenceDragin
    prompts = PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", num_demos=1))
    model = scripted_llama(smol_tokenizer, " Osk founded Kelmora. Then he left:")
    method = MethodConfig(method="dragin", theta=0.0, max_rounds=2)
    question = [QAExample("q", "Who founded Kelmora?", ["Osk"])]
    plain, _ = ReferenceDragin(model, smol_tokenizer, fake_retriever, prompts, method, max_new_tokens=12).run(question)
    ref = ReferenceDragin(model, smol_tokenizer, fake_retriever, prompts, method, max_new_tokens=12)
    ref.profile = p = Profile()
    profiled, _ = ref.run(question)
    assert [r["output"] for r in profiled] == [r["output"] for r in plain]
    assert [x["query"] for x in profiled[0]["retrievals"]] == [x["query"] for x in plain[0]["retrievals"]]
    assert profiled[0]["retrievals"], "the replay should retrieve"
    for section in ("prefill", "decode", "attention_pass", "retrieval", "signals", "prompts"):
        assert p.seconds[section] > 0, section
    assert p.counts["prefill_tokens"] > 0 and p.counts["attention_pass_tokens"] > p.counts["prefill_tokens"]
