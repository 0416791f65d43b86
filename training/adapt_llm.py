"""ADAPT-LLM end to end: Algorithm 1 data -> LoRA SFT (trl SFTTrainer + peft) -> NR / AR / ADAPT-LLM on held-out
questions. Run from the repository root.

    accelerate launch training/adapt_llm.py                      # no arguments: the CPU demo, see below
    python training/adapt_llm.py                                 # the same without accelerate
    accelerate launch --config_file accelerate_configs/cpu.yaml training/adapt_llm.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml training/adapt_llm.py \\
        training/configs/adapt_llm_paper.yaml --base_model meta-llama/Llama-2-7b-hf
    python training/adapt_llm.py training/configs/adapt_llm_demo_cpu.yaml --num_train_epochs 1 --output_dir runs/x

Arguments: ``[CONFIG.yaml] [--field value ...]`` over the fields of ``BaseModelConfig``
(adaptive_rag/lm/base_model.py: ``base_model``, the model Algorithm 1 asks and the job fine-tunes),
``AdaptDataConfig`` (data_builders/adapt_llm.py), ``AdaptTrainConfig`` and ``AdaptEvalConfig``
(training/adapt_llm_config.py); unknown fields fail. Without a YAML the dataclass defaults are the paper's
recipe (effective batch 128, micro-batch 32, 3 epochs, lr 3e-4, LoRA r 8 / alpha 16 / dropout 0.05 on q_proj,
v_proj, cut-off 512).

**No arguments at all** runs ``training/configs/adapt_llm_demo_cpu.yaml``: the embedded world (its fictional
single-hop and common-knowledge questions, a held-out fifth never trained on), the embedded SmolLM2-135M,
on CPU: 4.2 min measured on two cores (much longer while other jobs share them); the YAML's comments
say where it departs from the paper.

``--mode nr`` / ``--mode ar`` train the paper's baselines instead (NR-LLM: the closed-book prompt -> gold answer;
AR-LLM: the gold passage in the context prompt -> gold answer), same recipe, each into its own ``data_dir`` and
``output_dir``; their held-out table's NR (resp. AR) row is the trained baseline.

Stages, each resumable: (1) Algorithm 1 into ``data_dir`` (closed-book answers already in
``closed_book.jsonl`` are not asked again); (2) fine-tuning into ``output_dir`` (resumes from its last
checkpoint; writes adapter, tokenizer, ``config.yaml``, ``data_stats.json``, ``train_results.json``);
(3) with ``evaluate: true``, the held-out comparison, through the evaluate command's own path: a table is printed
and ``output_dir/eval/`` gets what any evaluation folder holds (``predictions.jsonl`` with every question's three
answers, ``metrics.json``, ``config.yaml``) plus ``summary.json`` and ``table.txt`` (NR / AR / ADAPT-LLM decided
from those answers, and the ``<RET>`` threshold sweep).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path

import yaml

from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.plumbing.cards import push_to_hub, write_adapter_card
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.wandb_logging import log_run
from data_builders.adapt_llm import (
    AdaptDataConfig,
    build_adapt_dataset,
    check_data_dir_mode,
    load_adapt_dataset,
)
from data_builders.question_loader import check_dataset
from inference.commands.eval_checks import check_model_name, check_output_dir
from training.adapt_llm_config import AdaptEvalConfig, AdaptTrainConfig

DEMO_CONFIG = Path(__file__).resolve().parent / "configs" / "adapt_llm_demo_cpu.yaml"


CONFIG_TYPES = (BaseModelConfig, AdaptDataConfig, AdaptTrainConfig, AdaptEvalConfig)


def parse(argv: list[str]) -> tuple[BaseModelConfig, AdaptDataConfig, AdaptTrainConfig, AdaptEvalConfig]:
    return parse_config(CONFIG_TYPES, argv or [str(DEMO_CONFIG)], prog="training/adapt_llm.py")


def build_data(model_cfg: BaseModelConfig, data_cfg: AdaptDataConfig, state):
    """Algorithm 1 on the main process only (one model answers closed-book); the others load its output."""
    if state.is_main_process:
        build_adapt_dataset(data_cfg, model=model_cfg)
        if data_cfg.push_dataset_to_hub:
            push_to_hub(data_cfg.data_dir, data_cfg.push_dataset_to_hub, repo_type="dataset")
    state.wait_for_everyone()
    return load_adapt_dataset(data_cfg.data_dir)


def check_inputs(model_cfg: BaseModelConfig, data_cfg: AdaptDataConfig, train_cfg: AdaptTrainConfig,
                 eval_cfg: AdaptEvalConfig) -> None:
    """Everything the job reads or writes, checked before any model loads: a mistake ends in one line at once,
    not after Algorithm 1 and training. The base model's name, the training questions' file, the output
    folders, a 4-/8-bit request without CUDA, and with ``evaluate: true`` the evaluation's questions and index."""
    if train_cfg.load_in_4bit or train_cfg.load_in_8bit or train_cfg.precision == "fp16":
        import torch

        if not torch.cuda.is_available():  # first: the machine, before the names a GPU recipe gives
            raise ConfigError("load_in_4bit / load_in_8bit / precision fp16 need CUDA (and bitsandbytes for 4-/8-bit); "
                              "this machine has no CUDA: set load_in_8bit false and precision auto")
    check_model_name(model_cfg.base_model, flag="--base_model")
    check_dataset(data_cfg.question_set(), data_cfg.dataset_format)
    for flag, folder in (("--data_dir", data_cfg.data_dir), ("--output_dir", train_cfg.output_dir)):
        check_output_dir(folder, flag=flag)
    check_data_dir_mode(data_cfg.data_dir, data_cfg.mode)
    if eval_cfg.evaluate:
        from training.adapt_llm_eval import check_eval_inputs

        check_eval_inputs(data_cfg, eval_cfg)


def evaluate(data_cfg: AdaptDataConfig, train_cfg: AdaptTrainConfig, eval_cfg: AdaptEvalConfig) -> dict:
    from training.adapt_llm_eval import evaluate_gate, load_for_eval

    model, tokenizer = load_for_eval(train_cfg.output_dir)
    return evaluate_gate(model, tokenizer, data_cfg, eval_cfg, Path(train_cfg.output_dir) / "eval",
                         model_dir=train_cfg.output_dir)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    model_cfg, data_cfg, train_cfg, eval_cfg = parse(list(sys.argv[1:] if argv is None else argv))
    check_inputs(model_cfg, data_cfg, train_cfg, eval_cfg)
    # imported after the arguments are parsed and checked: --help and a mistake cost no torch/trl start-up
    from accelerate import PartialState

    from training.lora_sft import train_adapt

    state = PartialState()
    timings: dict[str, float] = {}
    start = time.time()
    dsd = build_data(model_cfg, data_cfg, state)
    timings["data_s"] = time.time() - start
    state.print(f"Algorithm 1 data: train {len(dsd['train'])}, validation {len(dsd['validation'])} instances")
    if state.is_main_process and train_cfg.report_to == "wandb":
        stats = json.loads((Path(data_cfg.data_dir) / "stats.json").read_text())
        log_run("wandb", job="algorithm1", name=Path(data_cfg.data_dir).name,
                config={**asdict(model_cfg), **asdict(data_cfg)},
                metrics={k: v for k, v in stats.items() if k != "by_group"})

    t = time.time()
    metrics = train_adapt(data_cfg, train_cfg, dsd, extra_configs=(eval_cfg,), model=model_cfg)
    timings["train_s"] = time.time() - t
    state.print(f"trained: loss {metrics.get('train_loss', float('nan')):.4f}, adapter {metrics.get('adapter')}")

    if eval_cfg.evaluate and state.is_main_process:
        t = time.time()
        result = evaluate(data_cfg, train_cfg, eval_cfg)
        timings["eval_s"] = time.time() - t
        print("\nHeld-out questions (accuracy = any gold answer contained, %):\n" + result["table"])
        if data_cfg.mode != "adapt":
            print(f"\nThis model was trained as the paper's {data_cfg.mode.upper()}-LLM: its "
                  f"{'NR' if data_cfg.mode == 'nr' else 'AR'} row is the baseline to compare with ADAPT-LLM.")
        print("\nThreshold rule on p(<RET> first), re-decided offline:\n" + result["sweep_table"])
        out = Path(train_cfg.output_dir)
        write_adapter_card(out, yaml.safe_load((out / "config.yaml").read_text()),
                           {**metrics, "held_out": result["summaries"]}, repo_id=train_cfg.push_to_hub)
    timings["total_s"] = time.time() - start
    if state.is_main_process:
        (Path(train_cfg.output_dir) / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
        print("\nwall time: " + ", ".join(f"{k[:-2]} {v:.0f}s" for k, v in timings.items()))
        if train_cfg.push_to_hub:
            print("pushed to " + str(push_to_hub(train_cfg.output_dir, train_cfg.push_to_hub, repo_type="model")))


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return run_cli(main)


if __name__ == "__main__":
    sys.exit(cli())
