"""An index folder's shared parts: the passages it serves and a small ``meta.json`` saying what built it.

Index folders are written whole or not at all (:func:`index_writer`): the files go to a staging folder beside the
target, ``meta.json`` gets a manifest (every file's size), and the staging folder is renamed into place; an
existing index is replaced only then. Loading checks the manifest first, so a damaged folder (a file deleted or
cut short) is one line naming the folder and the command that rebuilds it, not a faiss or numpy traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_rag.plumbing.atomic_files import atomic_folder, old_path, recover
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.record_log import FolderLock
from adaptive_rag.plumbing.records import Passage

META = "meta.json"
PASSAGES = "passages.jsonl"
OFFSETS = "passages.offsets.npy"  # (N + 1,) int64: passage i is bytes offsets[i]:offsets[i+1] of passages.jsonl
CONFIG = "config.yaml"
# Everything an index folder may hold: an existing folder with anything else is not replaced.
INDEX_ENTRIES = frozenset({META, PASSAGES, OFFSETS, CONFIG, "index.faiss", "embeddings.npy", "bm25",
                           FolderLock.NAME})


class IndexFolderError(DataError):
    """An index folder that is damaged or was never finished."""


def rebuild_command(index_dir: str | Path) -> str:
    """The command that rebuilds this folder: from its ``config.yaml`` where ``build_index`` wrote one, else from
    ``meta.json`` with the corpus left for the user to fill in."""
    import yaml

    folder = Path(index_dir)
    settings: dict[str, Any] = {"corpus": "CORPUS"}
    for name, parse in ((META, json.loads), (CONFIG, yaml.safe_load)):
        try:
            found = parse((folder / name).read_text())
        except (OSError, ValueError, yaml.YAMLError):  # a damaged file: build the command from what is left
            continue
        if isinstance(found, dict):
            settings.update(found)
    args = [("corpus", settings["corpus"]), ("corpus_format", settings.get("corpus_format")),
            ("kind", settings.get("kind"))]
    if settings.get("kind") == "dense":
        args += [(name, settings.get(name)) for name in ("encoder", "faiss", "max_length")]
    scoring = settings.get("bm25_scoring") or settings.get("scoring")
    if settings.get("kind") == "bm25" and scoring not in (None, "bm25s"):
        args.append(("bm25_scoring", scoring))  # an elasticsearch index is rebuilt as one
    flags = [f"--{name} {shlex.quote(str(value))}" for name, value in args if value is not None]
    return " ".join(["python -m retrieval_adapt.build_index", *flags, "--output_dir", shlex.quote(str(index_dir))])


def damaged(index_dir: str | Path, problem: str) -> IndexFolderError:
    return IndexFolderError(f"{problem}; rebuild the index: {rebuild_command(index_dir)}", source=str(index_dir))


def _manifest(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in (META, FolderLock.NAME)}


def check_replaceable(out: Path) -> None:
    """An existing output folder is replaced only when it holds nothing but an index."""
    extra = sorted(p.name for p in out.iterdir() if p.name not in INDEX_ENTRIES) if out.is_dir() else []
    if extra:
        raise DataError(f"exists and holds more than an index ({', '.join(extra[:5])}); refusing to replace it: "
                        "choose another output folder", source=str(out))


@contextmanager
def index_writer(out_dir: str | Path) -> Iterator[Path]:
    """``with index_writer(out) as tmp:`` write the index files (``meta.json`` among them) into ``tmp``; when the
    block ends, the manifest goes into ``meta.json`` and ``tmp`` replaces ``out``. ``out`` is locked meanwhile;
    on an error it is left as it was (a first build leaves nothing)."""
    out = Path(out_dir)
    recover(out)
    with FolderLock(out):  # a first build that fails leaves no folder: the lock removes the one it made
        check_replaceable(out)
        with atomic_folder(out) as tmp:
            yield tmp
            meta = json.loads((tmp / META).read_text())
            meta["files"] = _manifest(tmp)
            (tmp / META).write_text(json.dumps(meta, indent=2))
            # The lock file travels with the folder, so this run still holds the lock after the swap.
            lock = out / FolderLock.NAME
            if lock.is_file():
                (tmp / FolderLock.NAME).write_bytes(lock.read_bytes())


def passage_line(p: Passage) -> bytes:
    """A passage as one line of ``passages.jsonl``; the content hash is taken over exactly these bytes."""
    return (json.dumps(p.to_dict(), ensure_ascii=False) + "\n").encode("utf-8")


class StoreWriter:
    """Appends passages to ``passages.jsonl`` and records each line's end, so the store is read by offset later.
    ``sha256`` hashes the lines in order: the content hash ``check_index`` compares against a corpus."""

    def __init__(self, folder: Path):
        self.file = (folder / PASSAGES).open("wb")
        self.ends: list[np.ndarray] = []
        self._pending: list[int] = []
        self.pos = 0
        self.hash = hashlib.sha256()

    def add_lines(self, data: bytes, line_ends: np.ndarray) -> None:
        """Whole lines at once (a finished chunk): ``line_ends`` are their end offsets relative to ``data``."""
        self.file.write(data)
        self.hash.update(data)
        self._flush_pending()
        self.ends.append(np.asarray(line_ends, dtype=np.int64) + self.pos)
        self.pos += len(data)

    def add(self, passage: Passage) -> None:
        line = passage_line(passage)
        self.file.write(line)
        self.hash.update(line)
        self.pos += len(line)
        self._pending.append(self.pos)

    def _flush_pending(self) -> None:
        if self._pending:
            self.ends.append(np.asarray(self._pending, dtype=np.int64))
            self._pending = []

    def close(self) -> tuple[int, str]:
        """Write the offsets; returns (passage count, sha256 of passages.jsonl)."""
        self._flush_pending()
        self.file.close()
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), *self.ends])
        np.save(Path(self.file.name).with_name(OFFSETS), offsets)
        return len(offsets) - 1, self.hash.hexdigest()


def save_store(out_dir: str | Path, passages: Iterable[Passage], meta: dict[str, Any]) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    writer = StoreWriter(out)
    for p in passages:
        writer.add(p)
    n, digest = writer.close()
    meta = {**meta, "num_passages": n, "passages_sha256": digest, "check_sample": check_sample(out, n)}
    (out / META).write_text(json.dumps(meta, indent=2))


def check_sample(folder: Path, n: int, size: int = 32) -> list[list[Any]]:
    """(position, id) of passages spread over a written store, which ``check_index`` looks up by their own text."""
    store = load_passages(folder)
    positions = sorted({int(i) for i in np.linspace(0, n - 1, num=min(size, n))}) if n else []
    return [[i, store[i].id] for i in positions]


RUN_FILES = ("predictions.jsonl", "metrics.json")  # what an evaluation writes into its run folder


def run_folder_problem(folder: str | Path, what: str = "an index folder") -> str | None:
    """What to tell a user who gave an evaluation's run folder where ``what`` goes (it holds predictions.jsonl
    or metrics.json): the index that run read, as its config.yaml records it. None for any other folder."""
    folder = Path(folder)
    found = [name for name in RUN_FILES if (folder / name).is_file()]
    if not found or (folder / META).is_file():
        return None
    try:
        import yaml

        config = yaml.safe_load((folder / CONFIG).read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 (a missing or unreadable config.yaml only loses the hint)
        config = None
    used = config.get("index", "") if isinstance(config, dict) else ""
    hint = (f"; that run read the index {used}" if used else
            "; that run read the embedded world's BM25 (no index folder)" if isinstance(config, dict) and "index" in
            config else "")
    return f"{folder} is a run folder ({', '.join(found)}), not {what}{hint}"


def load_meta(index_dir: str | Path) -> dict[str, Any]:
    """``meta.json``, after checking that every file its manifest lists is there with its size."""
    folder = Path(index_dir)
    path = folder / META
    if not path.is_file():
        if not folder.exists() and old_path(folder).is_dir():
            raise IndexFolderError(f"does not exist, but {old_path(folder).name} holds the index an interrupted "
                                   "rebuild moved aside: rename it back, or rebuild", source=str(folder))
        if (problem := run_folder_problem(folder)) is not None:
            raise DataError(problem)
        if folder.is_dir() and any(p.name in INDEX_ENTRIES - {FolderLock.NAME} for p in folder.iterdir()):
            raise damaged(folder, f"is an unfinished index folder (no {META})")
        raise FileNotFoundError(f"{index_dir} is not an index folder (no {META}); build one with "
                                "`python -m retrieval_adapt.build_index --help`")
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise damaged(folder, f"{META} is unreadable ({err})") from err
    if not isinstance(meta, dict):
        raise damaged(folder, f"{META} is not a JSON object")
    for name, size in (meta.get("files") or {}).items():
        file = folder / name
        if not file.is_file():
            raise damaged(folder, f"{name} is missing")
        if file.stat().st_size != size:
            raise damaged(folder, f"{name} has {file.stat().st_size} bytes, {size} were written (a damaged copy?)")
    return meta


class PassageStore(Sequence[Passage]):
    """The passages of an index folder, read from disk one at a time: only the offsets are memory-mapped, so
    holding a 21M-passage store costs nothing until a search returns passages (each one read is one ``pread``)."""

    def __init__(self, folder: Path, offsets: np.ndarray):
        self.path = folder / PASSAGES
        self.offsets = offsets
        self._fd = os.open(self.path, os.O_RDONLY)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"passage {i} of {n}")
        i %= n
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        try:
            d = json.loads(os.pread(self._fd, end - start, start))
            # written by this project (checked when read in): no field checks per search hit
            return Passage(id=d["id"], title=d["title"], text=d["text"])
        except (ValueError, KeyError, TypeError) as err:  # a line changed after the build
            raise damaged(self.path.parent, f"{PASSAGES} is damaged at passage {i} ({err})") from err

    def __iter__(self) -> Iterator[Passage]:
        with self.path.open(encoding="utf-8") as f:
            for n, line in enumerate(f):
                yield Passage.from_dict(json.loads(line), source=str(self.path), record=n)

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)

    def __getstate__(self):  # pickled (a worker process): reopen the file there
        return {"path": self.path, "offsets": np.asarray(self.offsets)}

    def __setstate__(self, state):
        self.__init__(state["path"].parent, state["offsets"])


def _scan_offsets(path: Path) -> np.ndarray:
    """Line offsets of a ``passages.jsonl`` written before the offsets file existed (one pass, no JSON parsing)."""
    ends = []
    pos = 0
    with path.open("rb") as f:
        while block := f.read(1 << 24):
            ends.append(np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10) + pos + 1)
            pos += len(block)
    return np.concatenate([np.zeros(1, dtype=np.int64), *ends])


def load_passages(index_dir: str | Path, meta: dict[str, Any] | None = None) -> PassageStore:
    folder = Path(index_dir)
    if not (folder / PASSAGES).is_file():
        raise damaged(folder, f"{PASSAGES} is missing")
    try:
        offsets = np.load(folder / OFFSETS, mmap_mode="r") if (folder / OFFSETS).is_file() else \
            _scan_offsets(folder / PASSAGES)
    except (ValueError, OSError, EOFError) as err:
        raise damaged(folder, f"{OFFSETS} is unreadable ({err})") from err
    size = (folder / PASSAGES).stat().st_size
    if offsets.ndim != 1 or len(offsets) < 1 or int(offsets[-1]) != size:
        raise damaged(folder, f"{OFFSETS} does not match {PASSAGES} ({int(offsets[-1])} of {size} bytes indexed)")
    store = PassageStore(folder, offsets)
    expected = (meta or {}).get("num_passages")
    if expected is not None and len(store) != expected:
        raise damaged(folder, f"{PASSAGES} holds {len(store)} passages, {expected} were indexed")
    return store
