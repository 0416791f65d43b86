"""Checks of what a user names on the command line (a model, an index folder, a device, an output folder), run
before anything loads or is written: a mistake costs a second and leaves no folder behind, instead of surfacing
after a model has loaded.

The checks read only small files (``meta.json``, ``adapter_config.json``, the hub cache's index); they never load
a model, so the real load happens once, later.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from adaptive_rag.lm.names import looks_local
from adaptive_rag.plumbing.errors import ConfigError, DataError
from retrieval_adapt.corpus_store import run_folder_problem

INDEX_KINDS = ("bm25", "dense", "lucene")


def check_model_name(name: str, flag: str = "--model") -> None:
    """Raise :class:`~adaptive_rag.lm.models.ModelNotFoundError` unless ``name`` is an embedded model, a local ``.gguf``
    file, an existing model or adapter folder (whose base model resolves too), or a hub id (one the local cache
    holds when offline). Follows the order :func:`adaptive_rag.lm.models.resolve_model` tries, without loading."""
    from adaptive_rag.lm.models import (
        EMBEDDED_ENCODERS,
        EMBEDDED_LMS,
        ModelNotFoundError,
        _wheel_file,
        adapter_base,
        cache_dir,
    )

    if name in EMBEDDED_LMS:
        if not (cache_dir() / name / "config.json").is_file():
            _wheel_file(*EMBEDDED_LMS[name])  # the wheel it converts from is installed (a metadata look-up)
        return
    if name in EMBEDDED_ENCODERS:
        _wheel_file(*EMBEDDED_ENCODERS[name])
        return
    path = Path(name).expanduser()
    if name.endswith(".gguf"):  # a local GGUF file, converted on first load (adaptive_rag.lm.gguf_convert)
        if not path.is_file():
            raise ModelNotFoundError(f"{flag} {name}: no such GGUF file ({path.resolve()})")
        return
    if path.is_dir():
        adapter = path / "adapter_config.json"
        if adapter.is_file():
            try:
                base = adapter_base(str(path))  # the project's own record first (adaptive_rag.json)
            except ModelNotFoundError as err:
                raise ModelNotFoundError(f"{flag} {name}: {err}") from err
            check_model_name(str(base), flag=f"{flag} {name} (its base model)")
        elif not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{flag} {name}: the folder holds no model (no config.json or "
                                     "adapter_config.json)")
        return
    known = ", ".join(sorted({**EMBEDDED_LMS, **EMBEDDED_ENCODERS}))
    if path.exists() or looks_local(name):
        raise ModelNotFoundError(f"{flag} {name}: no such model folder (embedded names: {known})")
    from huggingface_hub import is_offline_mode, try_to_load_from_cache

    if not is_offline_mode():
        return  # a hub id: the loader downloads it, or fails with the hub's reason
    try:
        cached = try_to_load_from_cache(name, "config.json")
    except ValueError:  # not a valid repo id
        cached = None
    if not isinstance(cached, str):
        raise ModelNotFoundError(f"{flag} {name}: not an embedded name ({known}), no such local folder, and not in "
                                 "the Hugging Face cache (HF_HUB_OFFLINE is set, so it cannot be downloaded)")


def check_index_folder(index: str, query_encoder: str | None = None, flag: str = "--index") -> None:
    """An index folder that ``retrieval_adapt.loading.load_retriever`` can open: its ``meta.json`` names a known
    kind; an adapted query encoder only goes with a dense index. ``flag`` names the option in messages."""
    folder = Path(index)
    if not folder.is_dir():
        raise ConfigError(f"{flag} {index}: " + ("not a folder" if folder.exists() else "no such folder")
                          + " (build one with `python -m retrieval_adapt.build_index --corpus FILE --out DIR`)")
    meta_path = folder / "meta.json"
    if (problem := run_folder_problem(folder)) is not None:
        raise ConfigError(f"{flag} {problem}")
    if not meta_path.is_file():
        raise ConfigError(f"{flag} {index} is not an index folder (no meta.json); build one with "
                          "`python -m retrieval_adapt.build_index --help`")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise DataError(f"not valid JSON ({err})", source=str(meta_path)) from err
    kind = meta.get("kind") if isinstance(meta, dict) else None
    if kind not in INDEX_KINDS:
        raise DataError(f"names an unknown index kind {kind!r} (known: {', '.join(INDEX_KINDS)})",
                        source=str(meta_path))
    if query_encoder and kind != "dense":
        raise ConfigError(f"--query_encoder applies to dense indexes only; {index} holds a {kind} index")
    if kind == "dense":
        if query_encoder:
            from retrieval_adapt.dense import check_query_encoder

            check_model_name(query_encoder, flag="--query_encoder")
            check_query_encoder(index, query_encoder, meta)  # a size the index does not hold: before the model loads
        elif not isinstance(meta.get("encoder"), str):
            raise DataError("a dense index needs the name of its encoder ('encoder')", source=str(meta_path))
        else:
            check_model_name(meta["encoder"], flag=f"the encoder of {flag} {index}")


def check_device(device: str) -> None:
    """``auto``, ``cpu``, or an accelerator this machine has."""
    if device in ("auto", "cpu"):
        return
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise ConfigError(f"--device {device}: not a device name (auto, cpu, cuda, cuda:N, mps)") from err
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (dev.index is not None and dev.index >= count):
            raise ConfigError(f"--device {device}: this machine has {count} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {device}: MPS is not available on this machine")


def check_output_dir(output_dir: str, flag: str = "--output_dir") -> None:
    """A folder, or a path where one can be made: not an existing file, no file on the way to it."""
    path = Path(output_dir)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {output_dir} is a file, not a folder")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{flag} {output_dir}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK) and not path.exists():
                raise ConfigError(f"{flag} {output_dir}: cannot create it, {parent} is not writable")
            break
