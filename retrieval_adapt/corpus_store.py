"""An index folder's shared parts: the passages it serves and a small ``meta.json`` saying what built it.

Index folders are written whole or not at all (:func:`index_writer`): the files go to a staging folder beside the
target, ``meta.json`` gets a manifest (every file's size), and the staging folder is renamed into place; an
existing index is replaced only then. Loading checks the manifest first, so a damaged folder (a file deleted or
cut short) is one line naming the folder and the command that rebuilds it, not a faiss or numpy traceback.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from adaptive_rag.plumbing.atomic_files import atomic_folder, old_path, recover
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.record_log import FolderLock
from adaptive_rag.plumbing.records import Passage
from data_builders.readers import read_passages_jsonl, write_passages_jsonl

META = "meta.json"
PASSAGES = "passages.jsonl"
CONFIG = "config.yaml"
# Everything an index folder may hold: an existing folder with anything else is not replaced.
INDEX_ENTRIES = frozenset({META, PASSAGES, CONFIG, "index.faiss", "embeddings.npy", "bm25", FolderLock.NAME})


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
    flags = [f"--{name} {shlex.quote(str(value))}" for name, value in args if value is not None]
    return " ".join(["python -m retrieval_adapt.build_index", *flags, "--out", shlex.quote(str(index_dir))])


def damaged(index_dir: str | Path, problem: str) -> IndexFolderError:
    return IndexFolderError(f"{problem}; rebuild the index: {rebuild_command(index_dir)}", source=str(index_dir))


def _manifest(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in (META, FolderLock.NAME)}


@contextmanager
def index_writer(out_dir: str | Path) -> Iterator[Path]:
    """``with index_writer(out) as tmp:`` write the index files (``meta.json`` among them) into ``tmp``; when the
    block ends, the manifest goes into ``meta.json`` and ``tmp`` replaces ``out``. ``out`` is locked meanwhile;
    on an error it is left as it was (a first build leaves nothing)."""
    out = Path(out_dir)
    recover(out)
    with FolderLock(out):  # a first build that fails leaves no folder: the lock removes the one it made
        extra = sorted(p.name for p in out.iterdir() if p.name not in INDEX_ENTRIES)
        if extra:
            raise DataError(f"exists and holds more than an index ({', '.join(extra[:5])}); refusing to replace it: "
                            "choose another output folder", source=str(out))
        with atomic_folder(out) as tmp:
            yield tmp
            meta = json.loads((tmp / META).read_text())
            meta["files"] = _manifest(tmp)
            (tmp / META).write_text(json.dumps(meta, indent=2))
            # The lock file travels with the folder, so this run still holds the lock after the swap.
            lock = out / FolderLock.NAME
            if lock.is_file():
                (tmp / FolderLock.NAME).write_bytes(lock.read_bytes())


def save_store(out_dir: str | Path, passages: list[Passage], meta: dict[str, Any]) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_passages_jsonl(passages, out / PASSAGES)
    (out / META).write_text(json.dumps(meta, indent=2))


def load_meta(index_dir: str | Path) -> dict[str, Any]:
    """``meta.json``, after checking that every file its manifest lists is there with its size."""
    folder = Path(index_dir)
    path = folder / META
    if not path.is_file():
        if not folder.exists() and old_path(folder).is_dir():
            raise IndexFolderError(f"does not exist, but {old_path(folder).name} holds the index an interrupted "
                                   "rebuild moved aside: rename it back, or rebuild", source=str(folder))
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


def load_passages(index_dir: str | Path, meta: dict[str, Any] | None = None) -> list[Passage]:
    folder = Path(index_dir)
    if not (folder / PASSAGES).is_file():
        raise damaged(folder, f"{PASSAGES} is missing")
    try:
        passages = read_passages_jsonl(folder / PASSAGES)
    except DataError as err:
        raise damaged(folder, f"{PASSAGES} is damaged ({err})") from err
    expected = (meta or {}).get("num_passages")
    if expected is not None and len(passages) != expected:
        raise damaged(folder, f"{PASSAGES} holds {len(passages)} passages, {expected} were indexed")
    return passages

