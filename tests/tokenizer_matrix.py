"""The tokenizer families the papers' checkpoints use, built offline in seconds, for every test that turns ids into
text or text into ids.

* ``bpe``: byte-level BPE, SmolLM2's own (the embedded model): "Ġ" marks a space, decode keeps it, no BOS.
* ``bpe_bos``: the same with a BOS before plain text (Llama-3's ``<|begin_of_text|>`` style).
* ``sentencepiece``: a real SentencePiece BPE model in Llama-2's style, trained here on the embedded world's text:
  "▁" word marker, byte fallback, digits split (a lone "▁" before a number), unk/bos/eos 0/1/2, BOS added, loaded as
  transformers' Llama tokenizer with the normalizer of Llama-2's hub ``tokenizer.json`` (a "▁" prepended, spaces
  turned into "▁"), whose decoder drops the leading space of what it decodes.

``TOKENIZERS`` names them; :func:`make_tokenizer` builds one (cached for the session).
"""

from __future__ import annotations

import copy
import io
import json
import tempfile
from functools import cache
from pathlib import Path

TOKENIZERS = ("bpe", "bpe_bos", "sentencepiece")

# Sentences the scripted models of the tests write: each must tokenize to whole words on the trained vocabulary, so
# the training text repeats them.
SCRIPT_SENTENCES = (
    " The city was founded in 1970. Its port opened!",
    " Red fox runs far. Blue cat sleeps now! Green owl hoots loud?",
    " Osk founded Kelmora. Then he left:",
    " Ada built Rome. Then she sailed north!",
    " Yes, Paris. It is old.",
)


def _training_text() -> list[str]:
    from data_builders.world import build_world

    world = build_world()
    lines = [p.text for p in world.passages[:3000]]
    # the prompts' own layout ("Question: ...", "Answer:", "Context:", "[1] Title: text") in the vocabulary too
    # (one line each: SentencePiece must never learn a newline piece, Llama-2 writes it as the byte <0x0A>)
    for q in (world.single_hop + world.two_hop)[:300]:
        lines += [f"Question: {q.question}", f"Answer: {q.answers[0]}"]
    lines += ["Context:", "[1] Probe: A probe passage.", "So the answer is"] * 20
    return lines + [s.strip() for s in SCRIPT_SENTENCES] * 40


@cache
def sentencepiece_folder() -> Path:
    """A Llama-2-style SentencePiece tokenizer folder (``tokenizer.model`` + config), trained once per session."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_training_text()), model_writer=model, vocab_size=1000, model_type="bpe",
        byte_fallback=True, split_digits=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=1.0,
        add_dummy_prefix=True, remove_extra_whitespaces=False, normalization_rule_name="identity", minloglevel=2)
    folder = Path(tempfile.mkdtemp(prefix="sp-llama2-"))
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False}))
    return folder


def _llama2_sentencepiece():
    from tokenizers import normalizers
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(sentencepiece_folder())
    backend = tokenizer.backend_tokenizer
    # Llama-2's hub tokenizer.json: every text gets a "▁" in front, so " Paris" alone is "▁", "▁Paris"
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    backend.pre_tokenizer = None
    tokenizer.pad_token = tokenizer.unk_token
    return tokenizer


def _with_bos(tokenizer):
    from tokenizers.processors import TemplateProcessing

    bos = tokenizer.bos_token
    tokenizer._tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.bos_token_id)])
    return tokenizer


@cache
def _smollm2():
    from adaptive_rag.lm.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


def make_tokenizer(name: str):
    """A fresh tokenizer of family ``name`` (fresh: a test may change it)."""
    if name == "bpe":
        return copy.deepcopy(_smollm2())
    if name == "bpe_bos":
        return _with_bos(copy.deepcopy(_smollm2()))
    if name == "sentencepiece":
        return _llama2_sentencepiece()
    raise ValueError(f"unknown tokenizer family {name!r} (known: {', '.join(TOKENIZERS)})")


@cache
def shared_tokenizer(name: str):
    """:func:`make_tokenizer`, built once per session: for tests that do not change it."""
    return make_tokenizer(name)
