"""Every command checks what it reads before it creates its output folder: a mistyped input ends in one line and
leaves nothing behind (a config.yaml written first would bind the corrected rerun to the wrong settings)."""

from __future__ import annotations

import importlib
import re

import pytest

from adaptive_rag.plumbing.cli import run_cli

# (module with main(argv), its arguments; OUT is the output folder, IDX an index folder that does not exist)
CASES = [
    ("training.distill_set", ["--dataset", "MISSING.jsonl", "--out", "OUT"], r"dataset 'MISSING.jsonl'"),
    ("training.distill_set", ["--index_dir", "IDX", "--out", "OUT"], r"--index .*IDX: no such folder"),
    ("training.evaluate_adapted", ["--dataset", "MISSING.jsonl", "--out", "OUT"], r"dataset 'MISSING.jsonl'"),
    ("training.evaluate_adapted", ["--index_dir", "IDX", "--out", "OUT"], r"--index .*IDX: no such"),
    ("training.distill_retriever", ["--data_dir", "NODATA", "--output_dir", "OUT"], r"NODATA: no dataset/"),
    ("retrieval_adapt.build_index", ["--corpus", "MISSING.jsonl", "--kind", "bm25", "--out", "OUT"], r"MISSING.jsonl"),
    ("data_builders.adapt_llm", ["--dataset", "MISSING.jsonl", "--data_dir", "OUT"], r"dataset 'MISSING.jsonl'"),
    ("inference.commands.evaluate", ["--dataset", "MISSING.jsonl", "--output_dir", "OUT"], r"MISSING.jsonl"),
]


@pytest.mark.parametrize(("module", "args", "message"), CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_a_missing_input_leaves_no_output_folder(module, args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "OUT"
    argv = [str(out) if a == "OUT" else str(tmp_path / a) if a == "IDX" else a for a in args]
    assert run_cli(importlib.import_module(module).main, argv=argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert not out.exists(), sorted(p.name for p in out.iterdir())


def test_a_bad_generator_is_named_before_the_builder_writes(tmp_path, monkeypatch, capsys):
    """With a real index folder, the next input checked is the generator's name."""
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / "meta.json").write_text('{"kind": "bm25"}')
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    module = importlib.import_module("training.distill_set")
    argv = ["--index_dir", str(tmp_path / "idx"), "--generator", "./no-model", "--out", str(tmp_path / "OUT")]
    assert run_cli(module.main, argv=argv) == 2
    assert "--model ./no-model: no such model folder" in capsys.readouterr().err
    assert not (tmp_path / "OUT").exists()
