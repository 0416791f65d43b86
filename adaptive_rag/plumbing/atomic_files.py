"""Files and folders that appear complete or not at all, so that a run killed mid-write never leaves a half-written
one where a reader (or a resumed run) would take it for finished.

* :func:`write_text_atomic`: a small file written beside its target, fsynced, then renamed over it.
* :func:`atomic_folder`: ``with atomic_folder(final) as tmp:`` write into ``tmp`` (``final`` + ``.tmp``, a sibling on
  the same filesystem); on success it is fsynced and renamed to ``final``, replacing an existing folder only then; on
  an error (Ctrl-C included) it is removed and ``final`` stays as it was.

Replacing an existing folder takes two renames (``final`` -> ``final.old``, ``tmp`` -> ``final``). A kill between them
leaves ``final.old``, which :func:`recover` (called by every commit, and by writers before they start) renames back.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)

TMP_SUFFIX = ".tmp"
OLD_SUFFIX = ".old"


def tmp_path(final: str | Path) -> Path:
    final = Path(final)
    return final.with_name(final.name + TMP_SUFFIX)


def old_path(final: str | Path) -> Path:
    final = Path(final)
    return final.with_name(final.name + OLD_SUFFIX)


def fsync_dir(folder: Path) -> None:
    """Make a folder's entries (new names, renames) durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """fsync every file under ``folder``, then every directory (deepest first), so a rename publishes full files."""
    dirs = [folder]
    for path in folder.rglob("*"):
        if path.is_dir():
            dirs.append(path)
        elif path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(d)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old content or the new, never a part of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # per process: ranks of a data-parallel run may write the same file at once
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def remove(path: Path) -> None:
    """Delete a file or a folder tree; nothing when it is not there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def recover(final: str | Path) -> None:
    """Finish or undo an interrupted :func:`commit`: ``final.old`` is renamed back when ``final`` is missing (the
    kill came between the two renames), and removed when ``final`` is there (the kill came after them)."""
    final = Path(final)
    old = old_path(final)
    if not old.exists():
        return
    if final.exists():
        remove(old)
    else:
        logger.warning("%s: restoring the previous version from %s (a replace was interrupted)", final, old.name)
        os.rename(old, final)
        fsync_dir(final.parent)


def commit(tmp: Path, final: Path) -> None:
    """Publish the complete folder ``tmp`` as ``final`` (replacing an existing ``final``)."""
    fsync_tree(tmp)
    recover(final)
    old = old_path(final)
    if final.exists():
        os.rename(final, old)
    os.rename(tmp, final)
    fsync_dir(final.parent)
    if old.exists():
        remove(old)


@contextmanager
def atomic_folder(final: str | Path) -> Iterator[Path]:
    """Yield an empty staging folder; publish it as ``final`` when the block ends normally, remove it otherwise.
    A leftover staging folder of an interrupted run is cleared first."""
    final = Path(final)
    tmp = tmp_path(final)
    remove(tmp)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        remove(tmp)
        raise
    commit(tmp, final)
