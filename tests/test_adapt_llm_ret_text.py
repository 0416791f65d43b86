"""ADAPT-LLM's two readings of ``<RET>`` (``ret_token: special | text``) and the adapter kept (``keep_adapter: last |
best``): plain-text ``<RET>`` trains with LoRA alone on an untied model, leaves the vocabulary as it is, is written
with the pieces the gate watches (SentencePiece and byte-level BPE), and both kinds of model load in the gate; the
best adapter by validation loss is the one saved, and train_results.json says which step was kept and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from datasets import Dataset, DatasetDict
from safetensors.torch import load_file
from tokenizer_matrix import shared_tokenizer

from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.lm.models import load_tokenizer
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.records import QAExample
from data_builders.adapt_llm import COLUMNS, AdaptDataConfig, split_rows
from data_builders.adapt_llm_prompts import RET_TOKEN, parametric_prompt
from inference.adapt_gate.ret_token import MARKER_FILE, ret_signal, text_piece_ids
from training.adapt_llm_config import AdaptEvalConfig, AdaptTrainConfig
from training.adapt_llm_tokens import tokenize_instances
from training.lora_sft import train_adapt

ROOT = Path(__file__).resolve().parents[1]


def _save_untied(out: Path, tokenizer, head_scale: float = 1.0) -> Path:
    """A tiny random Llama with its own LM head (as Llama-2's). ``head_scale``: a random 0.02-scale head gives
    every piece about the same logit, which LoRA on the attention alone cannot separate in a few steps; a larger
    head lets it, as a real model's head already separates its pieces."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0, max_position_embeddings=512)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _dataset(completions: list[str], validation: int = 0) -> DatasetDict:
    prompts = [parametric_prompt(f"Where is Town{i}?") for i in range(len(completions))]
    rows = {"prompt": prompts, "completion": completions, "kind": ["parametric_ret"] * len(prompts),
            "question_id": [f"q{i}" for i in range(len(prompts))]}
    train = Dataset.from_dict({k: v[validation:] for k, v in rows.items()})
    val = Dataset.from_dict({k: v[:validation] for k, v in rows.items()}) if validation else \
        Dataset.from_dict({c: [] for c in COLUMNS})
    return DatasetDict({"train": train, "validation": val})


def _train_cfg(out: Path, **kw) -> AdaptTrainConfig:
    base = dict(output_dir=str(out), micro_batch_size=8, effective_batch_size=8, max_steps=1, learning_rate=1e-2,
                warmup_steps=0, logging_steps=1, save_steps=100, eval_steps=None, max_length=256)
    return AdaptTrainConfig(**{**base, **kw})


# --- the pieces: what training writes is what the gate watches -------------------------------------------------

@pytest.mark.parametrize("family", ["sentencepiece", "bpe_bos"])
def test_plain_text_ret_is_trained_and_watched_as_the_same_pieces(family):
    tokenizer = shared_tokenizer(family)
    assert RET_TOKEN not in tokenizer.get_vocab()
    pieces = text_piece_ids(tokenizer)
    assert len(pieces) > 1  # plain text: several ordinary pieces, not one added token
    assert tokenizer.decode(pieces) == RET_TOKEN
    prompt = parametric_prompt("Where is Town1?")
    ids = tokenize_instances(tokenizer, [prompt], [RET_TOKEN])
    completion = [t for t, m in zip(ids["input_ids"][0], ids["completion_mask"][0]) if m]
    assert completion[:len(pieces)] == pieces and completion[-1] == tokenizer.eos_token_id
    signal = ret_signal(tokenizer, "text")
    assert signal.mode == "text" and signal.piece_ids == tuple(pieces)
    assert tokenizer.convert_tokens_to_ids(signal.watch) == pieces[0]  # the first piece, as a token string
    assert ret_signal(tokenizer) is None  # no token, no marker: a model never trained to ask


def test_sentencepiece_first_piece_is_the_bare_angle_bracket():
    """Llama-2's SentencePiece writes "<RET>" after the prompt's newline as "<", "RET"... without a "▁": the authors'
    threshold reads id 29966, Llama-2's "<" (this small test model spells "<" as its byte piece)."""
    tokenizer = shared_tokenizer("sentencepiece")
    first = text_piece_ids(tokenizer)[0]
    assert tokenizer.decode([first]) == "<" and not tokenizer.convert_ids_to_tokens(first).startswith("\u2581")


# --- training: text on an untied model, special as before ------------------------------------------------------

@pytest.mark.parametrize("family", ["sentencepiece", "bpe_bos"])
def test_text_ret_trains_lora_alone_on_an_untied_model_and_the_gate_reads_it(family, tmp_path):
    from adaptive_rag.lm.models import load_causal_lm
    from inference.adapt_gate.gate import AdaptGate, GateConfig, model_generator

    tokenizer = shared_tokenizer(family)
    base = _save_untied(tmp_path / "base", tokenizer, head_scale=25.0)
    out = tmp_path / "model"
    cfg = _train_cfg(out, ret_token="text", max_steps=40, learning_rate=3e-2,
                     lora_target_modules=["q_proj", "v_proj", "o_proj", "up_proj", "down_proj"])
    metrics = train_adapt(AdaptDataConfig(data_dir=str(tmp_path / "data")), cfg, _dataset([RET_TOKEN] * 8),
                          model=BaseModelConfig(base_model=str(base)))
    assert metrics["ret_token"] == "text" and metrics["kept"]["rule"] == "last step" and metrics["kept"]["step"] == 40
    weights = load_file(str(out / "adapter_model.safetensors"))
    assert weights and all("lora_" in k for k in weights)  # no <RET> row: nothing was added
    assert json.loads((out / MARKER_FILE).read_text())["ret_token"] == "text"
    model, loaded = load_causal_lm(str(out))
    assert len(loaded) == len(tokenizer) and RET_TOKEN not in loaded.get_vocab()
    signal = ret_signal(loaded)  # auto: from the marker beside the tokenizer
    assert signal is not None and signal.mode == "text" and signal.piece_ids == tuple(text_piece_ids(tokenizer))
    gen = model_generator(model, loaded, max_new_tokens=6, watch=signal.watch)
    examples = [QAExample(id=f"q{i}", question=f"Where is Town{i}?", answers=["x"],
                          metadata={"context_passage": "Town text"}) for i in range(3)]
    records = AdaptGate(gen, None, GateConfig(policy="sweep", ret_watch=signal.watch, context_source="file")).run(
        examples, "sweep")
    assert all(RET_TOKEN in r.parametric_output and r.retrieved for r in records)  # a substring, as theirs
    assert all(r.p_ret is not None and r.p_ret > 0.5 for r in records)  # the first piece's probability
    assert all(r.doc_ids == [f"{r.question_id}:file"] for r in records)


def test_special_ret_still_adds_one_trained_token(tmp_path):
    tokenizer = load_tokenizer("smollm2-135m")
    base = _save_untied(tmp_path / "base", tokenizer)
    out = tmp_path / "model"
    train_adapt(AdaptDataConfig(data_dir=str(tmp_path / "data")), _train_cfg(out), _dataset([RET_TOKEN] * 8),
                model=BaseModelConfig(base_model=str(base)))
    assert any("trainable_tokens_delta" in k for k in load_file(str(out / "adapter_model.safetensors")))
    assert json.loads((out / MARKER_FILE).read_text())["ret_token"] == "special"
    signal = ret_signal(load_tokenizer(str(out)))
    assert signal.mode == "special" and signal.watch == RET_TOKEN


# --- the adapter kept ------------------------------------------------------------------------------------------

def test_best_adapter_by_validation_loss_is_the_one_saved(tmp_path):
    """A learning rate high enough to overshoot: the validation losses are not monotone, and the adapter in
    output_dir is the checkpoint of the lowest one, as train_results.json says."""
    tokenizer = load_tokenizer("smollm2-135m")
    base = _save_untied(tmp_path / "base", tokenizer)
    out = tmp_path / "model"
    cfg = _train_cfg(out, ret_token="text", max_steps=6, learning_rate=0.5, eval_steps=1, save_steps=1,
                     save_total_limit=2, keep_adapter="best", micro_batch_size=4, effective_batch_size=4)
    metrics = train_adapt(AdaptDataConfig(data_dir=str(tmp_path / "data")), cfg,
                          _dataset(["Land one", RET_TOKEN, "Land two", RET_TOKEN] * 3, validation=4),
                          model=BaseModelConfig(base_model=str(base)))
    kept = metrics["kept"]
    losses = {e["step"]: e["eval_loss"] for e in kept["validation_losses"]}
    assert sorted(losses) == [1, 2, 3, 4, 5, 6] and kept["rule"] == "best validation loss"
    assert kept["step"] == min(losses, key=losses.get) and kept["eval_loss"] == pytest.approx(min(losses.values()))
    saved = json.loads((out / "train_results.json").read_text())["kept"]
    assert saved["step"] == kept["step"]
    best = load_file(str(out / f"checkpoint-{kept['step']}" / "adapter_model.safetensors"))
    final = load_file(str(out / "adapter_model.safetensors"))
    assert best.keys() == final.keys() and all(torch.equal(best[k], final[k]) for k in best)


def test_keep_best_needs_validation_and_aligned_steps():
    with pytest.raises(ValueError, match="keep_adapter best"):
        AdaptTrainConfig(keep_adapter="best", eval_steps=None)
    with pytest.raises(ValueError, match="multiple"):
        AdaptTrainConfig(keep_adapter="best", eval_steps=200, save_steps=300)
    with pytest.raises(ValueError, match="ret_token must be"):
        AdaptTrainConfig(ret_token="token")


def test_validation_size_draws_instances_as_the_authors():
    rows = [{"prompt": f"p{i}", "completion": "c", "kind": "context", "question_id": f"q{i // 2}"} for i in range(50)]
    dsd = split_rows(rows, 0.5, seed=0, validation_size=20)
    assert len(dsd["validation"]) == 20 and len(dsd["train"]) == 30
    assert len(split_rows(rows, 0.0, seed=0, validation_size=500)["train"]) == 1  # training keeps an instance


# --- the authors' recipe ---------------------------------------------------------------------------------------

def test_authors_recipe_config():
    from training.adapt_llm import CONFIG_TYPES

    model, data_cfg, train_cfg, eval_cfg = parse_config(
        CONFIG_TYPES, [str(ROOT / "training" / "configs" / "adapt_llm_authors.yaml")])
    assert model.base_model == "meta-llama/Llama-2-7b-chat-hf"
    assert data_cfg.validation_size == 2000 and data_cfg.judge_normalize is False
    assert (train_cfg.ret_token, train_cfg.keep_adapter, train_cfg.load_in_8bit, train_cfg.precision) == (
        "text", "best", True, "fp16")
    assert (train_cfg.eval_steps, train_cfg.save_steps, train_cfg.micro_batch_size) == (200, 200, 32)
    assert isinstance(eval_cfg, AdaptEvalConfig) and eval_cfg.gate_rule == "token"
    paper = parse_config(CONFIG_TYPES, [str(ROOT / "training" / "configs" / "adapt_llm_llama2_7b_lora.yaml")])
    assert paper[2].ret_token == "special" and paper[2].keep_adapter == "last"


def test_fp16_and_8bit_are_refused_in_one_line_without_cuda(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from adaptive_rag.plumbing.cli import run_cli
    from training import adapt_llm

    argv = [str(ROOT / "training" / "configs" / "adapt_llm_authors.yaml"), "--data_dir", str(tmp_path / "d"),
            "--output_dir", str(tmp_path / "m")]
    assert run_cli(adapt_llm.main, argv=argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA" in err
    assert not (tmp_path / "d").exists() and not (tmp_path / "m").exists()
