"""Score the LM head only where a token has a label, on CPU, under trl's ``fused_lm_head`` forward.

trl's ``SFTTrainer`` patches the model (``trl.trainer.utils.add_fused_lm_head``) so that the loss never builds the
full ``(tokens, vocabulary)`` logits. On CUDA its Triton kernel scores only the positions whose next token has a
label; everywhere else it scores every position (a fixed tile shape, for compilers that would recompile on each
batch) and masks afterwards. With ``completion_only_loss`` most positions are prompt: on the knowing model's
training mix 28% of the tokens carry a label (14,510 of 51,247), on ADAPT-LLM's Alpaca prompts 4%, so on a CPU the
head, its softmax statistics and their backward run three times or more over rows whose result is thrown away
(``bench/sft_head.py`` times both). :func:`score_labelled_only` replaces that forward with one that projects only
the labelled positions, in the same output type and with the same fields, so the trainer's loss and its
entropy / token-accuracy logs are unchanged.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import torch


def patched_model(trainer: Any) -> Any:
    """The module trl patched: the base model under a PEFT wrapper, else the trainer's model."""
    from peft import PeftModel

    model = trainer.model
    return model.get_base_model() if isinstance(model, PeftModel) else model


def score_labelled_only(trainer: Any) -> bool:
    """Give ``trainer``'s model the labelled-positions-only head on CPU. Returns whether it was installed: not on
    other devices (on CUDA and XPU trl's Triton kernel skips the unlabelled rows itself), nor where trl's head is
    absent."""
    from trl.trainer import utils as trl_utils

    model = patched_model(trainer)
    if (model.device.type != "cpu" or not isinstance(model.__dict__.get("forward"), types.MethodType)
            or not hasattr(trl_utils, "FusedCausalLMOutput")):  # a trl without the fused head patches nothing
        return False
    fused = model.forward  # trl's fused forward: kept for what this one does not cover
    config = model.config.get_text_config()
    scaled = any(getattr(config, name, None) is not None for name in
                 ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                  "logits_scaling"))

    @functools.wraps(type(model).forward)
    def forward(self, *args, fused_lm_head=False, labels=None, shift_labels=None, num_items_in_batch=None,
                **kwargs):
        if (not fused_lm_head or shift_labels is not None or scaled or kwargs.get("output_router_logits")
                or getattr(config, "output_router_logits", False)):
            return fused(*args, fused_lm_head=fused_lm_head, labels=labels, shift_labels=shift_labels,
                         num_items_in_batch=num_items_in_batch, **kwargs)
        return _labelled_only(self, args, kwargs, labels, num_items_in_batch)

    model.forward = types.MethodType(forward, model)
    return True


def _labelled_only(model: Any, args: tuple, kwargs: dict, labels: torch.Tensor,
                   num_items_in_batch: Any) -> Any:
    from trl.trainer.utils import FusedCausalLMOutput

    kwargs["use_cache"] = False
    hidden = model.base_model(*args, **kwargs).last_hidden_state[:, :-1]
    targets = labels[:, 1:].to(hidden.device)
    mask = targets != -100
    chosen = targets[mask]
    # The head module itself (not its weight): a PEFT wrapper on it (a trainable <RET> row) applies its delta.
    logits = model.get_output_embeddings()(hidden[mask]).float()
    log_softmax = logits.log_softmax(-1)
    token_log_probs = log_softmax.gather(-1, chosen[:, None]).squeeze(-1)
    with torch.no_grad():
        entropy = -(log_softmax.exp() * log_softmax).sum(-1)
        is_top1 = logits.argmax(-1) == chosen

    def spread(values: torch.Tensor) -> torch.Tensor:
        # masked_scatter keeps an all-unlabelled micro-batch connected to the graph (a zero loss, not 0 / 0)
        return values.new_zeros(mask.shape).masked_scatter(mask, values)

    log_probs = spread(token_log_probs)
    loss = -log_probs.sum() / (mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch)
    return FusedCausalLMOutput(loss=loss, log_probs=log_probs, entropy=spread(entropy), is_top1=spread(is_top1),
                               label_mask=mask)
