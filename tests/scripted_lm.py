"""A tiny Llama whose greedy output is a known text, for engine tests that need real sentences.

Attention and MLP write nothing into the residual stream (``o_proj`` and ``down_proj`` are zero), so the last
position's hidden state is its input token's embedding. The script's tokens get orthogonal one-hot embeddings, and
the LM head gives each one's successor a logit high enough to win greedily but not so high that the entropy
vanishes: after token ``ids[k]`` the model writes ``ids[k + 1]``, after the last one ``ids[0]``, whatever the
context. Attention weights are still computed (random queries and keys), so RIND and QFS have rows to read.
"""

from __future__ import annotations

import torch
from conftest import tiny_llama

from adaptive_rag.lm.tokenization import continuation_ids
from inference.dynamic_rag.prompts import PromptBuilder


def scripted_llama(tokenizer, script: str, *, strength: float = 2.0):
    """A model that writes ``script`` over and over, starting after its last token (tokens must be distinct)."""
    ids = continuation_ids(tokenizer, script)  # as the model writes it after a prompt: no SentencePiece dummy "▁"
    if len(set(ids)) != len(ids):
        raise ValueError(f"the script's tokens repeat: {tokenizer.convert_ids_to_tokens(ids)}")
    model = tiny_llama(len(tokenizer))
    hidden = model.config.hidden_size
    if len(ids) > hidden:
        raise ValueError(f"at most {hidden} script tokens")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        for k, tok in enumerate(ids):
            model.model.embed_tokens.weight[tok] = 0.0
            model.model.embed_tokens.weight[tok, k] = 1.0
            model.lm_head.weight[ids[(k + 1) % len(ids)], k] = strength
    return model


class CountingPrompts(PromptBuilder):
    """Remembers how many documents each round's prompt carried."""

    def __init__(self, tokenizer, cfg):
        super().__init__(tokenizer, cfg)
        self.doc_counts: list[int] = []

    def build(self, question, docs, prior="", **kw):
        self.doc_counts.append(len(docs))
        return super().build(question, docs, prior, **kw)
