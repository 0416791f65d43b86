"""Model names resolve to loaded models, or fail with one clear line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch

import retrieval_adapt.distill
from adaptive_rag.lm import gguf_convert, models
from adaptive_rag.lm.models import (
    ModelNotFoundError,
    adapter_base,
    hub_offline,
    load_causal_lm,
    load_encoder,
    load_tokenizer,
    resolve_model,
)
from adaptive_rag.plumbing import errors
from inference.commands.eval_checks import check_model_name


def test_missing_local_path_fails_with_one_line(tmp_path):
    with pytest.raises(ModelNotFoundError, match="cannot load model .*no such local folder") as err:
        load_causal_lm(str(tmp_path / "no-such-checkpoint"))
    assert "\n" not in str(err.value)


def test_unknown_hub_id_fails_offline():
    with pytest.raises(ModelNotFoundError, match="embedded name"):
        load_encoder("nobody/no-such-model-xyz")


@pytest.mark.parametrize("load", [load_encoder, load_causal_lm, load_tokenizer])
def test_hub_id_offline_says_hub_unreachable_and_how_to_fix(load, monkeypatch):
    # a name with one slash is a hub id, not "not a hub id"; offline, the hub cannot be asked
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = "adaptive-rag-tests/never-cached-model"
    with pytest.raises(ModelNotFoundError) as err:
        load(name)
    msg = str(err.value)
    assert "\n" not in msg and "not a hub id" not in msg
    assert f"cannot load model '{name}'" in msg
    assert "hub is unreachable (HF_HUB_OFFLINE=1)" in msg and "not in the local HF cache" in msg
    assert f"hf download {name}" in msg and "pass a local folder" in msg


def test_hub_offline_is_read_when_asked_and_shared_by_distillation(monkeypatch):
    """huggingface_hub reads HF_HUB_OFFLINE once, at its import; the distillation job's warning used that copy."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_offline() and retrieval_adapt.distill.hub_offline()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert not hub_offline()
    assert retrieval_adapt.distill.hub_offline is hub_offline


def test_model_not_found_is_a_user_error_before_torch_is_imported():
    """It lives beside ConfigError, so run_cli knows it without importing the model loader (and torch)."""
    assert models.ModelNotFoundError is errors.ModelNotFoundError is gguf_convert.ModelNotFoundError
    assert models.cache_dir is gguf_convert.cache_dir
    code = ("import sys; from adaptive_rag.plumbing.errors import ModelNotFoundError, user_errors; "
            "assert ModelNotFoundError in user_errors() and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


@pytest.mark.parametrize("name", ["./nope-model", "/abs/nope-model", "a/b/nope-model", "~/nope-model-xyz",
                                  "org/nope-model/", "org\\nope-model"])
def test_missing_local_paths_say_no_such_folder(name):
    """The loader and the checks before it read a name with one rule (adaptive_rag.lm.names): a trailing slash or a
    backslash is a path to both, never a hub id to the loader."""
    with pytest.raises(ModelNotFoundError, match="no such model folder"):
        check_model_name(name)
    for load in (load_causal_lm, load_encoder, load_tokenizer):
        with pytest.raises(ModelNotFoundError, match=f"cannot load model '{re.escape(name)}': no such local folder"):
            load(name)


def test_existing_folder_without_a_model_says_so(tmp_path):
    with pytest.raises(ModelNotFoundError, match="the local folder .* holds no loadable model"):
        load_causal_lm(str(tmp_path))


def test_adapter_base_reads_adapter_config(tmp_path):
    assert adapter_base(str(tmp_path)) is None
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "smollm2-135m"}))
    assert adapter_base(str(tmp_path)) == "smollm2-135m"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"base_model_name_or_path": "smollm2-135m",', "is not valid JSON"),
        ('{"r": 8}', "names no base_model_name_or_path"),
        ('{"base_model_name_or_path": ""}', "names no base_model_name_or_path"),
        ("[1, 2]", "names no base_model_name_or_path"),
    ],
)
def test_broken_adapter_config_is_one_line_naming_the_file(tmp_path, content, problem):
    cfg = tmp_path / "adapter_config.json"
    cfg.write_text(content)
    with pytest.raises(ModelNotFoundError, match=f"{re.escape(str(cfg))} {problem}") as err:
        load_causal_lm(str(tmp_path))
    assert "\n" not in str(err.value)


def test_adapter_whose_base_is_missing_names_both(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "./gone-base"}))
    with pytest.raises(ModelNotFoundError, match="'./gone-base': no such local folder .* named in .*adapter_config"):
        load_causal_lm(str(tmp_path))


def test_refuses_4bit_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    from adaptive_rag.lm.models import ModelOptions

    with pytest.raises(RuntimeError, match="needs CUDA"):
        load_causal_lm("smollm2-135m", ModelOptions(load_in_4bit=True))


@pytest.mark.slow
def test_smollm2_loads_and_answers(smol_model):
    from adaptive_rag.lm.generation import chat_prompt, generate_texts

    model, tokenizer = smol_model
    assert type(model).__name__ == "LlamaForCausalLM"
    prompt = chat_prompt(tokenizer, "What is the capital of France? Answer with a short phrase.")
    [gen] = generate_texts(model, tokenizer, [prompt], max_new_tokens=12)
    assert "paris" in gen.text.lower()
    assert (resolve_model("smollm2-135m") + "/model.safetensors")  # cached once as safetensors


@pytest.mark.slow
def test_minilm_embeds():
    from retrieval_adapt.encoders import MeanPoolingEncoder

    enc = MeanPoolingEncoder.from_name("minilm")
    emb = enc.encode(["Paris is the capital of France.", "The capital of France is Paris.", "Bananas are yellow."])
    assert emb.shape == (3, 384)
    assert abs(float((emb**2).sum(1)[0]) - 1.0) < 1e-4  # MiniLM declares a Normalize module
    assert emb[0] @ emb[1] > emb[0] @ emb[2]
