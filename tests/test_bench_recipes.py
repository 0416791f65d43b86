"""bench/adapt_ret_token.py and bench/distill_candidates.py: their figures on hand-made answers, their mistakes in
one line, and each run end to end, tiny (a random Llama with SmolLM2's tokenizer, a random encoder over a few world
passages). The measured runs are in docs/measurements_recipes.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from bench_modules import bench_module

from adaptive_rag.lm.models import load_tokenizer
from adaptive_rag.plumbing.question_set import QuestionSet
from data_builders.question_loader import load_questions


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory) -> Path:
    """A random two-layer Llama saved with SmolLM2's tokenizer: loadable by path as a base model and generator."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer("smollm2-135m")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True, bos_token_id=1,
                      eos_token_id=2, pad_token_id=2, max_position_embeddings=512)
    out = tmp_path_factory.mktemp("tiny_lm")
    LlamaForCausalLM(cfg).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _run_bench(module, monkeypatch, argv: list[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["bench", *argv])
    module.main()


def _answers(nr, ar, adapt, retrieved, kind=None, p_ret=None):
    n = len(nr)
    return {"nr": nr, "ar": ar, "adapt": adapt, "retrieved": retrieved, "kind": kind or ["all"] * n,
            "p_ret": p_ret or [0.0] * n, "ids": [f"q{i}" for i in range(n)]}


def test_ret_token_figures_are_the_means_and_a_perfect_p_ret_has_auroc_one():
    bench = bench_module("adapt_ret_token")
    q = _answers(nr=[True, False, False, True], ar=[True, True, True, False], adapt=[True, True, False, True],
                 retrieved=[False, True, True, False], kind=["common", "fictional", "fictional", "common"],
                 p_ret=[0.1, 0.9, 0.8, 0.2])
    fig = bench.arm_figures(q, resamples=200)
    assert (fig["n"], fig["nr_acc"], fig["ar_acc"], fig["adapt_acc"]) == (4, 0.5, 0.75, 0.75)
    assert fig["retrieval_share"] == 0.5
    assert fig["retrieval_share_fictional"] == 1.0 and fig["retrieval_share_common"] == 0.0
    assert fig["p_ret_auroc"] == 1.0  # the two closed-book misses have the two highest p(<RET>)
    assert 0.0 <= fig["nr_acc_lo"] <= 0.5 <= fig["nr_acc_hi"] <= 1.0


def test_ret_token_paired_difference_is_per_question():
    bench = bench_module("adapt_ret_token")
    a = _answers([True] * 4, [True] * 4, [True, True, True, False], [True, True, False, False])
    b = _answers([True] * 4, [True] * 4, [False, False, True, False], [True, False, False, False])
    diff = bench.paired(a, b, resamples=200)
    assert diff["diff_adapt_acc"] == 0.5 and diff["diff_retrieval_share"] == 0.25
    assert diff["diff_nr_acc"] == diff["diff_nr_acc_lo"] == diff["diff_nr_acc_hi"] == 0.0  # same answers


def test_ret_token_arms_on_different_questions_end_in_one_line(capsys):
    bench = bench_module("adapt_ret_token")
    a = _answers([True], [True], [True], [True])
    b = {**a, "ids": ["other"]}
    with pytest.raises(SystemExit) as err:
        bench.paired(a, b, resamples=10)
    assert err.value.code == 2 and capsys.readouterr().err.startswith("error: the two arms evaluated different")


def test_adapt_ret_token_runs_both_arms_tiny_and_reads_them_back(tiny_lm, tmp_path, monkeypatch, capsys):
    bench = bench_module("adapt_ret_token")
    job = (f"--base_model {tiny_lm} --limit 6 --closed_book_max_new_tokens 2 --max_steps 1 --micro_batch_size 4 "
           "--effective_batch_size 4 --save_steps 1 --logging_steps 1 --eval_limit 3 --eval_max_new_tokens 2")
    out, report = tmp_path / "arms", tmp_path / "bench.json"
    argv = ["--output_dir", str(out), "--job_args", job, "--resamples", "50", "--json", str(report)]
    _run_bench(bench, monkeypatch, argv)
    printed = capsys.readouterr().out
    assert "ADAPT-LLM acc" in printed and "text - special, paired" in printed
    figures = json.loads(report.read_text())
    assert figures["special_n"] == figures["text_n"] == 3
    assert -1.0 <= figures["difference"] <= 1.0 and figures["difference"] == figures["diff_adapt_acc"]
    assert figures["text_wall_s"] > 0
    assert json.loads((out / "text" / "model" / "ret_token.json").read_text())["ret_token"] == "text"

    _run_bench(bench, monkeypatch, argv)
    assert capsys.readouterr().out.count("read as is") == 2  # a finished evaluation is read, not trained again
    assert json.loads(report.read_text())["difference"] == figures["difference"]


@pytest.fixture(scope="module")
def tiny_world_index(tiny_encoder, tmp_path_factory) -> Path:
    """The gold passages of the first eight two-hop questions and a few others, under the random encoder."""
    from data_builders.world import WorldConfig, build_world
    from retrieval_adapt.dense import DenseRetriever
    from retrieval_adapt.encoders import MeanPoolingEncoder

    gold = {p.id: p for ex in load_questions(QuestionSet("world-two-hop", shuffle_seed=0, limit=8))
            for p in ex.gold_passages}
    others = [p for p in build_world(WorldConfig(seed=0)).passages if p.id not in gold][:6]
    folder = tmp_path_factory.mktemp("world_index") / "dense"
    DenseRetriever.build([*gold.values(), *others], MeanPoolingEncoder.from_name(str(tiny_encoder)),
                         show_progress=False).save(folder)
    return folder


def test_distill_candidates_runs_two_arms_tiny(tiny_lm, tiny_world_index, tmp_path, monkeypatch, capsys):
    bench = bench_module("distill_candidates")
    report = tmp_path / "bench.json"
    _run_bench(bench, monkeypatch, [
        "--index", str(tiny_world_index), "--output_dir", str(tmp_path / "arms"), "--arms", "y1q+eq3", "q16+softmax",
        "--earlier_candidates", "4", "--resamples", "50", "--json", str(report),
        "--data_args", f"--limit 4 --top_k 2 --max_new_tokens 2 --model {tiny_lm} --reranker_model {tiny_lm} "
                       "--validation_fraction 0.25 --no_show_progress",
        "--distill_args", "--max_steps 2 --batch_size 2 --eval_steps 1 --logging_steps 1",
        "--eval_args", "--start 4 --limit 4"])
    printed = capsys.readouterr().out
    assert "difference (recall@5, y1q+eq3 - q16+softmax, paired)" in printed
    figures = json.loads(report.read_text())
    assert figures["n_questions"] == 4
    assert figures["pool_y1q_mean_candidates"] == 2 and figures["pool_q16_mean_candidates"] == 4
    assert figures["difference"] == pytest.approx(figures["y1q+eq3_recall@5"] - figures["q16+softmax_recall@5"])
    assert 0.0 <= figures["base_recall@5"] <= 1.0


def test_distill_candidates_unknown_arm_is_one_line(monkeypatch, capsys):
    bench = bench_module("distill_candidates")
    with pytest.raises(SystemExit) as err:
        _run_bench(bench, monkeypatch, ["--arms", "y1q+eq3", "q5+eq3"])
    assert err.value.code == 2
    assert capsys.readouterr().err.strip() == ("error: --arms: unknown q5+eq3 (choose from y1q+eq3, y1q+softmax, "
                                               "q16+eq3, q16+softmax)")


@pytest.mark.parametrize(("argv", "message"), [
    (["--data_args", "--bogus 1"], "error: --data_args or its config: Some specified arguments are not used"),
    (["--recall_k", "3"], "error: --recall_k 3: the evaluation computes recall at [1, 5, 10] (recall_ks)")])
def test_distill_candidates_checks_every_command_before_building_anything(argv, message, tmp_path, monkeypatch,
                                                                          capsys):
    bench = bench_module("distill_candidates")
    index = tmp_path / "index"
    with pytest.raises(SystemExit) as err:
        _run_bench(bench, monkeypatch, ["--index", str(index), "--output_dir", str(tmp_path / "arms"), *argv])
    assert err.value.code == 2 and capsys.readouterr().err.startswith(message)
    assert not index.exists() and not (tmp_path / "arms").exists()  # no index built, no candidates
