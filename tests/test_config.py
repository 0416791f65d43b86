"""YAML -> dataclasses -> overrides; user mistakes become one line and exit code 2; repo files stay valid."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError
from retrieval_adapt.build_index import IndexConfig

ROOT = Path(__file__).resolve().parents[1]


def test_yaml_then_overrides(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("kind: dense\nbatch_size: 8\n")
    (parsed,) = parse_config((IndexConfig,), [str(cfg), "--batch_size", "4"])
    assert parsed.kind == "dense" and parsed.batch_size == 4


def test_unknown_yaml_key_is_named(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("kind: bm25\nbatchsize: 8\n")
    with pytest.raises(ConfigError, match="unknown field.*batchsize"):
        parse_config((IndexConfig,), [str(cfg)])


def test_bad_value_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="batch_size must be positive"):
        parse_config((IndexConfig,), ["--batch_size", "0"])
    with pytest.raises(ConfigError, match="does not exist"):
        parse_config((IndexConfig,), [str(tmp_path / "nope.yaml")])


def test_run_cli_turns_user_errors_into_exit_2(capsys):
    def main(argv):
        raise ConfigError("bad field 'x'")

    assert run_cli(main) == 2
    assert capsys.readouterr().err.strip() == "error: bad field 'x'"


def test_build_index_cli_on_world(tmp_path):
    out = tmp_path / "idx"
    proc = subprocess.run([sys.executable, "-m", "retrieval_adapt.build_index", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "retrieval_adapt.search", str(out), "What is the capital of France?"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0 and "Paris" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "retrieval_adapt.build_index", "--corpus", str(tmp_path / "x.jsonl")],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr


def test_every_yaml_in_the_repo_parses():
    files = [p for p in ROOT.rglob("*.yaml") if not any(part in ("runs", ".venv") for part in p.parts)]
    assert files
    for path in files:
        yaml.safe_load(path.read_text())


def test_every_path_readme_names_exists():
    readme = (ROOT / "README.md").read_text()
    paths = set(re.findall(r"`((?:training|data_builders|retrieval_adapt|inference|bench|accelerate_configs|tests)"
                           r"/[\w./-]+)`", readme))
    assert paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"README names missing paths: {missing}"


def test_yaml_error_is_one_line_with_line_and_column(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("kind: dense\n  batch_size: 8\n")  # a bad indent: PyYAML's message spans four lines
    with pytest.raises(ConfigError) as err:
        parse_config((IndexConfig,), [str(cfg)])
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{cfg}, line 2, column 13: not valid YAML (")
    cfg.write_text("kind: [dense\n")
    with pytest.raises(ConfigError, match=r"line 2, column 1: not valid YAML"):
        parse_config((IndexConfig,), [str(cfg)])


def test_flag_mistakes_are_one_line(capsys):
    def main(argv):
        parse_config((IndexConfig,), argv, prog="python -m x")

    assert run_cli(main, argv=["--batch_size", "many"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: argument --batch_size/--batch-size: invalid int value: 'many' (see python -m x --help)"


def test_ctrl_c_is_one_line_and_exit_130(capsys):
    def main(argv):
        raise KeyboardInterrupt

    try:
        code = run_cli(main)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped run_cli as a traceback")
    assert code == 130
    assert capsys.readouterr().err.strip() == ("interrupted: what was written so far is kept; rerun the same command "
                                               "to resume")
    assert run_cli(main, resume_hint="nothing is saved; rerun to start again") == 130
    assert capsys.readouterr().err.strip() == "interrupted: nothing is saved; rerun to start again"

    def main_that_says_what_it_kept(argv):
        raise KeyboardInterrupt("3 of 9 questions are saved in out/predictions.jsonl")

    assert run_cli(main_that_says_what_it_kept) == 130
    assert capsys.readouterr().err.strip() == "interrupted: 3 of 9 questions are saved in out/predictions.jsonl"


def test_run_cli_catches_a_locked_folder_and_path_mistakes(tmp_path, capsys):
    from adaptive_rag.plumbing.record_log import FolderInUseError

    def locked(argv):
        raise FolderInUseError("runs/x is being written: another run (PID 7) holds it")

    def into_a_file(argv):
        (tmp_path / "f").write_text("x")
        (tmp_path / "f" / "sub").mkdir()

    assert run_cli(locked) == 2 and "PID 7" in capsys.readouterr().err
    assert run_cli(into_a_file) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


def _evaluate_help(capsys) -> str:
    from inference.commands import evaluate

    with pytest.raises(SystemExit) as stop:
        evaluate.main(["--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def test_evaluate_help_documents_every_field_with_its_default(capsys):
    """inference.commands.evaluate --help once documented 3 of its ~45 options and did not show the YAML positional."""
    import dataclasses

    from inference.commands.evaluate import EngineConfig, EvalConfig, GateMethodConfig, MethodConfig, PromptConfig

    text = _evaluate_help(capsys)
    assert text.startswith("usage: python -m inference.commands.evaluate [-h] [CONFIG.yaml] [--field value ...]")
    assert "Evaluate any method on any dataset with any checkpoint." in text  # the module docstring's first line
    blocks = re.split(r"\n(?=  -)", text)
    for cls in (EvalConfig, MethodConfig, PromptConfig, EngineConfig, GateMethodConfig):
        for f in dataclasses.fields(cls):
            block = next((b for b in blocks if re.match(rf"  --{f.name}\b", b)), None)
            assert block is not None, f"--{f.name} missing from --help"
            assert "(default" in block, f"--{f.name} shows no default: {block!r}"
    chunk = next(b for b in blocks if b.startswith("  --chunk_size"))
    assert "questions per chunk" in chunk and "(default: 64)" in chunk  # help from the field's comment
    assert "--chunk-size" not in text  # each option once


def test_help_shows_the_yaml_values_as_defaults(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("batch_size: 8\n")
    with pytest.raises(SystemExit):
        parse_config((IndexConfig,), [str(cfg), "--help"], prog="build_index")
    out = capsys.readouterr().out
    assert re.search(r"--batch_size BATCH_SIZE\s+\(default: 8\)", out)


def test_field_comments_give_help():
    from dataclasses import dataclass

    from adaptive_rag.plumbing.config import field_comments, first_line

    @dataclass
    class Knobs:
        # how many rows; 100% of them by default
        rows: int = 3
        width: int = 2  # columns
        plain: bool = False

    assert field_comments(Knobs) == {"rows": "how many rows; 100% of them by default", "width": "columns"}
    assert first_line("Evaluate a thing on\n    many datasets. More text.\n\nDetails.") == (
        "Evaluate a thing on many datasets.")


def test_help_of_the_training_job_imports_no_torch():
    """training/adapt_llm.py --help once imported torch, transformers' Trainer, trl and peft (~10 CPU-seconds)
    before parsing a single argument."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "training/adapt_llm.py", "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0 and "[CONFIG.yaml]" in proc.stdout and "--eval_index" in proc.stdout
    heavy = sorted(set(re.findall(r"\|\s+(torch|trl|peft)$", proc.stderr, flags=re.M)))
    assert not heavy, f"--help imported {heavy}"
