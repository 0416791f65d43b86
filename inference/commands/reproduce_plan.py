"""What ``python -m inference.commands.reproduce TABLE`` runs: the options, one :class:`Step` per command, and the
tables' steps (``inference/commands/reproduce_tables.py``).

A step is a command line of one of the project's own commands (download, corpus, index, evaluate, the ADAPT-LLM job,
the table's report), so every step can be run alone, as ``--dry_run`` prints it. Paths come from the options'
``output_dir``: ``data/`` (the downloads), ``corpus/``, ``index/``, and ``<table>/<model>/`` (the runs and the report).
Nothing here loads a model or writes a file.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from adaptive_rag.plumbing.cli import OneLineArgumentParser

StepKind = Literal["download", "corpus", "index", "run", "report"]
DEFAULT_OUTPUT_DIR = "runs/reproduce"


@dataclass(frozen=True)
class Step:
    """One command of a table. ``outputs``: files that exist once its output is complete (a run's
    ``metrics.json``); ``sources``: the download names of a download step; ``folder``: a run's folder."""

    name: str
    module: str
    args: tuple[str, ...]
    kind: StepKind
    outputs: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    folder: str | None = None

    @property
    def command(self) -> str:
        return shlex.join(["python", "-m", self.module, *self.args])


@dataclass
class Options:
    """What the user asked for; None: the paper's value (the table's model, question count and index kind)."""

    table: str
    output_dir: str = DEFAULT_OUTPUT_DIR
    model: str | None = None
    limit: int | None = None
    datasets: list[str] | None = None  # DRAGIN: a subset of its four datasets
    methods: list[str] | None = None  # DRAGIN: a subset of its six methods
    index_kind: str | None = None
    train_limit: int | None = None  # ADAPT-LLM: Algorithm 1's training questions (None: all)
    sets: dict[str, str] = field(default_factory=dict)  # field=value given to every run that has the field
    mirrors: list[str] = field(default_factory=list)  # passed to the download step
    cuda: bool = True  # False: the ADAPT-LLM recipe's 8-bit base and fp16 give way to full precision

    @property
    def out(self) -> Path:
        return Path(self.output_dir)

    def runs_dir(self, default_model: str) -> Path:
        """``<output_dir>/<table>/<model>``: the table's runs and report, one folder per model."""
        return self.out / self.table / model_slug(self.model or default_model)


def model_slug(model: str) -> str:
    """A model name as a folder name: the hub id's last part (``meta-llama/Llama-2-7b-chat-hf`` ->
    ``Llama-2-7b-chat-hf``), other characters than letters, digits, ``.``, ``_`` and ``-`` as ``_``."""
    name = Path(model.rstrip("/")).name or "model"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def flag_value(value) -> str:
    """A YAML value as its command-line spelling (HfArgumentParser reads true/false for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def flags(settings: dict) -> list[str]:
    """``--field value`` for every setting that is not null, in the mapping's order."""
    out: list[str] = []
    for key, value in settings.items():
        if value is not None:
            out += [f"--{key}", flag_value(value)]
    return out


def shown_path(path: Path) -> str:
    """A shipped file as a command shows it: relative to the working folder when it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def read_manifest(data_dir: Path) -> dict:
    """The download folder's manifest (empty before the first download, or when unreadable: the download step then
    says what is wrong with it)."""
    try:
        return json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def data_file(data_dir: Path, source: str, name: str, key: str = "questions") -> Path:
    """Where a downloaded file lies: as the manifest records it (archives nest their files), else where the release
    puts it (``data_dir/<source>/<name>``), which is what a dry run before the download shows."""
    for rel, _fmt in read_manifest(data_dir).get(source, {}).get(key, []):
        if Path(rel).name == name:
            return data_dir / rel
    return data_dir / source / name


def download_step(sources: Sequence[str], opts: Options) -> Step:
    names = list(dict.fromkeys(sources))
    args = [*names, "--output_dir", str(opts.out / "data")]
    for mirror in opts.mirrors:
        args += ["--mirror", mirror]
    return Step("download", "data_builders.download", tuple(args), "download", sources=tuple(names))


def report_step(opts: Options) -> Step:
    """The table's report (inference/commands/reproduce_report.py): the reproduce command with the same options and
    ``--report_only``."""
    return Step("report", "inference.commands.reproduce", (*option_args(opts), "--report_only"), "report")


def option_args(opts: Options) -> list[str]:
    """``opts`` as the command line that gives them (what the report step and the report's header show)."""
    args = [opts.table, "--output_dir", opts.output_dir]
    for flag, value in (("--model", opts.model), ("--limit", opts.limit), ("--index_kind", opts.index_kind),
                        ("--train_limit", opts.train_limit)):
        if value is not None:
            args += [flag, str(value)]
    for flag, values in (("--datasets", opts.datasets), ("--methods", opts.methods)):
        if values:
            args += [flag, ",".join(values)]
    for key, value in opts.sets.items():
        args += ["--set", f"{key}={value}"]
    if not opts.cuda and opts.table == "adapt-llm-popqa":  # the only table whose runs depend on it
        args += ["--no_cuda"]
    return args


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _setting(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not re.fullmatch(r"[a-z_][a-z0-9_]*", key.strip()):
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE (e.g. max_new_tokens=32), got {text!r}")
    return key.strip(), value.strip()


def add_option_flags(parser: argparse.ArgumentParser) -> None:
    """The options shared by the reproduce command and the report step."""
    parser.add_argument("--output_dir", "--output-dir", default=DEFAULT_OUTPUT_DIR,
                        help=f"where data, indexes, runs and the report go (default {DEFAULT_OUTPUT_DIR})")
    parser.add_argument("--model", help="the model every run uses (default: the paper's; ADAPT-LLM: the base model)")
    parser.add_argument("--limit", type=_positive, help="questions per evaluation (default: the paper's count)")
    parser.add_argument("--datasets", type=_names, help="dragin-table2: a comma-separated subset of 2wiki, hotpotqa, "
                                                        "iirc, strategyqa")
    parser.add_argument("--methods", type=_names, help="dragin-table2: a comma-separated subset of its six methods")
    parser.add_argument("--index_kind", "--index-kind",
                        help="the retriever's index (default: the paper's; --list shows each table's kinds)")
    parser.add_argument("--train_limit", "--train-limit", type=_positive,
                        help="adapt-llm-popqa: training questions Algorithm 1 asks (default: all of SQuAD train)")
    parser.add_argument("--set", dest="sets", action="append", type=_setting, default=[], metavar="FIELD=VALUE",
                        help="a setting every run of the table that has FIELD takes (e.g. max_new_tokens=32); "
                             "repeatable; the report lists it as a difference from the paper")
    parser.add_argument("--no_cuda", "--no-cuda", action="store_true",
                        help="plan as on a machine without CUDA (found by itself when there is none)")


def options_parser(prog: str, description: str) -> OneLineArgumentParser:
    parser = OneLineArgumentParser(prog=prog, description=description)
    parser.add_argument("table", nargs="?", help="the table to reproduce (--list shows them)")
    add_option_flags(parser)
    return parser
