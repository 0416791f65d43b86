"""One configuration path for every entry point: YAML file -> dataclasses -> command-line overrides on top.

``parse_config((A, B), argv)`` accepts ``[CONFIG.yaml] [--field value ...]``. Unknown YAML keys fail loudly
(naming the key and the known fields), as do unknown command-line flags. The resolved config can be written
next to every output with :func:`save_config`.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re
import sys
import typing
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from adaptive_rag.plumbing.atomic_files import write_text_atomic
from adaptive_rag.plumbing.errors import ConfigError


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


def parse_config(types: tuple[type, ...], argv: list[str] | None = None, *, prog: str | None = None,
                 description: str | None = None) -> tuple:
    """Parse ``[CONFIG.yaml] [--field value ...]`` into one instance of each dataclass in ``types``.

    ``--help`` shows ``description`` (default: the first sentence of the calling module's docstring, i.e. the
    program's), the ``[CONFIG.yaml]`` positional, and every field with its help (the field's ``metadata["help"]``,
    else its comment in the dataclass source) and default (the YAML's value when a YAML is given).
    """
    if description is None:
        description = first_line(sys._getframe(1).f_globals.get("__doc__"))
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = config_parser(types, prog=prog, description=description)
    if argv and not argv[0].startswith("-") and argv[0].endswith((".yaml", ".yml")):
        path = argv.pop(0)
        data = rename_aliases(types, _load_yaml(path), where=f"{path}: ")
        known = {f.name for t in types for f in dataclasses.fields(t)}
        refuse_renamed(types, data, where=f"{path}: ")
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{path}: unknown field(s) {', '.join(unknown)}; "
                              f"known fields: {', '.join(sorted(known))}")
        check_yaml_values(types, data, path)
        # YAML values become the defaults; flags on the command line still win.
        parser.set_defaults(**data)
    refuse_renamed(types, [a[2:].split("=", 1)[0].replace("-", "_") for a in argv if a.startswith("--")], flag="--")
    try:
        return tuple(parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=False))
    except ValueError as err:  # raised by a dataclass __post_init__
        raise ConfigError(str(err)) from err


def check_yaml_values(types: tuple[type, ...], data: dict[str, Any], path: str | Path) -> None:
    """Refuse a YAML value of the wrong shape for its field (a list where a number goes, a mapping where a name
    goes, a value outside a field's choices), in one line naming the file and the field. argparse converts and
    checks only what it parses itself (flags, and YAML strings): any other YAML value would reach the program as
    it is and fail there, after the model has loaded and the output folder has been made."""
    hints: dict[str, Any] = {}
    for cls in types:
        try:
            hints.update({f.name: h for f in dataclasses.fields(cls) if (h := typing.get_type_hints(cls).get(f.name))})
        except (NameError, TypeError):  # an annotation that does not resolve here: left to the program
            continue
    for key, value in data.items():
        if key in hints and (expected := _misfit(value, hints[key])) is not None:
            raise ConfigError(f"{path}: field '{key}' expects {expected}, got {_shown(value)}")


def _shown(value: Any) -> str:
    kind = {list: "a list", dict: "a mapping", bool: "a boolean", int: "an integer", float: "a number",
            str: "a string"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} ({text[:60]}{'…' if len(text) > 60 else ''})"


def _misfit(value: Any, hint: Any) -> str | None:
    """What ``hint`` expects when ``value`` cannot be it; None when it can (or when argparse will check it: a
    string for a number or a boolean is converted by argparse, with its own one-line error)."""
    import types as pytypes

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is typing.Any:
        return None
    if origin in (typing.Union, pytypes.UnionType):
        if value is None and type(None) in args:
            return None
        wanted = [a for a in args if a is not type(None)]
        misfits = [_misfit(value, a) for a in wanted]
        if any(m is None for m in misfits):
            return None
        return " or ".join(dict.fromkeys(m for m in misfits if m)) + (" (or null)" if type(None) in args else "")
    if origin is typing.Literal:
        return None if value in args else "one of " + ", ".join(str(a) for a in args)
    if value is None:
        return None if hint is type(None) else _describe(hint)
    if hint is bool:
        return None if isinstance(value, (bool, str)) else "true or false"
    if hint is int:
        return None if (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str) \
            else "a whole number"
    if hint is float:
        return None if (isinstance(value, (int, float)) and not isinstance(value, bool)) or isinstance(value, str) \
            else "a number"
    if hint is str:
        return None if not isinstance(value, (list, dict)) else "a single value"
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple):
        if not isinstance(value, list):
            return "a list"
        inner = args[0] if args and args[0] is not Ellipsis else Any
        bad = next((m for item in value if (m := _misfit(item, inner)) is not None), None)
        return None if bad is None else f"a list of {bad.removeprefix('a ').removeprefix('an ')}s"
    if origin is dict or hint is dict:
        return None if isinstance(value, dict) else "a mapping of key: value"
    return None  # paths, enums and the like: the program checks them


def _describe(hint: Any) -> str:
    return {int: "a whole number", float: "a number", bool: "true or false", str: "a single value"}.get(
        hint, getattr(hint, "__name__", str(hint)))


def aliases(types: tuple[type, ...]) -> dict[str, str]:
    """``{old name: field}`` for every field that lists earlier spellings in its metadata (``aliases=["--out"]``,
    the way transformers' ``HfArg`` does): the command line takes each as a flag, a YAML as a key."""
    return {alias.lstrip("-").replace("-", "_"): f.name for t in types for f in dataclasses.fields(t)
            for alias in _listed(f.metadata.get("aliases"))}


def _listed(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def rename_aliases(types: tuple[type, ...], data: dict[str, Any], *, where: str = "") -> dict[str, Any]:
    """``data`` with every key that is an old spelling of a field (see :func:`aliases`) under the field's name; a
    mapping that gives a field under two spellings is refused in one line naming both."""
    old_names = aliases(types)
    out: dict[str, Any] = {}
    given: dict[str, str] = {}  # field -> the key that gave it
    for key, value in data.items():
        name = old_names.get(key, key)
        if name in out:
            raise ConfigError(f"{where}{given[name]} and {key} are the same field; give it once, as {name}")
        out[name], given[name] = value, key
    return out


def refuse_renamed(types: tuple[type, ...], names, *, where: str = "", flag: str = "") -> None:
    """A field that was renamed fails with one line naming its new name. Each dataclass lists its old names in a
    ``RENAMED`` class attribute: ``{"end": "limit (the number of questions from start)"}``, the value starting with
    the new field's name."""
    known = {f.name for t in types for f in dataclasses.fields(t)}
    renamed = {old: new for t in types for old, new in getattr(t, "RENAMED", {}).items() if old not in known}
    hits = [name for name in names if name in renamed]
    if hits:
        raise ConfigError(where + "; ".join(f"{flag}{old} was renamed: use {flag}{renamed[old]}" for old in hits))


def first_line(doc: str | None) -> str | None:
    """A program's one-line description: the first sentence of its docstring's first paragraph (a wrapped first
    sentence is joined back into one line)."""
    paragraph = []
    for line in (doc or "").strip().splitlines():
        if not line.strip():
            break
        paragraph.append(line.strip())
    text = " ".join(paragraph)
    end = text.find(". ")
    return (text[:end + 1] if end >= 0 else text) or None


def config_parser(types: tuple[type, ...], *, prog: str | None = None, description: str | None = None):
    """transformers' ``HfArgumentParser`` over ``types`` with one-line errors and a help that documents every
    field: one group per dataclass, each option once (``--field``; the ``--field-name`` spelling also works),
    its help and its default."""
    from transformers import HfArgumentParser

    class Grouped(HfArgumentParser):
        def _add_dataclass_arguments(self, dtype):
            # one titled group per dataclass; HfArgumentParser groups only classes with _argument_group_name
            if hasattr(dtype, "_argument_group_name"):
                return super()._add_dataclass_arguments(dtype)
            hints = typing.get_type_hints(dtype)
            group = self.add_argument_group(_group_title(dtype))
            for f in dataclasses.fields(dtype):
                if f.init:
                    f.type = hints[f.name]
                    self._parse_dataclass_field(group, f)

        @staticmethod
        def _parse_dataclass_field(parser, field):
            # an old spelling works as --old_name and --old-name, as the field's own name does
            old = _listed(field.metadata.get("aliases"))
            hyphens = [o.replace("_", "-") for o in old if o.replace("_", "-") not in old]
            if hyphens:
                field = copy.copy(field)
                field.metadata = MappingProxyType({**field.metadata, "aliases": old + hyphens})
            HfArgumentParser._parse_dataclass_field(parser, field)

    prog = prog or Path(sys.argv[0]).name
    parser = _OneLineErrors(Grouped)(
        types, prog=prog, description=description, formatter_class=_HelpFormatter,
        usage=f"{prog} [-h] [CONFIG.yaml] [--field value ...]",
        epilog="CONFIG.yaml sets any of these options (field: value); options given on the command line win.")
    helps: dict[str, str] = {}
    for cls in types:
        helps.update(field_comments(cls))
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        if action.help is None and action.option_strings[0].startswith("--no_"):  # HfArgumentParser's complement
            action.help = f"the same as --{action.dest} false"  # of a true-by-default flag
            action.default = argparse.SUPPRESS  # shown once, with its positive flag
        elif action.help is None:
            action.help = helps.get(action.dest, "").replace("%", "%%")
        old = _earlier_spellings(action.option_strings)
        if old and action.help != argparse.SUPPRESS:  # an earlier spelling still works: the help says so
            action.help = f"{action.help} (also {', '.join(old)})".lstrip()
        if action.help == "":
            action.help = "(default: %(default)s)"
    return parser


def _earlier_spellings(option_strings: list[str]) -> list[str]:
    """The aliases of an option other than its own hyphenated spelling, each once (``--index_dir``, not also
    ``--index-dir``)."""
    seen = {option_strings[0].replace("-", "_")}
    old = []
    for option in option_strings[1:]:
        if option.replace("-", "_") not in seen:
            seen.add(option.replace("-", "_"))
            old.append(option)
    return old


def _group_title(cls: type) -> str:
    """``ClassName``, with the first line of its docstring where it has one of its own (a dataclass without one
    gets a generated ``ClassName(field: type, ...)``)."""
    doc = first_line(cls.__doc__)
    return cls.__name__ if not doc or doc.startswith(f"{cls.__name__}(") else f"{cls.__name__} ({doc.rstrip('.')})"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option once, by its first spelling (``--top_k TOP_K``, not also ``--top-k TOP_K``); the default
    appended unless the help already says what it is."""

    def _get_help_string(self, action):
        if "(default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)

    def _format_action_invocation(self, action):
        if len(action.option_strings) < 2 or not all(o.startswith("--") for o in action.option_strings):
            return super()._format_action_invocation(action)
        shown = argparse.Action(action.option_strings[:1], action.dest, nargs=action.nargs, choices=action.choices,
                                metavar=action.metavar)
        return super()._format_action_invocation(shown)


def field_comments(cls: type) -> dict[str, str]:
    """``{field: comment}`` from a dataclass's source: the comment at the end of the field's line, else the
    comment lines directly above it. Empty where the source cannot be read (an interactive definition)."""
    import inspect
    import io
    import textwrap
    import tokenize

    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    comments: dict[int, str] = {}  # line number (1-based) -> comment text
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string.lstrip("#").strip()
    except (tokenize.TokenError, IndentationError):
        return {}
    names = {f.name for f in dataclasses.fields(cls)}
    body_indent = None
    out: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        match = re.match(r"(\s+)(\w+)\s*:", line)
        if not match or match.group(2) not in names:
            continue
        body_indent = body_indent or match.group(1)
        if match.group(1) != body_indent:
            continue
        if number in comments:
            out[match.group(2)] = comments[number]
            continue
        above = []
        k = number - 1
        while k >= 1 and lines[k - 1].strip().startswith("#"):
            above.insert(0, comments.get(k, ""))
            k -= 1
        if above:
            out[match.group(2)] = " ".join(a for a in above if a)
    return out


def _OneLineErrors(base: type) -> type:  # noqa: N802 (a class factory)
    """``base`` (an argparse parser) whose errors raise :class:`ConfigError` instead of printing the whole usage
    and exiting: an unknown or malformed flag ends like every other user mistake, in one line."""

    class Parser(base):
        def error(self, message: str):
            raise ConfigError(f"{message} (see {self.prog} --help)")

    return Parser


def config_dict(*configs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in configs:
        out.update(dataclasses.asdict(c))
    return out


def save_config(path: str | Path, *configs: Any) -> None:
    """Write the resolved configuration (all dataclasses merged) as YAML. Written beside and then renamed, so a
    killed run never leaves a half-written file that the resume check would then fail to read."""
    write_text_atomic(path, yaml.safe_dump(config_dict(*configs), sort_keys=False))


