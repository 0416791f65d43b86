"""Splitting articles, pooling corpora, the shared development corpus and the CLI."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders.corpus import (
    SHARED_CORPUS_INPUTS,
    main,
    parse_input,
    pool_corpus,
    pool_corpus_with_stats,
    pooled_shared_corpus,
    split_into_passages,
)
from data_builders.readers import read_corpus, read_passages_jsonl, read_qa

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def test_split_into_passages_100_words():
    text = " ".join(f"w{i}" for i in range(250))
    passages = split_into_passages([("Long", text), ("Empty", "  "), ("Short", "só  três\npalavras")])
    assert [len(p.text.split()) for p in passages] == [100, 100, 50, 3]
    assert passages[0].text.startswith("w0 w1") and passages[2].text.endswith("w249")
    assert passages[3] == Passage(passages[3].id, "Short", "só três palavras")
    assert [p.id for p in split_into_passages([("Long", text)])] == [p.id for p in passages[:3]]  # deterministic
    assert len({p.id for p in passages}) == 4
    assert len(split_into_passages([("T", "a b c d e")], words=2)) == 3
    with pytest.raises(ValueError, match="words must be >= 1"):
        split_into_passages([("T", "a")], words=0)


def test_pool_corpus_dedups_normalised_and_drops_empty(caplog):
    a = Passage("a", "Title", "Some text.")
    same_as_a = Passage("a2", " Title", "Some \n text.")
    gold = Passage("g", "Gold", "Gold text.")
    example = QAExample("q", "Q?", ["x"], [gold, a])
    with caplog.at_level(logging.WARNING):
        pooled, stats = pool_corpus_with_stats([[a, Passage("e", "Empty", " \n ")], [same_as_a], [example]])
    assert pooled == [a, gold]
    assert (stats.seen, stats.kept, stats.duplicates, stats.empty) == (5, 2, 2, 1)
    assert "skipped 1 passages with empty text" in caplog.text
    assert pool_corpus([]) == []


def test_pool_corpus_rejects_one_id_for_two_passages():
    with pytest.raises(DataError, match=r"pool_corpus input 1, field 'id': id '7' names two different passages"):
        pool_corpus([[Passage("7", "A", "one")], [Passage("7", "B", "two")]])


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _mini_shared(root: Path) -> Path:
    """A tiny stand-in for shared/data with one record in each file pooled_shared_corpus reads (each ships at
    least one passage: a file that ships none is an error; some repeat another file's, to be merged)."""
    para = {"title": "Shared", "paragraph_text": "Shared paragraph.", "is_supporting": True}
    files = {
        "hotpotqa/dev_subsampled.jsonl": {
            "question_id": "h",
            "question_text": "q?",
            "contexts": [para],
            "answers_objects": [{"spans": ["a"]}],
        },
        "2wikimultihopqa/migres/wikihop.json": {
            "_id": "w",
            "type": "inference",
            "question": "q?",
            "answer": "a",
            "context": [["W", ["Wiki sentence."]]],
            "supporting_facts": [],
        },
        "musique/migres/musique.json": {"id": "2hop__1", "question": "q?", "answer": "a", "paragraphs": [para]},
        "strategyqa/migres/strategyQA_aug_context.jsonl": {"title": "S", "para_index": 1, "contents": "Strategy."},
        "squad/dev-v1.1.json": {"data": [{"title": "Sq", "paragraphs": [{"context": "Squad ctx.", "qas": []}]}]},
        "squad/test-v1.1.json": {"data": [{"title": "Sq", "paragraphs": [{"context": "Squad  ctx.", "qas": []}]}]},
        "popqa/hipporag2_subset_via_NeuroPath/popqa.json": [
            {"id": 0, "question": "q?", "possible_answers": '["a"]', "s_pop": 1,
             "paragraphs": [{"title": "W", "text": "Wiki sentence.", "is_supporting": True}]}
        ],
        "wiki_corpus/sample_data.jsonl": {"id": "0", "contents": '"Evan"\nEvan text.'},
        "wiki_corpus/2wikimultihopqa_corpus.json": [
            {"title": "W", "text": "Wiki  sentence."},
            {"title": "T", "text": ""},
        ],
    }
    assert set(files) == {rel for rel, _ in SHARED_CORPUS_INPUTS}
    for rel, data in files.items():
        _write(root / rel, json.dumps(data) + "\n")
    return root


def test_pooled_shared_corpus_on_a_mini_copy(tmp_path):
    pooled = pooled_shared_corpus(_mini_shared(tmp_path / "data"))
    assert [p.title for p in pooled] == ["Shared", "W", "S", "Sq", "Evan"]
    with pytest.raises(DataError, match="no such directory"):
        pooled_shared_corpus(tmp_path / "nowhere")


def test_gold_passage_ids_match_pooled_corpus(tmp_path):
    root = _mini_shared(tmp_path / "data")
    ids = {p.id for p in pooled_shared_corpus(root)}
    [hotpot] = read_qa(root / "hotpotqa/dev_subsampled.jsonl")
    assert hotpot.gold_passages and all(p.id in ids for p in hotpot.gold_passages)


def test_parse_input():
    assert parse_input("dpr_tsv:/x/psgs.tsv") == (Path("/x/psgs.tsv"), "dpr_tsv")
    assert parse_input("C:/data/a.jsonl") == (Path("C:/data/a.jsonl"), None)  # not a format: part of the path


def test_cli_writes_pooled_corpus(tmp_path, capsys):
    tsv = _write(tmp_path / "psgs.tsv", "id\ttext\ttitle\np1\tAlpha text.\tAlpha\np2\tBeta.\tBeta\n")
    jsonl = _write(tmp_path / "more.jsonl", '{"id": "p1", "title": "Alpha", "text": "Alpha  text."}\n')
    out = tmp_path / "out" / "corpus.jsonl"
    assert main([f"dpr_tsv:{tsv}", str(jsonl), "-o", str(out)]) == 0
    assert [p.id for p in read_passages_jsonl(out)] == ["p1", "p2"]
    printed = capsys.readouterr().out
    assert "2 passages written" in printed and "1 duplicates merged" in printed
    assert main(["--shared-data", str(_mini_shared(tmp_path / "data")), "-o", str(out)]) == 0
    assert len(read_corpus(out)) == 5


def test_cli_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o.jsonl")])
    assert exc.value.code == 2 and "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["-o", str(tmp_path / "o.jsonl")])
    assert "give at least one input" in capsys.readouterr().err


def test_cli_mistakes_are_one_line_and_write_nothing(tmp_path, capsys):
    tsv = _write(tmp_path / "psgs.tsv", "id\ttext\ttitle\np1\tAlpha text.\tAlpha\n")
    header_only = _write(tmp_path / "empty.tsv", "id\ttext\ttitle\n")
    out = tmp_path / "out.jsonl"
    for argv, message in [([str(tsv), "-o", str(tmp_path)], "is a folder; name the JSONL file"),
                          ([str(tsv)], "the following arguments are required: --output_file"),
                          ([f"dpr_tsv:{header_only}", "-o", str(out)], "empty.tsv: no passages")]:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert exc.value.code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_cli_help_runs_as_module():
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-m", "data_builders.corpus", "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "--shared_data_dir" in done.stdout


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs the shared/data development files beside the checkout")
def test_real_pooled_shared_corpus():
    pooled = pooled_shared_corpus(SHARED_DATA)
    assert 19_000 <= len(pooled) <= 22_000  # SPEC.md: about 20k passages
    assert len({p.id for p in pooled}) == len(pooled)
    ids = {p.id for p in pooled}
    for rel in ("hotpotqa/dev_subsampled.jsonl", "popqa/hipporag2_subset_via_NeuroPath/popqa.json"):
        assert all(p.id in ids for e in read_qa(SHARED_DATA / rel) for p in e.gold_passages), rel
