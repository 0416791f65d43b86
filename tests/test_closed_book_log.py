"""Algorithm 1's closed-book answer log on the shared RecordLog: a line torn inside a multi-byte character is
repaired and the run continues; the log's folder is locked while answering; malformed records are refused."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys

import pytest

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.record_log import FolderInUseError
from adaptive_rag.plumbing.records import QAExample
from data_builders.adapt_closed_book import answer_closed_book, read_answers

WHO = {"model": "m", "prompt_variant": "paper", "max_new_tokens": 4}


def _examples(n: int) -> list[QAExample]:
    return [QAExample(id=f"q{i}", question=f"Où est né l'auteur {i} ? 北京?", answers=["x"]) for i in range(n)]


class Recorder:
    def __init__(self):
        self.asked: list[str] = []

    def __call__(self, batch):
        self.asked += [ex.id for ex in batch]
        return [f"réponse {ex.id} 北" for ex in batch]


def _record(qid: str, answer: str) -> bytes:
    return (json.dumps({"id": qid, "answer": answer, "labeller": WHO}, ensure_ascii=False) + "\n").encode()


@pytest.mark.parametrize("char", ["é", "北"])
def test_tail_torn_inside_a_multibyte_character_is_repaired_and_the_run_continues(tmp_path, char, caplog):
    path = tmp_path / "closed_book.jsonl"
    torn = _record("q1", f"Zuri{char}h")
    cut = torn.index(char.encode()) + 1  # inside the character: the file is no longer valid UTF-8
    path.write_bytes(_record("q0", "Genève") + torn[:cut])
    with caplog.at_level(logging.WARNING):
        assert read_answers(path, WHO) == {"q0": "Genève"}
    assert "unfinished last line" in caplog.text
    assert path.read_bytes() == _record("q0", "Genève")  # cut back to the last whole record
    asked = Recorder()
    answers = answer_closed_book(_examples(3), asked, path, WHO, batch_size=2, show_progress=False)
    assert asked.asked == ["q1", "q2"]  # only the questions not in the log
    assert answers == {"q0": "Genève", "q1": "réponse q1 北", "q2": "réponse q2 北"}
    assert read_answers(path, WHO) == answers
    assert [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()] == ["q0", "q1", "q2"]


def test_malformed_record_and_other_labeller_are_refused(tmp_path):
    path = tmp_path / "closed_book.jsonl"
    path.write_text(json.dumps({"id": "q0", "labeller": WHO}) + "\n" + _record("q1", "a").decode())
    with pytest.raises(DataError, match=r"line 1: malformed closed-book record"):
        read_answers(path, WHO)
    path.write_bytes(_record("q0", "a"))
    with pytest.raises(DataError, match=r"line 1: written by .* but this run labels with"):
        read_answers(path, {**WHO, "model": "other"})


def _lock(folder, pid: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_locked_log_folder_is_refused_and_a_stale_lock_taken_over(tmp_path, caplog):
    path = tmp_path / "data" / "closed_book.jsonl"
    _lock(path.parent, os.getppid())  # a live process holds the folder
    asked = Recorder()
    with pytest.raises(FolderInUseError, match=r"is being written: another run \(PID \d+\) holds it") as err:
        answer_closed_book(_examples(2), asked, path, WHO, batch_size=2, show_progress=False)
    assert "\n" not in str(err.value) and asked.asked == [] and not path.exists()
    _lock(path.parent, _dead_pid())
    with caplog.at_level(logging.WARNING):
        answers = answer_closed_book(_examples(2), asked, path, WHO, batch_size=2, show_progress=False)
    assert "taking over a stale lock" in caplog.text and len(answers) == 2
    assert not (path.parent / ".lock").exists()  # released when done
