"""Decoding for policies that act in turns: continue token-id contexts until EOS, a closing tag or a budget.

The engine's decoder (:mod:`adaptive_rag.lm.decoder`) drops EOS from what it returns and knows stop tokens only; a
policy trained with GRPO needs the EOS it wrote (trl scores it and judges truncation by it), the log-probability of
every token it sampled, and a stop on text (``</search>`` is several tokens). :func:`decode_until` drives the same
decoder and adds those: greedy by default, sampled with a :class:`~adaptive_rag.lm.sampling.Sampler`.

Contexts are token ids, not text: a turn continues exactly the ids the model wrote before it (re-tokenizing the text
could merge pieces differently, and the trained log-probabilities would then be of other tokens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from adaptive_rag.lm.decoder import BatchDecoder, stop_token_ids
from adaptive_rag.lm.decoder import Sequence as Row
from adaptive_rag.lm.sampling import Sampler

TAIL_TOKENS = 8  # a closing tag is found in the decoded text of the last few tokens (tags are 3-5 tokens long)


@dataclass
class Decoded:
    """One continuation: its ids (EOS included when written), the log-probability of each under the distribution it
    was drawn from, and why it stopped (``eos``, ``stop`` with the text that stopped it, or ``length``)."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reason: str = "length"
    stop_text: str | None = None


def stop_ids(tokenizer) -> set[int]:
    """EOS and the chat end-of-turn tokens (the decoder's own list)."""
    ids = stop_token_ids(tokenizer)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


@torch.no_grad()
def decode_until(model, tokenizer, contexts: Sequence[list[int]], *, max_new_tokens: int,
                 stop_texts: Sequence[str] = (), sampler: Sampler | None = None, batch_size: int = 16,
                 ) -> list[Decoded]:
    """Continue each context (token ids, BOS included where the model expects one) by at most ``max_new_tokens``
    tokens; stop a row at an EOS (kept as its last id) or once its decoded text ends with one of ``stop_texts``.
    ``sampler``: None decodes greedily (log-probabilities of the full distribution), else draws from it (those of
    its tempered distribution, as trl's loss computes them with the same temperature). The model is put in eval
    mode for the call and returned to the mode it was in."""
    if max_new_tokens < 1 or batch_size < 1:
        raise ValueError(f"max_new_tokens and batch_size must be >= 1, got {max_new_tokens} and {batch_size}")
    if not contexts:
        return []
    stops = stop_ids(tokenizer)
    was_training = model.training
    model.eval()
    try:
        decoder = BatchDecoder(model, tokenizer, capture=False, max_batch=batch_size, packed_linears=False)
        decoder.stop_token_ids = set()  # EOS is recorded as a token of the completion; the loop below stops on it
        decoder.sampler = sampler
        out = {i: Decoded() for i in range(len(contexts))}
        queue = list(range(len(contexts)))[::-1]
        while queue or decoder.seqs:
            free = batch_size - len(decoder.active)
            if queue and (free >= max(1, batch_size // 4) or not decoder.active):
                decoder.admit([Row(i, list(contexts[i]), max_new_tokens) for i in
                               (queue.pop() for _ in range(min(free, len(queue))))])
            for row in decoder.seqs:  # rows done by length are still here until the next step drops them
                _check_stop(row, out[row.key], tokenizer, stops, stop_texts)
            decoder.step()
        return [out[i] for i in range(len(contexts))]
    finally:
        model.train(was_training)


def _check_stop(row, result: Decoded, tokenizer, stops: set[int], stop_texts: Sequence[str]) -> None:
    """Copy the row's tokens into ``result`` and end the row where it wrote EOS or a stop text."""
    result.ids = list(row.gen_ids)
    result.logprobs = [math.log(max(p, 1e-45)) for p in row.probs]
    if not row.gen_ids or row.done:
        return
    if row.gen_ids[-1] in stops:
        row.done, result.reason = True, "eos"
        return
    if stop_texts:
        tail = tokenizer.decode(row.gen_ids[-TAIL_TOKENS:], skip_special_tokens=False)
        hit = next((s for s in stop_texts if tail.rstrip().endswith(s)), None)
        if hit is not None:
            row.done, result.reason, result.stop_text = True, "stop", hit
