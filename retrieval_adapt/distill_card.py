"""The distilled query encoder's card (``OUT/query_encoder/README.md``), from what the run has measured so far.

The distillation job writes it whenever ``query_encoder/`` is replaced (a new best validation loss) and once more
when the run completes, so the card always describes the encoder beside it: the best and the initial (unadapted,
step 0) validation loss, the steps done, the data's hashes from ``data_dir/stats.json`` and the resolved config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from adaptive_rag.plumbing.cards import write_encoder_card
from adaptive_rag.plumbing.record_log import RecordLog
from retrieval_adapt import distill_checkpoints as ckpt

if TYPE_CHECKING:
    from retrieval_adapt.distill_checkpoints import TrainerState
    from retrieval_adapt.distill_config import DistillConfig


def read_records(path: Path) -> list[dict]:
    """``metrics.jsonl`` as records (the job writing it reads it: a torn last line, from a kill mid-write, is cut)."""
    return RecordLog(path, key=None).read()


def run_metrics(cfg: DistillConfig, out: Path, state: TrainerState, processes: int) -> dict:
    """The figures the card reports: best and initial validation loss, steps, time, the last logged training step."""
    records = read_records(out / "metrics.jsonl")
    initial = next((r["val_loss"] for r in records if r.get("step") == 0 and "val_loss" in r), None)
    last_train = next((r for r in reversed(records) if "kl" in r), {})
    best = ckpt.read_best(out)
    metrics = {"best_val_loss": best[0] if best else None, "best_step": best[1] if best else None,
               "initial_val_loss": initial, "steps_done": state.step, "max_steps": cfg.max_steps,
               "train_seconds": round(state.train_seconds, 1), "processes": processes,
               **{f"last_logged_train_{k}": v for k, v in last_train.items()}}
    return {k: v for k, v in metrics.items() if v is not None}


def write_encoder_card_of(cfg: DistillConfig, out: Path, state: TrainerState, passage_encoder: str,
                          processes: int) -> Path:
    """Write ``out/query_encoder/README.md`` (main process); returns its path."""
    stats_path = Path(cfg.data_dir) / "stats.json"
    stats = json.loads(stats_path.read_text(encoding="utf-8")) if stats_path.is_file() else {}
    return write_encoder_card(out / "query_encoder", cfg, run_metrics(cfg, out, state, processes),
                              base_encoder=passage_encoder, stats=stats, repo_id=cfg.push_to_hub)
