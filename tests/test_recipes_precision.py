"""No shipped recipe pins a precision the machine it runs on may lack.

A recipe with ``dtype: bfloat16`` ran claim 4's data step at 616 s per batch of 16 questions on a CPU without
native bf16 (AVX2 only), where ``dtype: auto`` picks float32. Every YAML the repository ships (``git ls-files``) is
read: a half-precision or quantised setting, at any depth, is allowed only in a recipe that says it is for a GPU
(a comment naming GPU or CUDA), or in an accelerate launcher config that declares ``use_cpu: false``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# keys that choose a precision, and the values that run on any machine
PRECISION_KEYS = {"dtype", "torch_dtype", "precision", "mixed_precision", "compute_dtype", "bnb_4bit_compute_dtype",
                  "cpu_dtype", "model_dtype"}
PORTABLE = {"auto", "no", "none", "float32", "fp32", "32", "32-true", "float", "null"}
QUANTISED = {"load_in_4bit", "load_in_8bit", "fp16", "bf16"}  # true pins a CUDA-only load or autocast


def shipped_yaml() -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "*.yaml", "*.yml"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # an unpacked source tree without git
        listed = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.y*ml") if ".git" not in p.parts]
    return sorted(p for p in listed if (ROOT / p).is_file())


def pinned(data, where: str = "") -> list[str]:
    """``key: value`` of every setting in ``data`` (nested mappings and lists too) that pins a precision."""
    found = []
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{where}{key}"
            if isinstance(value, (dict, list)):
                found += pinned(value, path + ".")
            elif key in PRECISION_KEYS and str(value).strip().lower() not in PORTABLE and value is not None:
                found.append(f"{path}: {value}")
            elif key in QUANTISED and value is True:
                found.append(f"{path}: {value}")
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found += pinned(item, f"{where}[{i}].")
    return found


def says_gpu(text: str, data) -> bool:
    comments = " ".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    if re.search(r"\b(GPUs?|CUDA|A100|H100|A40)\b", comments, flags=re.I):
        return True
    return isinstance(data, dict) and "compute_environment" in data and data.get("use_cpu") is False


def test_the_recipes_are_found():
    files = shipped_yaml()
    for folder in ("bench/experiments/", "retrieval_adapt/configs/", "inference/configs/", "training/configs/"):
        assert any(f.startswith(folder) for f in files), folder


@pytest.mark.parametrize("path", shipped_yaml())
def test_no_recipe_pins_a_precision_the_machine_may_lack(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    pins = pinned(data)
    assert not pins or says_gpu(text, data), (
        f"{path} pins {', '.join(pins)}: use dtype: auto (bf16 on CUDA, float32 on a CPU without fast bf16), or "
        "say in a comment that the recipe is for a GPU")


def test_the_check_catches_a_pinned_bf16_and_lets_a_gpu_recipe_say_so():
    assert pinned({"dtype": "bfloat16", "sweep": {"grid": [{"torch_dtype": "float16"}]}}) == [
        "dtype: bfloat16", "sweep.grid.[0].torch_dtype: float16"]
    assert pinned({"dtype": "auto", "load_in_4bit": False, "mixed_precision": "no"}) == []
    assert not says_gpu("dtype: bfloat16  # fast here\n", {"dtype": "bfloat16"})
    assert says_gpu("# ADAPT-LLM on one GPU\nprecision: bf16\n", {"precision": "bf16"})
