"""The output folder of an evaluation run: one writer at a time, and the predictions already in it (resume).

Under a multi-process launch every process appends to its own ``predictions.rankN.jsonl``; the main process holds
the folder's lock for all of them and, once every process has finished, folds the shards into ``predictions.jsonl``
(:func:`merge_shards`), so a data-parallel folder ends like a single-process one. One process alone (the ADAPT-LLM
training job's evaluation) passes :class:`SingleProcess` where accelerate's state would go.

Commands that read another run's folder (report, compare_runs, knowing_claims) go through :func:`read_run`: it
writes nothing (the run may still be going), says on stderr how many torn last lines it left out, and gives the
scoring the run's ``config.yaml`` records (:func:`run_scoring`), so every reader scores a run as the run did.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from adaptive_rag.plumbing.atomic_files import fsync_dir, write_text_atomic
from adaptive_rag.plumbing.dragin_eval import dataset_kind
from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.record_log import FolderInUseError, FolderLock, RecordLog
from adaptive_rag.plumbing.records import PredictionRecord
from inference.adapt_gate.gate_eval import GATE_METHODS


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


# --- reading another run's folder -------------------------------------------------------------------------------

@dataclass
class RunRead:
    """What a reader found in a run folder: its settings, its records (first of each id over every process's file)
    and the torn last lines it left out (file name -> bytes), which a run killed mid-write (or still writing)
    leaves."""

    folder: Path
    config: dict[str, Any]
    records: list[PredictionRecord]
    torn: dict[str, int] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return (self.folder / "metrics.json").is_file()


def read_config(folder: Path) -> dict[str, Any]:
    """A run's ``config.yaml`` (every evaluation writes it before its first question). A folder without one (made
    by hand, or by a version that wrote only ``metrics.json``) gives the scoring its ``metrics.json`` records, with a
    note; with neither, the project's default scoring, with a note."""
    path = folder / "config.yaml"
    if not path.is_file():
        metrics = _metrics(folder)
        recorded = {k: metrics[k] for k in ("answer_extraction", "answer_normalisation", "method") if k in metrics}
        where = "as its metrics.json records" if recorded else "with the project's default answer extraction"
        print(f"note: {folder}: no config.yaml; its answers are scored {where}", file=sys.stderr)
        return recorded
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise DataError(f"not valid YAML ({type(err).__name__})", source=str(path)) from None
    if not isinstance(config, dict):
        raise DataError("expected a mapping of setting: value", source=str(path))
    return config


def _metrics(folder: Path) -> dict[str, Any]:
    path = folder / "metrics.json"
    if not path.is_file():
        return {}
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise DataError(f"not valid JSON ({err})", source=str(path)) from None
    return metrics if isinstance(metrics, dict) else {}


def read_predictions(folder: Path, *, say: bool = True) -> tuple[list[PredictionRecord], dict[str, int]]:
    """Every process's records (first of each id), without touching the files; ``say``: a torn last line left
    out is reported on stderr."""
    records: dict[str, PredictionRecord] = {}
    torn: dict[str, int] = {}
    for path in sorted(folder.glob("predictions*.jsonl")):
        log = RecordLog(path, key="id")
        for n, rec in enumerate(log.read(repair=False), 1):
            if rec["id"] not in records:
                records[rec["id"]] = PredictionRecord.from_dict(rec, source=f"{path}, record {n}")
        if log.torn_bytes:
            torn[path.name] = log.torn_bytes
    if torn and say:
        print(f"note: {torn_note(folder, torn, len(records))}", file=sys.stderr)
    return list(records.values()), torn


def torn_note(folder: Path, torn: dict[str, int], kept: int) -> str:
    files = ", ".join(f"{name} ({n} bytes)" for name, n in torn.items())
    lines = f"{len(torn)} torn last line{'s' if len(torn) > 1 else ''}"
    return (f"{folder}: {lines} left out ({files}): a run killed mid-write, or one still writing; scored on its "
            f"{kept} whole records (rerunning the run redoes the torn question{'s' if len(torn) > 1 else ''})")


def read_run(folder: Path) -> RunRead:
    """A run folder as a reader sees it: :func:`read_config`, :func:`read_predictions`, and a note on stderr
    when it has no ``metrics.json`` (an unfinished run, scored from its records as its config.yaml says)."""
    config = read_config(folder)
    records, torn = read_predictions(folder)
    run = RunRead(folder, config, records, torn)
    if not run.finished:
        print(f"note: {folder}: no metrics.json (an unfinished run): scored from its {len(records)} records as its "
              "config.yaml says, marked (unfinished); claims on finished runs leave it out", file=sys.stderr)
    return run


def run_scoring(config: dict[str, Any]) -> dict[str, Any]:
    """How a run's answers are scored, from its ``config.yaml``: the normalisation, and the answer extraction
    (DRAGIN's eval.py under the reference profile for an engine method, with its dataset's rule; the project's
    for Iter-RetGen, the gate methods and folders written before the setting existed). Keyword arguments of
    :func:`adaptive_rag.plumbing.scoring.score_record`."""
    mode: dict[str, Any] = {"normalisation": config.get("answer_normalisation", "official")}
    if config.get("answer_extraction") != "dragin" or config.get("method") in ("iter-retgen", *GATE_METHODS):
        return {**mode, "extraction": "project"}
    return {**mode, "extraction": "dragin", "dataset_kind": dataset_kind(str(config.get("dataset", "")))}
