"""Batched greedy decoding with per-token signals and sequences that leave and join the batch.

For every generated token the decoder records: its id, its probability, the entropy of the full next-token
distribution at the step that produced it, and the last layer's attention row of that token over all earlier
positions (prompt included, left padding removed; heads aggregated, or kept per head with ``reduce="none"``). The
row of token t_j is produced when t_j is fed back as input, so a sequence that ends on length is fed once more
before it leaves. The row of the last prompt position (the one that chose t_0) comes from the prefill.

Sequences can be removed mid-flight (to retrieve) and new ones admitted: admitted prompts are prefilled in
batches of their own (grouped by length, so little padding is computed), then their KV cache is left-padded and
joined to the running batch, so nobody waits. The batch cache (:mod:`adaptive_rag.lm.batch_cache`) is written in
place by decode steps; a leaving row is replaced by one from the end of the batch, and joining rows are written
into free rows when they fit.

A shared head (``set_shared_prefix``: e.g. the paper prompt's few-shot demos, the same in every prompt) is prefilled
once; a prompt whose ids start with it prefills only the rest, against a copy of the head's KV cache. Its row of
the mask reads ``[head][padding][own tokens]``: the hole is masked like left padding, positions count real tokens
only, so every logit and attention row is what the full prefill gives (up to float rounding). The batch cache
then keeps only the rows' own tokens: decode steps score the head once for the whole batch against its single
copy (:class:`adaptive_rag.lm.attention_capture.SharedHeadLayer`) instead of reading it once per row (a thousand
demo tokens per row were most of a paper-prompt decode step).
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache

from adaptive_rag.lm.attention_capture import (
    ATTN_NAME,
    CaptureBuffer,
    HeadReduce,
    SharedHeadLayer,
    attention_modules,
    install_capture,
)
from adaptive_rag.lm.batch_cache import KV, compact, join, keep_columns, layers
from adaptive_rag.lm.packed_linear import linear_packing
from adaptive_rag.lm.profiling import Profile
from adaptive_rag.lm.sampling import Sampler
from adaptive_rag.lm.tokenization import prompt_ids


@dataclass
class _CallTime:
    seconds: float | None = None  # set when the call has returned


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
    shared_head: bool = False  # prefilled after the decoder's shared head (its own tokens follow it)
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
                 capture: bool = True, watch_token_ids: tuple[int, ...] = (),
                 shared_prefix_ids: list[int] | None = None, max_batch: int = 0, packed_linears: bool = True,
                 head_once: bool | None = None, banned_token_ids: tuple[int, ...] = ()):
        self.model, self.tokenizer = model, tokenizer
        # every model call below runs inside ``with self.linears`` (bf16 on a CPU: weights prepacked once)
        self.linears = linear_packing(model, enabled=packed_linears)
        self.max_batch = max_batch  # rows the batch cache makes room for (0: as many as it holds)
        self.buffer: CaptureBuffer | None = install_capture(model, reduce) if capture else None
        self.device = next(model.parameters()).device
        stops = set(stop_token_ids or ())
        if tokenizer.eos_token_id is not None:
            stops.add(tokenizer.eos_token_id)
        self.stop_token_ids = stops
        # keep the stop token that ends a sequence in gen_ids (with its probability, entropy and attention row), as a
        # generate() call returns it: DRAGIN's reference code decodes it into the round's text
        self.keep_stop_token = False
        self.seqs: list[Sequence] = []
        self.cache: DynamicCache | None = None  # the running batch's (adaptive_rag.lm.batch_cache)
        self.mask: torch.Tensor | None = None  # (B, L) 1 = real token
        self.pending: torch.Tensor | None = None  # (B,) token to feed next
        self.has_head: torch.Tensor | None = None  # (B,) bool: the row starts with the shared head (not in the cache)
        self.forward_passes = 0
        self.watch_token_ids = tuple(watch_token_ids)  # their first-step probabilities go to Sequence.first_probs
        # never chosen (ADAPT-LLM's <RET> in the answer to the context prompt); watched probabilities stay the model's
        self.banned_ids = (torch.tensor(sorted(set(banned_token_ids)), device=self.device)
                           if banned_token_ids else None)
        self.profile: Profile | None = None  # attach one to time prefill, decode steps and cache reshuffles
        # decode steps score the shared head once for the batch (False: each row's cache holds a copy and SDPA reads
        # it per row). None: once in float32, and in other dtypes at batches of 32 rows and more: SDPA's fused bf16
        # kernel reads the copies faster than the float32 scores of the shared path at small batches (one layer,
        # head 494, own 250, 1 thread: bf16 per row 2.5 / 8.1 / 47 ms at batch 6 / 16 / 64, once 4.0 / 9.2 / 36;
        # float32 per row 3.2 / 11 / 80, once 3.2 / 7.0 / 41)
        if head_once is None:
            head_once = head_scored_once(next(model.parameters()).dtype, max_batch)
        self.head_once = head_once
        self.prefix_ids: list[int] = []
        self.sampler: Sampler | None = None  # None: greedy; else seeded sampling (adaptive_rag.lm.sampling)
        self._prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer, batch 1
        self._prefix_f32: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer (H_kv, P, D), for decode steps
        if shared_prefix_ids:
            self.set_shared_prefix(shared_prefix_ids)

    def _timed(self, name: str):
        return self.profile.section(name) if self.profile is not None else nullcontext()

    @contextmanager
    def _model_call(self, phase: str, attention=None):
        """One model call, timed as ``phase`` and on its own (``.seconds`` of what it yields, for the profile's
        record of the call), with the packed linears and, for a decode step, its attention function in place.
        Under a profile on CUDA the time is taken once the queued kernels have run: a call returns before they do,
        and the wait would fall on the next operation that reads a result."""
        timed = _CallTime()
        with self._timed(phase), self.linears, attention or nullcontext():
            start = time.perf_counter()
            yield timed
            if self.profile is not None and self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            timed.seconds = time.perf_counter() - start

    @torch.no_grad()
    def set_shared_prefix(self, ids: list[int] | None) -> None:
        """Prefill ``ids`` once (``None`` or empty: no shared head). From now on a prompt whose ids start with them
        and go on past them prefills only its own tokens; any other prompt gets the full prefill. Matching is on the
        ids of the whole prompt, so a tokenizer that merges across the head's end only costs a cache miss."""
        if self.seqs:
            raise ValueError("the shared head can only change while no sequence is in flight")
        self.prefix_ids, self._prefix_kv, self._prefix_f32 = [], [], []
        if not ids:
            return
        ids = list(ids)
        cache = DynamicCache()
        with self._model_call("prefill") as call:
            self.model(input_ids=torch.tensor([ids], device=self.device),
                       attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=self.device),
                       position_ids=torch.arange(len(ids), device=self.device)[None], cache=cache, use_cache=True,
                       logits_to_keep=1)
        self.forward_passes += 1
        if self.profile is not None:
            self.profile.count("prefill_tokens", len(ids))
            self.profile.count("prefill_padded_tokens", len(ids))
            self.profile.work("prefill", len(ids), 1, _causal_pairs(len(ids), 0), seconds=call.seconds)
        self.prefix_ids, self._prefix_kv = ids, layers(cache)
        self._prefix_f32 = [(k[0].float(), v[0].float()) for k, v in self._prefix_kv]
        self._attention = attention_modules(self.model)
        if self.buffer is None:  # decode steps need the attention function that knows the shared head
            self.model.set_attn_implementation(ATTN_NAME)

    def _starts_with_prefix(self, seq: Sequence) -> bool:
        n = len(self.prefix_ids)
        return 0 < n < len(seq.prompt_ids) and seq.prompt_ids[:n] == self.prefix_ids

    # -- batch bookkeeping -------------------------------------------------------------------------------
    def _drop_unused_columns(self) -> None:
        # Columns that are padding for every row: left after sequences with long prompts leave, and the hole between
        # a shared head and the prompts' own tokens when every row has it. Positions count real tokens, so a dropped
        # column changes nothing but the work.
        used = self.mask.any(dim=0)
        if not bool(used.all()):
            keep_columns(self.cache, used)
            self.mask = self.mask[:, used]

    def _merge(self, parts: list[KV], masks: list[torch.Tensor], pending: torch.Tensor, has_head: torch.Tensor) -> None:
        """The running batch (if any) then each admitted part, left-padded to one length."""
        if self.cache is not None:
            masks, pending = [self.mask, *masks], torch.cat([self.pending, pending])
            has_head = torch.cat([self.has_head, has_head])
        self.cache = join(self.cache, parts, self.max_batch)
        length = self.cache.layers[0].length
        self.mask = torch.cat([_pad_left(m, length, 1) for m in masks])
        self.pending, self.has_head = pending, has_head
        self._drop_unused_columns()

    def remove(self, leaving: list[Sequence]) -> None:
        """Take sequences out of the batch (finished, or leaving to retrieve)."""
        gone = {id(s) for s in leaving}
        keep = [i for i, s in enumerate(self.seqs) if id(s) not in gone]
        if len(keep) == len(self.seqs):
            return
        if not keep:
            self.seqs, self.cache, self.mask, self.pending, self.has_head = [], None, None, None, None
            return
        with self._timed("cache"):
            order = compact(self.cache, keep)
            idx = torch.tensor(order, device=self.device)
            self.seqs = [self.seqs[i] for i in order]
            self.mask, self.pending = self.mask.index_select(0, idx), self.pending.index_select(0, idx)
            self.has_head = self.has_head.index_select(0, idx)
            self._drop_unused_columns()

    # -- model calls -------------------------------------------------------------------------------------
    def _choose(self, logits: torch.Tensor, logp: torch.Tensor | None = None):
        """Next token, its probability and the entropy, greedy or by ``self.sampler``: (B, V) -> three (B,).
        Banned tokens get the lowest finite logit, so the probability and entropy are those of what can be chosen."""
        if self.banned_ids is not None:
            logits = logits.float().index_fill(-1, self.banned_ids, torch.finfo(torch.float32).min)
            logp = None
        if self.sampler is not None:
            return self.sampler.choose(logits)
        return _entropy_and_choice(logits) if logp is None else _choice_from_logp(logp)

    def _record_choice(self, seq: Sequence, token: int, prob: float, entropy: float) -> None:
        stop = token in self.stop_token_ids
        if stop and not self.keep_stop_token:
            seq.done, seq.hit_eos = True, True
            return
        seq.gen_ids.append(token)
        seq.probs.append(prob)
        seq.entropies.append(entropy)
        seq.hit_eos = stop
        if stop or len(seq.gen_ids) >= seq.max_new_tokens:
            if self.buffer is None:  # no attention row to collect: the extra feed would be wasted
                seq.done = True
            else:
                seq.closing = True

    @torch.no_grad()
    def admit(self, seqs: list[Sequence]) -> None:
        """Prefill new sequences and join them to the running batch in one reshuffle. Those that start with the shared
        head prefill only their own tokens, the others whole prompts; each kind in left-padded batches of similar
        lengths (:func:`prefill_groups`)."""
        shared = [self._starts_with_prefix(s) for s in seqs]
        parts = []
        for group, head in (([s for s, h in zip(seqs, shared) if not h], 0),
                            ([s for s, h in zip(seqs, shared) if h], len(self.prefix_ids))):
            for rows in prefill_groups([len(s.prompt_ids) - head for s in group]):
                parts.append(self._prefill([group[i] for i in rows], head))
        if not parts:
            return
        with self._timed("cache"):
            self._merge([kv for kv, _, _, _ in parts], [m for _, m, _, _ in parts],
                        torch.cat([t for _, _, t, _ in parts]), torch.cat([h for _, _, _, h in parts]))

    def _prefill(self, seqs: list[Sequence], head: int) -> tuple[KV, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One forward pass over ``prompt_ids[head:]`` of each sequence, after ``head`` cached shared tokens; the
        sequences join ``self.seqs``. Returns for :meth:`_merge` their own columns' KV cache and mask (the head
        stays out of the batch cache), first chosen tokens and whether they start with the head."""
        own = [s.prompt_ids[head:] for s in seqs]
        length = max(map(len, own))
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.tensor([[pad] * (length - len(x)) + x for x in own], device=self.device)
        mask = torch.tensor([[1] * head + [0] * (length - len(x)) + [1] * len(x) for x in own], device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, head:]
        cache = DynamicCache()
        for i, (k, v) in enumerate(self._prefix_kv if head else []):
            cache.update(k.expand(len(seqs), -1, -1, -1), v.expand(len(seqs), -1, -1, -1), i)
        with self._model_call("prefill") as call:
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache,
                             use_cache=True, logits_to_keep=1)
            logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)  # once: the choice and the watched tokens
            token, prob, entropy = self._choose(out.logits[:, -1], logp)
            watched = logp[:, list(self.watch_token_ids)].exp().tolist() if self.watch_token_ids else None
            # the last prompt position's row: it chose the first token (a one-token input took the decode path)
            prefill_rows = self.buffer.row.float().cpu() if self.buffer is not None else None
        self.forward_passes += 1
        if self.profile is not None:
            self.profile.count("prefill_tokens", sum(map(len, own)))
            self.profile.count("prefill_padded_tokens", ids.numel())
            self.profile.count("shared_head_tokens_reused", head * len(seqs))
            self.profile.work("prefill", sum(map(len, own)), len(seqs), sum(_causal_pairs(len(x), head) for x in own),
                              seconds=call.seconds)
        real = mask.bool().cpu()
        for b, seq in enumerate(seqs):
            seq.forward_passes += 1
            seq.shared_head = head > 0
            if prefill_rows is not None:
                seq.prompt_row = prefill_rows[b][..., real[b]]
            if watched is not None:
                seq.first_probs = dict(zip(self.watch_token_ids, watched[b]))
            self._record_choice(seq, int(token[b]), float(prob[b]), float(entropy[b]))
        self.seqs = self.seqs + list(seqs)
        cut = head if self.head_once else 0  # the head's columns stay out of the batch cache
        own_kv = [(k[:, :, cut:], v[:, :, cut:]) for k, v in layers(cache)]
        return own_kv, mask[:, cut:], token, torch.full((len(seqs),), cut > 0, device=self.device)

    @torch.no_grad()
    def step(self) -> None:
        """Feed every active sequence its pending token: record that token's attention row, choose the next."""
        live = [s for s in self.seqs if not s.done]
        self.remove([s for s in self.seqs if s.done])
        if not live:
            return
        mask = torch.cat([self.mask, self.mask.new_ones(len(self.seqs), 1)], dim=1)
        head = len(self.prefix_ids) * self.has_head.long()  # shared positions before the row's own
        positions = self.mask.sum(dim=1, keepdim=True) + head[:, None]
        with self._model_call("decode", self._shared_head_attention()) as call:
            out = self.model(input_ids=self.pending[:, None], attention_mask=mask, position_ids=positions,
                             cache=self.cache, use_cache=True)
            token, prob, entropy = self._choose(out.logits[:, -1])
            rows = self.buffer.row.float().cpu() if self.buffer is not None else None
        self.forward_passes += 1
        if self.profile is not None:
            # the shared head is one set of keys every row that starts with it reads: a step has to read it once,
            # whether it stays out of the batch cache (scored once) or each row's cache holds a copy (per row)
            rows_with_head = sum(s.shared_head for s in self.seqs)
            copies = 0 if self.head_once else rows_with_head
            read = int(mask.sum()) - copies * len(self.prefix_ids) + (len(self.prefix_ids) if rows_with_head else 0)
            self.profile.work("decode", len(self.seqs), len(self.seqs), int(mask.sum() + head.sum()), read,
                              seconds=call.seconds)
        self.mask = mask
        real = mask.bool()
        if self._prefix_f32 and bool(self.has_head.any()):  # rows span [shared head][own tokens]
            real = torch.cat([self.has_head[:, None].expand(-1, len(self.prefix_ids)), real], dim=1)
        real = real.cpu()
        for b, seq in enumerate(self.seqs):
            seq.forward_passes += 1
            if rows is not None:
                seq.rows.append(rows[b][..., real[b]])
            if seq.closing:
                seq.done = True
                continue
            self._record_choice(seq, int(token[b]), float(prob[b]), float(entropy[b]))
        self.pending = token

    @contextmanager
    def _shared_head_attention(self):
        """During a decode step: each layer's attention scores the shared head once for the batch (rows that start
        with it), since the batch cache holds only the rows' own tokens."""
        if not self._prefix_f32 or not bool(self.has_head.any()):
            yield
            return
        for module, (k, v) in zip(self._attention, self._prefix_f32):
            module.shared_head = SharedHeadLayer(k, v, self.has_head)
        try:
            yield
        finally:
            for module in self._attention:
                module.__dict__.pop("shared_head", None)

    @property
    def active(self) -> list[Sequence]:
        return [s for s in self.seqs if not s.done]

    def clear(self) -> None:
        """Drop every sequence in flight and the batch cache (after an out-of-memory error: their rounds run
        again); the shared head stays."""
        self.seqs, self.cache, self.mask, self.pending, self.has_head = [], None, None, None, None
        if self.buffer is not None:
            self.buffer.row = self.buffer.all_rows = None


def head_scored_once(dtype: torch.dtype, max_batch: int) -> bool:
    """Whether decode steps score the shared head once for the batch (the batch cache holds only the rows' own
    tokens) rather than reading a copy per row: in float32 always, in other dtypes from 32 rows (the timings in
    :class:`BatchDecoder`)."""
    return dtype == torch.float32 or max_batch >= 32


def _causal_pairs(tokens: int, cached: int) -> int:
    """(query, key) pairs a causal pass over ``tokens`` new positions after ``cached`` ones scores."""
    return tokens * cached + tokens * (tokens + 1) // 2


PREFILL_CALL_COST = 16  # one more model call costs about as much as this many padding positions


def prefill_groups(lengths: list[int], call_cost: int = PREFILL_CALL_COST) -> list[list[int]]:
    """Indices of prompts of ``lengths`` grouped for prefill: each group one left-padded batch. Sorted by length and
    cut where the padding a group would carry costs more than another model call (exact, by dynamic programming
    over the sorted lengths: a group's cost is rows × its longest length + ``call_cost``)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    sorted_len = [lengths[i] for i in order]
    best = [0] + [None] * len(order)  # best[j]: cost of the first j sorted prompts; cut[j]: where its last group starts
    cut = [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        best[j], cut[j] = min((best[i] + (j - i) * sorted_len[j - 1] + call_cost, i) for i in range(j))
    groups, j = [], len(order)
    while j > 0:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]


def stop_token_ids(tokenizer) -> set[int]:
    """EOS plus chat end-of-turn tokens (SmolLM2 ends a turn with <|im_end|>)."""
    ids = set()
    for tok in ("<|im_end|>", "<|eot_id|>", "<|end|>", "</s>", "<|endoftext|>"):
        tid = tokenizer.convert_tokens_to_ids(tok)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.add(tid)
    return ids


def shared_head_ids(tokenizer, texts: list[str]) -> list[int]:
    """The prompt ids that every one of ``texts`` starts with, cut where the tokenization is stable.

    Start from the longest common prefix of the texts' ids (:func:`prompt_ids`, each text tokenized whole) and drop
    its last token: that token may merge with what follows in another prompt ("1" of " 12" and " 13" is not a
    token of " 7"; a run of newlines). Then drop more until the head's text, tokenized alone, gives exactly the
    head's ids (a cut between the byte tokens of one character does not): tokenizing head + rest then gives the
    head's ids followed by the rest's, for every text given. The rest is never tokenized alone (SentencePiece would
    add a leading space to it): the decoder matches each whole prompt's ids against the head, so a prompt that
    still merges across the cut only misses the cache. Give it prompts that differ right after the shared part
    (two questions, with and without documents); the result may be empty.
    """
    if len(texts) < 2:
        raise ValueError(f"a shared head needs at least two prompt texts, got {len(texts)}")
    encoded = [prompt_ids(tokenizer, t, offsets=True) for t in texts]
    first, spans = encoded[0]
    n = min(len(ids) for ids, _ in encoded)
    for ids, _ in encoded[1:]:
        n = next((i for i in range(n) if ids[i] != first[i]), n)
    for cut in range(n - 1, 0, -1):
        if prompt_ids(tokenizer, texts[0][:spans[cut - 1][1]]) == first[:cut]:
            return first[:cut]
    return []
