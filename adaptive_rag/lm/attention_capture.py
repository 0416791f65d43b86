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


class SharedHeadLayer:
    """One layer's keys and values of the batch's shared head ((H_kv, P, D), float32: scores are computed in float32
    as the capture's are) and which batch rows start with it ((B,) bool)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, rows: torch.Tensor):
        self.keys, self.values, self.rows = keys, values, rows


def _shared_head_weights(query, key, attention_mask, scaling, head: SharedHeadLayer) -> torch.Tensor:
    """Eager attention weights of a one-token query over [shared head][the row's own keys]: (B, H_kv, n_rep, P + K),
    float32. The head's scores are one matmul for the whole batch against the head's single copy ((H_kv, B·n_rep, D)
    @ (H_kv, D, P)); rows that do not start with the head get none of it."""
    b, h, _, d = query.shape
    h_kv = key.shape[1]
    scale = scaling if scaling is not None else d ** -0.5
    q = query[:, :, -1].reshape(b, h_kv, h // h_kv, d).float()
    own = torch.matmul(q, key.float().transpose(2, 3)) * scale  # (B, H_kv, n_rep, K)
    if attention_mask is not None:
        mask = attention_mask[:, :, -1:, : key.shape[-2]]  # (B, 1, 1, K): the same for every head
        own = own.masked_fill(~mask, torch.finfo(own.dtype).min) if mask.dtype == torch.bool else own + mask
    shared = torch.matmul(q.transpose(0, 1).reshape(h_kv, -1, d), head.keys.transpose(1, 2)) * scale
    shared = shared.reshape(h_kv, b, h // h_kv, -1).transpose(0, 1)  # (B, H_kv, n_rep, P)
    shared = shared.masked_fill(~head.rows[:, None, None, None], torch.finfo(shared.dtype).min)
    return torch.softmax(torch.cat([shared, own], dim=-1), dim=-1)


def _shared_head_forward(module, query, key, value, attention_mask, scaling, head: SharedHeadLayer,
                         buffer: CaptureBuffer | None):
    weights = _shared_head_weights(query, key, attention_mask, scaling, head)
    b, h_kv, n_rep, _ = weights.shape
    p = head.keys.shape[1]
    if buffer is not None:
        buffer.row = buffer.reduced(weights.reshape(b, h_kv * n_rep, -1))
    from_head = torch.matmul(weights[..., :p].transpose(0, 1).reshape(h_kv, b * n_rep, p), head.values)
    from_own = torch.matmul(weights[..., p:].to(value.dtype), value)  # (B, H_kv, n_rep, D)
    out = from_head.reshape(h_kv, b, n_rep, -1).transpose(0, 1) + from_own.float()
    return out.to(value.dtype).reshape(b, h_kv * n_rep, 1, -1).transpose(1, 2).contiguous(), None


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
    head: SharedHeadLayer | None = getattr(module, "shared_head", None)
    if head is not None and query.shape[2] == 1:  # a decode step over a batch whose rows share a head
        return _shared_head_forward(module, query, key, value, attention_mask, scaling, head, buffer)
    # a pass that keeps every row reads them here even over one token (a round that wrote its stop token alone)
    if buffer is None or query.shape[2] != 1 or buffer.keep_all:
        if buffer is not None:  # prefill: SDPA for the output, one eager row for the last prompt position
            if buffer.keep_all:  # every row (the authors' pass); the last prompt position's is one of them
                buffer.all_rows = _all_query_weights(query, key, attention_mask, scaling)
                buffer.row = buffer.reduced(buffer.all_rows[:, :, -1])
            else:
                buffer.row = buffer.reduced(_last_query_weights(query, key, attention_mask, scaling))
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


def attention_modules(model) -> list[torch.nn.Module]:
    """The self-attention module of every decoder layer, in layer order (found by ``layer_idx``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    n = base.config.get_text_config().num_hidden_layers
    found = {module.layer_idx: module for name, module in base.named_modules()
             if isinstance(getattr(module, "layer_idx", None), int)
             and name.endswith(("self_attn", "attention", "attn"))}
    if sorted(found) != list(range(n)):
        raise ValueError(f"cannot find the attention module of every layer in {type(base).__name__}")
    return [found[i] for i in range(n)]


def last_attention_module(model) -> torch.nn.Module:
    """The self-attention module of the model's last decoder layer (found by ``layer_idx``)."""
    return attention_modules(model)[-1]


def install_capture(model, reduce: HeadReduce = "mean") -> CaptureBuffer:
    """Switch ``model`` to the capturing attention function and attach a buffer to its last layer."""
    model.set_attn_implementation(ATTN_NAME)
    module = last_attention_module(model)
    buffer = CaptureBuffer(reduce)
    module.signal_capture = buffer
    return buffer
