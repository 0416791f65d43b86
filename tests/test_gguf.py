"""A user's ``.gguf`` file as a model name: converted once into the cache, streamed, and loaded like a folder."""

from __future__ import annotations

import os

import pytest
import torch
from gguf_files import TOKENS, tiny_hf_model, write_gguf

from adaptive_rag.lm import gguf_convert
from adaptive_rag.lm.models import ModelNotFoundError, load_causal_lm, load_tokenizer

IDS = torch.tensor([[4, 5, 30, 31, 33, 9, 34, 20]])


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPTIVE_RAG_CACHE", str(tmp_path / "cache"))


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_untied_gguf_loads_with_the_original_weights(tmp_path, arch):
    original = tiny_hf_model(arch, untied=True)
    path = write_gguf(original, tmp_path / f"tiny-{arch}.gguf")
    model, tokenizer = load_causal_lm(str(path))
    assert type(model).__name__ == type(original).__name__ and not model.config.tie_word_embeddings
    # llama's q/k rows come back un-permuted, qwen2's biases arrive: the same function as the original
    assert torch.equal(_logits(model), _logits(original))
    assert torch.equal(model.lm_head.weight, original.lm_head.weight)
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert len(tokenizer) == len(TOKENS) and tokenizer.eos_token == "<|im_end|>" and tokenizer.padding_side == "left"
    assert tokenizer("the cat", add_special_tokens=False).input_ids == [23, 31, 3, 6, 4, 23]  # t|he| |c|a|t
    assert load_tokenizer(str(path)).get_vocab() == tokenizer.get_vocab()


def test_tied_gguf_ties_again(tmp_path):
    original = tiny_hf_model("llama", untied=False)
    model, _ = load_causal_lm(str(write_gguf(original, tmp_path / "tied.gguf")))
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert torch.equal(_logits(model), _logits(original))


def test_converted_once_and_again_when_the_file_changes(tmp_path, monkeypatch):
    path = write_gguf(tiny_hf_model(seed=0), tmp_path / "m.gguf")
    first = gguf_convert.gguf_lm_path(path)
    calls = []
    real = gguf_convert.convert_gguf
    monkeypatch.setattr(gguf_convert, "convert_gguf", lambda *a: calls.append(a) or real(*a))
    assert gguf_convert.gguf_lm_path(path) == first and calls == []  # cached
    changed = tiny_hf_model(seed=1)
    write_gguf(changed, path)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))  # same size: mtime tells
    second = gguf_convert.gguf_lm_path(path)
    assert second != first and len(calls) == 1
    model, _ = load_causal_lm(str(path))
    assert torch.equal(_logits(model), _logits(changed))


def test_streamed_shards_load(tmp_path, monkeypatch):
    original = tiny_hf_model("qwen2")
    monkeypatch.setattr(gguf_convert, "SHARD_BYTES", 4096)  # a few tensors per shard
    folder = gguf_convert.gguf_lm_path(write_gguf(original, tmp_path / "s.gguf"))
    assert (folder / "model.safetensors.index.json").is_file() and len(list(folder.glob("model-*.safetensors"))) > 3
    model, _ = load_causal_lm(str(folder))
    assert torch.equal(_logits(model), _logits(original))


def test_whole_model_path_writes_the_same_model(tmp_path, monkeypatch):
    pytest.importorskip("transformers.integrations.gguf.utils")
    original = tiny_hf_model("llama")
    monkeypatch.setattr(gguf_convert, "_packed_loader_only", lambda arch: True)
    model, _ = load_causal_lm(str(write_gguf(original, tmp_path / "p.gguf")))
    assert torch.equal(_logits(model), _logits(original))


def test_unknown_architecture_is_one_line(tmp_path):
    path = write_gguf(tiny_hf_model(), tmp_path / "odd.gguf", arch="nosucharch")
    with pytest.raises(ModelNotFoundError, match="cannot read its GGUF architecture 'nosucharch'") as err:
        load_causal_lm(str(path))
    assert "\n" not in str(err.value)


def test_missing_tensor_is_named(tmp_path):
    path = write_gguf(tiny_hf_model(), tmp_path / "cut.gguf", drop=("blk.1.ffn_up.weight",))
    with pytest.raises(ModelNotFoundError, match="no tensor for 1 weight.*model.layers.1.mlp.up_proj.weight"):
        load_causal_lm(str(path))
    assert not list((tmp_path / "cache" / "gguf").iterdir())  # no half-converted folder left behind


def test_not_a_gguf_and_no_such_file(tmp_path):
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelNotFoundError, match="not a readable GGUF file"):
        load_causal_lm(str(tmp_path / "junk.gguf"))
    with pytest.raises(ModelNotFoundError, match="no such GGUF file"):
        load_tokenizer(str(tmp_path / "nope.gguf"))


def test_evaluate_model_check_accepts_a_gguf_file(tmp_path):
    from inference.commands.eval_checks import check_model_name

    check_model_name(str(write_gguf(tiny_hf_model(), tmp_path / "ok.gguf")))  # no conversion needed to check it
    with pytest.raises(ModelNotFoundError, match="--model .*missing.gguf: no such GGUF file"):
        check_model_name(str(tmp_path / "missing.gguf"))
