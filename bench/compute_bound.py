"""The compute bound of a run: how long its model calls' matrix products alone take on this machine.

A probe times the model's own linear layers (one decoder layer's, and the LM head) on inputs of 1 to 512 rows in
the model's dtype (through the prepacked kernel where the runs use it), in the same process as the runs, before
and after them; the fastest time of each product counts (a neighbour's load only ever slows a product down). Each
model call a :class:`~adaptive_rag.lm.profiling.Profile` recorded (``Profile.work``: real tokens, LM-head rows,
attention pairs) is then priced:

* a decode step at its own row count (a one-row step costs a full read of the weights, which the probe's one-row
  time includes), LM head at the step's rows;
* prefill and attention passes at the 512-row rate per token (a pass split into small calls is work the bound does
  not excuse), their LM heads per call;
* attention (QKᵀ and AV: 4 × heads × head_dim FLOPs per pair per layer) at the 512-row rate.

FLOPs: 2 × (parameters of the layers' linears) × tokens + 2 × (LM head) × logits rows + attention FLOPs. The
embedding lookup, norms, softmax and everything outside the model are free in the bound, so wall ÷ bound is the
distance left to gain.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass

import torch

from adaptive_rag.lm.packed_linear import linear_packing

ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
PHASES = ("prefill", "decode", "attention_pass")


def decoder_layers(model) -> torch.nn.ModuleList:
    n = model.config.get_text_config().num_hidden_layers
    found = next((m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n), None)
    if found is None:
        raise ValueError(f"cannot find the {n} decoder layers of {type(model).__name__}")
    return found


@dataclass
class MatmulProbe:
    rows: tuple[int, ...]
    layer_seconds: list[float]  # one decoder layer's linear layers, per row count
    head_seconds: list[float]  # the LM head, per row count
    layer_flops_per_row: float
    head_flops_per_row: float
    layers: int
    attention_flops_per_pair: float  # per layer

    @staticmethod
    def _interp(rows: tuple[int, ...], seconds: list[float], r: float) -> float:
        if r <= 0:
            return 0.0
        if r >= rows[-1]:
            return seconds[-1] * r / rows[-1]
        i = bisect_left(rows, r)
        if rows[i] == r or i == 0:
            return seconds[i] * (r / rows[i] if i == 0 else 1.0)
        lo, hi = rows[i - 1], rows[i]
        return seconds[i - 1] + (seconds[i] - seconds[i - 1]) * (r - lo) / (hi - lo)

    def layer_time(self, r: float) -> float:
        return self._interp(self.rows, self.layer_seconds, r)

    def head_time(self, r: float) -> float:
        return self._interp(self.rows, self.head_seconds, r)

    def _best_per_row(self) -> float:
        # the wide products (64 rows and more) run at the machine's full rate: the best of them is the rate, since
        # a long product is the likeliest to be slowed by a neighbour's job during the probe
        wide = [s / r for r, s in zip(self.rows, self.layer_seconds) if r >= min(64, self.rows[-1])]
        return min(wide)

    @property
    def per_token_saturated(self) -> float:
        """Seconds per token through every layer at the best rate of the wide products."""
        return self.layers * self._best_per_row()

    @property
    def saturated_rate(self) -> float:
        return self.layer_flops_per_row / self._best_per_row()

    def rate(self, r: int) -> float:
        """FLOP/s of the layers' linear products at ``r`` rows."""
        return self.layer_flops_per_row * r / self.layer_time(r)

    def head_rate(self, r: int) -> float:
        return self.head_flops_per_row * r / self.head_time(r)


def _time(fn, budget: float = 0.05) -> float:
    fn()  # warm-up: first-call allocations
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    samples = []
    for _ in range(max(3, min(25, int(budget / max(once, 1e-6))))):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)


@torch.no_grad()
def probe(model, packed_linears: bool = True, rows: tuple[int, ...] = ROWS) -> MatmulProbe:
    """Time the model's own linear layers (first decoder layer, LM head) at each row count."""
    cfg = model.config.get_text_config()
    stack = decoder_layers(model)
    linears = [m for m in stack[0].modules() if isinstance(m, torch.nn.Linear)]
    head = model.get_output_embeddings()
    dtype = head.weight.dtype
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    gen = torch.Generator().manual_seed(0)
    layer_s, head_s = [], []
    with linear_packing(model, enabled=packed_linears):
        for r in rows:
            inputs = {m.in_features: torch.randn(r, m.in_features, generator=gen).to(dtype) for m in linears}
            layer_s.append(_time(lambda inputs=inputs: [m(inputs[m.in_features]) for m in linears]))
            x = torch.randn(r, head.in_features, generator=gen).to(dtype)
            head_s.append(_time(lambda x=x: head(x)))
    return MatmulProbe(tuple(rows), layer_s, head_s,
                       layer_flops_per_row=2.0 * sum(m.weight.numel() for m in linears),
                       head_flops_per_row=2.0 * head.weight.numel(), layers=len(stack),
                       attention_flops_per_pair=4.0 * heads * head_dim)


def fastest(a: MatmulProbe, b: MatmulProbe) -> MatmulProbe:
    """Each product's faster time of two probes of the same model."""
    return MatmulProbe(a.rows, [min(x, y) for x, y in zip(a.layer_seconds, b.layer_seconds)],
                       [min(x, y) for x, y in zip(a.head_seconds, b.head_seconds)], a.layer_flops_per_row,
                       a.head_flops_per_row, a.layers, a.attention_flops_per_pair)


def bound(calls: list[tuple[str, int, int, int]], p: MatmulProbe) -> dict[str, dict[str, float]]:
    """Per phase: model calls, tokens, GFLOP and the bound in seconds, from ``Profile.calls``."""
    out = {phase: {"calls": 0, "tokens": 0, "gflop": 0.0, "bound_s": 0.0} for phase in PHASES}
    for phase, tokens, logits, pairs in calls:
        f = out.setdefault(phase, {"calls": 0, "tokens": 0, "gflop": 0.0, "bound_s": 0.0})
        attention = p.layers * p.attention_flops_per_pair * pairs
        f["calls"] += 1
        f["tokens"] += tokens
        f["gflop"] += (p.layers * p.layer_flops_per_row * tokens + p.head_flops_per_row * logits + attention) / 1e9
        layers_s = p.layers * p.layer_time(tokens) if phase == "decode" else p.per_token_saturated * tokens
        f["bound_s"] += layers_s + p.head_time(logits) + attention / p.saturated_rate
    return out


def probe_figures(p: MatmulProbe, batch: int) -> dict[str, float | list[float]]:
    """Flat figures of the probe: GFLOP/s of the layers' products at 1 row, at ``batch`` rows and at 512, the
    saturated rate the bound uses for prefill and attention, and the probe's own times (bounds can be recomputed)."""
    rows = sorted({1, batch, p.rows[-1]})
    return {**{f"matmul_gflops_{r}_rows": p.rate(r) / 1e9 for r in rows},
            **{f"lm_head_gflops_{r}_rows": p.head_rate(r) / 1e9 for r in rows},
            "matmul_gflops_saturated": p.saturated_rate / 1e9, "probe_rows": list(p.rows),
            "probe_layer_seconds": p.layer_seconds, "probe_head_seconds": p.head_seconds}
