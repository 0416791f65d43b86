"""One vocabulary of options across the commands (docs/options.md): every console script in pyproject.toml and every
benchmark script in bench/ is built here and its options checked. An option is spelled in snake_case, the Hugging
Face scripts' way (``--output_dir``); the same concept has the same name in every command; an earlier spelling
(``--out``, ``--index_dir``, ``-k``, the hyphenated ``--max-new-tokens`` of the benchmarks) is only ever an alias of
the canonical name, and is listed in docs/options.md. A new command is covered as soon as pyproject.toml names it.
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest
import yaml
from bench_modules import BENCH, bench_module

from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

# (concept, canonical name, earlier spellings that may only be aliases of it). docs/options.md shows the same table.
CONCEPTS = [
    ("output folder", "output_dir", ("out",)),
    ("output file", "output_file", ("out", "output", "o")),
    ("index folder", "index", ("index_dir",)),
    ("adapted query encoder", "query_encoder", ()),
    ("progress bars", "show_progress", ("no_progress",)),
    ("passages retrieved per query", "top_k", ("k",)),
    ("the embedded world's seed", "world_seed", ()),
    ("training seed", "seed", ("train_seed",)),
    ("training epochs", "num_train_epochs", ("num_epochs", "epochs")),
    ("learning-rate schedule", "lr_scheduler_type", ("lr_scheduler",)),
    ("the language model that answers", "model", ("generator",)),
    ("a downloaded data folder", "data_dir", ("data",)),
    ("the shared development data folder", "shared_data_dir", ("shared_data",)),
    ("keep downloaded archives", "keep_archives", ()),
    ("a benchmark's scratch folder", "workdir", ("work",)),
    ("a benchmark's recall@k cut-off", "recall_k", ("k",)),
]
# world.py's --seed is the world's seed (an alias of --world_seed there); elsewhere --seed is the run's own seed
ALIAS_OF = {"seed": "world_seed"}
OLD: dict[str, set[str]] = {}
for _, _canonical, _olds in CONCEPTS:
    for _old in _olds:
        OLD.setdefault(_old, set()).add(_canonical)
SNAKE = re.compile(r"--[a-z][a-z0-9]*(_[a-z0-9]+)*")


class _Built(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


def built_parser(monkeypatch, run) -> argparse.ArgumentParser | None:
    """The parser ``run()`` builds, caught when it starts parsing (nothing after that runs)."""
    def capture(self, args=None, namespace=None):
        raise _Built(self)

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_known_args", capture)
        try:
            run()
        except _Built as built:
            return built.parser
        except (Exception, SystemExit):
            return None
    return None


def console_scripts() -> dict[str, str]:
    """``{command: module}`` from pyproject.toml's [project.scripts] (read as text: tomllib is Python 3.11+)."""
    section = (ROOT / "pyproject.toml").read_text(encoding="utf-8").split("[project.scripts]", 1)[1]
    section = section.split("\n[", 1)[0]
    return {name: module for name, module in re.findall(r'^([\w-]+)\s*=\s*"([\w.]+):\w+"', section, re.M)}


def command_parser(module_name: str, monkeypatch, tmp_path) -> argparse.ArgumentParser:
    main = importlib.import_module(module_name).main
    recipe = tmp_path / "recipe.yaml"  # the sweep reads its recipe before it builds the parser
    recipe.write_text("sweep:\n  top_k: [1]\n", encoding="utf-8")
    parser = built_parser(monkeypatch, lambda: main([])) or built_parser(monkeypatch, lambda: main([str(recipe)]))
    assert parser is not None, f"{module_name}: main() built no argparse parser"
    return parser


def bench_parser(name: str, monkeypatch) -> argparse.ArgumentParser | None:
    return built_parser(monkeypatch, lambda: bench_module(name).main())


def problems(parser: argparse.ArgumentParser) -> list[str]:
    """Every option that breaks the vocabulary, in one line each."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        canonical, *others = action.option_strings
        name = canonical[2:]
        if not SNAKE.fullmatch(canonical):
            found.append(f"{canonical}: not a --snake_case name (give it one; keep {canonical} as an alias)")
            continue
        if name in OLD:
            new = " or ".join(f"--{n}" for n in sorted(OLD[name]))
            found.append(f"{canonical}: an earlier spelling of {new} (make {new} the name)")
        for other in others:
            plain = other.lstrip("-").replace("-", "_")
            if plain in (name, action.dest) or name in OLD.get(plain, ()) or ALIAS_OF.get(plain) == name:
                continue
            if plain.startswith("no_") and action.dest in OLD.get(plain, ()):  # --no-progress for --show_progress
                continue
            found.append(f"{canonical}: alias {other} is in no concept of the table (add it to CONCEPTS and "
                         "docs/options.md)")
    return found


@pytest.mark.parametrize("command", sorted(console_scripts()))
def test_every_command_speaks_the_vocabulary(command, monkeypatch, tmp_path):
    parser = command_parser(console_scripts()[command], monkeypatch, tmp_path)
    assert problems(parser) == [], f"{command}: {problems(parser)}"


BENCH_SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py") if "ArgumentParser(" in p.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", BENCH_SCRIPTS)
def test_every_benchmark_speaks_the_vocabulary(name, monkeypatch):
    """The benchmarks too: their documented hyphenated flags (``--max-new-tokens``) stay as aliases."""
    parser = bench_parser(name, monkeypatch)
    assert parser is not None, f"bench/{name}.py: main() built no argparse parser"
    assert problems(parser) == [], f"bench/{name}.py: {problems(parser)}"


def test_the_checker_catches_each_kind_of_mistake():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--max-new-tokens")
    parser.add_argument("--index", "--idx")
    parser.add_argument("--output_dir", "--out_dir")
    found = problems(parser)
    assert len(found) == 4
    assert found[0].startswith("--out: an earlier spelling of --output_dir")
    assert found[1].startswith("--max-new-tokens: not a --snake_case name")
    assert found[2].startswith("--index: alias --idx is in no concept")
    assert found[3].startswith("--output_dir: alias --out_dir")
    fine = argparse.ArgumentParser()
    fine.add_argument("--output_dir", "--out")
    fine.add_argument("--top_k", "-k")
    fine.add_argument("--max_new_tokens", "--max-new-tokens")
    fine.add_argument("--no_show_progress", "--no-progress", dest="show_progress", action="store_false")
    assert problems(fine) == []


def test_docs_list_every_concept_and_alias():
    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    rows = {line.split("|")[2].strip(): line for line in text.splitlines() if line.startswith("| ") and "`--" in line}
    for concept, canonical, olds in CONCEPTS:
        row = rows.get(f"`--{canonical}`")
        assert row is not None, f"docs/options.md has no row for --{canonical} ({concept})"
        for old in olds:
            shown = [f"`-{old}`", f"`--{old}`", f"`--{old.replace('_', '-')}`"]
            assert any(s in row for s in shown), f"docs/options.md: --{canonical} misses {old}"


# The alias mechanism of the dataclass commands: old names work as flags and as YAML keys, once.

def test_old_flag_and_old_yaml_key_reach_the_renamed_field(tmp_path):
    from retrieval_adapt.build_index import IndexConfig

    (cfg,) = parse_config((IndexConfig,), ["--out", "runs/x"])
    assert cfg.output_dir == "runs/x"
    (cfg,) = parse_config((IndexConfig,), ["--output_dir", "runs/y"])
    assert cfg.output_dir == "runs/y"
    recipe = tmp_path / "old.yaml"
    recipe.write_text(yaml.safe_dump({"out": "runs/from-yaml", "kind": "bm25"}), encoding="utf-8")
    (cfg,) = parse_config((IndexConfig,), [str(recipe)])
    assert cfg.output_dir == "runs/from-yaml"
    (cfg,) = parse_config((IndexConfig,), [str(recipe), "--output_dir", "runs/flag"])
    assert cfg.output_dir == "runs/flag"  # the command line still wins over the YAML's old key


def test_hyphenated_old_flag_works_as_the_old_snake_case_one():
    from retrieval_adapt.distill_config import DistillConfig

    (cfg,) = parse_config((DistillConfig,), ["--index-dir", "runs/i", "--lr_scheduler", "linear"])
    assert (cfg.index, cfg.lr_scheduler_type) == ("runs/i", "linear")


def test_a_field_given_twice_in_yaml_is_one_line(tmp_path):
    from retrieval_adapt.build_index import IndexConfig

    recipe = tmp_path / "both.yaml"
    recipe.write_text("out: runs/a\noutput_dir: runs/b\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"both.yaml: out and output_dir are the same field; give it once"):
        parse_config((IndexConfig,), [str(recipe)])


def test_a_config_yaml_written_before_the_rename_reads_under_the_new_names():
    """The knowing model's build compares a folder's saved config.yaml with the command's settings to resume it."""
    from adaptive_rag.plumbing.config import rename_aliases
    from training.knowing_steps import KnowingConfig

    saved = {"out": "runs/knowing/seed0", "seed": 0, "epochs": 3.0, "lora_r": 16}
    assert rename_aliases((KnowingConfig,), saved) == {"output_dir": "runs/knowing/seed0", "seed": 0,
                                                       "num_train_epochs": 3.0, "lora_r": 16}


def test_help_names_the_old_spelling_once(capsys):
    from training.evaluate_adapted import EvaluateAdaptedConfig

    with pytest.raises(SystemExit):
        parse_config((EvaluateAdaptedConfig,), ["--help"], prog="evaluate_adapted")
    shown = " ".join(capsys.readouterr().out.split())
    assert "--index INDEX" in shown and "(also --index_dir)" in shown and "--index-dir" not in shown
    assert "--output_dir OUTPUT_DIR (also --out) (default:" in shown


def test_argparse_commands_take_old_and_new_spellings(tmp_path, capsys):
    from data_builders import download

    assert download.main(["--list", "--out", str(tmp_path), "--no-progress", "--keep-archives"]) == 0
    assert download.main(["--list", "--output_dir", str(tmp_path), "--show_progress", "false"]) == 0
    with pytest.raises(SystemExit) as exit_info:
        download.main(["--list", "--show_progress", "maybe"])
    assert exit_info.value.code == 2
    assert "expected true or false, got 'maybe'" in capsys.readouterr().err


def test_shipped_recipes_use_the_canonical_names():
    """A YAML recipe's keys are the fields' names: no shipped recipe spells one the old way."""
    recipes = [p for folder in ("inference/configs", "training/configs", "retrieval_adapt/configs", "bench/experiments")
               for p in (ROOT / folder).rglob("*.yaml")]
    old_keys = {"out", "index_dir", "generator", "num_epochs", "epochs", "train_seed", "lr_scheduler"}
    stale = [f"{p.relative_to(ROOT)}: {key}" for p in recipes
             for key in _mapping(yaml.safe_load(p.read_text(encoding="utf-8"))) if key in old_keys]
    assert stale == []


def _mapping(data) -> dict:
    return data if isinstance(data, dict) else {}


def test_benchmark_list_is_not_empty():
    assert len(BENCH_SCRIPTS) >= 10 and all((BENCH / f"{name}.py").is_file() for name in BENCH_SCRIPTS)
