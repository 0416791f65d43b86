"""Resuming ADAPT-LLM training from checkpoint folders made by hand: only complete checkpoints are continued,
another mode's checkpoints never are, and the whole run's loss is the step-weighted mean of the logged losses."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from adaptive_rag.plumbing.errors import ConfigError
from training.adapt_llm_checkpoints import (
    check_resumable,
    checkpoint_complete,
    logged_loss,
    previous_runtimes,
    whole_run_results,
)
from training.lora_sft import resolve_checkpoint  # what the training job calls


def _checkpoint(root: Path, step: int, state: bool = True, weights: str | None = "adapter_model.safetensors") -> Path:
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    if weights:
        (folder / weights).write_bytes(b"weights")
    if state:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    return folder


def test_newest_complete_checkpoint_is_resumed_and_incomplete_ones_are_named(tmp_path, caplog):
    _checkpoint(tmp_path, 5)
    _checkpoint(tmp_path, 9, weights="model.safetensors")
    _checkpoint(tmp_path, 10, weights=None)  # killed before the weights were written
    _checkpoint(tmp_path, 12, state=False)  # killed before trainer_state.json (the Trainer writes it last)
    (tmp_path / "checkpoint-final").mkdir()  # not a step folder: ignored
    with caplog.at_level(logging.WARNING):
        chosen = resolve_checkpoint("auto", str(tmp_path))
    assert chosen == str(tmp_path / "checkpoint-9")
    skipped = [r.getMessage() for r in caplog.records if "incomplete checkpoint" in r.getMessage()]
    assert len(skipped) == 2 and "checkpoint-12" in skipped[0] and "checkpoint-10" in skipped[1]
    assert checkpoint_complete(tmp_path / "checkpoint-5") and not checkpoint_complete(tmp_path / "checkpoint-12")


def test_no_complete_checkpoint_means_a_fresh_start_and_an_incomplete_path_is_refused(tmp_path):
    _checkpoint(tmp_path, 4, state=False)
    assert resolve_checkpoint("auto", str(tmp_path)) is None
    with pytest.raises(FileNotFoundError, match="checkpoint-4 is incomplete"):
        resolve_checkpoint(str(tmp_path / "checkpoint-4"), str(tmp_path))
    deepspeed = _checkpoint(tmp_path, 6, weights=None)
    (deepspeed / "global_step6").mkdir()  # DeepSpeed keeps its weights in a folder
    assert resolve_checkpoint("auto", str(tmp_path)) == str(deepspeed)


def test_checkpoints_of_another_mode_are_never_continued(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"base_model": "m", "learning_rate": 0.001}))
    check_resumable(tmp_path, {"mode": "adapt", "base_model": "m", "learning_rate": 0.001})  # old folders: adapt
    with pytest.raises(ConfigError, match="other mode .*'adapt' vs 'nr'"):
        check_resumable(tmp_path, {"mode": "nr", "base_model": "m", "learning_rate": 0.001})


def test_logged_loss_weights_each_log_by_the_steps_it_covers():
    history = [{"loss": 4.0, "step": 2}, {"eval_loss": 9.0, "step": 2}, {"loss": 2.0, "step": 4},
               {"loss": 1.0, "step": 5}, {"train_loss": 0.5, "step": 5}]
    mean, steps = logged_loss(history)
    assert steps == 5 and mean == pytest.approx((4.0 * 2 + 2.0 * 2 + 1.0 * 1) / 5)  # 2.6
    assert logged_loss([]) == (None, 0)


def test_whole_run_results_labels_session_figures():
    session = {"train_loss": 1.0, "train_runtime": 3.0, "epoch": 1.0}
    res = whole_run_results(session, [{"loss": 3.0, "step": 1}, {"loss": 1.0, "step": 2}], [5.0, 3.0], 2)
    assert (res["train_loss"], res["train_runtime"], res["sessions"], res["global_step"]) == (2.0, 8.0, 2, 2)
    assert (res["session_train_loss"], res["session_train_runtime"], res["session_epoch"]) == (1.0, 3.0, 1.0)
    assert whole_run_results(session, [], [3.0], 0)["train_loss"] == 1.0  # nothing logged: the session's figure


def test_previous_runtimes_come_from_the_resumed_checkpoint(tmp_path):
    folder = _checkpoint(tmp_path, 3)
    assert previous_runtimes(None) == [] and previous_runtimes(folder) == []  # written before session clocks
    (folder / "session_runtimes.json").write_text(json.dumps({"session_runtimes": [12.5, 4.0]}))
    assert previous_runtimes(folder) == [12.5, 4.0]
