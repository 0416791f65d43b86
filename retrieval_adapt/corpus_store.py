"""An index folder's shared parts: the passages it serves and a small ``meta.json`` saying what built it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data_builders.readers import read_passages_jsonl, write_passages_jsonl
from data_builders.schema import Passage

META = "meta.json"
PASSAGES = "passages.jsonl"


def save_store(out_dir: str | Path, passages: list[Passage], meta: dict[str, Any]) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_passages_jsonl(passages, out / PASSAGES)
    (out / META).write_text(json.dumps(meta, indent=2))


def load_meta(index_dir: str | Path) -> dict[str, Any]:
    path = Path(index_dir) / META
    if not path.is_file():
        raise FileNotFoundError(f"{index_dir} is not an index folder (no {META}); build one with "
                                "`python -m retrieval_adapt.build_index --help`")
    return json.loads(path.read_text())


def load_passages(index_dir: str | Path) -> list[Passage]:
    return read_passages_jsonl(Path(index_dir) / PASSAGES)
