"""The running batch's KV cache (in-place decode writes, one-copy reshuffles) and the prefill grouping."""

import pytest
import torch
from transformers import DynamicCache

from adaptive_rag.lm import batch_cache as bc
from adaptive_rag.lm.decoder import prefill_groups


def kv(rows, length, layers=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, 3, length, 4, generator=g), torch.randn(rows, 3, length, 4, generator=g))
            for _ in range(layers)]


def test_decode_steps_write_in_place_and_match_concatenation():
    start = kv(2, 5)
    cache, plain = bc.batch_cache(start), DynamicCache()
    for i, (k, v) in enumerate(start):
        plain.update(k, v, i)
    buffer = cache.layers[0].k_buf
    for step in range(bc.SPARE + 10):  # past the spare: the buffer grows once
        new = kv(2, 1, seed=step + 1)
        for i, (k, v) in enumerate(new):
            got = cache.update(k, v, i)
            want = plain.update(k, v, i)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        if step < bc.SPARE - 1:
            assert cache.layers[0].k_buf is buffer  # no copy while the spare lasts
    assert cache.layers[0].k_buf is not buffer
    assert cache.get_seq_length() == 5 + bc.SPARE + 10


def test_select_rows_and_keep_columns():
    start = kv(3, 6)
    cache = bc.batch_cache(start)
    assert bc.compact(cache, [0, 2]) == [0, 2]  # row 2 moves into row 1's place
    assert torch.equal(cache.layers[1].keys, start[1][0][[0, 2]])
    leading = torch.tensor([False, False, True, True, True, True])
    buffer = cache.layers[0].k_buf
    bc.keep_columns(cache, leading)  # a leading run: a view, no copy
    assert cache.layers[0].k_buf.data_ptr() == buffer[:, :, 2:].data_ptr()
    assert torch.equal(cache.layers[0].values, start[0][1][[0, 2]][:, :, 2:])
    hole = torch.tensor([True, False, True, True])
    bc.keep_columns(cache, hole)
    assert torch.equal(cache.layers[0].keys, start[0][0][[0, 2]][:, :, [2, 4, 5]])
    k, v = kv(2, 1, seed=9)[0]
    cache.update(k, v, 0)  # still writable after both
    assert torch.equal(cache.layers[0].keys[:, :, -1:], k)


def test_compact_moves_only_rows_past_the_end():
    start = kv(5, 3)
    cache = bc.batch_cache(start)
    order = bc.compact(cache, [1, 3, 4])  # rows 0 and 2 leave: 3 moves to 0, 4 to 2
    assert order == [3, 1, 4]
    assert torch.equal(cache.layers[0].keys, start[0][0][order])
    assert torch.equal(cache.layers[1].values, start[1][1][order])


def test_join_in_place_when_there_is_room():
    cache = bc.batch_cache(kv(2, 6, seed=1), row_capacity=4)
    buffer = cache.layers[0].k_buf
    part = kv(1, 4, seed=2)
    joined = bc.join(cache, [part], row_capacity=4)
    assert joined is cache and cache.layers[0].k_buf is buffer
    keys = cache.layers[0].keys
    assert keys.shape[0] == 3 and not keys[2, :, :2].any() and torch.equal(keys[2, :, 2:], part[0][0][0])
    longer = bc.join(cache, [kv(1, 9, seed=3)], row_capacity=4)  # longer than the batch: a new buffer
    assert longer is not cache and longer.layers[0].keys.shape == (4, 3, 9, 4)
    assert torch.equal(longer.layers[0].keys[:3, :, 3:], keys)


def test_join_left_pads_each_part_to_the_longest():
    a, b, c = kv(1, 4, seed=1), kv(2, 7, seed=2), kv(1, 2, seed=3)
    cache = bc.join(None, [a, b, c])
    keys = cache.layers[1].keys
    assert keys.shape == (4, 3, 7, 4)
    assert torch.equal(keys[0, :, 3:], a[1][0][0]) and torch.equal(keys[0, :, :3], torch.zeros(3, 3, 4))
    assert torch.equal(keys[1:3], b[1][0])
    assert torch.equal(keys[3, :, 5:], c[1][0][0]) and not keys[3, :, :5].any()


@pytest.mark.parametrize("lengths, call_cost, want", [
    ([], 16, []),
    ([7], 16, [[0]]),
    ([35, 36, 300, 290, 40, 120], 16, [[0, 1, 4], [5], [3, 2]]),  # padding 5+1 tokens < a call; 290 vs 120 is not
    ([10, 20], 0, [[0], [1]]),  # calls free: never pad
    ([10, 20], 1000, [[0, 1]]),  # calls dear: one batch
])
def test_prefill_groups(lengths, call_cost, want):
    assert prefill_groups(lengths, call_cost) == want
