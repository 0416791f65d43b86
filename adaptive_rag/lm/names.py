"""What a model name is: a local path or a hub id. One rule for the loader and the checks that run before it, so a
name the checks pass as a hub id is never loaded as a path (or the reverse). Imports no torch."""

from __future__ import annotations

from pathlib import Path


def looks_local(name: str) -> bool:
    """A path, not a hub id (hub ids are ``name`` or ``org/name``): absolute, relative with ``./`` ``../`` ``~``,
    deeper than one slash, ending in a slash, with a backslash, or an existing file or folder."""
    return (name.startswith(("/", ".", "~")) or name.count("/") > 1 or name.endswith("/") or "\\" in name
            or Path(name).expanduser().exists())
