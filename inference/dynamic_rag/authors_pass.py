"""The attention DRAGIN's reference code reads: two extra forward passes without demos or documents.

* RIND (``generate_attn``): a pass over the round's generated text alone, without the prompt or a BOS, so the
  round's first token sits at position 0 (where an attention sink forms) and every row's softmax covers the
  generated text only.
* QFS (``keep_real_words``): a pass over question + answer so far + this round up to the end of the triggering
  sentence (``tokenizer.encode``, so with a BOS where the tokenizer adds one); the query words are drawn from it.

``attention_pass: authors`` switches both to these passes; the project's default reads the rows captured during
generation, over the whole prompt. Each pass is one left-padded batch over every question judged (RIND) or
retrieving (QFS) in the same step; only the last layer computes its attention weights eagerly (every query row),
every other layer runs SDPA, and only the last position's logits are computed (they are not used): never a full
eager forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from adaptive_rag.lm.tokenization import adds_bos, prompt_ids


@torch.no_grad()
def last_layer_attention(decoder, batch_ids: list[list[int]]) -> list[torch.Tensor]:
    """Per sequence of ``batch_ids``, the last layer's attention over itself, per head: (H, T, T) float32."""
    buffer = decoder.buffer
    if buffer is None:
        raise ValueError("attention_pass 'authors' needs the attention capture installed")
    lengths = [len(x) for x in batch_ids]
    width = max(lengths)
    pad = decoder.tokenizer.pad_token_id if decoder.tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - n) + x for x, n in zip(batch_ids, lengths)], device=decoder.device)
    mask = torch.tensor([[0] * (width - n) + [1] * n for n in lengths], device=decoder.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # padding must not shift the real tokens' positions
    buffer.keep_all = True
    try:
        with decoder.linears:
            decoder.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False,
                          logits_to_keep=1)
        weights = buffer.all_rows.cpu()  # (B, H, T, T)
    finally:
        buffer.keep_all, buffer.all_rows = False, None
    return [weights[b, :, width - n:, width - n:] for b, n in enumerate(lengths)]


def authors_token_attention(weights: torch.Tensor, how: str, head_reduce: str = "mean") -> torch.Tensor:
    """Per generated token, the attention it receives in the authors' pass, (H, T, T) -> (T,).

    ``how`` = ``reference``: per head the max over query rows j >= i (diagonal included), then the mean over heads
    (``generate_attn`` with ``solver="max"``); ``paper``: heads reduced per row, then the max over later rows j > i.
    """
    if how == "reference":
        return weights.amax(dim=1).mean(dim=0)
    reduced = weights.amax(dim=0) if head_reduce == "max" else weights.mean(dim=0)  # (T, T)
    return reduced.tril(-1).amax(dim=0) if reduced.shape[0] > 1 else torch.zeros(reduced.shape[0])


@dataclass
class QfsPass:
    """The authors' QFS input for one retrieval: its tokens' pieces, the last layer's head-averaged attention over
    them (T, T), and where this round's first generated token sits in it."""

    pieces: list[str]  # word_text tokens: raw token strings
    weights: torch.Tensor
    offset: int
    bos: int  # leading special tokens (the BOS): never a query word
    # word_text tokens: keep_real_words' own input, its text encoded again (inference/dynamic_rag/token_words.py)
    ids: list[int] | None = None
    text: str | None = None


def qfs_pass_ids(tokenizer, question: str, prior: str, round_ids: list[int],
                 first_piece: str) -> tuple[list[int], int, int]:
    """(ids, offset, bos) of question + " " + answer so far + this round's tokens (``first_piece``: the round's first
    token as text): the round's own ids are kept, so a hit word's tokens sit at ``offset`` + their round index."""
    head = " ".join(s for s in (question.strip(), prior.strip()) if s)
    if first_piece and not first_piece[:1].isspace():
        head += " "  # the authors join the pieces with spaces; a round opening without one must not fuse
    ids = prompt_ids(tokenizer, head)
    bos = int(adds_bos(tokenizer) and ids[:1] == [tokenizer.bos_token_id])
    return ids + list(round_ids), len(ids), bos
