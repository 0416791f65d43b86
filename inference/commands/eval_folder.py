"""The output folder of an evaluation run: one writer at a time, and the predictions already in it (resume).

Under a multi-process launch every process appends to its own ``predictions.rankN.jsonl``; the main process holds
the folder's lock for all of them and, once every process has finished, folds the shards into ``predictions.jsonl``
(:func:`merge_shards`), so a data-parallel folder ends like a single-process one. One process alone (the ADAPT-LLM
training job's evaluation) passes :class:`SingleProcess` where accelerate's state would go.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from adaptive_rag.plumbing.atomic_files import fsync_dir, write_text_atomic
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.record_log import FolderInUseError, FolderLock, RecordLog
from adaptive_rag.plumbing.records import PredictionRecord


class SingleProcess:
    """The part of accelerate's ``PartialState`` an evaluation reads, for one process running alone."""

    is_main_process = True
    num_processes = 1
    process_index = 0

    def wait_for_everyone(self) -> None:
        pass


def read_done(out: Path) -> dict[str, PredictionRecord]:
    """Records already written by any process (resume), keyed by question id, first record of an id kept. A torn
    last line (a killed run, even one cut inside a multi-byte character) is cut off; that question runs again."""
    done: dict[str, PredictionRecord] = {}
    for path in sorted(out.glob("predictions*.jsonl")):
        for n, rec in enumerate(RecordLog(path, key="id").read(), 1):
            if rec["id"] not in done:
                done[rec["id"]] = PredictionRecord.from_dict(rec, source=f"{path}, record {n}")
    return done


@contextmanager
def locked_output(out: Path, state) -> Iterator[None]:
    """The main process holds the output folder's lock for the whole run; the others start once it holds it, or
    fail with its reason (each process of `accelerate launch` ends in the same one line)."""
    lock = FolderLock(out) if state.is_main_process else None
    error: Exception | None = None
    if lock is not None:
        try:
            lock.acquire()
        except FolderInUseError as err:
            error = err
        except OSError as err:  # e.g. no permission to create it
            error = ConfigError(f"cannot create --output_dir {out}: {err.strerror or err}")
    if state.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        reason = broadcast_object_list([None if error is None else str(error)])[0]
        error = error or (FolderInUseError(reason) if reason else None)
    if error is not None:
        raise error
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def read_done_everywhere(out: Path, state) -> dict[str, PredictionRecord]:
    """:func:`read_done` in every process. The main process reads first (cutting torn tails); no process appends
    before all have read, so nobody cuts a line another process is writing."""
    done = read_done(out) if state.is_main_process else {}
    state.wait_for_everyone()
    if not state.is_main_process:
        done = read_done(out)
    state.wait_for_everyone()
    return done


def merge_shards(out: Path, order: list[str]) -> int:
    """Fold every ``predictions.rankN.jsonl`` (and the ``predictions.jsonl`` already there) into
    ``predictions.jsonl``, records in question-set ``order`` (ids outside it after, in file order; the first record
    of an id kept, as :func:`read_done` keeps it), then delete the shards. Returns how many shards were merged.

    The merged file replaces the old one whole before any shard is deleted, so a kill at any point loses nothing:
    a resumed run reads both and keeps one record per id."""
    shards = sorted(out.glob("predictions.rank*.jsonl"))
    if not shards:
        return 0
    merged: dict[str, dict] = {}
    for path in [out / "predictions.jsonl", *shards]:
        for rec in RecordLog(path, key="id").read():
            merged.setdefault(rec["id"], rec)
    position = {qid: i for i, qid in enumerate(order)}
    records = sorted(merged.values(), key=lambda rec: position.get(rec["id"], len(position)))  # stable sort
    write_text_atomic(out / "predictions.jsonl", "".join(_line(rec) for rec in records))
    for path in shards:
        os.remove(path)
    fsync_dir(out)
    return len(shards)


def _line(rec: dict) -> str:
    text = json.dumps(rec, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, as RecordLog writes it: escaped
        text = json.dumps(rec)
    return text + "\n"
