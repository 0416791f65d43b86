"""One configuration path for every entry point: YAML file -> dataclasses -> command-line overrides on top.

``parse_config((A, B), argv)`` accepts ``[CONFIG.yaml] [--field value ...]``. Unknown YAML keys fail loudly
(naming the key and the known fields), as do unknown command-line flags. The resolved config can be written
next to every output with :func:`save_config`.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration file or override that names a field wrongly or has a bad value."""


def _load_yaml(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({err})") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of field: value at the top level")
    return data


def parse_config(types: tuple[type, ...], argv: list[str] | None = None, *, prog: str | None = None) -> tuple:
    """Parse ``[CONFIG.yaml] [--field value ...]`` into one instance of each dataclass in ``types``."""
    from transformers import HfArgumentParser

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = HfArgumentParser(types, prog=prog)
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


def config_dict(*configs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in configs:
        out.update(dataclasses.asdict(c))
    return out


def save_config(path: str | Path, *configs: Any) -> None:
    """Write the resolved configuration (all dataclasses merged) as YAML."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(yaml.safe_dump(config_dict(*configs), sort_keys=False))


def run_cli(main, *, argv: list[str] | None = None) -> int:
    """Run ``main(argv)`` and turn a user mistake into one line on stderr and exit status 2, not a traceback."""
    from data_builders.schema import DataError
    from inference.models import ModelNotFoundError

    try:
        main(argv)
    except (ConfigError, DataError, ModelNotFoundError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
