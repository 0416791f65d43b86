"""Retrieval decisions learned from outcomes: GRPO (trl's ``GRPOTrainer`` with the project's rollout). Run from the
repository root.

    accelerate launch training/grpo.py                                    # no arguments: the CPU demo (world)
    python training/grpo.py training/configs/grpo_demo_cpu.yaml --max_steps 5 --output_dir runs/grpo/x
    python training/grpo.py bench/experiments/grpo_knowing_gate.yaml --world_seed 0 \\
        --base_model runs/knowing/seed0/model --index runs/knowing/seed0/bm25 --output_dir runs/knowing/seed0/grpo
    python training/grpo.py training/configs/grpo_search_cpu.yaml                 # Search-R1's multi-turn search
    accelerate launch --config_file accelerate_configs/single_gpu.yaml training/grpo.py \\
        training/configs/grpo_search_qwen7b_vllm.yaml                             # GPU, vLLM generation (untested)

Arguments: ``[CONFIG.yaml] [--field value ...]`` over ``BaseModelConfig`` (``base_model``), ``GrpoTaskConfig`` and
``GrpoTrainConfig`` (training/grpo_config.py); unknown fields fail.

``task: gate`` learns ADAPT-LLM's single decision (an answer, or ``<RET>``: retrieve with the question, answer from
the context prompt); ``task: search`` learns Search-R1's turns. Reward: the judge's correctness − λ per retrieval
(``retrieval_penalty``) + ``format_reward`` for a well-formed completion (training/grpo_rewards.py). Start from the
base model (``explore_ret`` sets a share of each group's decisions to ``<RET>`` so the policy meets retrieval) or
from an ADAPT-LLM adapter (``init_adapter``: supervised, then RL).

Output (``output_dir``): the adapter (or model), tokenizer, ``adaptive_rag.json``, ``config.yaml``,
``train_results.json`` (the logged rewards per step) and ``checkpoint-N`` folders; rerunning the same command
resumes from the last checkpoint. Evaluate the gate with
``python -m inference.commands.evaluate --method adapt-llm --model OUTPUT_DIR ...``; docs/grpo.md has the rest.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError
from data_builders.question_loader import check_dataset
from inference.commands.eval_checks import check_model_name, check_output_dir
from training.grpo_config import GrpoTaskConfig, GrpoTrainConfig

DEMO_CONFIG = Path(__file__).resolve().parent / "configs" / "grpo_demo_cpu.yaml"
CONFIG_TYPES = (BaseModelConfig, GrpoTaskConfig, GrpoTrainConfig)


def parse(argv: list[str]) -> tuple[BaseModelConfig, GrpoTaskConfig, GrpoTrainConfig]:
    return parse_config(CONFIG_TYPES, argv or [str(DEMO_CONFIG)], prog="training/grpo.py")


def check_inputs(model_cfg: BaseModelConfig, task: GrpoTaskConfig, train: GrpoTrainConfig) -> None:
    """Everything the job reads or writes, before a model loads: a mistake ends in one line at once."""
    if train.use_vllm or train.precision == "bf16":
        import torch

        if train.use_vllm and not torch.cuda.is_available():
            raise ConfigError("use_vllm needs CUDA and vllm; this machine has no CUDA: set use_vllm false")
    if train.init_adapter:
        if not (Path(train.init_adapter) / "adapter_config.json").is_file():
            raise ConfigError(f"--init_adapter {train.init_adapter}: not an adapter folder (no adapter_config.json)")
    else:
        check_model_name(model_cfg.base_model, flag="--base_model")
    check_dataset(task.question_set(), task.dataset_format)
    if task.index is not None and not Path(task.index).is_dir():
        raise ConfigError(f"--index {task.index}: no such index folder (build one with python -m "
                          "retrieval_adapt.build_index)")
    check_output_dir(train.output_dir)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    model_cfg, task, train = parse(list(sys.argv[1:] if argv is None else argv))
    check_inputs(model_cfg, task, train)
    from accelerate import PartialState  # after the checks: --help and a mistake cost no torch/trl start-up

    from training.grpo_job import train_grpo

    start = time.time()
    metrics = train_grpo(model_cfg, task, train)
    state = PartialState()
    if state.is_main_process:
        seconds = time.time() - start
        out = Path(train.output_dir)
        (out / "timings.json").write_text(json.dumps({"total_s": seconds}, indent=2) + "\n")
        print(f"trained {metrics.get('global_step')} steps in {seconds / 60:.1f} min; policy in {out}")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return run_cli(main)


if __name__ == "__main__":
    sys.exit(cli())
