"""Every command README.md and docs/*.md show runs a program that exists and whose parser accepts the flags shown
(and, where a flag has choices, the value shown): a renamed flag, a moved module or a dropped console script
fails here, in the document that still shows it."""

from __future__ import annotations

import pytest
from readme_commands import DOCS, ROOT, all_shown, check, resolve, shown_commands, shown_in

# Commands that only run after the example code beside them is added (the "Adding a trigger" example registers
# low_margin and its --margin knob; tests/test_plugins.py runs that example on the engine).
NEEDS_THE_EXAMPLE = ("--trigger low_margin",)


def _cases():
    return [c for c in all_shown() if not any(part in c.text for part in NEEDS_THE_EXAMPLE)]


@pytest.mark.parametrize("shown", _cases(), ids=str)
def test_every_command_the_docs_show_runs_a_program_that_accepts_its_flags(shown):
    problems = check(shown)
    assert problems == [], f"{shown}: {'; '.join(problems)}"


def test_the_reader_finds_the_commands():
    readme = shown_commands(ROOT / "README.md")
    assert len(readme) > 20
    assert any(c.words[:2] == ["make", "setup"] for c in readme)
    assert sum(1 for doc in DOCS if doc.parent.name == "docs" and shown_commands(doc)) >= 5
    # a variable set in a block is expanded where a later line uses it, as the shell does
    assert not [c for c in all_shown() if "$" in c.text and not c.text.startswith("make")]


def _one(text: str) -> list[str]:
    (shown,) = shown_in(text, "example.md")
    return check(shown)


def test_the_check_catches_an_unknown_flag_a_bad_choice_and_a_missing_program():
    assert _one("```bash\npython -m retrieval_adapt.build_index --corpus world --kind bm25 --out x\n```\n") == []
    assert _one("```bash\npython -m retrieval_adapt.build_index --corpus world --no_such_flag 3\n```\n") == [
        "--no_such_flag is not an option of python -m retrieval_adapt.build_index"]
    assert _one("```bash\npython -m retrieval_adapt.build_index --corpus world --kind sparse\n```\n")[0].startswith(
        "--kind sparse: not one of")
    assert _one("```bash\npython -m retrieval_adapt.build_index --kind DIR\n```\n") == []  # a placeholder
    assert _one("`python -m inference.commands.no_such --x 1`") == ["missing module inference.commands.no_such"]
    assert _one("`python bench/no_such.py --x 1`") == ["missing script bench/no_such.py"]
    assert _one("```bash\narag-no-such --x 1\n```\n") == [
        "arag-no-such is no console script of pyproject.toml [project.scripts]"]
    assert _one("`make no-such-target`") == ["the Makefile has no target no-such-target"]
    assert _one("`bash bench/experiments/no_such.sh 0`") == ["bench/experiments/no_such.sh does not exist"]
    assert _one("`bench/gpu_check.py` alone, then `python bench/gpu_check.py --fast`") == [
        "bench/gpu_check.py takes no options, shown with --fast"]
    sweep = _one("`python -m inference.commands.sweep --limit 2`")  # its main() reads the recipe before parsing
    assert len(sweep) == 1 and sweep[0].startswith("inference.commands.sweep: its parser could not be read")


def test_launchers_and_console_scripts_reach_the_program():
    launched = ["accelerate", "launch", "--config_file", "accelerate_configs/multi_gpu.yaml", "-m",
                "retrieval_adapt.build_dense", "--corpus", "x.tsv"]
    assert (resolve(launched).kind, resolve(launched).name) == ("module", "retrieval_adapt.build_dense")
    torchrun = ["python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
                "inference.commands.evaluate", "--limit", "3"]
    assert resolve(torchrun).name == "inference.commands.evaluate" and resolve(torchrun).args == ["--limit", "3"]
    script = resolve(["accelerate", "launch", "training/adapt_llm.py", "training/configs/adapt_llm_paper.yaml"])
    assert (script.kind, script.name) == ("script", "training/adapt_llm.py")
    assert resolve(["arag-evaluate", "--limit", "2"]).name == "inference.commands.evaluate"
    assert _one("```bash\narag-evaluate --method dragin --limit 2\n```\n") == []
    assert _one("```bash\narag-evaluate --method no-such-method\n```\n")[0].startswith("--method no-such-method")
    indented = "Prose.\n\n    python -m inference.commands.evaluate --no_such 1\n\n* item\n    python -m x --y\n"
    assert _one(indented) == ["--no_such is not an option of python -m inference.commands.evaluate"]
    flags = "```bash\nARGS=\"--limit 2 --no_such 1\"\npython -m inference.commands.evaluate $ARGS\n```\n"
    assert _one(flags) == ["--no_such is not an option of python -m inference.commands.evaluate"]
