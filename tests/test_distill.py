"""Query-encoder distillation: a step moves the query encoder only; the index and passage encoder stay fixed;
the best checkpoint loads into DenseRetriever; a rerun resumes; the entry script runs from a YAML."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage
from data_builders.distill_schema import to_dataset_dict
from retrieval_adapt.dense import DenseRetriever
from retrieval_adapt.distill import train
from retrieval_adapt.distill_config import DistillConfig
from retrieval_adapt.distill_data import collate
from retrieval_adapt.encoders import MeanPoolingEncoder

REPO = Path(__file__).resolve().parents[1]
PASSAGES = [Passage(f"p{i}", f"Title {i}", f"Passage number {i} about topic {i % 3}.") for i in range(8)]


def _digest(folder: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir()) if f.is_file()}


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Path]:
    """A tiny random BERT encoder folder, a dense index over 8 passages, and a distillation dataset."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from adaptive_rag.lm.models import resolve_model

    root = tmp_path_factory.mktemp("distill")
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("minilm"))
    bert = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32))
    enc = MeanPoolingEncoder(bert, tokenizer, normalize=True, max_length=32)
    enc.save(root / "encoder")
    DenseRetriever.build(PASSAGES, MeanPoolingEncoder.from_name(str(root / "encoder")),
                         show_progress=False).save(root / "index")
    rows = []
    for i in range(6):
        pos = [(i + j) % 8 for j in range(4 - i % 2)]  # 4 or 3 candidates: padding and masks get exercised
        rows.append({"question_id": f"q{i}", "question": f"question {i} topic {i % 3}", "answers": ["a"],
                     "gold_ids": [], "y1": f"draft {i}", "y1_answer": "", "candidate_ids": [f"p{p}" for p in pos],
                     "candidate_positions": pos, "teacher_scores": [3.0 if j == 1 else 0.0 for j in range(len(pos))],
                     "retriever_scores": [0.0] * len(pos)})
    to_dataset_dict(rows, 0.34, 0).save_to_disk(str(root / "data" / "dataset"))
    return {"root": root, "encoder": root / "encoder", "index": root / "index", "data": root / "data"}


def _config(setup, out: Path, **kw) -> DistillConfig:
    base = dict(data_dir=str(setup["data"]), index=str(setup["index"]), output_dir=str(out), batch_size=2,
                learning_rate=1e-2, max_steps=2, eval_steps=1, logging_steps=1, temperature=0.1)
    return DistillConfig(**{**base, **kw})


def _checkpoint_weights(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    newest = max(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return {k.removeprefix("model."): v for k, v in load_file(str(newest / "model.safetensors")).items()}


def test_step_changes_query_encoder_only(setup, tmp_path):
    encoder_before, index_before = _digest(setup["encoder"]), _digest(setup["index"])
    emb_before = np.load(setup["index"] / "embeddings.npy").copy()
    initial = MeanPoolingEncoder.from_name(str(setup["encoder"])).model.state_dict()
    result = train(_config(setup, tmp_path / "out", max_steps=1))
    assert result["steps"] == 1
    # One optimiser step moved the query encoder's weights ...
    after = _checkpoint_weights(tmp_path / "out")
    assert any(not torch.equal(initial[k], after[k]) for k in initial if k in after)
    assert {k for k in initial if "embeddings.word_embeddings" in k} <= set(after)
    # ... while the passage encoder's files, the stored embeddings and the faiss index are untouched.
    assert _digest(setup["encoder"]) == encoder_before and _digest(setup["index"]) == index_before
    np.testing.assert_array_equal(np.load(setup["index"] / "embeddings.npy"), emb_before)
    retriever = DenseRetriever.load(setup["index"], query_encoder=str(tmp_path / "out" / "query_encoder"))
    assert retriever.index.ntotal == len(PASSAGES)
    assert [len(r) for r in retriever.search(["question 1"], 3)] == [3]
    assert MeanPoolingEncoder.from_name(str(tmp_path / "out" / "query_encoder")).normalize
    log = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in r and "agreement@1" in r for r in log) and any("val_loss" in r for r in log)
    assert (tmp_path / "out" / "config.yaml").is_file()


def test_training_lowers_loss_and_resumes(setup, tmp_path):
    out = tmp_path / "out"
    cfg = dict(batch_size=4, learning_rate=3e-3)  # one full batch of the 4 training questions per step
    train(_config(setup, out, max_steps=2, **cfg))
    assert json.loads((out / "trainer_state.json").read_text())["step"] == 2
    result = train(_config(setup, out, max_steps=8, **cfg))  # resumes at step 2
    assert result["steps"] == 8
    log = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "val_loss" in r] == list(range(9))  # step 0 once, no step done twice
    train_loss = {r["step"]: r["kl"] for r in log if "kl" in r}
    assert train_loss[8] < train_loss[1]  # the query encoder learned to follow the teacher
    val = [r["val_loss"] for r in log if "val_loss" in r]
    assert result["best_val_loss"] == pytest.approx(min(val))


def test_positions_must_match_the_index(setup, tmp_path):
    from datasets import load_from_disk

    data = load_from_disk(str(setup["data"] / "dataset"))
    bad = data.map(lambda r: {"candidate_positions": [(p + 1) % 8 for p in r["candidate_positions"]]})
    bad.save_to_disk(str(tmp_path / "bad" / "dataset"))
    with pytest.raises(DataError, match="does not match the index"):
        train(_config(setup, tmp_path / "out", data_dir=str(tmp_path / "bad")))


def test_collate_pads_and_builds_queries():
    rows = [{"question": "q?", "y1": "y one", "candidate_positions": [3, 1], "teacher_scores": [1.0, 2.0]},
            {"question": "r?", "y1": "", "candidate_positions": [0], "teacher_scores": [5.0]}]
    batch = collate(rows, "question_y1")
    assert batch.queries == ["y one q?", "r?"]
    assert batch.positions.tolist() == [[3, 1], [0, 0]] and batch.mask.tolist() == [[True, True], [True, False]]
    assert collate(rows, "question").queries == ["q?", "r?"]
    rows[0]["retriever_scores"], rows[1]["retriever_scores"] = [0.5, 0.25], [1.0]
    # teacher_prior="retriever": t + (tau_t / tau) * s0, e.g. 1.0 + 4 * 0.5 = 3.0
    assert collate(rows, "question", prior_weight=4.0).teacher_scores.tolist() == [[3.0, 3.0], [9.0, 0.0]]


def test_config_validation():
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        DistillConfig(batch_size=0)
    with pytest.raises(ValueError, match="learning_rate must be positive"):
        DistillConfig(learning_rate=0)
    with pytest.raises(ValueError, match="quote them"):
        DistillConfig(exclude_answers=[True, False])  # what YAML makes of a bare [yes, no]


def test_entry_script_runs_from_yaml(setup, tmp_path):
    cfg = _config(setup, tmp_path / "cli", max_steps=1)
    path = tmp_path / "distill.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in cfg.__dict__.items()}))
    spec = importlib.util.spec_from_file_location("distill_retriever", REPO / "training" / "distill_retriever.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main([str(path), "--max_steps", "1"])
    assert (tmp_path / "cli" / "query_encoder" / "pooling.json").is_file()
    assert yaml.safe_load((tmp_path / "cli" / "config.yaml").read_text())["max_steps"] == 1


@pytest.mark.parametrize("path", sorted((REPO / "retrieval_adapt" / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_parses(path):
    from adaptive_rag.plumbing.config import parse_config
    from data_builders.question_loader import QuestionsConfig
    from training.distill_set import RetrievalAdaptDataConfig
    from training.evaluate_adapted import EvaluateAdaptedConfig

    types = {"data": (QuestionsConfig, RetrievalAdaptDataConfig), "distill": (DistillConfig,),
             "evaluate": (QuestionsConfig, EvaluateAdaptedConfig)}[path.name.split("_")[0]]
    assert len(parse_config(types, [str(path)])) == len(types)


def test_exclude_answers_drops_questions_the_teacher_cannot_rank(setup, tmp_path):
    from datasets import load_from_disk

    from retrieval_adapt.distill_data import load_distill_data, without_answers

    data = load_from_disk(str(setup["data"] / "dataset"))
    answers = {"q0": ["Yes"], "q1": ["no", "NO."], "q2": ["no", "Paris"], "q3": [], "q4": ["a"], "q5": ["yes"]}
    relabelled = data.map(lambda r: {"answers": answers[r["question_id"]]})
    kept = without_answers(relabelled["train"], ["yes", "no"])
    # q2 keeps a span answer, q3 has none to judge: both stay.
    assert sorted(kept["question_id"]) == sorted(q for q in relabelled["train"]["question_id"]
                                                 if q in {"q2", "q3", "q4"})
    assert len(without_answers(relabelled["train"], [])) == len(relabelled["train"])
    relabelled.save_to_disk(str(tmp_path / "yn" / "dataset"))
    data.map(lambda r: {"answers": ["yes"]}).save_to_disk(str(tmp_path / "all-yes" / "dataset"))
    with pytest.raises(DataError, match="leaves no train question"):
        load_distill_data(tmp_path / "all-yes", setup["index"], exclude_answers=["yes", "no"])
    before = sorted(p.name for p in (tmp_path / "yn").rglob("*"))
    result = train(_config(setup, tmp_path / "out", data_dir=str(tmp_path / "yn"), exclude_answers=["yes", "no"],
                           max_steps=1))
    assert result["steps"] == 1
    assert sorted(p.name for p in (tmp_path / "yn").rglob("*")) == before  # no cache files in the user's data


# ---- interruptions: atomic checkpoints, each step logged once, Ctrl-C, the folder lock ------------------------------


def _log_steps(out: Path) -> tuple[list[int], list[int]]:
    """(steps of training records, steps of validation records) in metrics.jsonl."""
    log = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in log if "kl" in r], [r["step"] for r in log if "val_loss" in r]


def test_incomplete_newest_checkpoint_is_skipped_with_a_warning(setup, tmp_path, caplog):
    import logging
    import shutil

    out = tmp_path / "out"
    train(_config(setup, out, max_steps=2))
    assert sorted(p.name for p in out.glob("checkpoint*")) == ["checkpoint-1", "checkpoint-2"]
    # checkpoint-2 cut short (a damaged copy) and a checkpoint-3 the run was killed while writing
    weights = out / "checkpoint-2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    shutil.copytree(out / "checkpoint-1", out / "checkpoint-3.tmp")
    with caplog.at_level(logging.WARNING):
        result = train(_config(setup, out, max_steps=3))
    assert "checkpoint-2 is incomplete (model.safetensors has 100 bytes" in caplog.text
    assert "checkpoint-3.tmp: an unfinished checkpoint" in caplog.text
    assert result["resumed_from_step"] == 1 and result["steps"] == 3
    assert _log_steps(out) == ([1, 2, 3], [0, 1, 2, 3])  # step 2 redone, logged once
    assert sorted(p.name for p in out.glob("checkpoint*")) == ["checkpoint-2", "checkpoint-3"]
    assert json.loads((out / "trainer_state.json").read_text())["step"] == 3


def test_ctrl_c_saves_the_step_and_the_resumed_run_logs_each_step_once(setup, tmp_path, monkeypatch):
    import signal

    import retrieval_adapt.distill as distill

    out = tmp_path / "out"
    real_log = distill._log

    def ctrl_c_at_step_3(accelerator, metrics, record):
        real_log(accelerator, metrics, record)
        if record["step"] == 3 and "kl" in record:
            signal.raise_signal(signal.SIGINT)

    def found(signum, frame):  # the handler the run finds: any, as a test may start with SIGINT ignored
        raise AssertionError("the run's own handler should have taken this Ctrl-C")

    monkeypatch.setattr(distill, "_log", ctrl_c_at_step_3)
    entry = signal.signal(signal.SIGINT, found)
    try:
        with pytest.raises(KeyboardInterrupt, match="stopped at step 3, saved in .*checkpoint-3: rerun"):
            train(_config(setup, out, max_steps=5, eval_steps=2))
        assert signal.getsignal(signal.SIGINT) is found  # the handler is given back as it was found
    finally:
        signal.signal(signal.SIGINT, entry)
    # eval_steps=2 saves at 2 and 4: checkpoint-3 exists only because Ctrl-C kept the step in flight
    assert sorted(p.name for p in out.glob("checkpoint*")) == ["checkpoint-2", "checkpoint-3"]
    monkeypatch.setattr(distill, "_log", real_log)
    result = train(_config(setup, out, max_steps=5, eval_steps=2))
    assert result["resumed_from_step"] == 3 and result["steps"] == 5
    assert _log_steps(out) == ([1, 2, 3, 4, 5], [0, 2, 4, 5])
    # the summary covers the whole run: the best of every validation, before and after the interruption
    val = [json.loads(line)["val_loss"] for line in (out / "metrics.jsonl").read_text().splitlines()
           if "val_loss" in line]
    assert result["best_val_loss"] == pytest.approx(min(val))
    best = json.loads((out / "query_encoder" / "best.json").read_text())
    assert (best["step"], best["val_loss"]) == (result["best_step"], pytest.approx(result["best_val_loss"]))


def test_kill_after_logging_redoes_the_steps_without_duplicate_lines(setup, tmp_path):
    """A hard kill after step 3 was logged (and a line torn mid-character) but before its checkpoint."""
    out = tmp_path / "out"
    train(_config(setup, out, max_steps=2, eval_steps=2))
    with (out / "metrics.jsonl").open("ab") as f:
        f.write(json.dumps({"step": 3, "kl": 0.5, "lr": 0.01}).encode() + b"\n")
        f.write('{"step": 4, "note": "é'.encode()[:-1])
    train(_config(setup, out, max_steps=4, eval_steps=2))
    assert _log_steps(out) == ([1, 2, 3, 4], [0, 2, 4])


def test_metrics_log_is_a_record_log(tmp_path):
    """metrics.jsonl on the shared RecordLog: an append after a torn last line starts on its own line (it once
    glued onto the torn one), a resume cuts a line torn inside a character and the steps it redoes, and a damaged
    line inside the log is an error naming it instead of a record silently lost."""
    from retrieval_adapt.distill_checkpoints import MetricsLog

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1, "kl": 0.5}\n{"step": 2, "k')
    MetricsLog(path).append({"step": 2, "kl": 0.25})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"step": 1, "kl": 0.5},
                                                                          {"step": 2, "kl": 0.25}]
    with path.open("ab") as f:
        f.write(b'{"step": 2, "val_loss": 1.5}\n{"step": 3, "kl": 0.125}\n' + '{"step": 4, "é'.encode()[:-1])
    MetricsLog(path).keep_until(2)
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"step": 1, "kl": 0.5}, {"step": 2, "kl": 0.25}, {"step": 2, "val_loss": 1.5}]
    path.write_text('{"step": 1}\n{"step": 2, oops}\n{"step": 3}\n')
    with pytest.raises(DataError, match=r"metrics.jsonl, line 2: not a JSON record"):
        MetricsLog(path).keep_until(1)


def test_resume_refuses_other_settings_and_resume_false_starts_over(setup, tmp_path):
    from adaptive_rag.plumbing.record_log import FolderInUseError

    out = tmp_path / "out"
    train(_config(setup, out, max_steps=1))
    with pytest.raises(FolderInUseError, match=r"other settings \(learning_rate: 0.01 -> 0.02\)"):
        train(_config(setup, out, max_steps=2, learning_rate=2e-2))
    result = train(_config(setup, out, max_steps=2, learning_rate=2e-2, resume=False))
    assert result["resumed_from_step"] == 0 and _log_steps(out) == ([1, 2], [0, 1, 2])


def test_locked_output_folder_fails_in_one_line_and_stale_lock_is_taken_over(setup, tmp_path, capsys, caplog):
    import logging
    import os
    import socket
    import subprocess
    import sys

    from adaptive_rag.plumbing.cli import run_cli

    spec = importlib.util.spec_from_file_location("distill_retriever", REPO / "training" / "distill_retriever.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "out"
    out.mkdir()
    lock = out / ".lock"
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))  # a live process
    cfg = _config(setup, out, max_steps=1)
    path = tmp_path / "distill.yaml"
    path.write_text(yaml.safe_dump(dict(cfg.__dict__)))
    assert run_cli(module.main, argv=[str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "is being written: another run" in err
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    with caplog.at_level(logging.WARNING):
        assert run_cli(module.main, argv=[str(path)]) == 0
    assert "taking over a stale lock" in caplog.text and not lock.exists()


@pytest.mark.parametrize("entry", ["ignored", "default", "custom"])
def test_graceful_stop_gives_each_handler_back_as_found(entry):
    """A signal ignored on entry (a background job, nohup) stays ignored inside and after; any other handler is
    replaced inside and given back, the very same object, after."""
    import signal

    from retrieval_adapt.distill_checkpoints import GracefulStop

    handler = {"ignored": signal.SIG_IGN, "default": signal.default_int_handler, "custom": lambda s, f: None}[entry]
    previous = signal.signal(signal.SIGINT, handler)
    try:
        with GracefulStop() as stop:
            inside = signal.getsignal(signal.SIGINT)
            if entry == "ignored":
                assert inside == signal.SIG_IGN
                signal.raise_signal(signal.SIGINT)  # nothing happens
                assert not stop.requested
            else:
                assert inside == stop._handle
                signal.raise_signal(signal.SIGINT)
                assert stop.requested and signal.getsignal(signal.SIGINT) is handler  # a second Ctrl-C is theirs
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)
