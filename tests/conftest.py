"""Shared fixtures: tiny random models for fast unit tests, the real embedded models for the slow ones."""

from __future__ import annotations

import os

# Tests never touch the network: a hub id fails at once instead of retrying for a minute.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# dtype "auto" on CPU probes for bf16 (adaptive_rag/lm/cpu_dtype.py): tests must not depend on the machine
os.environ.setdefault("ADAPTIVE_RAG_CPU_DTYPE", "float32")

import pytest  # noqa: E402
import torch  # noqa: E402

from adaptive_rag.plumbing.records import Passage  # noqa: E402
from adaptive_rag.plumbing.retriever import Hit  # noqa: E402


@pytest.fixture(scope="session")
def smol_tokenizer():
    from adaptive_rag.lm.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


def tiny_llama(vocab_size: int, seed: int = 0, layers: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      pad_token_id=0, eos_token_id=None)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture()
def tiny_model(smol_tokenizer):
    return tiny_llama(len(smol_tokenizer))


@pytest.fixture(scope="session")
def smol_model():
    from adaptive_rag.lm.models import load_causal_lm

    return load_causal_lm("smollm2-135m")


class FakeRetriever:
    """Returns k numbered passages that echo the query, and remembers every query it saw."""

    def __init__(self):
        self.queries: list[str] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.queries.extend(queries)
        return [[Hit(Passage(f"doc-{len(self.queries)}-{i}", f"Doc {i}", f"About {q}."), 1.0 / (i + 1))
                 for i in range(k)] for q in queries]


@pytest.fixture()
def fake_retriever():
    return FakeRetriever()


def bos_tokenizer():
    """SmolLM2's tokenizer made to put BOS before plain text, as Llama-2's and Mistral's do."""
    from tokenizers.processors import TemplateProcessing

    from adaptive_rag.lm.models import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m")
    bos = tokenizer.bos_token
    tokenizer._tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.bos_token_id)])
    return tokenizer


@pytest.fixture()
def live_pid():
    """The PID of a live process that is not this one (a lock owner that is still running)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """A tiny random BERT encoder folder (dense indexes without the real model)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from adaptive_rag.lm.models import resolve_model
    from retrieval_adapt.encoders import MeanPoolingEncoder

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("minilm"))
    bert = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32))
    folder = tmp_path_factory.mktemp("encoder")
    MeanPoolingEncoder(bert, tokenizer, normalize=True, max_length=32).save(folder)
    return folder


@pytest.fixture(scope="module")
def dense_index(tiny_encoder, tmp_path_factory):
    """A two-passage dense index over the tiny encoder (16 dimensions)."""
    from retrieval_adapt.dense import DenseRetriever
    from retrieval_adapt.encoders import MeanPoolingEncoder

    passages = [Passage("a", "Lima", "Lima is the capital of Peru."), Passage("b", "Osk", "Osk founded Kelmora.")]
    folder = tmp_path_factory.mktemp("index") / "dense"
    DenseRetriever.build(passages, MeanPoolingEncoder.from_name(str(tiny_encoder)), show_progress=False).save(folder)
    return folder


@pytest.fixture(scope="module")
def wide_encoder(tiny_encoder, tmp_path_factory):
    """The tiny encoder's folder with a config that says 24 dimensions (the index holds 16)."""
    import json
    import shutil

    wide = tmp_path_factory.mktemp("wide") / "wide"
    shutil.copytree(tiny_encoder, wide)
    config = json.loads((wide / "config.json").read_text())
    (wide / "config.json").write_text(json.dumps({**config, "hidden_size": 24}))
    return wide
