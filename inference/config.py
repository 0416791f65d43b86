"""One configuration path for every entry point: YAML file -> dataclasses -> command-line overrides on top.

``parse_config((A, B), argv)`` accepts ``[CONFIG.yaml] [--field value ...]``. Unknown YAML keys fail loudly
(naming the key and the known fields), as do unknown command-line flags. The resolved config can be written
next to every output with :func:`save_config`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration file or override that names a field wrongly or has a bad value."""


def yaml_error_line(path: str | Path, err: yaml.YAMLError) -> str:
    """PyYAML's multi-line message (with a source excerpt and a caret) as one line naming file, line and column."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(path)
    parts = [getattr(err, "context", None), getattr(err, "problem", None)]
    what = "; ".join(p for p in parts if p) or " ".join(str(err).split())
    return f"{where}: not valid YAML ({what})"


def _load_yaml(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {path} " + ("is not a file" if p.exists() else "does not exist"))
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ConfigError(yaml_error_line(path, err)) from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of field: value at the top level")
    return data


def parse_config(types: tuple[type, ...], argv: list[str] | None = None, *, prog: str | None = None) -> tuple:
    """Parse ``[CONFIG.yaml] [--field value ...]`` into one instance of each dataclass in ``types``."""
    from transformers import HfArgumentParser

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _OneLineErrors(HfArgumentParser)(types, prog=prog)
    if argv and not argv[0].startswith("-") and argv[0].endswith((".yaml", ".yml")):
        path = argv.pop(0)
        data = _load_yaml(path)
        known = {f.name for t in types for f in dataclasses.fields(t)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{path}: unknown field(s) {', '.join(unknown)}; "
                              f"known fields: {', '.join(sorted(known))}")
        # YAML values become the defaults; flags on the command line still win.
        parser.set_defaults(**data)
    try:
        return tuple(parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=False))
    except ValueError as err:  # raised by a dataclass __post_init__
        raise ConfigError(str(err)) from err


def _OneLineErrors(base: type) -> type:  # noqa: N802 (a class factory)
    """``base`` (an argparse parser) whose errors raise :class:`ConfigError` instead of printing the whole usage
    and exiting: an unknown or malformed flag ends like every other user mistake, in one line."""

    class Parser(base):
        def error(self, message: str):
            raise ConfigError(f"{message} (see {self.prog} --help)")

    return Parser


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ``argparse`` parser for commands outside :func:`parse_config`: a mistake ends in one line on stderr
    (``error: ... (see PROG --help)``, exit status 2) instead of the usage block and the error."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def config_dict(*configs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in configs:
        out.update(dataclasses.asdict(c))
    return out


def save_config(path: str | Path, *configs: Any) -> None:
    """Write the resolved configuration (all dataclasses merged) as YAML. Written beside and then renamed, so a
    killed run never leaves a half-written file that the resume check would then fail to read."""
    write_atomic(path, yaml.safe_dump(config_dict(*configs), sort_keys=False))


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to a file beside ``path`` and rename it over ``path``: readers see the old or the new file,
    never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


DEFAULT_RESUME_HINT = "what was written so far is kept; rerun the same command to resume"
# Path mistakes (a file where a folder belongs, a folder without write permission) are the user's, like a
# missing file; other OSErrors stay tracebacks.
_PATH_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)


def run_cli(main, *, argv: list[str] | None = None, resume_hint: str = DEFAULT_RESUME_HINT) -> int:
    """Run ``main(argv)`` and turn a user mistake into one line on stderr and exit status 2, not a traceback.

    Ctrl-C ends in one line too, exit status 130: ``interrupted: `` and the interrupt's own message when ``main``
    raised one saying what it kept, else ``resume_hint``.
    """
    from data_builders.schema import DataError  # FolderInUseError (a locked or mismatched folder) is one
    from inference.models import ModelNotFoundError

    try:
        main(argv)
    except (ConfigError, DataError, ModelNotFoundError, *_PATH_ERRORS) as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        print(f"interrupted: {one_line(str(err)) or resume_hint}", file=sys.stderr)
        return 130
    return 0


def one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())
