"""check_index: a sound index passes; a damaged one, or one built from another corpus, fails in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage
from data_builders.readers import write_passages_jsonl
from data_builders.world import build_world
from retrieval_adapt.build_index import main as build_main
from retrieval_adapt.check_index import check
from retrieval_adapt.check_index import main as check_main


@pytest.fixture()
def built(tmp_path) -> tuple[Path, Path, list[Passage]]:
    passages = build_world().passages[:300]
    corpus = write_passages_jsonl(passages, tmp_path / "corpus.jsonl")
    out = tmp_path / "idx"
    assert run_cli(build_main, argv=["--corpus", str(corpus), "--out", str(out), "--chunk_size", "70"]) == 0
    return out, corpus, passages


def _error(capsys, argv) -> str:
    assert run_cli(check_main, argv=argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_sound_index_passes(built, capsys):
    out, corpus, passages = built
    assert run_cli(check_main, argv=[str(out), "--corpus", str(corpus)]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"ok: {out}: 300 passages") and "32 sampled passages found" in line


def test_changed_passage_bytes_fail_the_hash(built, capsys):
    out, _, _ = built
    store = out / "passages.jsonl"
    data = bytearray(store.read_bytes())
    i = data.index(b"was born")
    data[i:i + 8] = b"was barn"  # same size: the manifest's sizes cannot see it
    store.write_bytes(bytes(data))
    assert "passages.jsonl has sha256" in _error(capsys, [str(out)])


def test_other_corpus_fails(built, tmp_path, capsys):
    out, _, passages = built
    longer = write_passages_jsonl([*passages, Passage("extra", "X", "one more")], tmp_path / "longer.jsonl")
    assert "the corpus holds 301 passages, the index 300" in _error(capsys, [str(out), "--corpus", str(longer)])
    edited = list(passages)
    edited[123] = Passage(edited[123].id, edited[123].title, edited[123].text + " Edited.")
    other = write_passages_jsonl(edited, tmp_path / "edited.jsonl")
    err = _error(capsys, [str(out), "--corpus", str(other)])
    assert f"first difference at passage 123 (id {passages[123].id})" in err


def test_damaged_matrix_loses_the_sample(built, capsys):
    out, _, _ = built
    path = out / "bm25" / "data.csc.index.npy"
    scores = np.load(path)
    np.save(path, np.zeros_like(scores))  # the disk filled with zeros: same size, no score left
    assert "32 of 32 sampled passages are not found by their own text" in _error(capsys, [str(out)])


def test_missing_file_and_old_index(built, capsys):
    out, _, _ = built
    with pytest.raises(DataError, match="no such file"):
        check(out, corpus=str(out / "nope.jsonl"))
    with pytest.raises(FileNotFoundError, match="not an index folder"):
        check(out / "nothing")
    (out / "bm25" / "indices.csc.index.npy").unlink()
    assert "bm25/indices.csc.index.npy is missing" in _error(capsys, [str(out)])
