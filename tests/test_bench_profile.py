"""The benchmarks' shared pieces and the profile they print: exclusive section times, the tokenizer patch undone,
the baseline's replay unchanged by profiling. Speed is measured in bench/, never asserted here."""

from __future__ import annotations

from dataclasses import replace

import pytest
from bench_modules import bench_module
from scripted_lm import scripted_llama

from adaptive_rag.lm import profiling
from adaptive_rag.lm.decoder import BatchDecoder, Sequence
from adaptive_rag.lm.profiling import ModelCall, Profile
from adaptive_rag.plumbing.records import QAExample
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig


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


@pytest.mark.parametrize("head_once", [True, False])
def test_decode_steps_read_the_shared_head_once(tiny_model, smol_tokenizer, head_once):
    head = [11, 12, 13, 14]  # scored once for the batch, or copied into each row's cache: read once either way
    dec = BatchDecoder(tiny_model, smol_tokenizer, shared_prefix_ids=head, head_once=head_once)
    dec.stop_token_ids = set()
    dec.profile = p = Profile()
    dec.admit([Sequence(0, head + [5, 6], max_new_tokens=2), Sequence(1, head + [7], max_new_tokens=2)])
    dec.step()
    [(phase, tokens, logits, pairs, read, _)] = [c for c in p.calls if c.phase == "decode"]
    # own tokens after the head: 2 + 1 prompt, + 1 fed each; each row scores head + own; the head is read once
    assert (tokens, logits) == (2, 2)
    assert pairs == (4 + 3) + (4 + 2) and read == 4 + 3 + 2


def test_reference_replay_is_the_same_with_a_profile(smol_tokenizer, fake_retriever):
    DraginReplay = bench_module("dragin_replay").DraginReplay
    prompts = PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", num_demos=1))
    model = scripted_llama(smol_tokenizer, " Osk founded Kelmora. Then he left:")
    method = MethodConfig(method="dragin", theta=0.0, max_rounds=2)
    question = [QAExample("q", "Who founded Kelmora?", ["Osk"])]
    plain, _ = DraginReplay(model, smol_tokenizer, fake_retriever, prompts, method, max_new_tokens=12).run(question)
    ref = DraginReplay(model, smol_tokenizer, fake_retriever, prompts, method, max_new_tokens=12)
    ref.profile = p = Profile()
    profiled, _ = ref.run(question)
    assert [r["output"] for r in profiled] == [r["output"] for r in plain]
    assert [x["query"] for x in profiled[0]["retrievals"]] == [x["query"] for x in plain[0]["retrievals"]]
    assert profiled[0]["retrievals"], "the replay should retrieve"
    for section in ("prefill", "decode", "attention_pass", "retrieval", "signals", "prompts"):
        assert p.seconds[section] > 0, section
    assert p.counts["prefill_tokens"] > 0 and p.counts["attention_pass_tokens"] > p.counts["prefill_tokens"]


def test_authors_pattern_passes_cover_the_text_not_the_prompt(smol_tokenizer, fake_retriever):
    """RIND's pass covers the round's generated text only, QFS's question + answer so far (no demos, no documents);
    each ``generate`` prefills the whole prompt."""
    AuthorsPatternDragin = bench_module("dragin_authors_pattern").AuthorsPatternDragin
    prompts = PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", num_demos=1))
    model = scripted_llama(smol_tokenizer, " Osk founded Kelmora. Then he left:")
    method = MethodConfig(method="dragin", theta=0.0, max_rounds=2)
    question = QAExample("q", "Who founded Kelmora?", ["Osk"])
    authors = AuthorsPatternDragin(model, smol_tokenizer, fake_retriever, prompts, method, max_new_tokens=12)
    seen = []
    real = authors._attention_rows
    authors._attention_rows = lambda ids, prompt_len: (seen.append((list(ids), prompt_len)), real(ids, prompt_len))[1]
    authors.profile = p = Profile()
    [record], _ = authors.run([question])
    assert record["retrievals"], "theta 0 should retrieve"
    rind, qfs = seen[0], seen[1]
    assert rind[1] == 0 and smol_tokenizer.decode(rind[0]).startswith(" Osk")  # SmolLM2 adds no BOS
    qfs_text = smol_tokenizer.decode(qfs[0])
    assert qfs_text.startswith("Who founded Kelmora?") and "Osk" in qfs_text[len("Who founded Kelmora?"):]
    assert qfs[1] == len(smol_tokenizer("Who founded Kelmora?", add_special_tokens=False)["input_ids"])
    demo = prompts.build(question.question, []).text.split("Who founded Kelmora?")[0]
    assert len(smol_tokenizer(demo)["input_ids"]) > 20  # the demos are long; no pass holds them
    assert all(len(ids) <= 12 + qfs[1] for ids, _ in seen)
    prefills = [c for c in p.calls if c.phase == "prefill"]
    assert prefills and all(c.tokens > len(smol_tokenizer(demo)["input_ids"]) for c in prefills)
    assert p.counts["attention_pass_tokens"] == sum(len(ids) for ids, _ in seen)


def call(phase: str, tokens: int, logits: int, pairs: int, read: int | None = None) -> ModelCall:
    return ModelCall(phase, tokens, logits, pairs, pairs if read is None else read)


def hand_probe():
    """2 layers; one layer's linears 1 s per row up to 4 rows, then flat 4 s (1 s per token saturated at 4 rows); LM
    head 0.5 s at any rows; attention 10 FLOPs per pair per layer at the saturated rate of 100 FLOP/s."""
    return bench_module("compute_bound").MatmulProbe(
        rows=(1, 2, 4), layer_seconds=[1.0, 2.0, 4.0], head_seconds=[0.5, 0.5, 0.5], layer_flops_per_row=100.0,
        head_flops_per_row=1000.0, layers=2, attention_flops_per_pair=10.0)


def test_compute_bound_prices_each_call_by_hand():
    cb = bench_module("compute_bound")
    probe = hand_probe()
    assert probe.layer_time(3) == 3.0 and probe.layer_time(8) == 8.0 and probe.saturated_rate == 100.0
    # a wide product slowed during the probe does not lower the saturated rate: the best wide product's counts
    slowed = cb.MatmulProbe(rows=(1, 64, 128), layer_seconds=[1.0, 64.0, 256.0], head_seconds=[1.0, 1.0, 1.0],
                            layer_flops_per_row=100.0, head_flops_per_row=1.0, layers=1, attention_flops_per_pair=1.0)
    assert slowed.per_token_saturated == 1.0 and slowed.saturated_rate == 100.0
    calls = [call("decode", 2, 2, 5), call("prefill", 3, 1, 6), call("attention_pass", 8, 8, 36)]
    got = cb.bound(calls, probe)
    # decode: 2 layers x 2 s + head 0.5 + 2 x 10 x 5 FLOPs / 100 = 5.5
    assert got["decode"] == {"calls": 1, "tokens": 2, "gflop": (2 * 100 * 2 + 1000 * 2 + 100) / 1e9, "kv_gb": 0.0,
                             "bound_s": 5.5}
    # prefill: 3 tokens at the saturated 2 x 1 s per token + head 0.5 + 120 / 100
    assert got["prefill"]["bound_s"] == 6.0 + 0.5 + 1.2
    # a pass over 8 tokens: 16 s + head at 8 rows (0.5 x 8 / 4 = 1.0) + 720 / 100
    assert got["attention_pass"]["bound_s"] == 16.0 + 1.0 + 7.2
    assert cb.bound([], probe)["decode"]["bound_s"] == 0.0


def test_compute_bound_reads_the_kv_cache_at_the_memory_rate_by_hand():
    cb = bench_module("compute_bound")
    # 2 layers, a one-row pass over both takes 2 x 1 s and reads 200 bytes of weights: 100 bytes/s; each cached
    # position holds 10 bytes (keys and values of both layers); attention 10 FLOPs per pair per layer at 100 FLOP/s
    probe = cb.MatmulProbe(rows=(1, 2, 4), layer_seconds=[1.0, 2.0, 4.0], head_seconds=[0.5, 0.5, 0.5],
                           layer_flops_per_row=100.0, head_flops_per_row=1000.0, layers=2,
                           attention_flops_per_pair=10.0, kv_bytes_per_position=10.0, weight_bytes=200.0,
                           one_layer_seconds=[0.5, 1.0, 2.0])
    assert probe.memory_rate == 100.0
    # a plain streaming read faster than the weights' one-row pass (a kernel slow at one row) sets the cache's rate
    assert replace(probe, stream_bytes_per_second=250.0).memory_rate == 250.0
    # 2 rows scoring 50 pairs, 30 distinct positions read (a shared head counted once): 300 bytes / 100 = 3 s,
    # shorter than the attention FLOPs (2 layers x 10 x 50 = 1000 FLOPs / 100 = 10 s), so the FLOPs count here
    got = cb.bound([call("decode", 2, 2, 50, 30)], probe)["decode"]
    assert got["kv_gb"] == 300 / 1e9 and got["bound_s"] == 2 * 2.0 + 0.5 + 10.0
    # few pairs, many positions (a long cache read by one row): the reads dominate: 2 + 0.5 + 1000 x 10 / 100
    got = cb.bound([call("decode", 1, 1, 5, 1000)], probe)["decode"]
    assert got["bound_s"] == 2 * 1.0 + 0.5 + 100.0
    # a call recorded without its reads: every pair is a position read
    recorded = Profile()
    recorded.work("decode", 1, 1, 1000)
    assert cb.bound(recorded.calls, probe)["decode"]["kv_gb"] == 10000 / 1e9
    # the FLOP-only bound: one layer alone (0.5 s at one row; 0.5 s per row at 4 rows: 200 FLOP/s saturated), no
    # reads: 2 x 0.5 + head 0.5 + 2 x 10 x 5 FLOPs / 200
    assert cb.flop_bound([call("decode", 1, 1, 5, 1000)], probe) == 2 * 0.5 + 0.5 + 2 * 10 * 5 / 200
    # prefill is priced as before (no memory term)
    assert cb.bound([call("prefill", 3, 1, 6)], probe)["prefill"]["bound_s"] == 6.0 + 0.5 + 1.2


@pytest.mark.parametrize("runner", ["dragin_replay", "dragin_authors_pattern"])
def test_baselines_stop_generating_at_the_paper_prompts_stop(runner, smol_tokenizer, fake_retriever):
    cls = {"dragin_replay": "DraginReplay", "dragin_authors_pattern": "AuthorsPatternDragin"}[runner]
    Baseline = getattr(bench_module(runner), cls)
    prompts = PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", num_demos=1))
    script = " Osk left.\nQuestion:"  # after the prompt's "Answer:" the model writes it, then again and again
    model = scripted_llama(smol_tokenizer, script)
    method = MethodConfig(method="dragin", theta=1e9, max_rounds=2)  # never retrieves: one round
    baseline = Baseline(model, smol_tokenizer, fake_retriever, prompts, method, max_new_tokens=30)
    [record], _ = baseline.run([QAExample("q", "Who left?", ["Osk"])])
    assert record["output"] == "Osk left."
    # generate ended once "Question:" was written (the engine's stop), not at the 30-token budget: its forward
    # passes (one per written token) plus the one attention pass over the round's text
    to_stop = len(smol_tokenizer(" Osk left.\nQuestion:", add_special_tokens=False)["input_ids"])
    assert baseline.forward_passes <= to_stop + 1


def test_bound_figures_show_the_decode_tail(capsys):
    bench, probe = bench_module("dynamic_rag"), hand_probe()
    p = Profile()
    p.cpu_seconds = 3.0
    for rows in (4, 3, 2, 1):  # a batch of 4 draining: half the steps run one or two rows
        p.work("decode", rows, rows, 10 * rows)
    got = bench.bound_figures("engine", [p], probe, wall=40.0)
    assert got["engine_decode_steps"] == 4 and got["engine_decode_rows_mean"] == 2.5
    assert got["engine_decode_steps_share_1_2_rows"] == 0.5
    results = {**got, "engine_seconds": 40.0, "engine_prefill_s": 0.0, "engine_decode_s": 30.0,
               "engine_attention_pass_s": 0.0}
    bench.print_bound(results, ["engine"], probe, batch=4)
    assert "4 (2.5, 50%)" in capsys.readouterr().out


def test_distance_by_rows_prices_each_group_of_calls_by_hand(capsys):
    bench, probe = bench_module("dynamic_rag"), hand_probe()
    p = Profile()
    p.work("prefill", 3, 1, 6, seconds=15.4)  # bound 2 x 3 + 0.5 + 1.2 = 7.7
    p.work("decode", 1, 1, 5, seconds=11.0)  # bound 2 x 1 + 0.5 + 1.0 = 3.5
    p.work("decode", 2, 2, 5, seconds=7.0)  # bound 2 x 2 + 0.5 + 1.0 = 5.5
    p.work("decode", 12, 12, 0, seconds=30.0)  # 12 rows: 2 x 12 + 0.5 x 12 / 4 = 25.5
    p.work("decode", 1, 1, 5)  # not timed on its own (a step inside generate): left out
    baseline = Profile()
    baseline.work("decode", 1, 1, 5)
    assert bench.timed_calls([p]) and not bench.timed_calls([baseline])  # only the engine gets the table
    got = bench.distance_by_rows("engine", [p], probe)
    assert got["engine_prefill_rows_1_2_calls"] == 1 and got["engine_prefill_rows_1_2_over_bound"] == 2.0
    assert (got["engine_decode_rows_1_2_calls"], got["engine_decode_rows_1_2_wall_s"],
            got["engine_decode_rows_1_2_bound_s"], got["engine_decode_rows_1_2_over_bound"]) == (2, 18.0, 9.0, 2.0)
    assert got["engine_decode_rows_9_up_bound_s"] == 25.5 and "engine_decode_rows_3_8_calls" not in got
    bench.print_distance_by_rows(got, ["engine"])
    out = capsys.readouterr().out
    assert "decode, 1-2 rows" in out and "2 / 18.00 / 9.00 / x2.00" in out and "decode, 3-8 rows" not in out


def test_decoder_times_each_of_its_model_calls(tiny_model, smol_tokenizer):
    dec = BatchDecoder(tiny_model, smol_tokenizer, shared_prefix_ids=[11, 12, 13])
    dec.profile = p = Profile()
    dec.set_shared_prefix([11, 12, 13])
    dec.admit([Sequence(0, [11, 12, 13, 5, 6], max_new_tokens=2), Sequence(1, [8], max_new_tokens=2)])
    while dec.active:
        dec.step()
    assert p.calls and all(c.seconds is not None and c.seconds > 0 for c in p.calls)
    for phase in ("prefill", "decode"):  # a call's own time: no more than the section around it
        assert sum(c.seconds for c in p.calls if c.phase == phase) <= p.seconds[phase]


def test_operator_table_names_the_operators_a_run_spent_its_time_in(tmp_path):
    import torch

    harness = bench_module("harness")
    a = torch.randn(64, 64)
    table = harness.operator_table(lambda: [a @ a for _ in range(3)], tmp_path / "ops" / "table.txt")
    assert "aten::mm" in table and (tmp_path / "ops" / "table.txt").read_text(encoding="utf-8").strip() == table.strip()
