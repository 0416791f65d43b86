"""The evaluation commands of README and docs/, run in order by a new user, each do what their text says: no
command writes into a folder another one filled (a finished folder resumes and does nothing; a smaller --limit
re-scores it), the trained ADAPT-LLM models are compared on questions they did not train on, and shipped recipes
leave dtype to ``auto``."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# README, then every docs page: a user may copy commands from any of them into the same working folder
GUIDE = [README, *(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))]


COMMANDS = ("inference.commands.evaluate", "inference.commands.sweep")


def _evaluate_argvs() -> list[tuple[list[str], bool]]:
    """(arguments after ``-m inference.commands.evaluate`` or ``.sweep``, from a fenced block) for every evaluation
    README and docs/ show: fenced commands, and inline ones (which may be fragments, e.g. a trigger defined in the
    text)."""
    found = []
    for block in (b for text in GUIDE for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)):
        for line in block.replace("\\\n", " ").splitlines():
            if any(f"-m {c}" in line for c in COMMANDS):
                found.append((line, True))
    for span in (s for text in GUIDE for s in re.findall(r"`(python -m inference\.commands\.(?:evaluate|sweep)[^`]*)`",
                                                         text)):
        found.append((span.replace("\n", " "), False))
    argvs = []
    for line, fenced in found:
        words = shlex.split(line, comments=True)
        command = next(c for c in COMMANDS if c in words)
        argvs.append((words[words.index(command) + 1:], fenced))
    return argvs


def output_folder(argv: list[str]) -> str:
    """Where ``python -m inference.commands.evaluate ARGV`` writes (a sweep: the grid's folder)."""
    from inference.commands import evaluate as ev
    from inference.commands import sweep

    flags = dict(zip(argv, argv[1:], strict=False))  # each option with the word after it
    if sweep.is_sweep_recipe(argv):
        recipe = yaml.safe_load((ROOT / argv[0]).read_text(encoding="utf-8"))
        return flags.get("--output_dir", recipe.get("output_dir"))
    types = (ev.EvalConfig, ev.MethodConfig, ev.PromptConfig, ev.EngineConfig, ev.GateMethodConfig)
    cfg, method, *_ = parse_config(types, [str(ROOT / a) if a.endswith(".yaml") else a for a in argv])
    return cfg.output_dir or ev.default_output_dir(method.method, cfg.dataset)


def test_no_two_readme_evaluations_share_a_folder():
    folders: dict[str, str] = {}
    for argv, fenced in _evaluate_argvs():
        try:
            folder = output_folder(argv)
        except (ConfigError, SystemExit):
            assert not fenced, f"README's command does not parse: {argv}"
            continue
        command = " ".join(argv)
        assert folder not in folders or folders[folder] == command, (
            f"`{command}` writes into {folder}, which `{folders.get(folder)}` already filled")
        folders[folder] = command
    assert "runs/sweeps/world-theta-quick" in folders and "runs/eval/example-dragin-2proc" in folders


def test_trained_adapt_models_are_compared_on_held_out_questions():
    """NR, AR and ADAPT-LLM trained on world-adapt-train: evaluated on world-single-hop, ~80% of whose facts they
    trained on, the comparison measured memory; world-adapt-heldout shares no question with the training part."""
    from adaptive_rag.plumbing.question_set import QuestionSet
    from data_builders.question_loader import load_questions

    demo = yaml.safe_load((ROOT / "training" / "configs" / "adapt_llm_demo_cpu.yaml").read_text(encoding="utf-8"))
    compared = {tuple(argv) for argv, _ in _evaluate_argvs() if any(a.startswith("runs/adapt_llm_demo") for a in argv)}
    assert len(compared) == 3  # NR, AR and ADAPT-LLM (README shows the last again)
    for argv in compared:
        assert argv[argv.index("--dataset") + 1] == demo["eval_dataset"] == "world-adapt-heldout", argv
    train = {e.id for e in load_questions(QuestionSet(demo["dataset"]))}
    assert not train & {e.id for e in load_questions(QuestionSet(demo["eval_dataset"]))}


@pytest.mark.parametrize("recipe", sorted(p.name for p in (ROOT / "retrieval_adapt" / "configs").glob("*.yaml")))
def test_shipped_recipes_leave_dtype_to_auto(recipe):
    """A dtype pinned for one CPU is wrong on the next machine (bf16 is slower on CPUs without bf16 units);
    ``auto`` probes."""
    cfg = yaml.safe_load((ROOT / "retrieval_adapt" / "configs" / recipe).read_text(encoding="utf-8"))
    assert cfg.get("dtype", "auto") == "auto"
