"""LoRA SFT of ADAPT-LLM with trl's ``SFTTrainer``: ``<RET>`` as a trained special token, the paper's batch
arithmetic, resumable checkpoints and a checked adapter. :func:`train_adapt` is the whole job;
``training/adapt_llm.py`` only parses the config and calls it.

How ``<RET>`` is trained (SPEC, "Checked on this machine"): peft's ``trainable_token_indices`` trains just
that row, and on a tied model (SmolLM2, Llama-3.2) the same row is the LM head's output row. trl 1.16 patches
a fused LM head that reads ``lm_head.bias``, which peft's ``TrainableTokensWrapper`` does not expose, so
training failed with ``AttributeError``; :func:`expose_lm_head_bias` gives the wrapper the ``bias`` its
wrapped layer has (``None`` for Llama's bias-free head), and then it trains.
``ret_token_training="modules_to_save"`` (whole embedding and LM head) remains the fallback.

``ret_token: text`` is the authors' reading instead: nothing is added, ``<RET>`` stays the tokenizer's ordinary
pieces, LoRA alone learns to write them, and the model folder records the mode for the gate
(:mod:`inference.adapt_gate.ret_token`). ``keep_adapter: best`` ends with the checkpoint of lowest validation loss
(the authors' ``load_best_model_at_end``); ``train_results.json``'s ``kept`` says which step and why.

On an untied model (Llama-2, Mistral) the LM head has its own ``<RET>`` row, drawn around the mean of the others
by the resize; it must train as well, or greedy decoding never emits ``<RET>``: its row is a second trainable token
(:func:`ret_token_modules`), saved in the adapter next to the embedding's and checked by :func:`check_adapter`.
Instances reach trl already tokenized (``training/adapt_llm_tokens.py``), with the prompt ids inference uses.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import shutil
from contextlib import nullcontext
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import torch
import yaml
from datasets import DatasetDict

from adaptive_rag.lm import models
from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.plumbing.cards import EMBEDDED_HUB_IDS, write_adapter_card
from adaptive_rag.plumbing.config import config_dict
from adaptive_rag.plumbing.record_log import FolderLock
from adaptive_rag.plumbing.wandb_logging import configure_wandb
from data_builders.adapt_llm import AdaptDataConfig
from data_builders.adapt_llm_prompts import RET_TOKEN
from inference.adapt_gate.ret_token import write_marker
from training.adapt_llm_checkpoints import (  # noqa: F401  (RESUME_KEYS: re-exported)
    RESUME_KEYS,
    SessionClock,
    check_resumable,
    checkpoint_step,
    previous_runtimes,
    resolve_checkpoint,
    whole_run_results,
)
from training.adapt_llm_config import AdaptTrainConfig
from training.adapt_llm_tokens import tokenize_split
from training.label_only_head import score_labelled_only
from training.varlen_attention import use_for_padding_free

logger = logging.getLogger(__name__)
ADAPTER_FILE = "adapter_model.safetensors"


def checkpointing_option(on: bool) -> dict[str, bool]:
    """Activation checkpointing as a trainer option: transformers 5.x renamed ``gradient_checkpointing`` to
    ``activation_checkpointing`` (the old name warns on every config) and older 5.x releases know the old name only."""
    from transformers import TrainingArguments

    names = {f.name for f in fields(TrainingArguments)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": on}


def add_ret_token(tokenizer: Any, model: Any | None = None) -> int:
    """Add ``<RET>`` as one special token (once: an existing one is reused) and resize ``model``'s embeddings."""
    if RET_TOKEN not in tokenizer.get_vocab():
        tokenizer.add_special_tokens({"additional_special_tokens": [RET_TOKEN]})
    ret_id = tokenizer.convert_tokens_to_ids(RET_TOKEN)
    if tokenizer(RET_TOKEN, add_special_tokens=False)["input_ids"] != [ret_id]:
        raise RuntimeError(f"{RET_TOKEN} does not tokenize to the single id {ret_id}")
    if model is not None and model.get_input_embeddings().weight.shape[0] < len(tokenizer):
        # mean_resizing: the new row starts at the mean embedding, not at random noise far from the others.
        model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
    return ret_id


def gradient_accumulation(effective_batch: int, micro_batch: int, processes: int) -> int:
    """Accumulation steps so that micro-batch x steps x processes is the effective batch (rounded up)."""
    per_step = micro_batch * processes
    steps = max(1, math.ceil(effective_batch / per_step))
    if steps * per_step != effective_batch:
        logger.warning("effective batch %d is not a multiple of %d x %d processes; using %d", effective_batch,
                       micro_batch, processes, steps * per_step)
    return steps


def is_tied(model: Any) -> bool:
    """Whether the LM head shares the input embedding matrix (SmolLM2, Llama-3.2; not Llama-2 or Mistral)."""
    return bool(getattr(model.config.get_text_config(), "tie_word_embeddings", False))


def embedding_names(model: Any) -> tuple[str, str]:
    """The input embedding's and the LM head's module names as peft matches them (the end of the full name:
    ``embed_tokens``, ``lm_head``)."""
    names = {id(module): name.rsplit(".", 1)[-1] for name, module in model.named_modules()}
    return names[id(model.get_input_embeddings())], names.get(id(model.get_output_embeddings()), "lm_head")


def ret_token_modules(model: Any) -> tuple[str, ...]:
    """The modules whose ``<RET>`` row must train: the input embedding, and the LM head when it is untied."""
    embedding, head = embedding_names(model)
    return (embedding,) if is_tied(model) else (embedding, head)


def lora_config(cfg: AdaptTrainConfig, ret_id: int | None, tied: bool = True,
                modules: tuple[str, str] = ("embed_tokens", "lm_head")):
    """LoRA on the target modules plus the ``<RET>`` rows: of the embedding (``modules[0]``) and, untied, of the
    LM head (``modules[1]``); on a tied model peft ties the head's row to the embedding's by itself. ``ret_token:
    text`` (``ret_id`` None): LoRA alone, as the authors' alpaca-lora trains."""
    from peft import LoraConfig

    rows = modules[:1] if tied else modules
    extra: dict[str, Any] = {"trainable_token_indices": {name: [ret_id] for name in rows}}
    if cfg.ret_token == "text":
        extra = {}
    elif cfg.ret_token_training == "modules_to_save":
        # whole saved modules need ensure_weight_tying on a tied model, or the two copies drift apart
        extra = {"modules_to_save": list(modules), "ensure_weight_tying": tied}
    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_target_modules), bias="none", task_type="CAUSAL_LM", **extra)


def expose_lm_head_bias(model: Any) -> int:
    """Give each ``TrainableTokensWrapper`` the ``bias`` of the layer it wraps (trl's fused head reads it).
    Returns how many wrappers were patched."""
    from peft.utils.other import TrainableTokensWrapper

    n = 0
    for module in model.modules():
        if isinstance(module, TrainableTokensWrapper) and "bias" not in module.__dict__:
            module.bias = getattr(module.token_adapter.base_layer, "bias", None)
            n += 1
    return n


def loadable_base(name: str) -> str:
    """The base as ``adapter_config.json`` records it, for a plain ``PeftModel.from_pretrained`` outside this
    project: an embedded model by the hub id of the same model (``smollm2-135m`` ->
    ``HuggingFaceTB/SmolLM2-135M-Instruct``), a local folder or ``.gguf`` by the absolute path of the model folder
    transformers reads (a ``.gguf``'s converted folder), a hub id as it is."""
    if name in models.EMBEDDED_LMS:
        return EMBEDDED_HUB_IDS[name]
    if Path(name).expanduser().exists():
        return str(Path(models.resolve_model(name)).resolve())
    return name


def project_base(name: str) -> str:
    """The base as this project's loader names it (``adaptive_rag.json``): an embedded short name as it is (it
    resolves on any machine with the wheel), a local path made absolute, a hub id as it is."""
    path = Path(name).expanduser()
    return str(path.resolve()) if name not in EMBEDDED_HUB_IDS and path.exists() else name


def record_adapter_base(folder: str | Path, base_name: str) -> None:
    """Write ``adaptive_rag.json`` beside an adapter: :func:`adaptive_rag.lm.models.adapter_base` loads the adapter on
    this base (the embedded weights it was trained on) rather than on ``adapter_config.json``'s hub id."""
    (Path(folder) / models.ADAPTER_BASE_FILE).write_text(json.dumps({"base_model": project_base(base_name)}, indent=2)
                                                  + "\n")


def build_peft_model(model: Any, cfg: AdaptTrainConfig, ret_id: int | None, base_name: str):
    """LoRA on the target modules plus a trainable ``<RET>`` row; the adapter names the base loadably
    (:func:`loadable_base`), and :func:`record_adapter_base` keeps the project's own name for it."""
    from peft import get_peft_model, prepare_model_for_kbit_training

    if cfg.load_in_4bit or cfg.load_in_8bit:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg.gradient_checkpointing)
    peft_model = get_peft_model(model, lora_config(cfg, ret_id, is_tied(model), embedding_names(model)))
    peft_model.peft_config["default"].base_model_name_or_path = loadable_base(base_name)
    expose_lm_head_bias(peft_model)
    # Every save, the trainer's checkpoints too, keeps the embedding matrix out unless it trains whole: peft's
    # "auto" would fetch the base's config (from the hub, for a hub id) and then, as the vocabulary grew by <RET>,
    # add the whole resized matrix (~110 MB for SmolLM2) to each checkpoint; the <RET> row is in the adapter.
    peft_model.save_pretrained = functools.partial(
        peft_model.save_pretrained, save_embedding_layers=_saves_embeddings(cfg))
    return peft_model


def adapter_base_callback(base_name: str):
    """A trainer callback that records the project's base (:func:`record_adapter_base`) in every checkpoint, so
    that ``load_causal_lm(output_dir/checkpoint-N)`` loads on the same base as the final adapter."""
    from transformers import TrainerCallback

    class RecordBase(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                record_adapter_base(folder, base_name)

    return RecordBase()


def _saves_embeddings(cfg: AdaptTrainConfig) -> bool:
    return cfg.ret_token == "special" and cfg.ret_token_training == "modules_to_save"


def build_optimizer(model: Any, cfg: AdaptTrainConfig) -> torch.optim.Optimizer | None:
    """AdamW with the <RET> row in its own group at ``ret_token_learning_rate``; None (the Trainer's own
    optimizer) when that is unset. The Trainer's schedule scales both groups alike."""
    if cfg.ret_token_learning_rate is None:
        return None
    if cfg.ret_token == "text":
        logger.warning("ret_token_learning_rate applies to an added <RET> row; ignored with ret_token text")
        return None
    if cfg.ret_token_training != "trainable_tokens":
        logger.warning("ret_token_learning_rate applies to trainable_tokens only; ignored with %s",
                       cfg.ret_token_training)
        return None
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    ret = [p for n, p in params if "trainable_tokens_delta" in n]
    if not ret:
        raise RuntimeError("no trainable <RET> row found in the model")
    rest = [p for n, p in params if "trainable_tokens_delta" not in n]
    return torch.optim.AdamW([{"params": rest, "lr": cfg.learning_rate},
                              {"params": ret, "lr": cfg.ret_token_learning_rate}], weight_decay=0.0)


def _precision(cfg: AdaptTrainConfig) -> str:
    if cfg.precision != "auto":
        return cfg.precision
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"


def sft_config(cfg: AdaptTrainConfig, processes: int, has_eval: bool):
    from trl import SFTConfig

    precision = _precision(cfg)
    evaluate = has_eval and cfg.eval_steps is not None
    if cfg.keep_adapter == "best" and not evaluate:
        raise ValueError("keep_adapter best needs a validation split (validation_fraction or validation_size) and "
                         "eval_steps: the best adapter is the one of lowest validation loss")
    # best: the Trainer keeps the checkpoint of lowest eval_loss out of save_total_limit's rotation and loads it
    # at the end (the authors' load_best_model_at_end); the saved adapter is then that step's
    best = {"load_best_model_at_end": True, "metric_for_best_model": "eval_loss",
            "greater_is_better": False} if cfg.keep_adapter == "best" else {}
    return SFTConfig(**best,
        output_dir=cfg.output_dir, per_device_train_batch_size=cfg.micro_batch_size,
        per_device_eval_batch_size=cfg.micro_batch_size,
        gradient_accumulation_steps=gradient_accumulation(cfg.effective_batch_size, cfg.micro_batch_size, processes),
        num_train_epochs=cfg.num_train_epochs, max_steps=cfg.max_steps, learning_rate=cfg.learning_rate,
        warmup_steps=cfg.warmup_steps, lr_scheduler_type=cfg.lr_scheduler_type,
        # trl refuses max_length with padding_free unless it packs (packing would change the batch's examples);
        # tokenize_split has cut every instance at max_length already
        max_length=None if cfg.padding_free else cfg.max_length, padding_free=cfg.padding_free,
        completion_only_loss=True,  # loss on the response only (alpaca-lora's train_on_inputs=False)
        train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
        bf16=precision == "bf16", fp16=precision == "fp16", **checkpointing_option(cfg.gradient_checkpointing),
        logging_steps=cfg.logging_steps, save_strategy="steps", save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit, eval_strategy="steps" if evaluate else "no",
        eval_steps=cfg.eval_steps if evaluate else None, report_to=cfg.report_to, run_name=cfg.run_name,
        seed=cfg.seed, dataloader_num_workers=0, disable_tqdm=False,
    )


def check_adapter(output_dir: str | Path, cfg: AdaptTrainConfig,
                  ret_modules: tuple[str, ...] = ("embed_tokens",)) -> dict[str, int]:
    """Refuse an adapter file without LoRA weights or without a ``<RET>`` row of each of ``ret_modules`` (the
    embedding; on an untied model the LM head too). alpaca-lora once saved empty 443-byte adapters. Returns
    tensor and parameter counts."""
    from safetensors import safe_open

    path = Path(output_dir) / ADAPTER_FILE
    if not path.is_file():
        raise RuntimeError(f"no adapter was written: {path} is missing")
    with safe_open(str(path), framework="pt") as f:
        keys = list(f.keys())
        numel = sum(math.prod(f.get_slice(k).get_shape()) for k in keys)
    if cfg.ret_token == "text":  # plain-text <RET>: no row of its own, LoRA weights are all there is
        if not any("lora_" in k for k in keys) or numel == 0:
            raise RuntimeError(f"{path} ({path.stat().st_size} bytes) lacks LoRA weights: keys {keys[:6]}")
        return {"tensors": len(keys), "parameters": int(numel), "bytes": path.stat().st_size}
    marker = "{}.token_adapter.trainable_tokens_delta" if cfg.ret_token_training == "trainable_tokens" else ".{}."
    if not any("lora_" in k for k in keys) or numel == 0 or not any(marker.format(ret_modules[0]) in k for k in keys):
        raise RuntimeError(f"{path} ({path.stat().st_size} bytes) lacks LoRA or {RET_TOKEN} weights: keys {keys[:6]}")
    missing = [m for m in ret_modules[1:] if not any(marker.format(m) in k for k in keys)]
    if missing:
        raise RuntimeError(f"{path} lacks the {RET_TOKEN} row of {', '.join(missing)}: on a model with untied "
                           f"embeddings greedy decoding would never emit {RET_TOKEN}")
    return {"tensors": len(keys), "parameters": int(numel), "bytes": path.stat().st_size}


def kept_adapter(trainer_state: Any, cfg: AdaptTrainConfig) -> dict[str, Any]:
    """Which step's adapter ``output_dir`` holds, and why: the last step's, or (``keep_adapter: best``) the checkpoint
    of lowest validation loss with that loss and every validation loss it was chosen from."""
    evals = [{"step": int(e["step"]), "eval_loss": float(e["eval_loss"])}
             for e in trainer_state.log_history if "eval_loss" in e and "step" in e]
    if cfg.keep_adapter == "best" and trainer_state.best_model_checkpoint:
        step = int(Path(trainer_state.best_model_checkpoint).name.rsplit("-", 1)[-1])
        return {"step": step, "of_steps": int(trainer_state.global_step), "rule": "best validation loss",
                "eval_loss": trainer_state.best_metric, "checkpoint": Path(trainer_state.best_model_checkpoint).name,
                "validation_losses": evals}
    why = "last step" if cfg.keep_adapter == "last" else "last step (no validation loss was computed)"
    return {"step": int(trainer_state.global_step), "of_steps": int(trainer_state.global_step), "rule": why,
            "eval_loss": evals[-1]["eval_loss"] if evals and evals[-1]["step"] == trainer_state.global_step else None,
            "validation_losses": evals}


def _write_outputs(output_dir: Path, model: BaseModelConfig, data_cfg: AdaptDataConfig, train_cfg: AdaptTrainConfig,
                   extra: Any) -> None:
    """Resolved config (base model, data and training settings, with the data's source hash, which resuming
    checks) and the dataset stats."""
    output_dir.mkdir(parents=True, exist_ok=True)
    stats_path = Path(data_cfg.data_dir) / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
    resolved = {**config_dict(model, data_cfg, train_cfg, *extra), "source_sha256": stats.get("source_sha256")}
    (output_dir / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    if stats:
        shutil.copy(stats_path, output_dir / "data_stats.json")


def _start_output(main_process: bool, model: BaseModelConfig, data_cfg: AdaptDataConfig,
                  train_cfg: AdaptTrainConfig, extra: tuple) -> str | None:
    """The checkpoint to resume from (checked against the saved recipe), and the resolved config written."""
    resume = resolve_checkpoint(train_cfg.resume_from_checkpoint, train_cfg.output_dir)
    if main_process:
        if resume:
            stats_path = Path(data_cfg.data_dir) / "stats.json"
            sha = json.loads(stats_path.read_text()).get("source_sha256") if stats_path.is_file() else None
            check_resumable(train_cfg.output_dir, {**asdict(model), **asdict(data_cfg), **asdict(train_cfg),
                                                   "source_sha256": sha})
            logger.info("resuming from %s", resume)
        _write_outputs(Path(train_cfg.output_dir), model, data_cfg, train_cfg, extra)
    return resume


def train_adapt(data_cfg: AdaptDataConfig, train_cfg: AdaptTrainConfig, dsd: DatasetDict,
                extra_configs: tuple = (), *, model: BaseModelConfig | None = None) -> dict[str, Any]:
    """Fine-tune ``model.base_model`` (default :class:`BaseModelConfig`'s) on ``dsd``; write adapter, tokenizer,
    config and stats to ``train_cfg.output_dir``. Returns the train metrics plus the adapter check."""
    from accelerate import PartialState

    state = PartialState()
    try:
        # One run per output_dir (main process): two would write the same checkpoints.
        with FolderLock(train_cfg.output_dir) if state.is_main_process else nullcontext():
            return _train_locked(state, model or BaseModelConfig(), data_cfg, train_cfg, dsd, extra_configs)
    finally:
        release_memory()


def release_memory() -> None:
    """Free what training left behind before the next stage loads a model: the trainer and the model sit in
    reference cycles until a collection, and glibc keeps freed activation memory in its heap (measured on the CPU
    demo: 3.1 GB resident after training while ~0.8 GB was live, and the evaluation's model came on top)."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    libc = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(libc).malloc_trim if libc else None
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to hand back this way
        trim = None
    if trim is not None:
        trim(0)


def load_base_model(name: str, train_cfg: AdaptTrainConfig, device: str) -> tuple[Any, Any]:
    """The base model to train, in the recipe's precision, and its tokenizer. With ``padding_free`` on a CPU the
    model attends with ``sdpa_varlen`` (:func:`training.varlen_attention.use_for_padding_free`: SDPA per instance of
    the flattened row, where plain SDPA would score the whole row); otherwise its attention is left as loaded."""
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(_precision(train_cfg), "float32")
    model, tokenizer = models.load_causal_lm(name, models.ModelOptions(
        dtype=dtype, device=device, load_in_4bit=train_cfg.load_in_4bit, load_in_8bit=train_cfg.load_in_8bit))
    use_for_padding_free(model, train_cfg.padding_free)
    return model, tokenizer


def _train_locked(state: Any, model_cfg: BaseModelConfig, data_cfg: AdaptDataConfig, train_cfg: AdaptTrainConfig,
                  dsd: DatasetDict, extra_configs: tuple) -> dict[str, Any]:
    from transformers import set_seed
    from trl import SFTTrainer

    out = Path(train_cfg.output_dir)
    base_name = model_cfg.base_model
    resume = _start_output(state.is_main_process, model_cfg, data_cfg, train_cfg, extra_configs)
    configure_wandb(train_cfg.report_to)
    model, tokenizer = load_base_model(base_name, train_cfg, str(state.device))
    # the <RET> row (drawn around the mean embedding) and LoRA's A matrices are random: seeded here, since the
    # trainer seeds only once it is built, so two runs of one command train the same adapter
    set_seed(train_cfg.seed)
    ret_id = add_ret_token(tokenizer, model) if train_cfg.ret_token == "special" else None
    ret_modules = ret_token_modules(model)
    model = build_peft_model(model, train_cfg, ret_id, base_name)
    if state.is_main_process:
        model.print_trainable_parameters()
    has_eval = len(dsd["validation"]) > 0
    previous_sessions = previous_runtimes(resume)
    # Read now: save_total_limit may rotate the resumed checkpoint away before training ends.
    resume_step = checkpoint_step(resume) if resume else None
    trainer = SFTTrainer(model=model, args=sft_config(train_cfg, state.num_processes, has_eval),
                         train_dataset=tokenize_split(dsd["train"], tokenizer, max_length=train_cfg.max_length),
                         eval_dataset=tokenize_split(dsd["validation"], tokenizer, max_length=train_cfg.max_length)
                         if has_eval else None,
                         processing_class=tokenizer, optimizers=(build_optimizer(model, train_cfg), None),
                         callbacks=[SessionClock(previous_sessions), adapter_base_callback(base_name)])
    score_labelled_only(trainer)
    result = trainer.train(resume_from_checkpoint=resume)
    session = dict(result.metrics)
    previous = out / "train_results.json"
    if resume_step is not None and trainer.state.global_step == resume_step and previous.is_file():
        # A finished run resumed: no step ran, and the trainer reports loss 0; keep the run's real figures.
        metrics = {**json.loads(previous.read_text()), "resumed_without_new_steps": True}
    else:
        metrics = whole_run_results(session, trainer.state.log_history,
                                    [*previous_sessions, round(session["train_runtime"], 4)],
                                    trainer.state.global_step)
    metrics["mode"] = data_cfg.mode
    metrics["ret_token"] = train_cfg.ret_token
    metrics["kept"] = kept_adapter(trainer.state, train_cfg)
    if state.is_main_process:
        # Trainable tokens carry the <RET> row; the resized base embedding need not be saved (peft's "auto"
        # would add the whole matrix, ~110 MB for SmolLM2, because the vocabulary grew).
        whole = _saves_embeddings(train_cfg)
        trainer.accelerator.unwrap_model(trainer.model).save_pretrained(out, save_embedding_layers=whole)
        tokenizer.save_pretrained(out)  # with <RET>: the base's embeddings are resized to len(tokenizer) first
        record_adapter_base(out, base_name)
        write_marker(out, tokenizer, train_cfg.ret_token)  # how the gate reads <RET> from this model
        metrics["adapter"] = check_adapter(out, train_cfg, ret_modules)
        (out / "train_results.json").write_text(json.dumps(metrics, indent=2) + "\n")
        write_adapter_card(out, yaml.safe_load((out / "config.yaml").read_text()), metrics,
                           repo_id=train_cfg.push_to_hub)
        if train_cfg.merge_adapter:
            merged = trainer.model.merge_and_unload()
            merged.save_pretrained(out / "merged")
            tokenizer.save_pretrained(out / "merged")
            write_marker(out / "merged", tokenizer, train_cfg.ret_token)
    state.wait_for_everyone()
    return metrics
