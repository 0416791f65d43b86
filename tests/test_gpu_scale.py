"""bench/gpu_scale.py, the GPU scale benchmark, on its tiny shape on the CPU: the same code a GPU run takes, the
fixed generation length it relies on, and its figures. Speed is measured on a GPU, never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from bench_modules import bench_module

from adaptive_rag.lm.decoder import stop_token_ids

ROOT = Path(__file__).resolve().parents[1]


def test_random_model_has_the_shape_and_cannot_stop_early(smol_tokenizer):
    scale = bench_module("gpu_scale")
    model = scale.random_model("tiny", smol_tokenizer, torch.device("cpu"), torch.bfloat16)
    assert model.dtype == torch.bfloat16 and not model.config.tie_word_embeddings  # Llama-2's untied head
    assert model.config.num_hidden_layers == 2 and model.lm_head.weight.shape[0] == len(smol_tokenizer)
    stops = sorted(stop_token_ids(smol_tokenizer) | {smol_tokenizer.eos_token_id})
    assert torch.count_nonzero(model.lm_head.weight[stops]) == 0
    others = torch.ones(len(smol_tokenizer), dtype=torch.bool)
    others[stops] = False
    assert bool((model.lm_head.weight[others] != 0).any(dim=1).all())  # every other row keeps its weights


def test_the_7b_shape_is_llama_2_7b():
    shape = bench_module("gpu_scale").SHAPES["llama-2-7b"]
    h, inter, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    per_layer = 4 * h * h + 3 * h * inter  # attention (no grouping) + gated MLP
    assert (shape["num_attention_heads"], shape["num_key_value_heads"]) == (32, 32)
    assert abs(layers * per_layer + 2 * 32000 * h - 6.74e9) < 0.01e9  # Llama-2-7B with its own 32,000 vocabulary


def test_the_bench_runs_on_the_cpu_and_writes_its_figures(tmp_path):
    out = tmp_path / "scale.json"
    done = subprocess.run([sys.executable, "bench/gpu_scale.py", "--shape", "tiny", "--device", "cpu", "--dtype",
                           "float32", "--questions", "3", "--questions-at-batch-1", "2", "--batch-sizes", "2,1",
                           "--max-new-tokens", "5", "--threads", "1", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    fig = json.loads(out.read_text())
    assert fig["batch_1_questions"] == 2 and fig["batch_2_questions"] == 3
    for batch in (1, 2):  # every question generated the fixed length, nothing retrieved
        assert fig[f"batch_{batch}_tokens_per_q"] == 5 and fig[f"batch_{batch}_short_answers"] == 0
        assert fig[f"batch_{batch}_retrievals"] == 0
    assert fig["ratio"] == fig["batch_1_seconds_per_q"] / fig["batch_2_seconds_per_q"]
    assert fig["published_ratio"] == 7.73 / fig["batch_2_seconds_per_q"]
    assert "x the published 7.73 s" in done.stdout


def test_the_bench_refuses_cuda_without_a_gpu_and_bad_batch_sizes():
    if torch.cuda.is_available():
        return
    for extra, message in ((["--shape", "tiny"], "no CUDA device here"),
                           (["--device", "cpu", "--batch-sizes", "1,x"], "must be integers")):
        done = subprocess.run([sys.executable, "bench/gpu_scale.py", *extra], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2 and message in done.stderr, done.stderr[-1000:]
