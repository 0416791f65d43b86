"""Batched greedy decoding with per-token signals and sequences that leave and join the batch.

For every generated token the decoder records: its id, its probability, the entropy of the full next-token
distribution at the step that produced it, and the last layer's attention row of that token over all earlier
positions (prompt included, left padding removed; heads aggregated, or kept per head with ``reduce="none"``). The
row of token t_j is produced when t_j is fed back as input, so a sequence that ends on length is fed once more
before it leaves. The row of the last prompt position (the one that chose t_0) comes from the prefill.

Sequences can be removed mid-flight (to retrieve) and new ones admitted: admitted prompts are prefilled as a
batch of their own, then their KV cache is left-padded and concatenated with the running batch, so nobody waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache

from inference.core.attention_capture import CaptureBuffer, HeadReduce, install_capture


@dataclass
class Sequence:
    """One generation in flight. ``rows[i]`` covers ``len(prompt_ids) + i + 1`` positions (diagonal included; a
    leading head axis when the decoder keeps heads); ``prompt_row`` is the last prompt position's row."""

    key: Any
    prompt_ids: list[int]
    max_new_tokens: int
    gen_ids: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    rows: list[torch.Tensor] = field(default_factory=list)
    prompt_row: torch.Tensor | None = None
    forward_passes: int = 0
    first_probs: dict[int, float] = field(default_factory=dict)  # watched token id -> probability at step 1
    closing: bool = False  # last token chosen; one more feed to get its row, then done
    done: bool = False
    hit_eos: bool = False


def _entropy_and_choice(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy token, its probability and the distribution's entropy: (B, V) -> three (B,) tensors."""
    return _choice_from_logp(torch.log_softmax(logits.float(), dim=-1))


def _choice_from_logp(logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    token = logp.argmax(dim=-1)
    prob = logp.gather(-1, token[:, None]).squeeze(-1).exp()
    entropy = -(logp.exp() * logp).sum(dim=-1)
    return token, prob, entropy


def _pad_left(x: torch.Tensor, length: int, dim: int) -> torch.Tensor:
    missing = length - x.shape[dim]
    if missing <= 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x.new_zeros(shape), x], dim=dim)


class BatchDecoder:
    """Greedy decoding of a changing batch. ``admit`` adds sequences, ``step`` advances all by one token."""

    def __init__(self, model, tokenizer, *, reduce: HeadReduce = "mean", stop_token_ids: set[int] | None = None,
                 capture: bool = True, watch_token_ids: tuple[int, ...] = ()):
        self.model, self.tokenizer = model, tokenizer
        self.buffer: CaptureBuffer | None = install_capture(model, reduce) if capture else None
        self.device = next(model.parameters()).device
        stops = set(stop_token_ids or ())
        if tokenizer.eos_token_id is not None:
            stops.add(tokenizer.eos_token_id)
        self.stop_token_ids = stops
        self.seqs: list[Sequence] = []
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None  # (B, L) 1 = real token
        self.pending: torch.Tensor | None = None  # (B,) token to feed next
        self.forward_passes = 0
        self.watch_token_ids = tuple(watch_token_ids)  # their first-step probabilities go to Sequence.first_probs

    # -- batch bookkeeping -------------------------------------------------------------------------------
    def _layers(self, cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in cache.layers]

    def _set_batch(self, kv: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor, pending: torch.Tensor):
        # Drop columns that are padding for every row (left after sequences with long prompts leave).
        real = mask.any(dim=0).nonzero()
        start = int(real[0]) if len(real) else mask.shape[1]
        cache = DynamicCache()
        for i, (k, v) in enumerate(kv):
            cache.update(k[:, :, start:], v[:, :, start:], i)
        self.cache, self.mask, self.pending = cache, mask[:, start:], pending

    def _merge(self, kv: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor, pending: torch.Tensor):
        if self.cache is None or not self.seqs:
            self._set_batch(kv, mask, pending)
            return
        length = max(self.mask.shape[1], mask.shape[1])
        merged = [
            (torch.cat([_pad_left(k0, length, 2), _pad_left(k1, length, 2)]),
             torch.cat([_pad_left(v0, length, 2), _pad_left(v1, length, 2)]))
            for (k0, v0), (k1, v1) in zip(self._layers(self.cache), kv)
        ]
        self._set_batch(merged, torch.cat([_pad_left(self.mask, length, 1), _pad_left(mask, length, 1)]),
                        torch.cat([self.pending, pending]))

    def remove(self, leaving: list[Sequence]) -> None:
        """Take sequences out of the batch (finished, or leaving to retrieve)."""
        gone = {id(s) for s in leaving}
        keep = [i for i, s in enumerate(self.seqs) if id(s) not in gone]
        if len(keep) == len(self.seqs):
            return
        self.seqs = [self.seqs[i] for i in keep]
        if not keep:
            self.cache = self.mask = self.pending = None
            return
        idx = torch.tensor(keep, device=self.device)
        kv = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in self._layers(self.cache)]
        self._set_batch(kv, self.mask.index_select(0, idx), self.pending.index_select(0, idx))

    # -- model calls -------------------------------------------------------------------------------------
    def _record_choice(self, seq: Sequence, token: int, prob: float, entropy: float) -> None:
        if token in self.stop_token_ids:
            seq.done, seq.hit_eos = True, True
            return
        seq.gen_ids.append(token)
        seq.probs.append(prob)
        seq.entropies.append(entropy)
        if len(seq.gen_ids) >= seq.max_new_tokens:
            if self.buffer is None:  # no attention row to collect: the extra feed would be wasted
                seq.done = True
            else:
                seq.closing = True

    @torch.no_grad()
    def admit(self, seqs: list[Sequence]) -> None:
        """Prefill new sequences as one left-padded batch and join them to the running batch."""
        if not seqs:
            return
        length = max(len(s.prompt_ids) for s in seqs)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.tensor([[pad] * (length - len(s.prompt_ids)) + s.prompt_ids for s in seqs], device=self.device)
        mask = torch.tensor([[0] * (length - len(s.prompt_ids)) + [1] * len(s.prompt_ids) for s in seqs],
                            device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                         logits_to_keep=1)
        self.forward_passes += 1
        logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)  # once: the choice and the watched tokens
        token, prob, entropy = _choice_from_logp(logp)
        watched = logp[:, list(self.watch_token_ids)].exp().tolist() if self.watch_token_ids else None
        prefill_rows = self.buffer.prefill_row.float().cpu() if self.buffer is not None else None
        real = mask.bool().cpu()
        for b, seq in enumerate(seqs):
            seq.forward_passes += 1
            if prefill_rows is not None:
                seq.prompt_row = prefill_rows[b][..., real[b]]
            if watched is not None:
                seq.first_probs = dict(zip(self.watch_token_ids, watched[b]))
            self._record_choice(seq, int(token[b]), float(prob[b]), float(entropy[b]))
        self.seqs = self.seqs + list(seqs)
        self._merge(self._layers(cache), mask, token)

    @torch.no_grad()
    def step(self) -> None:
        """Feed every active sequence its pending token: record that token's attention row, choose the next."""
        live = [s for s in self.seqs if not s.done]
        self.remove([s for s in self.seqs if s.done])
        if not live:
            return
        mask = torch.cat([self.mask, self.mask.new_ones(len(self.seqs), 1)], dim=1)
        positions = self.mask.sum(dim=1, keepdim=True)
        out = self.model(input_ids=self.pending[:, None], attention_mask=mask, position_ids=positions,
                         cache=self.cache, use_cache=True)
        self.forward_passes += 1
        self.mask = mask
        token, prob, entropy = _entropy_and_choice(out.logits[:, -1])
        rows = self.buffer.row.float().cpu() if self.buffer is not None else None
        real = mask.bool().cpu()
        for b, seq in enumerate(self.seqs):
            seq.forward_passes += 1
            if rows is not None:
                seq.rows.append(rows[b][..., real[b]])
            if seq.closing:
                seq.done = True
                continue
            self._record_choice(seq, int(token[b]), float(prob[b]), float(entropy[b]))
        self.pending = token

    @property
    def active(self) -> list[Sequence]:
        return [s for s in self.seqs if not s.done]


def stop_token_ids(tokenizer) -> set[int]:
    """EOS plus chat end-of-turn tokens (SmolLM2 ends a turn with <|im_end|>)."""
    ids = set()
    for tok in ("<|im_end|>", "<|eot_id|>", "<|end|>", "</s>", "<|endoftext|>"):
        tid = tokenizer.convert_tokens_to_ids(tok)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.add(tid)
    return ids
