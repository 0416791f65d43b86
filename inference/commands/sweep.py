"""Sweeps from one YAML: a grid of knobs, one evaluation folder per point, one summary table.

    python -m inference.commands.sweep bench/experiments/world_tune.yaml            # a recipe with a `sweep:` mapping
    python -m inference.commands.sweep bench/experiments/world_tune.yaml --limit 8  # command-line overrides on top

A recipe is an evaluation YAML (any field of ``python -m inference.commands.evaluate --help``) plus
``sweep: {knob: [value, ...]}``. Every combination runs into its own sub-folder of ``output_dir``, named from the
knobs that vary (``method=dragin,theta=0.8``); each resumes like any evaluation folder, and a finished one
(``metrics.json`` of all its questions, made with the same settings) is skipped. A knob that only some methods
read (``theta``: RIND; ``flare_threshold``: FLARE; ``iterations``: Iter-RetGen; ...) keeps the recipe's value
where it does not apply, so ``wo-rag`` runs once in a ``method`` x ``theta`` grid, not once per θ.
``output_dir`` gets ``summary.md`` and ``summary.csv``; ``python -m inference.commands.report`` draws the figures.

The whole grid is checked against the config dataclasses before anything runs. Each point loads its model
afresh: :func:`inference.commands.evaluate.evaluate` loads the model itself and takes no loaded model.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any

import yaml

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import check_yaml_values, config_dict, refuse_renamed
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.question_set import QuestionSet
from data_builders.question_loader import WorldOptions, load_questions
from inference.commands import evaluate as evaluation
from inference.commands.eval_folder import read_predictions
from inference.commands.knobs import knob_applies
from inference.commands.report import write_summary

# Settings that do not change a finished folder's results.
NOT_RESULTS = frozenset({"output_dir", "show_progress", "chunk_size", "device", "batch_size", "memory_budget_gb"})


@dataclass
class Point:
    """One run of a sweep."""

    name: str  # its sub-folder: the varying knobs that apply, e.g. "method=dragin,theta=0.8"
    knobs: dict[str, Any]  # those knobs and their values
    values: dict[str, Any]  # every field of every config dataclass, as the point runs


def is_sweep_recipe(argv: Sequence[str] | None) -> bool:
    """True when the command line starts with a YAML file that has a ``sweep:`` key."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or not argv[0].endswith((".yaml", ".yml")) or not Path(argv[0]).is_file():
        return False
    try:
        data = yaml.safe_load(Path(argv[0]).read_text(encoding="utf-8"))
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and "sweep" in data


# --- the recipe and its grid ----------------------------------------------------------------------------------

def load_recipe(path: str | Path) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """``(settings, grid)`` of a sweep recipe: the YAML's fields, and its ``sweep:`` mapping."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({err})") from err
    if not isinstance(data, dict) or not isinstance(data.get("sweep"), dict) or not data["sweep"]:
        raise ConfigError(f"{path}: a sweep recipe needs 'sweep:' mapping knobs to lists of values")
    grid = data.pop("sweep")
    return data, grid


def _type_error(tp: Any, value: Any) -> str | None:
    """Why ``value`` does not fit the field type ``tp`` (None when it does or the type is not checked)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return None if value in args else f"not one of {', '.join(map(str, args))}"
    if origin in (typing.Union, UnionType):
        errors = [_type_error(a, value) for a in args]
        return None if any(e is None for e in errors) else next(e for e in errors if e)
    if tp is type(None):
        return None if value is None else "not null"
    checks = {bool: lambda v: isinstance(v, bool), str: lambda v: isinstance(v, str),
              int: lambda v: isinstance(v, int) and not isinstance(v, bool),
              float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}
    if tp in checks and not checks[tp](value):
        return f"not {'an' if tp is int else 'a'} {tp.__name__}"
    return None


def check_grid(grid: dict[str, Any], fixed: Iterable[str], types: Sequence[type], source: str) -> None:
    """Unknown knobs, knobs also set outside the grid, empty or non-list values and values of the wrong type."""
    hints = {}
    for cls in types:
        hints.update(typing.get_type_hints(cls))
    unknown = sorted(set(grid) - set(hints))
    if unknown:
        raise ConfigError(f"{source}: unknown sweep knob(s) {', '.join(unknown)}; known: {', '.join(sorted(hints))}")
    twice = sorted(set(grid) & set(fixed))
    if twice:
        raise ConfigError(f"{source}: {', '.join(twice)} set both in sweep and outside it; set each in one place")
    for knob, values in grid.items():
        if knob == "output_dir":
            raise ConfigError(f"{source}: output_dir cannot be swept; each point gets a sub-folder of it")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{source}: sweep.{knob} must be a non-empty list of values, got {values!r}")
        for v in values:
            why = _type_error(hints[knob], v)
            if why:
                raise ConfigError(f"{source}: sweep.{knob} value {v!r} is {why}")


def build(values: dict[str, Any], types: Sequence[type], where: str = "") -> tuple:
    """One instance of each config dataclass from ``values``; a bad value is a ConfigError naming ``where``."""
    try:
        return tuple(cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})
                     for cls in types)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}" if where else str(err)) from err


def format_value(v: Any) -> str:
    """A knob value as it appears in a folder name: 0.8, true, none; a path's separators become '_'."""
    if isinstance(v, bool) or v is None:
        text = str(v).lower()
    elif isinstance(v, float):
        text = format(v, "g")
    else:
        text = str(v)
    return "".join(c if c.isalnum() or c in ".+-_" else "_" for c in text)


def point_name(knobs: dict[str, Any]) -> str:
    return ",".join(f"{k}={format_value(v)}" for k, v in knobs.items()) or "default"


def expand(settings: dict[str, Any], grid: dict[str, list[Any]], types: Sequence[type]) -> list[Point]:
    """Every distinct run of the grid, in grid order. ``settings`` holds every field (defaults included); a knob
    that a point's method does not read keeps its value from ``settings``, and points that then coincide run once."""
    knobs = list(grid)
    varying = [k for k in knobs if len(grid[k]) > 1]
    out = Path(settings["output_dir"])
    points, seen = [], set()
    for combo in itertools.product(*(grid[k] for k in knobs)):
        swept = dict(zip(knobs, combo))
        label = point_name(swept)
        resolved = config_dict(*build({**settings, **swept}, types, f"sweep point {label}"))
        applied = {k: v for k, v in swept.items() if knob_applies(k, resolved)}
        key = json.dumps(applied, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        shown = {k: v for k, v in applied.items() if k in varying} or applied
        name = point_name(shown)
        values = {**settings, **applied, "output_dir": str(out / name)}
        build(values, types, f"sweep point {name}")
        points.append(Point(name, shown, values))
    names = [p.name for p in points]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ConfigError(f"sweep points share a folder name after cleaning their values: {', '.join(clash)}")
    return points


# --- running ---------------------------------------------------------------------------------------------------

MARKER = "sweep_point.json"  # what the sweep asked of a folder whose evaluation returned


def _done_ids(folder: Path) -> set[str]:
    """Questions with a whole record; a torn last line is left out and said on stderr (as every reader of a run
    folder does), the file left to evaluate, which cuts it when it resumes the folder."""
    return {r.id for r in read_predictions(folder)[0]}


def _settings(values: dict[str, Any]) -> dict[str, Any]:
    """The settings that decide a point's results, as JSON gives them back."""
    return json.loads(json.dumps({k: v for k, v in values.items() if k not in NOT_RESULTS}, default=str))


def mark_finished(folder: Path, point: Point) -> None:
    (folder / MARKER).write_text(json.dumps({"name": point.name, "knobs": point.knobs,
                                             "settings": _settings(point.values)}, indent=1, default=str))


def is_finished(folder: Path, values: dict[str, Any], question_ids: Sequence[str]) -> bool:
    """The sweep's evaluation of this folder returned with these settings (its marker), ``metrics.json`` covers
    exactly ``question_ids`` and all of them have predictions. The sweep's own settings are compared, not
    config.yaml, which evaluate fills with values it resolves itself; anything else goes to evaluate, which
    resumes the folder or refuses other settings."""
    try:
        marker = json.loads((folder / MARKER).read_text())
        metrics = json.loads((folder / "metrics.json").read_text())
    except (OSError, ValueError):
        return False
    if marker.get("settings") != _settings(values) or metrics.get("n") != len(question_ids):
        return False
    return set(question_ids) <= _done_ids(folder)


def dataset_ids(values: dict[str, Any]) -> list[str]:
    """The question ids a point evaluates (cheap: no model)."""
    qs = QuestionSet(values["dataset"], values.get("split"), values.get("start", 0), values.get("limit"),
                     values.get("shuffle_seed"))
    world = WorldOptions(seed=values.get("world_seed", 0))
    examples = load_questions(qs, fmt=values.get("dataset_format"), world=world)
    return [e.id for e in examples]


def run_sweep(points: Sequence[Point], types: Sequence[type], evaluate: Callable[..., dict[str, Any]],
              question_ids: Callable[[dict[str, Any]], Sequence[str]] = dataset_ids,
              log: Callable[[str], None] = print) -> list[tuple[Point, dict[str, Any]]]:
    """Run every point not finished yet with ``evaluate(*configs)``; returns each point with its metrics."""
    results = []
    for i, point in enumerate(points, 1):
        configs = build(point.values, types, f"sweep point {point.name}")
        folder = Path(point.values["output_dir"])
        if is_finished(folder, point.values, question_ids(point.values)):
            log(f"[{i}/{len(points)}] {point.name}: finished, skipped")
            metrics = json.loads((folder / "metrics.json").read_text())
        else:
            log(f"[{i}/{len(points)}] {point.name}")
            metrics = evaluate(*configs)
            if metrics:  # the main process: evaluate returned the folder's metrics
                mark_finished(folder, point)
        results.append((point, metrics))
    return results


def settings_from(types: Sequence[type], recipe: dict[str, Any], argv: list[str], prog: str) -> dict[str, Any]:
    """Every field's value: dataclass defaults, then the recipe, then the command line (parsed as evaluate does)."""
    from transformers import HfArgumentParser

    class Parser(HfArgumentParser):
        def error(self, message: str):  # one line, as parse_config's parser: not argparse's usage block and exit
            raise ConfigError(f"{message} (see {self.prog} --help)")

    parser = Parser(types, prog=prog)
    parser.set_defaults(**recipe)
    return vars(parser.parse_args(argv))


def main(argv: list[str] | None = None, prog: str = "python -m inference.commands.sweep"
         ) -> list[tuple[Point, dict[str, Any]]]:
    """``python -m inference.commands.sweep RECIPE.yaml [--field value ...]``: every point through
    :func:`inference.commands.evaluate.evaluate`."""
    from accelerate import PartialState

    types, evaluate = evaluation.CONFIG_TYPES, evaluation.evaluate

    argv = list(sys.argv[1:] if argv is None else argv)
    path, rest = argv[0], argv[1:]
    recipe, grid = load_recipe(path)
    refuse_renamed(tuple(types), [*recipe, *grid], where=f"{path}: ")
    flags = {a[2:].split("=", 1)[0] for a in rest if a.startswith("--")}
    refuse_renamed(tuple(types), [f.replace("-", "_") for f in flags], flag="--")
    known = {f.name for cls in types for f in dataclasses.fields(cls)}
    unknown = sorted(set(recipe) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown field(s) {', '.join(unknown)}; known fields: {', '.join(sorted(known))}")
    # The fixed values reach the dataclasses through set_defaults, which argparse never converts or checks: a list
    # where a number goes would fail mid-sweep, after folders exist.
    check_yaml_values(tuple(types), recipe, path)
    check_grid(grid, set(recipe) | flags, types, path)
    settings = settings_from(types, recipe, rest, prog)
    if not settings.get("output_dir"):  # evaluate's own default names one run; a sweep gets a folder of its own
        settings["output_dir"] = f"runs/sweeps/{Path(path).stem}"
    points = expand(settings, grid, types)
    state = PartialState()
    if state.is_main_process:
        combos = len(list(itertools.product(*grid.values())))
        print(f"sweep: {len(points)} runs ({combos} grid points) into {settings['output_dir']}")
    results = run_sweep(points, types, evaluate,
                        log=print if state.is_main_process else (lambda _msg: None))
    if state.is_main_process:
        table = write_summary(Path(settings["output_dir"]), results)
        print(f"\n{table}\nsummary: {Path(settings['output_dir']) / 'summary.md'} (and .csv); figures: "
              f"python -m inference.commands.report {settings['output_dir']} --out {settings['output_dir']}/report")
    return results


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run_cli(main, resume_hint="every finished point is kept; rerun the same command to resume")


if __name__ == "__main__":
    sys.exit(cli())
