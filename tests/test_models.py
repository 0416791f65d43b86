"""Model names resolve to loaded models, or fail with one clear line."""

from __future__ import annotations

import json

import pytest
import torch

from inference.models import ModelNotFoundError, adapter_base, load_causal_lm, load_encoder, resolve_model


def test_missing_local_path_fails_with_one_line(tmp_path):
    with pytest.raises(ModelNotFoundError, match="cannot load model .*no such local folder") as err:
        load_causal_lm(str(tmp_path / "no-such-checkpoint"))
    assert "\n" not in str(err.value)


def test_unknown_hub_id_fails_offline():
    with pytest.raises(ModelNotFoundError, match="embedded name"):
        load_encoder("nobody/no-such-model-xyz")


def test_adapter_base_reads_adapter_config(tmp_path):
    assert adapter_base(str(tmp_path)) is None
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "smollm2-135m"}))
    assert adapter_base(str(tmp_path)) == "smollm2-135m"


def test_refuses_4bit_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    from inference.models import ModelOptions

    with pytest.raises(RuntimeError, match="needs CUDA"):
        load_causal_lm("smollm2-135m", ModelOptions(load_in_4bit=True))


@pytest.mark.slow
def test_smollm2_loads_and_answers(smol_model):
    from inference.generation import chat_prompt, generate_texts

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
