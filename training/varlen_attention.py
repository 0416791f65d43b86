"""``sdpa_varlen``: SDPA that attends within each instance of a padding-free batch, for CPUs without flash-attention.

trl's padding-free collator flattens a micro-batch into one row ``(1, T)`` and passes the instance boundaries as
``cu_seq_lens_q``. With plain SDPA, transformers turns the restarting ``position_ids`` into a block-diagonal mask,
which is correct, but the kernel still scores all ``T x T`` pairs: on CPU that costs more than the padding it saves
(bench/sft.py). This implementation runs causal SDPA on each instance's slice instead (sum of L_i^2 pairs, as
flash-attention's varlen kernel does on CUDA). Any other batch (padded training, evaluation, generation) takes
the ordinary SDPA path with its mask, so a model can keep this implementation throughout.
"""

from __future__ import annotations

import torch

NAME = "sdpa_varlen"


def varlen_sdpa_forward(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                        is_causal: bool | None = None, cu_seq_lens_q: torch.Tensor | None = None, **kwargs):
    """query (1, H, T, D), key/value (1, H_kv, T, D) -> (1, T, H, D), like transformers' SDPA function."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cu_seq_lens_q is None or query.shape[0] != 1 or key.shape[2] != query.shape[2]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    bounds = cu_seq_lens_q.tolist()
    parts = [sdpa_attention_forward(module, query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None,
                                    dropout=dropout, scaling=scaling, is_causal=True)[0]
             for s, e in zip(bounds[:-1], bounds[1:]) if e > s]
    return torch.cat(parts, dim=1), None


def register() -> str:
    """Register ``sdpa_varlen`` with transformers (idempotent); its masks are SDPA's. Returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, varlen_sdpa_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def use_for_padding_free(model, padding_free: bool) -> bool:
    """Switch ``model`` to ``sdpa_varlen`` for padding-free training on CPU, where it pays (bench/sft.py: x1.58 over
    padded against x1.29 with SDPA's block mask); on CUDA keep the model's own attention (one SDPA launch per
    instance ran 3x slower on an H200; flash-attention's varlen kernel is the one there). Returns whether it
    switched."""
    if not padding_free or model.device.type != "cpu" or model.config._attn_implementation != "sdpa":
        return False
    model.set_attn_implementation(register())
    return True
