"""The GPU check script and the GPU recipes, on a machine without CUDA: the script skips cleanly, its check code
runs on the CPU (so a GPU session spends its minutes on the GPU, not on a broken script), and every recipe parses
with its command's config classes and marks its memory and time as estimates."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_readme import program_types

from adaptive_rag.plumbing.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
RECIPES = {
    "training/configs/adapt_llm_llama2_7b_lora.yaml": "training/adapt_llm.py",
    "training/configs/adapt_llm_llama2_7b_qlora.yaml": "training/adapt_llm.py",
    "inference/configs/dragin_reference/llama2_7b_chat_hotpotqa.yaml": "inference.commands.evaluate",
    "inference/configs/iter_retgen_hotpotqa_contriever.yaml": "inference.commands.evaluate",
}


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the checks run for real")
def test_without_cuda_every_check_is_skipped_and_the_exit_status_is_0():
    done = subprocess.run([sys.executable, "bench/gpu_check.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "no CUDA device: every GPU check skipped" in done.stdout


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_gpu_recipes_parse_and_mark_their_estimates(recipe):
    text = (ROOT / recipe).read_text(encoding="utf-8")
    assert "ESTIMATES, NOT MEASURED" in text and "memory" in text and "time" in text
    if "sweep:" in text:
        import yaml

        from inference.commands import sweep

        assert sweep.is_sweep_recipe([str(ROOT / recipe)])
        assert set(yaml.safe_load(text)["sweep"]["method"]) == {"wo-rag", "sr-rag", "fl-rag", "fs-rag", "token-rag",
                                                                 "dragin"}  # token-rag: their FLARE row
        return
    parse_config(program_types(RECIPES[recipe]), [str(ROOT / recipe)])


def test_the_checks_code_runs_on_the_cpu(tmp_path, monkeypatch):
    """The training and engine checks, with the device switched to the CPU: the same commands and assertions."""
    check = _gpu_check()
    monkeypatch.setattr(check, "DEVICE", "cpu")
    monkeypatch.setattr(check, "DTYPE", "float32")
    monkeypatch.setattr(check, "PRECISION", "auto")
    assert "adapter check" in check.check_bf16_training(tmp_path)
    assert "retrievals fired" in check.check_engine_bf16(tmp_path)
    with pytest.raises(check.Skip, match="NCCL needs one GPU per process"):
        check.check_data_parallel(tmp_path)
