"""Padding-free batching (``padding_free: true``): trl's options as ``sft_config`` sets them; the loss of one batch
equal to the padded batch's on a tiny random Llama on CPU, with SDPA (the block mask transformers builds from
``position_ids`` keeps the flattened instances apart) and with ``sdpa_varlen`` (SDPA per instance); when the
training job switches to ``sdpa_varlen``, and that it does so when it loads its model."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset, DatasetDict

import adaptive_rag.lm.models
from adaptive_rag.lm.base_model import BaseModelConfig
from data_builders.adapt_llm import COLUMNS, AdaptDataConfig
from training.adapt_llm_config import AdaptTrainConfig
from training.adapt_llm_tokens import tokenize_split
from training.lora_sft import load_base_model, sft_config, train_adapt
from training.varlen_attention import register as register_varlen
from training.varlen_attention import use_for_padding_free


def _cfg(tmp_path, **kw) -> AdaptTrainConfig:
    return AdaptTrainConfig(output_dir=str(tmp_path), micro_batch_size=4, effective_batch_size=4, eval_steps=None,
                            report_to="none", **kw)


def test_padded_by_default_with_truncation(tmp_path):
    args = sft_config(_cfg(tmp_path), processes=1, has_eval=False)
    assert args.padding_free is False and args.max_length == 512 and args.packing is False


def test_padding_free_drops_max_length_trl_refuses(tmp_path):
    args = sft_config(_cfg(tmp_path, padding_free=True), processes=1, has_eval=False)
    assert args.padding_free is True and args.max_length is None and args.packing is False


def _sharp_llama(vocab_size: int, attn: str = "sdpa"):
    """A tiny random Llama with large weights: attention far from uniform, so a token that attended across an
    instance boundary would move the loss well beyond rounding."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         initializer_range=0.5, max_position_embeddings=512))
    model.set_attn_implementation(attn)
    return model


def _first_batch_loss(tmp_path, tokenizer, data: Dataset, padding_free: bool, attn: str = "sdpa"
                      ) -> tuple[float, dict]:
    from trl import SFTTrainer

    model = _sharp_llama(len(tokenizer), attn)
    model.config.pad_token_id = tokenizer.pad_token_id
    args = sft_config(_cfg(tmp_path / str(padding_free), padding_free=padding_free), processes=1, has_eval=False)
    trainer = SFTTrainer(model=model, args=args, train_dataset=tokenize_split(data, tokenizer),
                         processing_class=tokenizer)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(data))])
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, dict(batch))
    return float(loss), batch


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("attn", ["sdpa", "sdpa_varlen"])
def test_padding_free_loss_equals_padded_loss(tmp_path, smol_tokenizer, attn):
    if attn == "sdpa_varlen":
        register_varlen()
    prompts = ["Q: Where is Town1?\n\nA:", "Below is an instruction. Answer the question Q about the long town "
               "name Town2 and its many neighbours.\n\nQ: Where is Town2?\n\nA:", "Q: Who?\n\nA:"]
    data = Dataset.from_dict({"prompt": prompts, "completion": [" Land1", " <RET>", " Land3 and more"]})
    padded, padded_batch = _first_batch_loss(tmp_path, smol_tokenizer, data, padding_free=False)
    flat, flat_batch = _first_batch_loss(tmp_path, smol_tokenizer, data, padding_free=True, attn=attn)
    assert padded_batch["input_ids"].shape[0] == 3 and (padded_batch["attention_mask"] == 0).any()
    assert flat_batch["input_ids"].shape[0] == 1 and "attention_mask" not in flat_batch
    assert flat_batch["input_ids"].shape[1] == int(padded_batch["attention_mask"].sum())
    assert flat == pytest.approx(padded, rel=1e-5)


def test_varlen_attention_keeps_instances_apart():
    """Each instance of a flattened row gets the logits it gets alone; a padded batch takes plain SDPA."""
    register_varlen()
    model = _sharp_llama(100, "sdpa_varlen").eval()
    torch.manual_seed(1)
    ids = torch.randint(5, 100, (1, 12))
    pos = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 2]])
    cu = torch.tensor([0, 5, 9, 12], dtype=torch.int32)
    with torch.no_grad():
        flat = model(input_ids=ids, position_ids=pos, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=5,
                     max_length_k=5, use_cache=False).logits
        for start, end in ((0, 5), (5, 9), (9, 12)):
            alone = model(input_ids=ids[:, start:end], use_cache=False).logits
            torch.testing.assert_close(flat[:, start:end], alone, rtol=1e-5, atol=1e-5)
        rows = torch.cat([ids[:, 5:9], torch.cat([ids[:, 9:12], ids.new_zeros(1, 1)], dim=1)])  # right-padded
        padded = model(input_ids=rows, attention_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
                       use_cache=False).logits
    torch.testing.assert_close(padded[0], flat[0, 5:9], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(padded[1, :3], flat[0, 9:12], rtol=1e-5, atol=1e-5)


def test_varlen_only_for_padding_free_sdpa_on_cpu():
    model = _sharp_llama(100)
    assert not use_for_padding_free(model, padding_free=False) and model.config._attn_implementation == "sdpa"
    assert use_for_padding_free(model, padding_free=True) and model.config._attn_implementation == "sdpa_varlen"
    eager = _sharp_llama(100, "eager")
    assert not use_for_padding_free(eager, padding_free=True) and eager.config._attn_implementation == "eager"


@pytest.fixture(scope="module")
def sdpa_dir(tmp_path_factory, smol_tokenizer):
    """A tiny random Llama saved with SmolLM2's tokenizer; transformers loads it with SDPA."""
    out = tmp_path_factory.mktemp("sdpa")
    _sharp_llama(len(smol_tokenizer)).save_pretrained(out)
    smol_tokenizer.save_pretrained(out)
    return out


def test_the_training_job_loads_its_model_with_varlen_only_when_padding_free(sdpa_dir, tmp_path):
    as_loaded = adaptive_rag.lm.models.load_causal_lm(str(sdpa_dir))[0].config._attn_implementation
    padded, _ = load_base_model(str(sdpa_dir), _cfg(tmp_path), "cpu")
    flat, _ = load_base_model(str(sdpa_dir), _cfg(tmp_path, padding_free=True), "cpu")
    assert as_loaded == "sdpa" and padded.config._attn_implementation == "sdpa"
    assert flat.config._attn_implementation == "sdpa_varlen"


@pytest.mark.filterwarnings("ignore")
def test_padding_free_training_runs_with_varlen(sdpa_dir, tmp_path, monkeypatch):
    """The whole job (train_adapt) with ``padding_free: true`` trains the model it switched to sdpa_varlen."""
    loaded = []
    real = adaptive_rag.lm.models.load_causal_lm

    def recording(*args, **kwargs):
        model, tokenizer = real(*args, **kwargs)
        loaded.append(model)
        return model, tokenizer

    monkeypatch.setattr(adaptive_rag.lm.models, "load_causal_lm", recording)
    rows = {"prompt": ["Q: Where is Town1?\n\nA:", "Q: Who founded the long named Town2?\n\nA:"],
            "completion": [" Land1", " <RET>"], "kind": ["parametric", "parametric_ret"], "question_id": ["q1", "q2"]}
    dsd = DatasetDict({"train": Dataset.from_dict(rows), "validation": Dataset.from_dict({c: [] for c in COLUMNS})})
    data_cfg = AdaptDataConfig(data_dir=str(tmp_path / "data"))
    cfg = _cfg(tmp_path / "model", padding_free=True, max_steps=1, save_steps=1, logging_steps=1, warmup_steps=0)
    metrics = train_adapt(data_cfg, cfg, dsd, model=BaseModelConfig(base_model=str(sdpa_dir)))
    assert len(loaded) == 1 and loaded[0].config._attn_implementation == "sdpa_varlen"
    assert metrics["train_loss"] > 0 and metrics["adapter"]["tensors"] > 0
