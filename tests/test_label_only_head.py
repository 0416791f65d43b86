"""The labelled-positions-only LM head (training/label_only_head.py) gives trl's fused head's loss, gradients and
logged fields, on tied and untied models, under PEFT with a trainable <RET> row, and for a micro-batch without a
single label."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_llama

from training.label_only_head import score_labelled_only


class _Trainer:  # what score_labelled_only reads of an SFTTrainer
    def __init__(self, model):
        self.model = model


def _fused(model):
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    return model


def _batch(vocab: int):
    torch.manual_seed(1)
    ids = torch.randint(3, vocab, (2, 9))
    labels = ids.clone()
    labels[0, :5] = -100  # a prompt
    labels[1, :2] = -100
    labels[1, 7:] = -100  # and a padded tail
    return ids, labels


def _run(model, ids, labels):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=labels, fused_lm_head=True)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, grads


@pytest.mark.parametrize("tied", [False, True])
def test_same_loss_fields_and_gradients_as_trls_head(tied):
    trl_model = _fused(tiny_llama(64))
    ours = _fused(tiny_llama(64))
    if tied:
        for m in (trl_model, ours):
            m.lm_head.weight = m.model.embed_tokens.weight
    ours.load_state_dict(trl_model.state_dict())
    assert score_labelled_only(_Trainer(ours))
    ids, labels = _batch(64)
    expected, expected_grads = _run(trl_model, ids, labels)
    got, got_grads = _run(ours, ids, labels)
    mask = labels[:, 1:] != -100
    assert torch.equal(got.label_mask, mask) and int(mask.sum()) == 9
    assert torch.allclose(got.loss, expected.loss, atol=1e-6)
    for field in ("log_probs", "entropy"):
        assert torch.allclose(getattr(got, field), getattr(expected, field), atol=1e-5), field
        assert torch.all(getattr(got, field)[~mask] == 0), field  # zero where there is no label, as trl's
    assert torch.equal(got.is_top1.bool(), expected.is_top1.bool())
    assert got_grads.keys() == expected_grads.keys()
    for name, grad in expected_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-6, rtol=1e-4), name


def test_loss_by_hand_on_the_labelled_positions():
    model = _fused(tiny_llama(64))
    score_labelled_only(_Trainer(model))
    ids, labels = _batch(64)
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels, fused_lm_head=True, num_items_in_batch=4)
        log_probs = model(input_ids=ids).logits.float().log_softmax(-1)
    # shift by one: position t predicts token t + 1; sum over labelled tokens only, divided by the count given
    total = sum(log_probs[b, t, labels[b, t + 1]] for b in range(2) for t in range(8) if labels[b, t + 1] != -100)
    assert math.isclose(float(out.loss), float(-total / 4), rel_tol=1e-5)


def test_a_micro_batch_without_labels_gives_a_zero_loss_that_backpropagates():
    model = _fused(tiny_llama(64))
    score_labelled_only(_Trainer(model))
    ids = torch.randint(3, 64, (1, 6))
    out = model(input_ids=ids, labels=torch.full_like(ids, -100), fused_lm_head=True)
    out.loss.backward()
    assert out.loss.detach().item() == 0.0 and int(out.label_mask.sum()) == 0


def test_plain_forward_and_generation_are_untouched():
    model = _fused(tiny_llama(64))
    ids = torch.randint(3, 64, (1, 6))
    before = model(input_ids=ids).logits
    score_labelled_only(_Trainer(model))
    assert torch.equal(model(input_ids=ids).logits, before)
    assert model.generate(ids, max_new_tokens=2, do_sample=False).shape == (1, 8)


def test_needs_trls_patched_forward():
    assert not score_labelled_only(_Trainer(tiny_llama(64)))  # no fused head: nothing to replace


def test_peft_trainable_ret_row_gets_trls_gradient():
    """ADAPT-LLM's set-up on an untied model: LoRA plus a trainable <RET> row in the embedding and the head (the
    head is a PEFT wrapper; the row's delta must reach the loss through it)."""
    from peft import LoraConfig, get_peft_model

    from training.lora_sft import expose_lm_head_bias

    def build():
        base = tiny_llama(64)
        peft = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                                               trainable_token_indices={"embed_tokens": [63], "lm_head": [63]}))
        expose_lm_head_bias(peft)
        _fused(peft.get_base_model())
        return peft

    trl_model, ours = build(), build()
    ours.load_state_dict(trl_model.state_dict())
    assert score_labelled_only(_Trainer(ours))
    ids, labels = _batch(64)
    labels[0, 6] = ids[0, 6] = 63  # the <RET> row is a label
    expected, expected_grads = _run(trl_model, ids, labels)
    got, got_grads = _run(ours, ids, labels)
    assert torch.allclose(got.loss, expected.loss, atol=1e-6)
    delta = [n for n in expected_grads if "trainable_tokens_delta" in n and "lm_head" in n]
    assert delta and float(expected_grads[delta[0]].abs().sum()) > 0
    for name, grad in expected_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-6, rtol=1e-4), name


def test_an_sft_trainer_padding_free_step_matches_trls(tmp_path, smol_tokenizer):
    """Installed on a real SFTTrainer (padding-free batches, completion-only loss): the step's loss and gradients
    are trl's own."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    rows = {"input_ids": [[5, 6, 7, 8, 9, 10], [11, 12, 13, 14]], "completion_mask": [[0, 0, 0, 1, 1, 1], [0, 1, 1, 1]]}
    model = tiny_llama(len(smol_tokenizer)).train()
    args = SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, padding_free=True, max_length=None,
                     completion_only_loss=True, use_cpu=True, report_to="none", save_strategy="no")
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_dict(rows), processing_class=smol_tokenizer)
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["input_ids"].shape == (1, 10)  # one flattened row
    trl_forward = model.forward
    assert score_labelled_only(trainer) and model.forward is not trl_forward
    results = []
    for forward in (trl_forward, model.forward):
        model.forward = forward
        loss = trainer.training_step(model, dict(batch), 5)
        results.append((loss, torch.cat([p.grad.flatten() for p in model.parameters()])))
        model.zero_grad()
    (a, ga), (b, gb) = results
    assert torch.allclose(a, b, atol=1e-6) and torch.allclose(ga, gb, atol=1e-6, rtol=1e-4)
