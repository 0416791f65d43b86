"""Prepacked bf16 linear layers: the same bits as the stock layers, only inside ``with``, repacked when weights
change, and nothing packed where exactness is not given (float32)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_llama
from test_prefix_cache import decode_schedule

from adaptive_rag.lm import packed_linear
from adaptive_rag.lm.packed_linear import PackedLinears, linear_packing

if not packed_linear._kernel_available():
    pytest.skip("this torch build has no oneDNN bf16 linear kernel", allow_module_level=True)


def bf16_llama(vocab: int, tied: bool):
    model = tiny_llama(vocab)
    model.config.tie_word_embeddings = tied
    if not tied:  # Llama-2 style: an lm_head of its own
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    return model.to(torch.bfloat16)


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("tied", [True, False])
def test_packed_layers_give_the_stock_bits_and_are_used(smol_tokenizer, tied, monkeypatch):
    model = bf16_llama(len(smol_tokenizer), tied)
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    packed = PackedLinears(model)
    assert len(packed) == len(linears), packed.reason  # q k v o gate up down per layer, and the lm_head
    ids = torch.tensor([[5, 17, 300, 2, 9, 44, 1000], [8, 8, 8, 120, 7, 3, 1]])
    stock = logits(model, ids)
    calls = []
    real = packed_linear._packed_call
    monkeypatch.setattr(packed_linear, "_packed_call", lambda *a: calls.append(1) or real(*a))
    with packed:
        fast = logits(model, ids)
    assert len(calls) == len(linears)  # every layer went through the prepacked kernel
    assert torch.equal(fast, stock)
    # outside ``with`` the model is the stock one again
    assert all("forward" not in m.__dict__ for m in linears)
    calls.clear()
    assert torch.equal(logits(model, ids), stock) and not calls


def test_a_weight_changed_after_packing_is_packed_again(smol_tokenizer):
    model = bf16_llama(len(smol_tokenizer), tied=False)
    packed = PackedLinears(model)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(2)  # e.g. an adapter merged into the base weight
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight * 0.5)  # a new tensor
    ids = torch.tensor([[5, 17, 300, 2]])
    stock = logits(model, ids)
    with packed:
        assert torch.equal(logits(model, ids), stock)


def test_float32_and_training_keep_the_stock_layers(smol_tokenizer):
    model = tiny_llama(len(smol_tokenizer))  # float32: oneDNN would round differently from MKL's sgemm
    packed = PackedLinears(model)
    assert len(packed) == 0 and "bf16" in packed.reason
    assert len(PackedLinears(model.to(torch.bfloat16), enabled=False)) == 0
    model = bf16_llama(len(smol_tokenizer), tied=True)
    ids = torch.tensor([[5, 17, 300, 2]])
    with PackedLinears(model):  # with gradients on, the stock path (the prepacked kernel has no backward)
        out = model(input_ids=ids).logits
        out.float().sum().backward()
    assert model.model.layers[0].mlp.up_proj.weight.grad is not None


def test_no_packing_when_the_copies_would_not_fit(smol_tokenizer, monkeypatch):
    monkeypatch.setattr(packed_linear, "_free_memory_bytes", lambda: 1024)
    packed = PackedLinears(bf16_llama(len(smol_tokenizer), tied=True))
    assert len(packed) == 0 and "free memory" in packed.reason


def test_a_kernel_that_differs_from_stock_packs_nothing(smol_tokenizer, monkeypatch):
    real = packed_linear._packed_call
    monkeypatch.setattr(packed_linear, "_packed_call", lambda x, w, b: real(x, w, b) + 1e-2)
    packed = PackedLinears(bf16_llama(len(smol_tokenizer), tied=True))
    assert len(packed) == 0 and "differ" in packed.reason


@pytest.mark.parametrize("reduce", ["mean", "none"])
def test_decoder_on_packed_layers_gives_the_same_tokens_probabilities_and_rows(smol_tokenizer, reduce):
    model = bf16_llama(len(smol_tokenizer), tied=False)
    prompts = [[5, 6, 7, 8, 9, 10], [300], [40, 41, 42], [7, 8, 9]]
    late = [list(range(100, 113)), [1, 2]]
    fast, stock = (decode_schedule(model, smol_tokenizer, prompts, late, reduce=reduce, packed_linears=on)
                   for on in (True, False))
    for a, b in zip(fast, stock, strict=True):
        assert (a.gen_ids, a.probs, a.entropies) == (b.gen_ids, b.probs, b.entropies)
        assert torch.equal(a.prompt_row, b.prompt_row)
        assert all(torch.equal(x, y) for x, y in zip(a.rows, b.rows, strict=True))


def test_one_packing_per_model_and_a_model_cast_to_float32_goes_back_to_stock(smol_tokenizer):
    model = bf16_llama(len(smol_tokenizer), tied=False)
    packing = linear_packing(model)
    assert linear_packing(model) is packing and len(packing) > 0
    assert len(linear_packing(model, enabled=False)) == 0
    model.float()  # new float32 weights: repacking them would change the bits
    ids = torch.tensor([[5, 17, 300, 2]])
    stock = logits(model, ids)
    with packing:
        assert torch.equal(logits(model, ids), stock)
    assert len(packing) == 0


def test_an_unmerged_lora_model_gives_the_stock_bits(smol_tokenizer):
    from peft import LoraConfig, get_peft_model

    model = bf16_llama(len(smol_tokenizer), tied=False)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)).eval()
    for name, p in model.named_parameters():  # lora_B starts at zero: give the adapter an effect
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    ids = torch.tensor([[5, 17, 300, 2, 9]])
    stock = logits(model, ids)
    packing = PackedLinears(model)
    base = [m for n, m in model.named_modules() if n.endswith("q_proj.base_layer")]
    assert base and all(m in packing._packed for m in base)  # the wrapped layers; peft keeps adapters in float32
    with packing:
        assert torch.equal(logits(model, ids), stock)
