"""The running batch's KV cache: every layer's keys and values in a buffer with spare columns at the end.

transformers' ``DynamicLayer`` concatenates each decode step's key and value onto the whole cache, so a step copies
all of it (batch 32 × 300 positions of SmolLM2: about a fifth of the step). Here a step writes its column in place;
only a full buffer grows (by half its length, at least ``SPARE`` columns), and the batch reshuffles (sequences
leaving, joining, all-padding columns dropped) copy each tensor once, straight into the new buffer.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

SPARE = 64  # free columns a new buffer gets at least: a round's decode steps rarely need to grow it

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values (B, H, L, D)


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` over buffers (row capacity, H, column capacity, D): ``keys``/``values`` are views of the
    first ``rows`` rows and ``length`` columns."""

    def _set(self, k_buf: torch.Tensor, v_buf: torch.Tensor, rows: int, length: int) -> None:
        self.k_buf, self.v_buf, self.rows, self.length = k_buf, v_buf, rows, length
        self.keys, self.values = k_buf[:rows, :, :length], v_buf[:rows, :, :length]
        self.device, self.is_initialized = k_buf.device, True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            rows = key_states.shape[0]
            self._set(*_buffers(key_states[:, :, :0], value_states[:, :, :0], rows, key_states.shape[2]), rows, 0)
        n, t = self.length, key_states.shape[2]
        if n + t > self.k_buf.shape[2]:
            self._set(*_buffers(self.keys, self.values, self.k_buf.shape[0], t), self.rows, n)
        self.k_buf[:self.rows, :, n:n + t].copy_(key_states)
        self.v_buf[:self.rows, :, n:n + t].copy_(value_states)
        self._set(self.k_buf, self.v_buf, self.rows, n + t)
        return self.keys, self.values

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0:
            self._set(self.k_buf, self.v_buf, self.rows, max(0, self.length + tokens_to_remove))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            rows = len(indices)
            self._set(*_buffers(self.keys.index_select(0, indices), self.values.index_select(0, indices), rows, 0),
                      rows, self.length)


def _empty_buffer(like: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    """A buffer shaped like ``like`` with ``rows`` rows and room for ``columns`` columns plus the spare."""
    return like.new_empty(rows, like.shape[1], columns + max(SPARE, columns // 2), like.shape[3])


def _buffers(keys: torch.Tensor, values: torch.Tensor, row_capacity: int, extra: int) -> tuple[torch.Tensor, ...]:
    """New buffers holding ``keys``/``values`` in their first rows and columns, with room for ``row_capacity`` rows
    and ``extra`` more columns plus the spare."""
    rows, n = keys.shape[0], keys.shape[2]
    bufs = []
    for x in (keys, values):
        buf = _empty_buffer(x, max(rows, row_capacity), n + extra)
        buf[:rows, :, :n].copy_(x)
        bufs.append(buf)
    return bufs[0], bufs[1]


def batch_cache(kv: KV, row_capacity: int = 0) -> DynamicCache:
    """A cache of :class:`GrowingLayer` over copies of ``kv`` (each tensor copied once), with room for
    ``row_capacity`` rows."""
    return join(None, [kv], row_capacity)


def layers(cache: DynamicCache) -> KV:
    return [(layer.keys, layer.values) for layer in cache.layers]


def compact(cache: DynamicCache, keep: list[int]) -> list[int]:
    """Keep only the rows ``keep`` (ascending), in place: each kept row past the new end moves into a hole left by a
    leaving row, so only those rows are copied. Returns the old row index now at each position."""
    rows = len(keep)
    kept = set(keep)
    holes = [i for i in range(rows) if i not in kept]
    movers = [i for i in keep if i >= rows]
    order = list(range(rows))
    for hole, mover in zip(holes, movers):
        order[hole] = mover
    for layer in cache.layers:
        for hole, mover in zip(holes, movers):
            layer.k_buf[hole, :, :layer.length].copy_(layer.k_buf[mover, :, :layer.length])
            layer.v_buf[hole, :, :layer.length].copy_(layer.v_buf[mover, :, :layer.length])
        layer._set(layer.k_buf, layer.v_buf, rows, layer.length)
    return order


def keep_columns(cache: DynamicCache, used: torch.Tensor) -> None:
    """Keep only the ``used`` columns (B,) bool. A run of leading columns is dropped without a copy (a view)."""
    first = int(used.to(torch.uint8).argmax())
    leading_run, kept = bool(used[first:].all()), int(used.sum())
    for layer in cache.layers:
        if leading_run:
            layer._set(layer.k_buf[:, :, first:], layer.v_buf[:, :, first:], layer.rows, kept)
        else:
            layer._set(*_buffers(layer.keys[:, :, used], layer.values[:, :, used], layer.k_buf.shape[0], 0),
                       layer.rows, kept)


def join(cache: DynamicCache | None, parts: list[KV], row_capacity: int = 0) -> DynamicCache:
    """The running batch ``cache`` (or none) with every part's rows after its own, each left-padded with zeros to the
    longest length. In place when the buffers have room for the rows and no part is longer than the batch; else
    one new buffer (each tensor copied once)."""
    if cache is not None:
        first = cache.layers[0]
        new_rows = sum(part[0][0].shape[0] for part in parts)
        if (first.rows + new_rows <= first.k_buf.shape[0]
                and all(part[0][0].shape[2] <= first.length for part in parts)):
            for layer, per_part in zip(cache.layers, zip(*parts)):
                row = layer.rows
                for k, v in per_part:
                    _write_left_padded(layer.k_buf, row, layer.length, k)
                    _write_left_padded(layer.v_buf, row, layer.length, v)
                    row += k.shape[0]
                layer._set(layer.k_buf, layer.v_buf, row, layer.length)
            return cache
        parts = [layers(cache), *parts]
    out = DynamicCache()
    out.layers = []
    for per_part in zip(*parts):  # one layer: every part's (keys, values)
        length = max(k.shape[2] for k, _ in per_part)
        rows = sum(k.shape[0] for k, _ in per_part)
        bufs = []
        for which in (0, 1):
            buf = _empty_buffer(per_part[0][which], max(rows, row_capacity), length)
            row = 0
            for kv in per_part:
                _write_left_padded(buf, row, length, kv[which])
                row += kv[which].shape[0]
            bufs.append(buf)
        layer = GrowingLayer()
        layer._set(bufs[0], bufs[1], rows, length)
        out.layers.append(layer)
    return out


def _write_left_padded(buf: torch.Tensor, row: int, length: int, x: torch.Tensor) -> None:
    pad = length - x.shape[2]
    buf[row:row + x.shape[0], :, :pad].zero_()  # masked, but 0 × NaN would still be NaN
    buf[row:row + x.shape[0], :, pad:length].copy_(x)
