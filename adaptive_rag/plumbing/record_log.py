"""The append-only JSONL record log that every resumable job writes, and the lock on its output folder.

* :class:`RecordLog`: records are appended batch by batch, flushed and fsynced, so a killed run loses at most the
  batch in flight. Reading cuts a torn last line at the byte level (a kill can land inside a multi-byte UTF-8
  character, which a text read would refuse forever) and keeps the first record of each key (a batch redone after
  a crash between write and exit is not counted twice). A bad line anywhere else is a :class:`DataError` naming
  the file and the line. ``key=None`` keeps every record (a time series such as a training run's metrics), and
  :meth:`RecordLog.keep` drops the records a resumed run will write again. A reader of another run's log
  (``read(repair=False)``: a report, a comparison) writes nothing: it leaves the torn last line out and counts it in
  :attr:`RecordLog.torn_bytes`, so the command can say so (the run may still be writing it).
* :func:`check_same_settings`: a folder made with other settings is refused instead of silently mixed into.
* :class:`FolderLock`: one writer per output folder. The lock file holds the owner's PID; a lock left by a dead
  process is taken over with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from adaptive_rag.plumbing.atomic_files import write_text_atomic
from adaptive_rag.plumbing.errors import DataError

logger = logging.getLogger(__name__)


class RecordLog:
    """An append-only JSONL file of records keyed by ``key`` (e.g. a question id; None: not keyed, all kept)."""

    def __init__(self, path: str | Path, *, key: str | None = "id", check: Callable[[dict, str], None] | None = None):
        self.path, self.key, self.check = Path(path), key, check
        self._repaired = False  # append() cuts a torn tail once, so a new record never lands glued to it
        self.torn_bytes = 0  # the torn last line the latest read(repair=False) left out (0: none)

    def repair(self) -> None:
        """Cut everything after the last newline: the unfinished write of an interrupted run."""
        if not self.path.is_file():
            return
        with self.path.open("r+b") as f:
            size = f.seek(0, os.SEEK_END)
            good_end = _end_of_last_line(f, size)
            if good_end < size:
                logger.warning("%s: dropping an unfinished last line (%d bytes)", self.path, size - good_end)
                f.truncate(good_end)
        self._repaired = True

    def read(self, *, repair: bool = True) -> list[dict[str, Any]]:
        """The records in file order, first of each key (every one without a key); the torn tail is repaired
        first, or with ``repair=False`` left out without touching the file (its size in :attr:`torn_bytes`)."""
        self.torn_bytes = 0
        if repair:
            self.repair()
        if not self.path.is_file():
            return []
        records, seen = [], set()
        with self.path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            end = _end_of_last_line(f, size)
            self.torn_bytes = size - end
            for n, raw in enumerate(_lines_up_to(f, end), start=1):
                if not raw.strip():
                    continue
                where = f"{self.path}, line {n}"
                try:
                    rec = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as err:
                    raise DataError(f"not a JSON record ({err}); delete the line or the file to redo it",
                                    source=where) from err
                if not isinstance(rec, dict):
                    raise DataError("a record must be a JSON object", source=where)
                if self.check is not None:
                    self.check(rec, where)
                if self.key is None:
                    records.append(rec)
                    continue
                if self.key not in rec:
                    raise DataError(f"a record needs the key '{self.key}'", source=where)
                if not isinstance(rec[self.key], (str, int)):
                    raise DataError(f"key '{self.key}' must be a string or an integer, got "
                                    f"{type(rec[self.key]).__name__}", source=where)
                if rec[self.key] not in seen:
                    seen.add(rec[self.key])
                    records.append(rec)
        return records

    def keys(self) -> set:
        return {r[self.key] for r in self.read()}

    def keep(self, wanted: Callable[[dict[str, Any]], bool]) -> int:
        """Rewrite the log with only the records ``wanted`` accepts (written beside and renamed over it, so a kill
        leaves the old or the new log); returns how many were dropped."""
        records = self.read()
        kept = [rec for rec in records if wanted(rec)]
        if len(kept) != len(records):
            write_text_atomic(self.path, b"".join(_json_line(rec) for rec in kept).decode("utf-8"))
        return len(records) - len(kept)

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Append records and make them durable before returning. The batch is serialised first, so a record
        that cannot be written fails before any line of its batch reaches the file."""
        records = list(records)
        for rec in records:
            if self.check is not None:
                self.check(rec, str(self.path))
        if not records:
            return
        payload = b"".join(_json_line(rec) for rec in records)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self._repaired:
            self.repair()
        with self.path.open("ab") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())


def _json_line(rec: dict[str, Any]) -> bytes:
    text = json.dumps(rec, ensure_ascii=False)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (text decoded with errors="surrogateescape"): escape it
        return (json.dumps(rec) + "\n").encode("ascii")


def _lines_up_to(f, end: int):
    """The lines (split on "\\n" only, as they were written) of a binary file up to offset ``end``."""
    f.seek(0)
    while f.tell() < end:
        yield f.readline()


def _end_of_last_line(f, size: int, block: int = 1 << 16) -> int:
    """Offset just past the last newline of a binary file (0 when it has none), read backwards in blocks so a
    large log is not loaded whole."""
    pos = size
    while pos > 0:
        start = max(0, pos - block)
        f.seek(start)
        chunk = f.read(pos - start)
        hit = chunk.rfind(b"\n")
        if hit >= 0:
            return start + hit + 1
        pos = start
    return 0


def check_same_settings(saved: str | Path, current: dict[str, Any], may_change: Iterable[str] = (),
                        what: str = "results") -> None:
    """Refuse to continue a folder whose ``saved`` resolved config (YAML) differs from ``current`` in a setting
    outside ``may_change``. Keys absent from either side are not compared (a newer field, an older file)."""
    saved = Path(saved)
    if not saved.is_file():
        return
    try:
        old = yaml.safe_load(saved.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise DataError(f"not a readable settings file ({type(err).__name__}); delete it and rerun with the "
                        "settings these results were made with", source=str(saved)) from err
    if not isinstance(old, dict):
        raise DataError("expected a mapping of setting: value", source=str(saved))
    skip = set(may_change)
    changed = sorted(k for k in current if k not in skip and k in old and old[k] != current[k])
    if changed:
        diff = ", ".join(f"{k}: {old[k]!r} -> {current[k]!r}" for k in changed[:5])
        raise FolderInUseError(f"{saved.parent} holds {what} made with other settings ({diff}); use another output "
                               "folder, or delete this one to start again")


class FolderInUseError(DataError):
    """An output folder that this run may not write: locked by a live run, or made with other settings."""


def _alive(pid: int) -> bool:
    if pid <= 0:  # os.kill(0, ...) would signal our own process group: never a lock owner
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _read_owner(path: Path) -> tuple[int, str] | None:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        return int(info["pid"]), str(info.get("host", ""))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class FolderLock:
    """``with FolderLock(folder):`` one run at a time writes ``folder``. Re-entrant within one process.

    A lock whose owner is gone is taken over: a dead PID on this host, or a PID of this very process (a
    container restarted with the same PID). A lock written on another host is never taken over, since its PID
    cannot be checked from here: the message names the lock file to delete once that run is known to be gone.
    Folders the lock created are removed again on release when the run left them empty (a run that failed
    before writing anything leaves no folder a rerun would take for a resume).
    """

    NAME = ".lock"
    FRESH_S = 10.0  # an unreadable lock file younger than this is another run still writing its PID
    _held: dict[Path, int] = {}

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).resolve()
        self.path = self.folder / self.NAME
        self._created: list[Path] = []

    def _owner(self) -> tuple[int, str] | None:
        return _read_owner(self.path)

    def _in_use(self, owner: tuple[int, str] | None) -> str | None:
        """Why the existing lock file stops us, or None when it is stale."""
        delete = f"if no such run exists, delete {self.path}"
        if owner is None:
            try:
                age = time.time() - self.path.stat().st_mtime
            except FileNotFoundError:
                return None
            return f"another run is taking the lock ({delete})" if age < self.FRESH_S else None
        pid, host = owner
        if host not in ("", socket.gethostname()):
            return f"a run on host {host} (PID {pid}) holds it; {delete}"
        if pid != os.getpid() and _alive(pid):
            return f"another run (PID {pid}) holds it; wait for it or use another output folder ({delete})"
        return None

    def _take_over(self, owner: tuple[int, str] | None) -> None:
        """Move the stale lock aside (atomic: of two runs taking over, one moves it) and check what was moved:
        a fresh lock that another run took meanwhile goes back."""
        aside = self.path.with_name(f"{self.NAME}.stale.{os.getpid()}")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return
        moved = _read_owner(aside)
        if moved != owner and self._in_use(moved) is not None:
            try:
                os.link(aside, self.path)
            except OSError:
                pass
            aside.unlink(missing_ok=True)
            raise FolderInUseError(f"{self.folder} is locked: another run took it first")
        aside.unlink(missing_ok=True)
        logger.warning("%s: taking over a stale lock (%s)", self.folder,
                       f"PID {owner[0]} is gone" if owner else "unreadable lock file")

    def acquire(self) -> None:
        if FolderLock._held.get(self.folder):
            FolderLock._held[self.folder] += 1
            return
        missing = [d for d in (self.folder, *self.folder.parents) if not d.exists()]
        self.folder.mkdir(parents=True, exist_ok=True)
        self._created = missing  # deepest first
        me = json.dumps({"pid": os.getpid(), "host": socket.gethostname()})
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self._owner()
                why = self._in_use(owner)
                if why is not None:
                    self._remove_created()
                    raise FolderInUseError(f"{self.folder} is being written: {why}") from None
                self._take_over(owner)
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(me)
            FolderLock._held[self.folder] = 1
            return
        raise FolderInUseError(f"{self.folder}: could not take the lock {self.path}")

    def release(self) -> None:
        count = FolderLock._held.get(self.folder, 0)
        if count > 1:
            FolderLock._held[self.folder] = count - 1
            return
        FolderLock._held.pop(self.folder, None)
        owner = self._owner()
        if owner is not None and owner[0] == os.getpid():
            self.path.unlink(missing_ok=True)
        self._remove_created()

    def _remove_created(self) -> None:
        for d in self._created:
            try:
                d.rmdir()  # only when empty
            except OSError:
                break
        self._created = []

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
