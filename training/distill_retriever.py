"""Iter-RetGen retrieval adaptation: distil re-ranker scores into the dense retriever's query encoder.

    # 1. a dense index (kept fixed) and 2. the distillation data (y1, candidates, re-ranker scores)
    python -m retrieval_adapt.build_index --corpus world --kind dense --encoder minilm \\
        --output_dir runs/index/world-minilm
    python -m training.distill_set retrieval_adapt/configs/data_world.yaml
    # 3. this job (any accelerate config; the paper's settings are in distill_paper.yaml)
    accelerate launch training/distill_retriever.py retrieval_adapt/configs/distill_world_cpu.yaml
    accelerate launch --config_file accelerate_configs/<config>.yaml training/distill_retriever.py \\
        retrieval_adapt/configs/distill_paper.yaml --data_dir runs/... --index runs/... --output_dir runs/...
    # 4. use it
    python -m retrieval_adapt.search runs/index/world-minilm "question" --query_encoder OUT/query_encoder

``--push_to_hub ORG/NAME`` uploads the encoder folder (with its card, ``README.md``) to the Hub when the run
completes; offline, the run still completes locally and one error line gives the ``hf upload`` command for later.
Plain ``python training/distill_retriever.py CONFIG.yaml`` runs on one process. Rerunning with the same
``output_dir`` resumes from its newest complete checkpoint (``--resume false`` starts over in place). Ctrl-C
finishes the step in flight, saves a checkpoint and exits (status 130); a second Ctrl-C stops at once.
"""

from __future__ import annotations

import logging
import sys

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from retrieval_adapt.distill import train
from retrieval_adapt.distill_config import DistillConfig


def main(argv: list[str] | None = None) -> None:
    (cfg,) = parse_config((DistillConfig,), argv, prog="accelerate launch training/distill_retriever.py")
    result = train(cfg)
    resumed = f", resumed at step {result['resumed_from_step']}" if result["resumed_from_step"] else ""
    print(f"best validation loss {result['best_val_loss']:.5f} at step {result['best_step']} "
          f"({result['steps']} steps{resumed}, {result['train_seconds']:.0f}s of training); "
          f"query encoder: {cfg.output_dir}/query_encoder" + (f", pushed to {result['pushed_to']}"
                                                                 if result.get("pushed_to") else ""))


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_cli(main, resume_hint="the newest complete checkpoint is kept; rerun the same command to resume")


if __name__ == "__main__":
    sys.exit(cli())
