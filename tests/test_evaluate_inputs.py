"""The evaluate command's user mistakes and its output folder's life: every bad input ends in exit 2 with one line
before any model loads and before the output folder exists; one run at a time writes a folder; a killed or
interrupted run resumes."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import adaptive_rag.lm.models
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.records import PredictionRecord, QAExample
from data_builders.readers import write_qa_jsonl
from inference.commands import evaluate as ev
from inference.commands.eval_data import question_at

ROOT = Path(__file__).resolve().parents[1]


def no_model(*args, **kwargs):
    raise AssertionError("a model was loaded although the input was bad")


def qa_file(path: Path, ids: list[str]) -> Path:
    write_qa_jsonl([QAExample(i, f"Question {i}?", [f"ans {i}"]) for i in ids], path)
    return path


def index_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "index"
    folder.mkdir(exist_ok=True)
    (folder / "meta.json").write_text('{"kind": "bm25"}')
    return folder


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """case -> (argv without --output_dir, what the one line must say)."""
    good = qa_file(tmp / "good.jsonl", ["q0", "q1", "q2"])
    index = index_folder(tmp)
    (tmp / "empty.jsonl").write_text("")
    (tmp / "empty.json").write_text("[]")
    (tmp / "header_only.tsv").write_text("id\tquestion\tpossible_answers\ts_pop\n")
    qa_file(tmp / "dups.jsonl", ["q0", "q1", "q0"])
    (tmp / "latin1.jsonl").write_bytes('{"id": "q", "question": "Zürich?", "answers": ["x"]}\n'.encode("latin-1"))
    (tmp / "no_model").mkdir()
    (tmp / "not_an_index").mkdir()
    adapter = tmp / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp / "gone")}))
    dense = tmp / "dense"
    dense.mkdir()
    (dense / "meta.json").write_text(json.dumps({"kind": "dense", "encoder": str(tmp / "encoders" / "gone")}))
    (tmp / "bad.yaml").write_text("method: dragin\n  theta: 0.5\n")
    (tmp / "a_file").write_text("x")
    on = ["--dataset", str(good), "--index", str(index)]
    return {
        "empty JSONL": (["--dataset", str(tmp / "empty.jsonl"), "--index", str(index)], "empty.jsonl: empty file"),
        "empty JSON list": (["--dataset", str(tmp / "empty.json"), "--dataset_format", "qa_json", "--index",
                             str(index)], "empty.json: no questions"),
        "TSV with only its header": (["--dataset", str(tmp / "header_only.tsv"), "--dataset_format", "popqa_tsv",
                                      "--index", str(index)], "header_only.tsv: no questions"),
        "start past the end": ([*on, "--start", "3"], "start 3 is past the end of"),
        "an old embedded name": (["--dataset", "world-common"],
                                 "question set 'world-common' was renamed: use 'world-common-knowledge'"),
        "a split of a file": ([*on, "--split", "train"], "split 'train' is for a hub dataset"),
        "negative start": ([*on, "--start", "-1"], "start must be >= 0"),
        "duplicate ids": (["--dataset", str(tmp / "dups.jsonl"), "--index", str(index)],
                          "question id 'q0' is used twice (questions 0 and 2)"),
        "not UTF-8": (["--dataset", str(tmp / "latin1.jsonl"), "--index", str(index)],
                      "latin1.jsonl, line 1: not UTF-8"),
        "file dataset without --index": (["--dataset", str(good)], "needs an index: pass --index"),
        "missing index folder": (["--dataset", str(good), "--index", str(tmp / "nope")], "no such folder"),
        "folder that is no index": (["--dataset", str(good), "--index", str(tmp / "not_an_index")],
                                    "not an index folder (no meta.json)"),
        "dense index whose encoder is gone": (["--dataset", str(good), "--index", str(dense)],
                                              "the encoder of --index"),
        "query encoder on a BM25 index": ([*on, "--query_encoder", "minilm"], "dense indexes only"),
        "missing model path": ([*on, "--model", str(tmp / "models" / "mine")], "no such model folder"),
        "folder without a model": ([*on, "--model", str(tmp / "no_model")], "holds no model"),
        "adapter with a missing base": ([*on, "--model", str(adapter)], "(its base model)"),
        "hub id not cached offline": ([*on, "--model", "no-such-org/no-such-model"], "not in the Hugging Face cache"),
        "device this machine lacks": ([*on, "--device", "cuda:99"], "--device cuda:99"),
        "unknown dtype": ([*on, "--dtype", "float8"], "dtype must be one of"),
        "unknown flag": ([*on, "--thetta", "0.5"], "--thetta"),
        "bad choice": ([*on, "--method", "self-rag"], "invalid choice: 'self-rag'"),
        "YAML with a bad indent": ([str(tmp / "bad.yaml"), *on], "bad.yaml, line 2, column 8: not valid YAML"),
        "output folder is a file": ([*on, "--output_dir", str(tmp / "a_file")], "is a file, not a folder"),
    }


CASES = ["empty JSONL", "empty JSON list", "TSV with only its header", "start past the end", "an old embedded name",
         "a split of a file", "negative start",
         "duplicate ids", "not UTF-8", "file dataset without --index", "missing index folder",
         "folder that is no index", "dense index whose encoder is gone", "query encoder on a BM25 index",
         "missing model path", "folder without a model", "adapter with a missing base", "hub id not cached offline",
         "device this machine lacks", "unknown dtype", "unknown flag", "bad choice", "YAML with a bad indent",
         "output folder is a file"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_before_anything_loads_or_is_written(case, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(adaptive_rag.lm.models, "load_causal_lm", no_model)
    cases = _bad_inputs(tmp_path)
    assert sorted(cases) == sorted(CASES)
    argv, message = cases[case]
    out = tmp_path / "out"
    if "--output_dir" not in argv:
        argv = [*argv, "--output_dir", str(out)]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert run_cli(ev.main, argv=argv) == 2
    err = one_error_line(capsys)
    assert err.startswith("error: ") and message in err, err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written anywhere


def fake_runner(calls: list[str], interrupt_on_call: int | None = None):
    """Answers every question; Ctrl-C arrives during call number ``interrupt_on_call``."""
    count = [0]

    def run(examples):
        count[0] += 1
        if count[0] == interrupt_on_call:
            raise KeyboardInterrupt
        calls.extend(e.id for e in examples)
        return [PredictionRecord(e.id, e.question, e.answers, f"So the answer is Zürich {e.id}.", [],
                                 llm_forward_passes=1, generated_tokens=1, batch_mean_seconds=0.1) for e in examples]
    return run


def argv_for(tmp_path: Path, n: int = 5) -> list[str]:
    data = qa_file(tmp_path / "qa.jsonl", [f"q{i}" for i in range(n)])
    return ["--method", "sr-rag", "--dataset", str(data), "--index", str(index_folder(tmp_path)), "--output_dir",
            str(tmp_path / "out"), "--chunk_size", "2", "--show_progress", "false"]


def predicted_ids(out: Path) -> list[str]:
    return [json.loads(line)["id"] for line in (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]


def test_tail_torn_inside_a_multibyte_character_resumes(tmp_path, monkeypatch, capsys):
    calls: list[str] = []
    monkeypatch.setattr(ev, "make_runner", lambda *a: fake_runner(calls))
    argv = argv_for(tmp_path)
    assert run_cli(ev.main, argv=[*argv, "--limit", "3"]) == 0
    pred = tmp_path / "out" / "predictions.jsonl"
    data = pred.read_bytes()
    cut = data.rindex("ü".encode()) + 1  # a kill between the two bytes of ü in the last record (q2)
    pred.write_bytes(data[:cut])
    assert run_cli(ev.main, argv=argv) == 0
    assert calls == ["q0", "q1", "q2", "q2", "q3", "q4"]  # q2 again, nothing else twice
    assert predicted_ids(tmp_path / "out") == ["q0", "q1", "q2", "q3", "q4"]




def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_run_into_a_locked_folder_fails_in_one_line(tmp_path, monkeypatch, capsys, live_pid):
    calls: list[str] = []
    monkeypatch.setattr(ev, "make_runner", lambda *a: fake_runner(calls))
    argv = argv_for(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    lock = out / ".lock"
    lock.write_text(json.dumps({"pid": live_pid, "host": socket.gethostname()}))
    assert run_cli(ev.main, argv=argv) == 2
    err = one_error_line(capsys)
    assert f"PID {live_pid}" in err and str(lock) in err
    assert calls == [] and sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing read, run or written
    # a lock written on another host cannot be checked from here: refused too, naming the host
    lock.write_text(json.dumps({"pid": live_pid, "host": "another-host"}))
    assert run_cli(ev.main, argv=argv) == 2
    assert "host another-host" in one_error_line(capsys) and calls == []


def test_a_stale_lock_is_taken_over(tmp_path, monkeypatch, caplog):
    calls: list[str] = []
    monkeypatch.setattr(ev, "make_runner", lambda *a: fake_runner(calls))
    argv = argv_for(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").write_text(json.dumps({"pid": dead_pid(), "host": socket.gethostname()}))
    with caplog.at_level(logging.WARNING):
        assert run_cli(ev.main, argv=argv) == 0
    assert "taking over a stale lock" in caplog.text
    assert calls == [f"q{i}" for i in range(5)] and not (out / ".lock").exists()


def test_ctrl_c_says_what_was_saved_and_the_rerun_resumes(tmp_path, monkeypatch, capsys):
    calls: list[str] = []
    monkeypatch.setattr(ev, "make_runner", lambda *a: fake_runner(calls, interrupt_on_call=2))
    argv = argv_for(tmp_path)
    try:
        code = run_cli(ev.main, argv=argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped run_cli as a traceback")
    assert code == 130
    err = one_error_line(capsys)
    out = tmp_path / "out"
    assert err == (f"interrupted: 2 of 5 questions are saved in {out / 'predictions.jsonl'}; rerun the same command "
                   "to resume (saved questions are not run again)")
    assert predicted_ids(out) == ["q0", "q1"] and not (out / ".lock").exists()
    monkeypatch.setattr(ev, "make_runner", lambda *a: fake_runner(calls))
    assert run_cli(ev.main, argv=argv) == 0
    assert calls == ["q0", "q1", "q2", "q3", "q4"] and predicted_ids(out) == ["q0", "q1", "q2", "q3", "q4"]


def test_a_model_that_fails_to_load_leaves_no_folder(tmp_path, monkeypatch, capsys):
    """Past the checks, a load that still fails (a hub id, a corrupt checkpoint) takes the folder it made away."""
    def fail(*args, **kwargs):
        raise adaptive_rag.lm.models.ModelNotFoundError("cannot load model 'x'")

    monkeypatch.setattr(adaptive_rag.lm.models, "load_causal_lm", fail)
    argv = argv_for(tmp_path)
    assert run_cli(ev.main, argv=argv) == 2
    assert "cannot load model" in one_error_line(capsys) and not (tmp_path / "out").exists()


def test_question_at_names_the_range():
    assert question_at("world-two-hop", 0).id
    with pytest.raises(ValueError, match=r"--question_index 10000 is out of range: world-two-hop has \d+ questions"):
        question_at("world-two-hop", 10_000)
    with pytest.raises(ValueError, match="out of range"):
        question_at("world-two-hop", -1)


@pytest.mark.slow
def test_data_parallel_processes_stop_together_on_a_locked_folder(tmp_path, live_pid):
    """Under `accelerate launch` the main process takes the lock; the others end with its reason, not a hang."""
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").write_text(json.dumps({"pid": live_pid, "host": socket.gethostname()}))
    # torchrun: what `accelerate launch` runs for several processes (accelerate has no multi-process CPU launcher)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "inference.commands.evaluate",
           "--method", "wo-rag", "--dataset", "world-two-hop", "--limit", "2", "--output_dir", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert proc.returncode != 0
    assert proc.stderr.count(f"PID {live_pid}") == 2, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


def test_trace_question_index_out_of_range_is_one_line(capsys, tmp_path):
    from adaptive_rag.plumbing.cli import run_cli
    from inference.commands.trace import main as trace_main

    out = tmp_path / "t.html"
    argv = ["--dataset", "world-two-hop", "--question_index", "100000", "--out", str(out)]
    assert run_cli(trace_main, argv=argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--question_index 100000 is out of range" in err[0]
    assert not out.exists()
