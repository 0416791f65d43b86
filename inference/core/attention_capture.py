"""Capture the last layer's attention row of each newly fed token while generating, without a second pass.

One attention function is registered with transformers' ``AttentionInterface`` and serves every layer: layers
without a capture buffer (all but the last) and prefill steps take the fast SDPA path; the last layer, during
one-token decode steps, runs the eager computation ``softmax(QKᵀ·scale + mask)`` and keeps the row of the
newest query, heads aggregated (mean or max: shape (B, kv_len)) or kept per head (``"none"``: (B, H, kv_len), which
DRAGIN's reference code needs: it takes the max over query rows per head before averaging heads). A prefill keeps the
row of its last prompt position the same way (one extra query row, not the prompt's matrix): that row chose the first
generated token, and the reference QFS reads the row of the position before each hit word. Keys include whatever the
cache held before the call (a shared head prefilled earlier), so rows always span every position.
"""

from __future__ import annotations

from typing import Literal

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTN_NAME = "last_layer_capture"
HeadReduce = Literal["mean", "max", "none"]


class CaptureBuffer:
    """Holds the last layer's attention row of the last input position of the most recent model call ((B, kv_len),
    or (B, H, kv_len) with ``reduce="none"``): the fed token's row in a decode step, the last prompt position's row
    in a prefill."""

    def __init__(self, reduce: HeadReduce = "mean"):
        if reduce not in ("mean", "max", "none"):
            raise ValueError(f"head reduction must be 'mean', 'max' or 'none', got '{reduce}'")
        self.reduce = reduce
        self.row: torch.Tensor | None = None
        # set by authors_pass: a prefill then also keeps every query row's weights, (B, H, Q, K) float32
        self.keep_all = False
        self.all_rows: torch.Tensor | None = None

    def reduced(self, weights: torch.Tensor) -> torch.Tensor:
        """(B, H, K) attention weights -> what this buffer keeps."""
        if self.reduce == "mean":
            return weights.mean(dim=1)
        return weights.amax(dim=1) if self.reduce == "max" else weights


def _last_query_weights(query, key, attention_mask, scaling) -> torch.Tensor:
    """Eager attention weights of the last query position: (B, H, K), float32.

    Grouped-query attention without repeating keys: the query heads that share a key head are rows of one matmul
    against it ((B, H_kv, n_rep, D) @ (B, H_kv, D, K)); query head h reads key head h // n_rep, as ``repeat_kv``
    lays them out. Repeating the keys instead copied them n_rep times in float32 at every step (at batch 64 that
    was half of a SmolLM2 decode step)."""
    b, h, _, d = query.shape
    h_kv = key.shape[1]
    scale = scaling if scaling is not None else d ** -0.5
    q = query[:, :, -1].reshape(b, h_kv, h // h_kv, d).float()
    scores = torch.matmul(q, key.float().transpose(2, 3)) * scale  # (B, H_kv, n_rep, K)
    if attention_mask is not None:
        mask = attention_mask[:, :, -1:, : key.shape[-2]]  # (B, 1, 1, K): the same for every head
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min) if mask.dtype == torch.bool else scores + mask
    return torch.softmax(scores, dim=-1).reshape(b, h, -1)


def _all_query_weights(query, key, attention_mask, scaling) -> torch.Tensor:
    """Eager attention weights of every query position: (B, H, Q, K), float32 (grouped heads as above)."""
    b, h, q_len, d = query.shape
    h_kv = key.shape[1]
    scale = scaling if scaling is not None else d ** -0.5
    q = query.reshape(b, h_kv, h // h_kv, q_len, d).float()
    scores = torch.matmul(q, key.float()[:, :, None].transpose(3, 4)) * scale  # (B, H_kv, n_rep, Q, K)
    k_len = key.shape[-2]
    # causal always: without padding SDPA gets no mask (is_causal instead), so None here still means causal
    causal = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).tril(k_len - q_len)
    scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
    if attention_mask is not None:
        mask = attention_mask[:, :, -q_len:, :k_len][:, :, None]  # (B, 1, 1, Q, K)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min) if mask.dtype == torch.bool else scores + mask
    return torch.softmax(scores, dim=-1).reshape(b, h, q_len, -1)


def capture_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    buffer: CaptureBuffer | None = getattr(module, "signal_capture", None)
    if buffer is None or query.shape[2] != 1:
        if buffer is not None:  # prefill: SDPA for the output, one eager row for the last prompt position
            buffer.row = buffer.reduced(_last_query_weights(query, key, attention_mask, scaling))
            if buffer.keep_all:
                buffer.all_rows = _all_query_weights(query, key, attention_mask, scaling)
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    weights = _last_query_weights(query, key, attention_mask, scaling)  # (B, H, K): the only query row
    buffer.row = buffer.reduced(weights)
    b, h, k_len = weights.shape
    h_kv = value.shape[1]
    out = torch.matmul(weights.reshape(b, h_kv, h // h_kv, k_len).to(value.dtype), value)  # (B, H_kv, n_rep, D)
    return out.reshape(b, h, 1, -1).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTN_NAME, capture_attention_forward)
# The custom function reads boolean masks (True = attend), exactly what SDPA gets.
AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


def last_attention_module(model) -> torch.nn.Module:
    """The self-attention module of the model's last decoder layer (found by ``layer_idx``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    last = base.config.get_text_config().num_hidden_layers - 1
    for name, module in base.named_modules():
        if getattr(module, "layer_idx", None) == last and name.endswith(("self_attn", "attention", "attn")):
            return module
    raise ValueError(f"cannot find the last layer's attention module in {type(base).__name__}")


def install_capture(model, reduce: HeadReduce = "mean") -> CaptureBuffer:
    """Switch ``model`` to the capturing attention function and attach a buffer to its last layer."""
    model.set_attn_implementation(ATTN_NAME)
    module = last_attention_module(model)
    buffer = CaptureBuffer(reduce)
    module.signal_capture = buffer
    return buffer
