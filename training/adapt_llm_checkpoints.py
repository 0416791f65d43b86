"""Resuming ADAPT-LLM training: which checkpoint to continue, whether it may be continued, and the figures of the
whole run across sessions.

A ``checkpoint-N`` folder is complete once the Trainer has written ``trainer_state.json`` (its last file) next to
the model or adapter weights; a kill during a save leaves the newest folder without it, and continuing that one
fails on every rerun, so :func:`resolve_checkpoint` takes the newest complete one. A resumed session's own
metrics cover only its steps; :func:`whole_run_results` reports the run from the trainer state's log history and
the runtimes of all sessions, which :class:`SessionClock` carries from checkpoint to checkpoint.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from adaptive_rag.plumbing.errors import ConfigError

logger = logging.getLogger(__name__)

TRAINER_STATE = "trainer_state.json"
# Model or adapter weights a Trainer checkpoint holds (plain, peft, sharded; FSDP and DeepSpeed keep their own).
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin", "model.safetensors", "model.safetensors.index.json",
                "pytorch_model.bin", "pytorch_model.bin.index.json")
WEIGHT_FOLDER_PATTERNS = ("pytorch_model_fsdp_*", "global_step*")
SESSIONS_FILE = "session_runtimes.json"  # written into each checkpoint by SessionClock
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")

# Fields that must match for a checkpoint to be continued (others, e.g. max_steps or logging, may change).
RESUME_KEYS = ("mode", "base_model", "data_dir", "source_sha256", "micro_batch_size", "effective_batch_size",
               "learning_rate", "ret_token_learning_rate", "max_length", "lora_r", "lora_alpha", "lora_dropout",
               "lora_target_modules", "ret_token", "ret_token_training", "load_in_4bit", "load_in_8bit",
               "keep_adapter")


def checkpoint_complete(folder: str | Path) -> bool:
    """Whether a checkpoint folder holds its trainer state and weights (a kill during the save leaves less)."""
    path = Path(folder)
    if not (path / TRAINER_STATE).is_file():
        return False
    return any((path / name).is_file() for name in WEIGHT_FILES) or any(
        any(path.glob(pattern)) for pattern in WEIGHT_FOLDER_PATTERNS)


def last_complete_checkpoint(output_dir: str | Path) -> str | None:
    """The ``checkpoint-N`` with the highest N that is complete; every newer incomplete one is named in a
    warning. None when there is none."""
    root = Path(output_dir)
    if not root.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name))]
    for _, folder in sorted(found, reverse=True):
        if checkpoint_complete(folder):
            return str(folder)
        logger.warning("skipping incomplete checkpoint %s (no %s or no model/adapter weights: a save was "
                       "interrupted)", folder, TRAINER_STATE)
    return None


def resolve_checkpoint(setting: str, output_dir: str) -> str | None:
    """``auto``: the newest complete ``checkpoint-*`` in ``output_dir`` (None when there is none); ``never``;
    or a path, which must be a complete checkpoint."""
    if setting == "never":
        return None
    if setting == "auto":
        return last_complete_checkpoint(output_dir)
    if not Path(setting).is_dir():
        raise FileNotFoundError(f"resume_from_checkpoint: no checkpoint folder {setting}")
    if not checkpoint_complete(setting):
        raise FileNotFoundError(f"resume_from_checkpoint: {setting} is incomplete (no {TRAINER_STATE} or no "
                                "model/adapter weights); choose another checkpoint")
    return setting


def check_resumable(output_dir: str | Path, current: dict[str, Any]) -> None:
    """Refuse to continue checkpoints that were written with another recipe (``config.yaml`` in output_dir)."""
    import yaml

    saved_path = Path(output_dir) / "config.yaml"
    if not saved_path.is_file():
        return
    saved = yaml.safe_load(saved_path.read_text()) or {}
    saved.setdefault("mode", "adapt")  # folders written before training modes existed hold ADAPT-LLM runs
    diff = [k for k in RESUME_KEYS if k in saved and k in current and saved[k] != current[k]]
    if diff:
        raise ConfigError(f"{output_dir} holds checkpoints trained with other {', '.join(diff)} "
                          f"(e.g. {diff[0]}: {saved[diff[0]]!r} vs {current[diff[0]]!r}); choose another output_dir "
                          "or set resume_from_checkpoint: never")


def checkpoint_step(folder: str | Path) -> int:
    """The optimizer step a checkpoint folder was saved at, from its own ``trainer_state.json``."""
    return int(json.loads((Path(folder) / TRAINER_STATE).read_text())["global_step"])


def previous_runtimes(checkpoint: str | Path | None) -> list[float]:
    """Runtimes (s) of the sessions that led to ``checkpoint``, the last one up to its save; [] without one."""
    if checkpoint is None:
        return []
    path = Path(checkpoint) / SESSIONS_FILE
    if not path.is_file():
        logger.warning("%s has no %s: the runtime of the sessions before it is unknown and left out of the total",
                       checkpoint, SESSIONS_FILE)
        return []
    return [float(s) for s in json.loads(path.read_text())["session_runtimes"]]


class SessionClock(TrainerCallback):
    """Writes the runtimes of all sessions so far (earlier ones from the resumed checkpoint, this one up to the
    save) into every checkpoint, so a later resume can sum the whole run."""

    def __init__(self, previous: list[float]):
        self.previous = list(previous)
        self.start = time.time()

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.time()

    def elapsed(self) -> float:
        return time.time() - self.start

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            runtimes = [*self.previous, round(self.elapsed(), 4)]
            (folder / SESSIONS_FILE).write_text(json.dumps({"session_runtimes": runtimes}) + "\n")


def logged_loss(log_history: list[dict[str, Any]]) -> tuple[float | None, int]:
    """Mean training loss over the logged steps of the whole run: each logged ``loss`` (itself the mean since the
    previous log) weighted by the steps it covers. Returns (mean or None, steps covered)."""
    entries = sorted((int(e["step"]), float(e["loss"])) for e in log_history if "loss" in e and "step" in e)
    total, steps, previous = 0.0, 0, 0
    for step, loss in entries:
        width = step - previous
        if width <= 0:
            continue
        total += loss * width
        steps += width
        previous = step
    return (total / steps if steps else None), steps


def whole_run_results(session: dict[str, Any], log_history: list[dict[str, Any]], runtimes: list[float],
                      global_step: int) -> dict[str, Any]:
    """``train_results.json``: the whole run (``train_loss``, ``train_runtime``, ``sessions``, ...) and, under
    ``session_*`` keys, what the Trainer reported for this session alone."""
    loss, covered = logged_loss(log_history)
    whole = {
        # step-weighted mean of the logged losses of every session (logging_steps apart)
        "train_loss": loss if loss is not None else session.get("train_loss"),
        "train_loss_logged_steps": covered,
        "train_runtime": round(sum(runtimes), 4),  # seconds, all sessions added up
        "session_runtimes": runtimes,
        "sessions": len(runtimes),
        "global_step": global_step,
    }
    return {**whole, **{f"session_{k}": v for k, v in session.items()}}
