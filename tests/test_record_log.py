"""The append-only record log and the output-folder lock every resumable job uses."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys

import pytest

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.record_log import FolderInUseError, FolderLock, RecordLog, check_same_settings


def test_torn_tail_inside_a_multibyte_character_is_cut(tmp_path, caplog):
    log = RecordLog(tmp_path / "p.jsonl")
    log.append([{"id": "a", "text": "Zürich"}, {"id": "b", "text": "東京"}])
    data = log.path.read_bytes()
    log.path.write_bytes(data[:-4])  # inside 京 (three bytes) of the last line
    with caplog.at_level(logging.WARNING):
        assert log.read() == [{"id": "a", "text": "Zürich"}]
    assert "dropping an unfinished last line" in caplog.text
    assert log.path.read_bytes() == data[:data.index(b"\n") + 1]


def test_append_after_a_torn_tail_starts_on_its_own_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b", "te')
    RecordLog(path).append([{"id": "b"}])  # without a read first: the new record must not glue onto the torn one
    assert RecordLog(path).read() == [{"id": "a"}, {"id": "b"}]


def test_first_record_of_a_key_wins_and_bad_lines_are_named(tmp_path):
    log = RecordLog(tmp_path / "p.jsonl")
    log.append([{"id": "a", "v": 1}, {"id": "a", "v": 2}, {"id": 3}])
    assert log.read() == [{"id": "a", "v": 1}, {"id": 3}] and log.keys() == {"a", 3}
    log.path.write_text('{"id": "a"}\n{"nope": 1}\n')
    with pytest.raises(DataError, match=r"p.jsonl, line 2: a record needs the key 'id'"):
        log.read()
    log.path.write_text('{"id": ["a"]}\n')
    with pytest.raises(DataError, match="line 1: key 'id' must be a string or an integer, got list"):
        log.read()


def test_an_unkeyed_log_keeps_every_record_and_drops_what_a_resume_redoes(tmp_path):
    """A time series (a training run's metrics.jsonl: a step logs a training and a validation record) on the same
    log: nothing deduplicated, and ``keep`` rewrites it whole with the records a resumed run will not write again."""
    log = RecordLog(tmp_path / "m.jsonl", key=None)
    log.append([{"step": 1, "kl": 0.5}, {"step": 2, "kl": 0.4}, {"step": 2, "val_loss": 1.0}, {"step": 3, "kl": 0.3}])
    assert len(log.read()) == 4
    log.path.write_bytes(log.path.read_bytes() + '{"step": 4, "note": "é'.encode()[:-1])  # torn inside é
    assert log.keep(lambda rec: rec["step"] <= 2) == 1  # step 3 goes (and the torn tail, which is no record)
    assert log.read() == [{"step": 1, "kl": 0.5}, {"step": 2, "kl": 0.4}, {"step": 2, "val_loss": 1.0}]
    assert log.keep(lambda rec: True) == 0
    log.path.write_text('{"step": 1}\n[1, 2]\n{"step": 2}\n')
    with pytest.raises(DataError, match=r"m.jsonl, line 2: a record must be a JSON object"):
        log.read()


def test_a_record_that_cannot_be_written_leaves_the_batch_unwritten(tmp_path):
    log = RecordLog(tmp_path / "p.jsonl")
    with pytest.raises(TypeError):
        log.append([{"id": "a"}, {"id": "b", "v": object()}])
    assert not log.path.exists() or log.path.read_text() == ""
    log.append([{"id": "c", "text": "bad \udc80 byte"}])  # a lone surrogate: escaped, still valid UTF-8
    assert log.read() == [{"id": "c", "text": "bad \udc80 byte"}]


def test_check_same_settings(tmp_path):
    saved = tmp_path / "config.yaml"
    saved.write_text("theta: 0.8\nlimit: 5\n")
    check_same_settings(saved, {"theta": 0.8, "limit": 9, "new_field": 1}, may_change={"limit"})
    with pytest.raises(FolderInUseError, match=r"theta: 0.8 -> 1.2"):
        check_same_settings(saved, {"theta": 1.2}, what="predictions")
    saved.write_text("theta: [0.8\n")  # torn by a kill
    with pytest.raises(DataError, match="config.yaml: not a readable settings file"):
        check_same_settings(saved, {"theta": 0.8})


def _write_lock(folder, pid, host=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".lock").write_text(json.dumps({"pid": pid, "host": host or socket.gethostname()}))




def test_lock_refuses_a_live_owner_and_another_host(tmp_path, live_pid):
    folder = tmp_path / "out"
    _write_lock(folder, live_pid)
    with pytest.raises(FolderInUseError, match=rf"another run \(PID {live_pid}\) holds it.*delete .*\.lock"):
        FolderLock(folder).acquire()
    _write_lock(folder, 1, host="other-node")  # its PID cannot be checked from here
    with pytest.raises(FolderInUseError, match="a run on host other-node"):
        FolderLock(folder).acquire()
    assert (folder / ".lock").exists()


@pytest.mark.parametrize("owner", ["dead", "zero", "own", "garbage"])
def test_stale_lock_is_taken_over(tmp_path, caplog, owner):
    folder = tmp_path / "out"
    if owner == "garbage":
        folder.mkdir()
        (folder / ".lock").write_text("{not json")
        old = os.stat(folder / ".lock").st_mtime - 60
        os.utime(folder / ".lock", (old, old))  # written a minute ago: no run is still writing it
    else:
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        _write_lock(folder, {"dead": proc.pid, "zero": 0, "own": os.getpid()}[owner])
    with caplog.at_level(logging.WARNING), FolderLock(folder) as lock:
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    assert "taking over a stale lock" in caplog.text and not (folder / ".lock").exists()


def test_a_lock_being_written_is_not_stolen(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / ".lock").write_text("")  # just created by another run that has not written its PID yet
    with pytest.raises(FolderInUseError, match="another run is taking the lock"):
        FolderLock(folder).acquire()


def test_lock_is_reentrant_and_removes_the_folders_it_made_when_left_empty(tmp_path):
    folder = tmp_path / "a" / "b"
    with FolderLock(folder):
        with FolderLock(folder):
            pass
        assert (folder / ".lock").exists()
    assert not (tmp_path / "a").exists()  # nothing was written: no folder a rerun would take for a resume
    with FolderLock(folder):
        (folder / "predictions.jsonl").write_text("{}\n")
    assert sorted(p.name for p in folder.iterdir()) == ["predictions.jsonl"]
