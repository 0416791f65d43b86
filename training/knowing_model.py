"""Build the knowing model: SmolLM2 fine-tuned on a seeded part of the world, with what it knows recorded per fact.

    python -m training.knowing_model --output_dir runs/knowing/seed0 --seed 0
    python -m training.knowing_model --output_dir runs/knowing/seed1 --seed 1
    python -m training.knowing_model --output_dir /tmp/k --tiny true --base_model PATH_TO_TINY_MODEL   # seconds

Design and split: docs/knowing_world.md (pre-registered). Stages, each written once and skipped on a rerun (an
interrupted build resumes, training from its last checkpoint): ``replay.jsonl`` (the base model's own chat answers
to the common-knowledge questions), ``train/`` (trl SFT checkpoints), ``model/`` (the knowing model),
``facts.jsonl`` + ``entities.jsonl`` (closed-book labels on held-out wordings), ``metrics.json``, then the question
sets and corpus of :mod:`data_builders.knowing_sets` under ``sets/``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
import yaml

from adaptive_rag.lm.models import ModelOptions, load_causal_lm, resolve_device, resolve_dtype
from adaptive_rag.plumbing.atomic_files import write_text_atomic
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config, rename_aliases
from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.metrics import contained_accuracy
from adaptive_rag.plumbing.record_log import FolderLock
from data_builders.knowing_sets import write_sets
from data_builders.knowing_world import KnowingWorld
from training.adapt_llm_tokens import tokenize_instances
from training.knowing_steps import (
    KnowingConfig,
    _write_jsonl,
    build_replay,
    chat_answers,
    paper_answers,
    read_jsonl,
    reasoning_texts,
    training_texts,
)
from training.label_only_head import score_labelled_only
from training.lora_sft import checkpointing_option
from training.varlen_attention import use_for_padding_free

logger = logging.getLogger(__name__)


def _training_precision(cfg: KnowingConfig) -> str:
    if cfg.dtype != "auto":
        return {"bfloat16": "bf16", "float32": "fp32"}.get(cfg.dtype, cfg.dtype)

    return "bf16" if resolve_dtype("auto", resolve_device("auto")) == torch.bfloat16 else "fp32"


def sft_args(cfg: KnowingConfig, output_dir: Path):
    """trl's settings of the knowing model's training (bench/sft_head.py times the same)."""
    from trl import SFTConfig

    # no activation checkpointing (trl turns it on by default): recomputing every layer's forward in the backward
    # pass saves memory a 135M model does not need, at the cost of time; the weights are bit-identical
    # (docs/knowing_world.md, "Built without activation checkpointing")
    return SFTConfig(output_dir=str(output_dir), per_device_train_batch_size=cfg.batch_size,
                     **checkpointing_option(False),
                     num_train_epochs=cfg.num_train_epochs, max_steps=cfg.max_steps, learning_rate=cfg.learning_rate,
                     lr_scheduler_type="cosine", warmup_steps=0, padding_free=True, max_length=None,
                     completion_only_loss=True, bf16=_training_precision(cfg) == "bf16",
                     use_cpu=not torch.cuda.is_available(), logging_steps=10, save_strategy="steps",
                     save_steps=cfg.save_steps, save_total_limit=1, report_to="none", seed=cfg.seed,
                     dataloader_num_workers=0, disable_tqdm=False)


def build_trainer(cfg: KnowingConfig, kw: KnowingWorld, replay: list[dict], output_dir: Path) -> tuple[Any, Any]:
    """The knowing model's trainer over its training mix, and that mix: trl's head still in place
    (``bench/sft_head.py`` times it against the labelled-only head on this trainer)."""
    from datasets import Dataset
    from trl import SFTTrainer

    model, tokenizer = load_causal_lm(cfg.base_model, ModelOptions(dtype="float32"))  # bf16 runs as autocast
    model.train()
    if cfg.training_mix == "reasoning":
        prompts, completions = reasoning_texts(kw, replay, tokenizer, cfg.reasoning_demos, cfg.replay)
    else:
        prompts, completions = training_texts(kw, replay, tokenizer, cfg.replay, cfg.train_wordings)
    data = Dataset.from_dict(tokenize_instances(tokenizer, prompts, completions)).shuffle(seed=cfg.seed)
    if cfg.finetune == "lora":
        from peft import LoraConfig, get_peft_model
        from transformers import set_seed

        set_seed(cfg.seed)  # LoRA's A matrices are random; the trainer seeds only once it is built
        model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=2 * cfg.lora_r, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    use_for_padding_free(model, True)
    trainer = SFTTrainer(model=model, args=sft_args(cfg, output_dir), train_dataset=data, processing_class=tokenizer)
    return trainer, data


def train(cfg: KnowingConfig, kw: KnowingWorld, replay: list[dict], out: Path) -> dict[str, Any]:
    """Fine-tune ``cfg.base_model`` into ``out/model``; resumes from ``out/train``'s last checkpoint."""
    final = out / "model"
    if (final / "config.json").is_file():
        return json.loads((out / "train_results.json").read_text())
    from transformers.trainer_utils import get_last_checkpoint

    trainer, data = build_trainer(cfg, kw, replay, out / "train")
    tokenizer, precision = trainer.processing_class, _training_precision(cfg)
    score_labelled_only(trainer)
    resume = get_last_checkpoint(str(out / "train")) if (out / "train").is_dir() else None
    start = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=resume)
    trained = trainer.model.merge_and_unload() if cfg.finetune == "lora" else trainer.model
    trained.save_pretrained(final)
    tokenizer.save_pretrained(final)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    metrics = {"instances": len(data), "tokens": int(sum(len(x) for x in data["input_ids"])),
               "steps": trainer.state.global_step, "train_seconds_this_session": round(time.perf_counter() - start, 1),
               "train_loss": result.metrics.get("train_loss"), "first_loss": losses[:1], "last_loss": losses[-1:],
               "precision": precision, "finetune": cfg.finetune, "resumed_from": resume}
    write_text_atomic(out / "train_results.json", json.dumps(metrics, indent=2) + "\n")
    return metrics


def label(cfg: KnowingConfig, kw: KnowingWorld, replay: list[dict], out: Path) -> dict[str, Any]:
    """Closed-book answers of the knowing model on every fact's held-out wording: facts.jsonl, entities.jsonl."""
    if (out / "facts.jsonl").is_file() and (out / "label_metrics.json").is_file():
        return json.loads((out / "label_metrics.json").read_text())

    model, tokenizer = load_causal_lm(str(out / "model"), ModelOptions(dtype="auto"))
    facts = kw.facts
    if cfg.label_untrained is not None:
        untrained = [f for f in facts if f.design == "untrained"]
        sample = random.Random(f"knowing:{cfg.seed}:label-sample").sample(untrained, min(cfg.label_untrained,
                                                                                          len(untrained)))
        facts = [f for f in facts if f.trained or f in sample]
    answers = chat_answers(model, tokenizer, [f.question for f in facts], cfg, "knowing model, held-out wordings")
    measured = [f for f in facts if f.design in ("trained", "untrained")]
    paper = dict(zip((f.key for f in measured),
                     paper_answers(model, tokenizer, [f.question for f in measured], cfg)))
    common = chat_answers(model, tokenizer, [r["question"] for r in replay], cfg, "knowing model, common knowledge")
    rows = []
    for fact, answer in zip(facts, answers):
        known = bool(contained_accuracy(answer, fact.answers))
        row = {"key": fact.key, "pid": fact.entity.pid, "entity": fact.entity.name, "kind": fact.entity.kind,
               "relation": fact.relation, "question": fact.question, "answers": fact.answers, "design": fact.design,
               "trained": fact.trained, "group": fact.group, "answer": answer, "label": "known" if known else
               "unknown"}
        if fact.key in paper:
            row["answer_paper"] = paper[fact.key]
            row["correct_paper"] = bool(contained_accuracy(paper[fact.key], fact.answers))
        rows.append(row)
    _write_jsonl(out / "facts.jsonl", rows)
    per_entity: dict[str, dict] = defaultdict(lambda: {"facts": 0, "known": 0})
    for row in rows:
        e = per_entity[row["pid"]]
        e.update(pid=row["pid"], name=row["entity"], kind=row["kind"], trained=row["trained"])
        e["facts"] += 1
        e["known"] += row["label"] == "known"
    _write_jsonl(out / "entities.jsonl", [{**e, "share_known": round(e["known"] / e["facts"], 4)}
                                          for e in per_entity.values()])
    common_rows = [{**r, "knowing_answer": a, "knowing_correct": contained_accuracy(a, r["answers"])}
                   for r, a in zip(replay, common)]
    _write_jsonl(out / "common_knowledge.jsonl", common_rows)
    metrics = summarise(rows, common_rows)
    write_text_atomic(out / "label_metrics.json", json.dumps(metrics, indent=2) + "\n")
    return metrics


def _acc(rows: list[dict], key: str = "label") -> dict[str, Any]:
    if not rows:
        return {"n": 0, "accuracy": None}
    hits = [(r[key] == "known") if key == "label" else bool(r[key]) for r in rows]
    return {"n": len(rows), "accuracy": round(sum(hits) / len(hits), 4)}


def summarise(rows: list[dict], common_rows: list[dict]) -> dict[str, Any]:
    """Closed-book accuracy by design label (chat and paper prompts) and on common knowledge, with the targets."""
    by = {d: [r for r in rows if r["design"] == d] for d in ("trained", "untrained", "guessable", "leaked")}
    held = [r for r in common_rows if not r["replayed"]]
    out = {
        "chat": {d: _acc(v) for d, v in by.items()},
        "paper": {d: _acc([r for r in v if "correct_paper" in r], "correct_paper")
                  for d, v in by.items() if d in ("trained", "untrained")},
        "common_knowledge_heldout": {"base": _acc(held, "base_correct"), "knowing": _acc(held, "knowing_correct")},
        "common_knowledge_replayed": {"base": _acc([r for r in common_rows if r["replayed"]], "base_correct"),
                                      "knowing": _acc([r for r in common_rows if r["replayed"]], "knowing_correct")},
        "flipped_common": sum(bool(r["base_correct"]) != bool(r["knowing_correct"]) for r in common_rows),
    }
    known, unknown = out["chat"]["trained"]["accuracy"], out["chat"]["untrained"]["accuracy"]
    out["acceptance"] = {"trained_accuracy": known, "untrained_accuracy": unknown,
                         "trained_ok": known is not None and known >= 0.60,
                         "untrained_ok": unknown is not None and unknown <= 0.05,
                         "common_knowledge_heldout": out["common_knowledge_heldout"]}
    return out


def build(cfg: KnowingConfig) -> dict[str, Any]:
    """Every stage of the knowing model into ``cfg.output_dir``; returns metrics.json's content."""

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "config.yaml"
    mine = {k: v for k, v in vars(cfg).items() if k not in ("output_dir",)}
    if saved.is_file():
        before = rename_aliases((KnowingConfig,), yaml.safe_load(saved.read_text()) or {})
        defaults = {f.name: f.default for f in dataclasses.fields(KnowingConfig)}
        changed = sorted(k for k in mine if k in ("seed", "n_trained", "tiny", "base_model", "finetune",
                                                   "num_train_epochs", "learning_rate", "batch_size", "replay",
                                                   "lora_r", "n_common", "label_untrained", "train_wordings",
                                                   "training_mix", "reasoning_demos")
                         and before.get(k, defaults.get(k)) != mine[k])  # a key added later: its default
        if changed:
            raise DataError(f"{out} was built with other settings ({', '.join(changed)}): use another --output_dir",
                            source=str(saved))
    else:
        write_text_atomic(saved, yaml.safe_dump(mine, sort_keys=False))
    with FolderLock(out):
        load = os.getloadavg()[0]
        kw = cfg.knowing_world()
        started = time.perf_counter()
        replay = build_replay(cfg, out)
        train_metrics = train(cfg, kw, replay, out)
        label_metrics = label(cfg, kw, replay, out)
        sets = write_sets(kw, read_jsonl(out / "facts.jsonl"), read_jsonl(out / "common_knowledge.jsonl"), out / "sets",
                          cfg.n_common)
        seconds = round(time.perf_counter() - started, 1)
        earlier = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").is_file() else {}
        # a rerun of a finished build takes a second: the sessions' times add up, the first build's load is kept
        sessions = earlier.get("build_sessions", []) + [{"seconds": seconds, "load_1min_at_start": round(load, 2),
                                                         "load_1min_at_end": round(os.getloadavg()[0], 2)}]
        metrics = {**label_metrics, "train": train_metrics, "sets": sets,
                   "build_seconds": round(sum(x["seconds"] for x in sessions), 1), "build_sessions": sessions}
        write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    return metrics


def main(argv: list[str] | None = None) -> None:
    (cfg,) = parse_config((KnowingConfig,), argv, prog="python -m training.knowing_model")
    if cfg.tiny and cfg.base_model == "smollm2-135m":
        logger.warning("tiny world on the real SmolLM2: fine, but the tiny variant is meant for a tiny base_model")
    if Path(cfg.output_dir).is_file():
        raise ConfigError(f"--output_dir {cfg.output_dir} is a file; give a folder")
    start = time.perf_counter()
    metrics = build(cfg)
    print(json.dumps(metrics["acceptance"], indent=2))
    print(f"knowing model in {cfg.output_dir}/model ({time.perf_counter() - start:.0f}s this session)")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_cli(main, resume_hint="every finished stage is kept in --output_dir; rerun the same command to resume")


if __name__ == "__main__":
    sys.exit(cli())
