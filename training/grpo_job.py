"""The GRPO job once its config is parsed: questions, retriever, policy, trl's ``GRPOTrainer`` with the project's
rollout, resumable checkpoints, and an output folder the evaluation command loads. ``training/grpo.py`` parses and
calls :func:`train_grpo`.
"""

from __future__ import annotations

import json
import logging
import random
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import yaml

from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.plumbing.config import config_dict
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.record_log import FolderLock
from adaptive_rag.plumbing.retriever import Hit, Retriever
from adaptive_rag.plumbing.wandb_logging import configure_wandb
from data_builders.question_loader import WorldOptions, load_questions
from inference.commands.eval_data import load_eval_retriever
from training.adapt_llm_checkpoints import resolve_checkpoint
from training.grpo_config import GrpoTaskConfig, GrpoTrainConfig
from training.grpo_model import finish_folder, load_policy, optimizer
from training.grpo_rewards import reward_functions
from training.grpo_rollout import GateRollout, SearchRollout
from training.lora_sft import adapter_base_callback

logger = logging.getLogger(__name__)

# Settings a resumed run must share with the checkpoints it continues (the others may change, e.g. max_steps).
RESUME_KEYS = ("base_model", "task", "dataset", "start", "limit", "shuffle_seed", "world_seed", "retriever",
               "retrieval_penalty", "format_reward", "ret_token", "context_ban_ret", "explore_ret", "init_adapter",
               "finetune", "lora_r", "num_generations", "questions_per_step", "learning_rate", "beta", "temperature",
               "seed")


class RandomRetriever:
    """The control: for each query, the hits another question of ``pool`` gets (drawn with ``seed``), so the
    passages are real passages of the index and almost never about the question."""

    def __init__(self, inner: Retriever, pool: list[str], seed: int = 0):
        if len(pool) < 2:
            raise ConfigError("retriever random needs at least two training questions to draw from")
        self.inner, self.pool, self.rng = inner, pool, random.Random(seed)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        others = [self.rng.choice([p for p in self.pool if p != q] or self.pool) for q in queries]
        return self.inner.search(others, k)


def training_questions(task: GrpoTaskConfig) -> list:
    return load_questions(task.question_set(), fmt=task.dataset_format, world=WorldOptions(seed=task.world_seed))


def make_retriever(task: GrpoTaskConfig, questions: list) -> Retriever:
    inner = load_eval_retriever(task.index, task.dataset, world_seed=task.world_seed)
    if task.retriever == "random":
        return RandomRetriever(inner, [ex.question for ex in questions], task.retriever_seed)
    return inner


def prompt_dataset(questions: list):
    """trl's prompt dataset: the question as ``prompt`` (the rollout builds the model's prompt), golds as
    ``answers`` (read by the correctness reward)."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [ex.question for ex in questions],
                              "answers": [list(ex.answers) for ex in questions],
                              "question_id": [ex.id for ex in questions]})


def grpo_args(task: GrpoTaskConfig, train: GrpoTrainConfig):
    from trl import GRPOConfig

    completions = train.questions_per_step * train.num_generations
    micro = train.micro_batch_size or completions
    # one rollout per optimizer step, split into micro-batches: trl then needs no old log-probabilities
    return GRPOConfig(
        output_dir=train.output_dir, per_device_train_batch_size=micro,
        gradient_accumulation_steps=completions // micro, steps_per_generation=completions // micro,
        num_generations=train.num_generations, max_steps=train.max_steps,
        learning_rate=train.learning_rate, beta=train.beta, epsilon=train.epsilon, temperature=train.temperature,
        loss_type=train.loss_type, scale_rewards=train.scale_rewards, lr_scheduler_type="constant",
        max_completion_length=train.max_new_tokens if task.task == "gate" else
        (task.max_searches + 1) * task.turn_max_new_tokens,
        logging_steps=train.logging_steps, save_steps=train.save_steps, save_total_limit=train.save_total_limit,
        report_to=[] if train.report_to == "none" else [train.report_to], run_name=train.run_name,
        seed=train.seed, bf16=train.precision == "bf16", disable_dropout=True,
        log_completions=train.log_completions, use_vllm=train.use_vllm, vllm_mode=train.vllm_mode,
        remove_unused_columns=False, push_to_hub=False, save_only_model=False)


def check_resume(out: Path, current: dict[str, Any]) -> None:
    saved_path = out / "config.yaml"
    if not saved_path.is_file():
        return
    saved = yaml.safe_load(saved_path.read_text()) or {}
    diff = [k for k in RESUME_KEYS if k in saved and saved[k] != current.get(k)]
    if diff:
        raise ConfigError(f"{out} holds checkpoints trained with other {', '.join(diff)} (e.g. {diff[0]}: "
                          f"{saved[diff[0]]!r} vs {current.get(diff[0])!r}); choose another output_dir or set "
                          "resume_from_checkpoint never")


def train_grpo(model_cfg: BaseModelConfig, task: GrpoTaskConfig, train: GrpoTrainConfig) -> dict[str, Any]:
    from accelerate import PartialState

    state = PartialState()
    with FolderLock(train.output_dir) if state.is_main_process else nullcontext():
        return _train_locked(state, model_cfg, task, train)


def _train_locked(state, model_cfg: BaseModelConfig, task: GrpoTaskConfig, train: GrpoTrainConfig) -> dict[str, Any]:
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in trl 1.16
    from transformers import set_seed
    from trl import GRPOTrainer

    out = Path(train.output_dir)
    resolved = config_dict(model_cfg, task, train)
    resume = resolve_checkpoint(train.resume_from_checkpoint, train.output_dir)
    if state.is_main_process:
        if resume:
            check_resume(out, resolved)
            logger.info("resuming from %s", resume)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    configure_wandb(train.report_to)
    questions = training_questions(task)
    retriever = make_retriever(task, questions)
    set_seed(train.seed)  # LoRA's A matrices and the <RET> row are drawn now, before the trainer seeds
    model, tokenizer, base = load_policy(model_cfg.base_model, task, train, str(state.device))
    rollout_cls = GateRollout if task.task == "gate" else SearchRollout
    trainer = GRPOTrainer(model=model, reward_funcs=reward_functions(task.judge, task.judge_normalize,
                                                                     task.retrieval_penalty, task.format_reward),
                          args=grpo_args(task, train), train_dataset=prompt_dataset(questions),
                          processing_class=tokenizer, rollout_func=rollout_cls(tokenizer, retriever, task, train),
                          optimizers=(optimizer(model, task, train), None),
                          callbacks=[adapter_base_callback(base)] if train.finetune == "lora" else None)
    result = trainer.train(resume_from_checkpoint=resume)
    metrics = {**result.metrics, "global_step": trainer.state.global_step}
    if state.is_main_process:
        trainer.save_model(str(out))
        finish_folder(out, tokenizer, task, base, lora=train.finetune == "lora")
        history = [row for row in trainer.state.log_history if "reward" in row]
        (out / "train_results.json").write_text(json.dumps({**metrics, "log": history}, indent=2) + "\n")
    return metrics
