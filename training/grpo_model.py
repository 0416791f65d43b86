"""The policy GRPO trains and the folder it leaves, in the shapes the gate method already loads.

* ``finetune: lora`` from a base model: ADAPT-LLM's LoRA (``training/lora_sft.py``: LoRA on the target modules and,
  with ``ret_token: special``, a trainable ``<RET>`` row, the LM head's too on an untied model).
* ``init_adapter``: an ADAPT-LLM adapter folder, its LoRA and ``<RET>`` row trained on (supervised, then RL); the
  policy writes ``<RET>`` as that adapter does (special token, or plain text marked by ``ret_token.json``).
* ``finetune: full``: every weight, ``<RET>`` added as a special token where asked.

The output folder is what ``python -m inference.commands.evaluate --method adapt-llm --model OUTPUT_DIR`` loads:
the adapter (or the whole model), the tokenizer with ``<RET>``, ``adaptive_rag.json`` naming the base, and
``ret_token.json`` for plain-text ``<RET>``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from adaptive_rag.lm import models
from adaptive_rag.plumbing.errors import ConfigError
from inference.adapt_gate.ret_token import ret_signal, write_marker
from training.adapt_llm_config import AdaptTrainConfig
from training.grpo_config import GrpoTaskConfig, GrpoTrainConfig
from training.lora_sft import (
    add_ret_token,
    build_optimizer,
    build_peft_model,
    expose_lm_head_bias,
    record_adapter_base,
)


def adds_ret_token(task: GrpoTaskConfig) -> bool:
    """Whether the policy writes ``<RET>`` as an added token (the gate's special mode; the search task uses tags)."""
    return task.task == "gate" and task.ret_token == "special"


def lora_settings(task: GrpoTaskConfig, train: GrpoTrainConfig) -> AdaptTrainConfig:
    """ADAPT-LLM's training config carrying this job's LoRA and ``<RET>`` settings (the helpers it shares read it);
    ``ret_token: text`` there means LoRA alone (no added row)."""
    return AdaptTrainConfig(output_dir=train.output_dir, learning_rate=train.learning_rate, lora_r=train.lora_r,
                            lora_alpha=train.lora_alpha, lora_dropout=train.lora_dropout,
                            lora_target_modules=list(train.lora_target_modules),
                            ret_token="special" if adds_ret_token(task) else "text",
                            ret_token_learning_rate=train.ret_token_learning_rate, max_steps=train.max_steps)


def dtype_name(train: GrpoTrainConfig) -> str:
    return {"bf16": "bfloat16", "fp32": "float32"}.get(train.precision, "auto")


def adapter_ret_mode(tokenizer: Any, folder: str) -> str:
    """How an ADAPT-LLM adapter writes ``<RET>``, from its tokenizer and marker (one line when it never learnt to)."""
    signal = ret_signal(tokenizer, "auto")
    if signal is None:
        raise ConfigError(f"init_adapter {folder}: its tokenizer has no <RET> token and the folder no ret_token.json; "
                          f"give a folder written by training/adapt_llm.py")
    return signal.mode


def load_policy(base_name: str, task: GrpoTaskConfig, train: GrpoTrainConfig, device: str) -> tuple[Any, Any, str]:
    """``(model, tokenizer, base)``: the trainable policy, its tokenizer and the base model it stands on."""
    opts = models.ModelOptions(dtype=dtype_name(train), device=device)  # type: ignore[arg-type]
    if train.init_adapter:
        return _continue_adapter(train.init_adapter, task, opts)
    model, tokenizer = models.load_causal_lm(base_name, opts)
    model.train()
    ret_id = add_ret_token(tokenizer, model) if adds_ret_token(task) else None
    if train.finetune == "full":
        return model, tokenizer, base_name
    return build_peft_model(model, lora_settings(task, train), ret_id, base_name), tokenizer, base_name


def _continue_adapter(folder: str, task: GrpoTaskConfig, opts) -> tuple[Any, Any, str]:
    from peft import PeftModel

    base = models.adapter_base(folder)
    if base is None:
        raise ConfigError(f"init_adapter {folder} is not a LoRA adapter folder (no adapter_config.json)")
    tokenizer = models.load_tokenizer(folder if (Path(folder) / "tokenizer_config.json").is_file() else base)
    mode = adapter_ret_mode(tokenizer, folder)
    if task.task == "gate" and mode != task.ret_token:
        raise ConfigError(f"init_adapter {folder} writes <RET> as {mode}; set ret_token {mode}")
    model, _ = models.load_causal_lm(base, opts)
    if len(tokenizer) != model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))
    model = PeftModel.from_pretrained(model, folder, is_trainable=True)
    expose_lm_head_bias(model)
    model.save_pretrained = functools.partial(model.save_pretrained, save_embedding_layers=False)
    model.train()
    return model, tokenizer, base


def optimizer(model: Any, task: GrpoTaskConfig, train: GrpoTrainConfig):
    """AdamW with the ``<RET>`` row at its own rate (LoRA with a special ``<RET>``), else None (trl's own)."""
    if train.finetune != "lora" or not adds_ret_token(task):
        return None
    return build_optimizer(model, lora_settings(task, train))


def finish_folder(folder: str | Path, tokenizer: Any, task: GrpoTaskConfig, base: str, lora: bool) -> None:
    """What the gate reads beside the weights: the tokenizer, the base (adapters), the ``<RET>`` mode (plain text)."""
    tokenizer.save_pretrained(str(folder))
    if lora:
        record_adapter_base(folder, base)
    if task.task == "gate" and task.ret_token == "text":
        write_marker(folder, tokenizer, "text")
