"""The compute bound of a run: how long its model calls' matrix products alone take on this machine.

A probe times the model's own linear layers (every decoder layer's in turn, as a forward pass runs them, and the LM
head) on inputs of 1 to 512 rows in the model's dtype (through the prepacked kernel where the runs use it), in the
same process as the runs, before and after them; the fastest time of each product counts (a neighbour's load only
ever slows a product down). Running every layer in turn matters for decode steps: a model's weights do not fit in
the cache, so a step of a few rows reads them all from memory, and timing one layer over and over (its weights
staying in cache) made a one-row step look 2.0x (float32) to 2.3x (bf16) cheaper than any step can be. Each model call a
:class:`~adaptive_rag.lm.profiling.Profile` recorded (``Profile.work``: real tokens, LM-head rows, attention pairs,
cached positions read) is then priced:

* a decode step at its own row count (a few-row step costs a full read of the weights, which the probe's time at
  that row count includes), LM head at the step's rows, and reading the KV cache: the cached positions the step
  reads (each row's own, the shared head once, whichever layout holds it) × their bytes (keys and values of every
  layer), at the memory rate (the faster of the one-row pass's weight bytes ÷ its time and a plain streaming read),
  or the attention's FLOPs at the saturated rate where that is longer;
* prefill and attention passes at the 512-row rate per token (a pass split into small calls is work the bound does
  not excuse), their LM heads per call;
* attention (QKᵀ and AV: 4 × heads × head_dim FLOPs per pair per layer) at the 512-row rate.

FLOPs: 2 × (parameters of the layers' linears) × tokens + 2 × (LM head) × logits rows + attention FLOPs. The
embedding lookup, norms, softmax and everything outside the model are free in the bound, so wall ÷ bound is the
distance left to gain. ``flop_bound`` prices the same calls without the KV-cache reads and with the layers timed
one at a time (the bound before the memory terms, kept for comparison).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass, replace

import torch

from adaptive_rag.lm.packed_linear import linear_packing
from adaptive_rag.lm.profiling import ModelCall

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
    kv_bytes_per_position: float = 0.0  # keys and values of one cached position, every layer
    weight_bytes: float = 0.0  # the decoder layers' linear weights
    one_layer_seconds: list[float] | None = None  # one layer timed alone (weights in cache): the FLOP-only bound
    stream_bytes_per_second: float = 0.0  # a plain read of a buffer larger than the cache

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

    @property
    def memory_rate(self) -> float:
        """Bytes per second the KV cache can be read at: the faster of the smallest-row pass over the weights (weight
        bytes ÷ its time) and a plain streaming read (a kernel slow at one row, such as bf16's prepacked one, does
        not slow the cache reads, which go through attention); 0: not probed."""
        one_row = self.layers * self.layer_seconds[0]
        weights = self.weight_bytes / one_row if self.weight_bytes and one_row > 0 else 0.0
        return max(weights, self.stream_bytes_per_second)

    def flop_only(self) -> MatmulProbe:
        """The same probe as the bound before the memory terms: layers timed one at a time, no KV-cache reads."""
        return replace(self, layer_seconds=self.one_layer_seconds or self.layer_seconds, kv_bytes_per_position=0.0,
                       one_layer_seconds=None)


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
    head = model.get_output_embeddings()
    dtype = head.weight.dtype
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    every = [[m for m in layer.modules() if isinstance(m, torch.nn.Linear)] for layer in stack]
    linears = every[0]
    gen = torch.Generator().manual_seed(0)
    layer_s, one_layer_s, head_s = [], [], []
    with linear_packing(model, enabled=packed_linears):
        for r in rows:
            inputs = {m.in_features: torch.randn(r, m.in_features, generator=gen).to(dtype) for m in linears}
            one_layer_s.append(_time(lambda inputs=inputs: [m(inputs[m.in_features]) for m in linears]))
            # every layer in turn, as a forward pass reads them: per layer
            layer_s.append(_time(lambda inputs=inputs: [m(inputs[m.in_features]) for ms in every for m in ms])
                           / len(stack))
            x = torch.randn(r, head.in_features, generator=gen).to(dtype)
            head_s.append(_time(lambda x=x: head(x)))
    return MatmulProbe(tuple(rows), layer_s, head_s,
                       layer_flops_per_row=2.0 * sum(m.weight.numel() for m in linears),
                       head_flops_per_row=2.0 * head.weight.numel(), layers=len(stack),
                       attention_flops_per_pair=4.0 * heads * head_dim,
                       kv_bytes_per_position=2.0 * len(stack) * kv_heads * head_dim * head.weight.element_size(),
                       weight_bytes=float(sum(m.weight.numel() * m.weight.element_size() for ms in every for m in ms)),
                       one_layer_seconds=one_layer_s, stream_bytes_per_second=stream_rate())


STREAM_BYTES = 256 * 2**20  # larger than any CPU's last-level cache


def stream_rate() -> float:
    """Bytes per second of a plain read of a buffer larger than the cache (the best of a few sums)."""
    x = torch.ones(STREAM_BYTES // 4)
    return STREAM_BYTES / _time(lambda: x.sum(), budget=0.0)


def fastest(a: MatmulProbe, b: MatmulProbe) -> MatmulProbe:
    """Each product's faster time of two probes of the same model."""
    def least(x, y):
        return None if x is None or y is None else [min(i, j) for i, j in zip(x, y)]

    return replace(a, layer_seconds=least(a.layer_seconds, b.layer_seconds),
                   head_seconds=least(a.head_seconds, b.head_seconds),
                   one_layer_seconds=least(a.one_layer_seconds, b.one_layer_seconds),
                   stream_bytes_per_second=max(a.stream_bytes_per_second, b.stream_bytes_per_second))


def bound(calls: list[ModelCall], p: MatmulProbe) -> dict[str, dict[str, float]]:
    """Per phase: model calls, tokens, GFLOP, KV-cache GB read (decode) and the bound in seconds, from
    ``Profile.calls``."""
    out = {phase: {"calls": 0, "tokens": 0, "gflop": 0.0, "kv_gb": 0.0, "bound_s": 0.0} for phase in PHASES}
    for phase, tokens, logits, pairs, read, _ in calls:
        f = out.setdefault(phase, {"calls": 0, "tokens": 0, "gflop": 0.0, "kv_gb": 0.0, "bound_s": 0.0})
        attention = p.layers * p.attention_flops_per_pair * pairs
        f["calls"] += 1
        f["tokens"] += tokens
        f["gflop"] += (p.layers * p.layer_flops_per_row * tokens + p.head_flops_per_row * logits + attention) / 1e9
        attention_s = attention / p.saturated_rate
        if phase == "decode":
            layers_s = p.layers * p.layer_time(tokens)
            kv_bytes = p.kv_bytes_per_position * read
            f["kv_gb"] += kv_bytes / 1e9
            if kv_bytes and p.memory_rate:
                attention_s = max(attention_s, kv_bytes / p.memory_rate)
        else:
            layers_s = p.per_token_saturated * tokens
        f["bound_s"] += layers_s + p.head_time(logits) + attention_s
    return out


def flop_bound(calls: list[ModelCall], p: MatmulProbe) -> float:
    """Seconds of the bound before the memory terms (one layer timed alone, no KV-cache reads), all phases."""
    return sum(phase["bound_s"] for phase in bound(calls, p.flop_only()).values())


def probe_figures(p: MatmulProbe, batch: int) -> dict[str, float | list[float]]:
    """Flat figures of the probe: GFLOP/s of the layers' products at 1 row, at ``batch`` rows and at 512, the
    saturated rate the bound uses for prefill and attention, and the probe's own times (bounds can be recomputed)."""
    rows = sorted({1, batch, p.rows[-1]})
    return {**{f"matmul_gflops_{r}_rows": p.rate(r) / 1e9 for r in rows},
            **{f"lm_head_gflops_{r}_rows": p.head_rate(r) / 1e9 for r in rows},
            "matmul_gflops_saturated": p.saturated_rate / 1e9, "probe_rows": list(p.rows),
            "memory_gb_per_s": p.memory_rate / 1e9, "stream_gb_per_s": p.stream_bytes_per_second / 1e9,
            "weight_gb": p.weight_bytes / 1e9,
            "kv_kb_per_position": p.kv_bytes_per_position / 1e3,
            **({f"matmul_gflops_{r}_rows_one_layer": p.flop_only().rate(r) / 1e9 for r in rows}
               if p.one_layer_seconds else {}),
            "probe_layer_seconds": p.layer_seconds, "probe_head_seconds": p.head_seconds,
            "probe_one_layer_seconds": p.one_layer_seconds}
