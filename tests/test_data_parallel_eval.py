"""Data-parallel evaluation ends like a single-process one: the per-process shards are folded into one
predictions.jsonl, in question order, when the last process has finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiny_llama

from adaptive_rag.plumbing.record_log import RecordLog
from inference.commands.eval_folder import merge_shards

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, ids: list[str], output: str = "x") -> None:
    path.write_text("".join(json.dumps({"id": i, "output": f"{output}-{i}"}) + "\n" for i in ids))


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def test_shards_merge_in_question_order_and_disappear(tmp_path):
    _write(tmp_path / "predictions.rank0.jsonl", ["q0", "q2", "q4"])
    _write(tmp_path / "predictions.rank1.jsonl", ["q1", "q3"])
    assert merge_shards(tmp_path, ["q0", "q1", "q2", "q3", "q4"]) == 2
    assert _ids(tmp_path / "predictions.jsonl") == ["q0", "q1", "q2", "q3", "q4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions.jsonl"]
    assert merge_shards(tmp_path, ["q0"]) == 0  # nothing to merge: the file is left as it is
    assert _ids(tmp_path / "predictions.jsonl") == ["q0", "q1", "q2", "q3", "q4"]


def test_merge_keeps_earlier_records_and_the_first_of_each_id(tmp_path):
    """A resumed data-parallel run: predictions.jsonl from an earlier run, shards from this one (one of them
    repeating an id, as a kill between rename and deletion would leave), and an id outside this question set."""
    _write(tmp_path / "predictions.jsonl", ["old", "q1"], output="first")
    _write(tmp_path / "predictions.rank0.jsonl", ["q0", "q1"], output="second")
    (tmp_path / "predictions.rank1.jsonl").write_text(json.dumps({"id": "q2", "output": "y"}) + "\n{\"id\": \"q3")
    assert merge_shards(tmp_path, ["q0", "q1", "q2", "q3"]) == 2
    lines = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in lines] == ["q0", "q1", "q2", "old"]  # the torn q3 runs again on a resume
    assert lines[1]["output"] == "first-q1"  # read_done keeps the first record of an id: so does the merge
    assert RecordLog(tmp_path / "predictions.jsonl").keys() == {"q0", "q1", "q2", "old"}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    from adaptive_rag.lm.models import load_tokenizer

    out = tmp_path_factory.mktemp("tiny")
    tokenizer = load_tokenizer("smollm2-135m")
    tiny_llama(len(tokenizer)).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _evaluate(launcher: list[str], tiny_dir: Path, out: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    args = ["-m", "inference.commands.evaluate", "--model", str(tiny_dir), "--method", "wo-rag", "--dataset",
            "world-two-hop", "--limit", "6", "--max_new_tokens", "4", "--show_progress", "false",
            "--output_dir", str(out)]
    done = subprocess.run([sys.executable, *launcher, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_two_processes_write_what_one_writes(tiny_dir, tmp_path):
    """torchrun with 2 CPU processes (gloo): the questions split, the shards merge, the records equal one
    process's in the same order."""
    _evaluate(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"], tiny_dir,
              tmp_path / "two")
    _evaluate([], tiny_dir, tmp_path / "one")
    assert sorted(p.name for p in (tmp_path / "two").glob("predictions*")) == ["predictions.jsonl"]

    def outputs(folder: Path) -> list[tuple[str, str]]:
        lines = (folder / "predictions.jsonl").read_text().splitlines()
        return [(r["id"], r["output"]) for r in map(json.loads, lines)]

    assert len(outputs(tmp_path / "two")) == 6 and outputs(tmp_path / "two") == outputs(tmp_path / "one")
    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert metrics["n"] == 6
