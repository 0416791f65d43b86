"""How a prompt becomes token ids: one function for training, the engine and plain generation.

Llama-2, Mistral and most 7B tokenizers add a BOS token when asked for special tokens; SmolLM2's adds none. trl
tokenizes training text with special tokens, DRAGIN's and ADAPT-LLM's code call the tokenizer with its defaults, so
the model always saw ``<s>`` first. A chat template may write its own BOS into the text (Llama-2's ``<s>[INST]``,
Llama-3's ``<|begin_of_text|>``), which is then parsed as that special token. :func:`prompt_ids` gives the model
exactly what the tokenizer's own default gives for plain text, and BOS exactly once whatever the text holds.

Text that *follows* other text needs care on SentencePiece tokenizers (Llama-2, Mistral, Vicuna): encoding it alone
adds a dummy "▁" before it (" Paris" becomes "▁", "▁Paris"), and decoding ids alone drops the space the first
piece carries ("▁The" decodes to "The"), so rounds decoded one by one fuse ("founded.The"). Byte-level BPE
(SmolLM2, GPT-2, Llama-3) does neither. :func:`continuation_ids` and :func:`decode_continuation` give, for every
tokenizer, the ids and the text a piece has in the middle of a longer text.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=32)
def _adds_bos(tokenizer: Any) -> bool:
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    return tokenizer("a", add_special_tokens=True)["input_ids"][:1] == [bos]


def adds_bos(tokenizer: Any) -> bool:
    """Whether the tokenizer puts a BOS token before plain text by default (Llama-2: yes; SmolLM2: no)."""
    try:
        return _adds_bos(tokenizer)
    except TypeError:  # an unhashable tokenizer (test doubles): probe without the cache
        return _adds_bos.__wrapped__(tokenizer)


def prompt_ids(tokenizer: Any, text: str, *, offsets: bool = False) -> list[int] | tuple[list[int], list[tuple]]:
    """``text`` as ids: its own tokens, preceded by BOS exactly once when the tokenizer adds one by default.

    Only a BOS is added (never an EOS, which some tokenizers append to plain text), and none when the text already
    begins with it (a chat template that writes its own). With ``offsets=True`` also returns each id's character
    span in ``text``; an added BOS spans ``(0, 0)``.
    """
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=offsets)
    ids = list(enc["input_ids"])
    spans = [tuple(s) for s in enc["offset_mapping"]] if offsets else []
    if adds_bos(tokenizer) and ids[:1] != [tokenizer.bos_token_id]:
        ids = [tokenizer.bos_token_id] + ids
        spans = [(0, 0)] + spans
    return (ids, spans) if offsets else ids


def batch_prompt_ids(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """:func:`prompt_ids` for many texts (one tokenizer call)."""
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    if not adds_bos(tokenizer):
        return [list(ids) for ids in encoded]
    bos = tokenizer.bos_token_id
    return [list(ids) if ids[:1] == [bos] else [bos, *ids] for ids in encoded]


# Text that ends every line of every tokenizer's vocabulary: one token on byte-level BPE ("Ċ") and on SentencePiece
# ("<0x0A>", after the dummy prefix), and a piece no tokenizer merges with a following word.
_ANCHOR = "\n"


def continuation_ids(tokenizer: Any, text: str) -> list[int]:
    """The ids of ``text`` as it tokenizes after other text: no BOS, and no SentencePiece dummy prefix (" Paris" is
    "▁Paris", not "▁", "▁Paris"). Falls back to ``text`` tokenized alone where the anchor merges with it."""
    anchor = tokenizer(_ANCHOR, add_special_tokens=False)["input_ids"]
    joint = tokenizer(_ANCHOR + text, add_special_tokens=False)["input_ids"]
    if list(joint[:len(anchor)]) == list(anchor):
        return list(joint[len(anchor):])
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def decode_continuation(tokenizer: Any, ids: list[int], *, skip_special_tokens: bool = True) -> str:
    """``ids`` as text in the middle of a longer text: the leading space of a first "▁word" piece kept, which a
    SentencePiece decoder strips from the start of what it decodes. For byte-level BPE the same as ``decode``."""
    if not ids:
        return ""
    anchor = continuation_ids(tokenizer, _ANCHOR) or tokenizer(_ANCHOR, add_special_tokens=False)["input_ids"]
    head = tokenizer.decode(anchor, skip_special_tokens=skip_special_tokens)
    text = tokenizer.decode(list(anchor) + list(ids), skip_special_tokens=skip_special_tokens)
    if head and text.startswith(head):
        return text[len(head):]
    return tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)
