"""wandb for evaluation and builders: off by default, offline without a key, never prompting."""

from __future__ import annotations

import pytest

from adaptive_rag.plumbing.wandb_logging import check_report_to, log_run, predictions_rows


def test_predictions_rows_hold_gold_output_and_retrievals():
    rec = {"id": 3, "question": "Who?", "answers": ["Ann", "Anne"], "output": "It is Ann.", "answer": "Ann",
           "retrievals": [{"query": "who a"}, {"query": "who b"}]}
    assert predictions_rows([rec]) == [["3", "Who?", "Ann | Anne", "It is Ann.", "Ann", 2, "who a || who b"]]
    assert predictions_rows([{"id": "x"}]) == [["x", "", "", "", "", 0, ""]]


def test_off_by_default_and_bad_values_refused():
    assert log_run("none", job="evaluate", name="x", config={}, metrics={"f1": 1.0}) is None
    with pytest.raises(ValueError, match="report_to must be one of none, wandb"):
        check_report_to("tensorboard")


@pytest.mark.slow
def test_offline_run_logs_config_metrics_and_table(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc key: must go offline, not prompt
    run_dir = log_run("wandb", job="evaluate", name="t", folder=tmp_path, config={"method": "dragin"},
                      metrics={"f1": 0.5, "n": 2, "method": "dragin"},
                      records=[{"id": "q1", "question": "Q?", "answers": ["a"], "output": "a", "retrievals": []}])
    assert run_dir is not None
    offline = list((tmp_path / "wandb").glob("offline-run-*"))
    assert offline, "an offline run folder is written"
    assert any(p.suffix == ".wandb" for p in offline[0].iterdir())
