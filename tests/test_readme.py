"""README.md and docs/*.md read top to bottom by a new user: every YAML a command names parses with that command's
own config classes, and every index or corpus the commands read is built by a command (README's own, before it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from adaptive_rag.plumbing.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# README first, then every page of docs/: the commands a user copies from any of them
GUIDE = {"README.md": README} | {f"docs/{p.name}": p.read_text(encoding="utf-8")
                                 for p in sorted((ROOT / "docs").glob("*.md"))}
# `-m module CONFIG.yaml` or `script.py CONFIG.yaml` (with any launcher before it)
COMMAND_YAML = re.compile(r"(?:-m\s+([\w.]+)|([\w/]+\.py))\s+([\w./-]+\.ya?ml)\b")


def program_types(program: str) -> tuple[type, ...]:
    """The config dataclasses each program parses (as its main() passes them to parse_config)."""
    if program in ("inference.commands.evaluate", "inference.commands.sweep"):
        from inference.commands.evaluate import CONFIG_TYPES

        return CONFIG_TYPES
    if program == "training/adapt_llm.py":
        from adaptive_rag.lm.base_model import BaseModelConfig
        from data_builders.adapt_llm import AdaptDataConfig
        from training.adapt_llm_config import AdaptEvalConfig, AdaptTrainConfig

        return BaseModelConfig, AdaptDataConfig, AdaptTrainConfig, AdaptEvalConfig
    if program in ("training/search_sft.py", "training.search_sft"):
        from training.search_sft import CONFIG_TYPES

        return CONFIG_TYPES
    if program in ("training/grpo.py", "training.grpo"):
        from training.grpo import CONFIG_TYPES

        return CONFIG_TYPES
    if program == "training.distill_set":
        from data_builders.question_loader import QuestionsConfig
        from training.distill_set import RetrievalAdaptDataConfig

        return QuestionsConfig, RetrievalAdaptDataConfig
    if program == "training/distill_retriever.py":
        from retrieval_adapt.distill_config import DistillConfig

        return (DistillConfig,)
    if program == "training.evaluate_adapted":
        from data_builders.question_loader import QuestionsConfig
        from training.evaluate_adapted import EvaluateAdaptedConfig

        return QuestionsConfig, EvaluateAdaptedConfig
    raise AssertionError(f"README runs {program} with a YAML: add its config classes to this test")


def readme_yaml_commands(text: str | None = None) -> list[tuple[str, str]]:
    """(program, YAML) for every command README (``text``) or, without ``text``, any page of the guide names."""
    texts = [text] if text is not None else list(GUIDE.values())
    return sorted({(m.group(1) or m.group(2), m.group(3)) for t in texts for m in COMMAND_YAML.finditer(t)})


def fenced_commands(text: str = README) -> str:
    """A page's ```bash blocks: the command sequences a user copies."""
    return "\n".join(re.findall(r"```bash\n(.*?)```", text, flags=re.S))


def test_readme_names_yaml_commands():
    programs = {program for program, _ in readme_yaml_commands(README)}
    assert {"inference.commands.evaluate", "inference.commands.sweep", "training/adapt_llm.py"} <= programs
    assert len(readme_yaml_commands()) > len(readme_yaml_commands(README))  # the docs' commands are read too


@pytest.mark.parametrize("program, path", readme_yaml_commands(), ids=lambda x: str(x))
def test_every_yaml_readme_names_parses_with_its_program(program, path):
    assert (ROOT / path).is_file(), f"README runs {program} with {path}, which does not exist"
    types = program_types(program)
    data = yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))
    assert (program == "inference.commands.sweep") == ("sweep" in data), f"{path}: a recipe runs with the sweep command"
    if program == "inference.commands.sweep":  # a sweep recipe: every point is built and checked
        from inference.commands import sweep

        settings, grid = sweep.load_recipe(ROOT / path)
        sweep.check_grid(grid, set(settings), types, path)
        points = sweep.expand(sweep.settings_from(types, settings, [], "test"), grid, types)
        assert points
        return
    configs = parse_config(types, [str(ROOT / path)])
    assert len(configs) == len(types)


def _yaml_inputs(path: str) -> set[str]:
    data = yaml.safe_load((ROOT / path).read_text(encoding="utf-8")) or {}
    return {str(v) for k, v in data.items() if k in ("index", "index_dir", "eval_index") and v}


def _built_and_read(text: str) -> tuple[set[str], set[str]]:
    """The index folders a page's commands build, and those its commands (and the recipes they run) read."""
    commands = fenced_commands(text)
    built = set(re.findall(r"build_(?:index|dense)\b[^\n]*--(?:output_dir|out)\s+(\S+)", text))
    read = set(re.findall(r"(?:--index|retrieval_adapt\.search)\s+(runs/\S+)", text))
    for _program, path in readme_yaml_commands(text):
        if path.replace("\\", "/") in commands:
            read |= {p for p in _yaml_inputs(path) if p.startswith("runs/")}
    return built, read


def makefile_built() -> set[str]:
    """The index folders a make target builds (``--out $(VAR)``, VAR's default from ``VAR ?= value``)."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    defaults = dict(re.findall(r"^(\w+) \?= (\S+)", makefile, flags=re.M))
    return {defaults.get(var, "") for var in re.findall(r"build_index\b[^\n]*?--(?:output_dir|out) \$\((\w+)\)",
                                                         makefile.replace("\\\n", " "))} - {""}


def test_readme_builds_every_index_its_commands_read():
    """The Iter-RetGen sequence once read runs/index/world-dense while its recipes need world-minilm, and the
    SQuAD -> PopQA recipe evaluates on runs/index/shared-bm25, which no command built. README stands alone; a
    docs page may read an index README or another page builds."""
    built, read = _built_and_read(README)
    assert read, "expected README commands that read an index"
    assert not sorted(read - built), f"README commands read indexes that no README command builds: {read - built}"
    pages = {name: _built_and_read(text) for name, text in GUIDE.items()}
    anywhere = set().union(*(b for b, _ in pages.values())) | makefile_built()
    for name, (_, read) in pages.items():
        missing = sorted(read - anywhere)
        assert not missing, f"{name} reads indexes that no command of README or docs/ builds: {missing}"


def test_readme_builds_every_corpus_its_index_commands_read():
    for name, text in GUIDE.items():
        corpora = set(re.findall(r"build_index\b[^\n]*--corpus\s+(runs/\S+)", text))
        written = set(re.findall(r"data_builders\.corpus\b[^\n]*(?:--output_file|--output|-o)\s+(\S+)", text))
        assert not sorted(corpora - written), f"{name} indexes a corpus that no command of the page pools"
    assert re.search(r"build_index\b[^\n]*--corpus\s+runs/", README)


def test_eval_example_yaml_is_the_one_the_docs_launch():
    assert ("python -m torch.distributed.run --standalone --nproc_per_node 2 -m inference.commands.evaluate "
            "inference/configs/eval_example.yaml --output_dir runs/eval/example-dragin-2proc") in GUIDE[
        "docs/evaluation.md"]
    cfg, method, *_ = parse_config(program_types("inference.commands.evaluate"),
                                   [str(ROOT / "inference" / "configs" / "eval_example.yaml")])
    assert method.method == "dragin" and cfg.dataset == "world-two-hop"


def test_long_commands_state_one_measured_time():
    """The main job's time once read ~6 min (README), ten minutes (the script) and another (its YAML)."""
    demo = (ROOT / "training" / "configs" / "adapt_llm_demo_cpu.yaml").read_text(encoding="utf-8")
    script = (ROOT / "training" / "adapt_llm.py").read_text(encoding="utf-8")
    measured = re.search(r"Measured: ([\d.]+ min) on 2 cores", demo).group(1)
    for text in (*GUIDE.values(), script, demo):
        assert "ten minutes" not in text and "~6 min" not in text
    assert f"{measured} measured on 2 cores" in README
    for name, text in GUIDE.items():  # a page that times the main job states the same measured time
        for stated in re.findall(r"\(([\d.]+ min) measured on 2 cores", text):
            assert stated == measured, name
    assert f"{measured} measured on two cores" in script
    assert f"({measured} measured, below)" in demo


def test_readme_warns_that_smollm2_scores_near_zero_on_hotpotqa_few_shot():
    assert re.search(r"SmolLM2-135M scores near zero on HotpotQA with the papers' few-shot", README)
    assert "world-two-hop" in README


def test_readme_opens_with_one_setup_one_main_job_and_the_ci_test_command():
    """The project's standard: README starts with ONE set-up command, ONE command for the main job on the embedded
    default, and the command that runs the tests, which .ci/run runs too, spelled the same."""
    first = re.search(r"```bash\n(.*?)```", README, flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first.strip().splitlines()]
    assert commands == ["make setup",
                        "accelerate launch --config_file accelerate_configs/cpu.yaml training/adapt_llm.py",
                        "python -m pytest -q"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert commands[0] in ci and commands[2] in ci


def test_readme_is_a_short_guide():
    """A newcomer reads it in ten minutes: at most about 300 lines, one results table with its date, and no load
    averages (the measurements' narratives live in docs/)."""
    assert len(README.splitlines()) <= 300
    assert "load average" not in README and "load 1." not in README
    assert re.search(r"Measured on .* 2026-\d\d-\d\d", README)
