"""A log file (stderr not a TTY, as under pytest's capture) gets no third-party DEBUG lines and no inner or per-tensor
progress bars; a terminal keeps them."""

from __future__ import annotations

import logging

import pytest
import torch
from gguf_files import tiny_hf_model, write_gguf
from transformers.utils import logging as hf_logging

from adaptive_rag.plumbing import progress
from adaptive_rag.plumbing.records import Passage

PASSAGES = [Passage(f"p{i}", f"Title {i}", f"Passage {i} about rivers and mountains {i}.") for i in range(6)]


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_bm25_build_writes_no_debug_line_and_no_bars(capfd):
    from retrieval_adapt.bm25 import BM25Retriever

    root, handler, level = logging.getLogger(), _Collect(), logging.getLogger().level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # what the commands' logging.basicConfig(level=INFO) sets
    try:
        capfd.readouterr()
        BM25Retriever.build(PASSAGES, show_progress=True)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert [r.getMessage() for r in handler.records if r.name.startswith("bm25s")] == []
    err = capfd.readouterr().err
    assert "BM25S" not in err and "Split strings" not in err


def test_bar_options_in_a_log_and_on_a_terminal(monkeypatch):
    assert progress.bar_options() == {"disable": False, "mininterval": progress.LOG_INTERVAL_S}
    assert progress.bar_options(inner=True) == {"disable": True}
    assert not progress.show_inner_progress(True)
    monkeypatch.setattr(progress, "interactive", lambda: True)
    assert progress.bar_options(inner=True) == {"disable": False} and progress.show_inner_progress(True)


def test_library_bars_off_in_a_log_only_and_restored(monkeypatch):
    import huggingface_hub.utils as hub

    assert hf_logging.is_progress_bar_enabled() and not hub.are_progress_bars_disabled()
    with progress.library_bars_quiet():
        assert not hf_logging.is_progress_bar_enabled() and hub.are_progress_bars_disabled()
    assert hf_logging.is_progress_bar_enabled() and not hub.are_progress_bars_disabled()
    monkeypatch.setattr(progress, "interactive", lambda: True)
    with progress.library_bars_quiet():
        assert hf_logging.is_progress_bar_enabled()


def test_encoder_load_draws_no_loading_weights_bar(tmp_path, capfd):
    from transformers import AutoTokenizer, BertConfig, BertModel

    from adaptive_rag.lm.models import load_encoder, resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("minilm"))
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(tmp_path / "enc")
    tokenizer.save_pretrained(tmp_path / "enc")
    capfd.readouterr()
    load_encoder(str(tmp_path / "enc"), device="cpu")
    assert "Loading weights" not in capfd.readouterr().err


def test_gguf_conversion_draws_no_per_tensor_bar(tmp_path, monkeypatch, capfd):
    pytest.importorskip("transformers.integrations.gguf.utils")
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from adaptive_rag.lm import gguf_convert
    from adaptive_rag.lm.models import load_causal_lm

    monkeypatch.setenv("ADAPTIVE_RAG_CACHE", str(tmp_path / "cache"))
    # the whole-model path: transformers de-quantises every tensor under its own plain-tqdm bar
    monkeypatch.setattr(gguf_convert, "_packed_loader_only", lambda arch: True)
    original_bar = gguf_utils.tqdm
    path = write_gguf(tiny_hf_model("llama"), tmp_path / "tiny.gguf")
    capfd.readouterr()
    model, _ = load_causal_lm(str(path))
    err = capfd.readouterr().err
    assert "Converting and de-quantizing" not in err and "Loading weights" not in err
    assert gguf_utils.tqdm is original_bar  # put back for everyone else
    assert isinstance(model(torch.tensor([[4, 5, 6]])).logits, torch.Tensor)
