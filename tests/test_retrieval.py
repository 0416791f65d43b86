"""BM25 and dense retrieval: build, search, save, load; recall on the embedded world."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_rag.plumbing.records import Passage
from retrieval_adapt.bm25 import BM25Retriever
from retrieval_adapt.loading import load_retriever

CORPUS = [Passage("a", "Quarvik", "Quarvik is a port city on the Tessna river."),
          Passage("b", "Veltrane Osk", "Veltrane Osk was born in Quarvik in 1962 and founded Kelmora Records."),
          Passage("c", "Kelmora Records", "Kelmora Records is a music label based in Halvenmark."),
          Passage("d", "Zürich", "Zürich is the largest city in Switzerland; its lake is called Zürichsee.")]


def test_bm25_ranks_and_differs_per_query(tmp_path):
    bm25 = BM25Retriever.build(CORPUS, show_progress=False)
    hits = bm25.search(["Was Veltrane Osk born in Quarvik?", "music label Halvenmark", "Zürichsee"], k=2)
    assert [row[0].passage.id for row in hits] == ["b", "c", "d"]  # not the same documents for every query
    assert hits[0][0].score >= hits[0][1].score
    bm25.save(tmp_path / "idx")
    again = load_retriever(tmp_path / "idx")
    assert [h.passage.id for h in again.search(["Was Veltrane Osk born in Quarvik?"], 2)[0]] == [h.passage.id for h in
                                                                                          hits[0]]


def test_bm25_edge_cases():
    bm25 = BM25Retriever.build(CORPUS, show_progress=False)
    assert bm25.search([], 3) == []
    assert bm25.search(["the of and"], 3) == [[]]  # only stopwords: nothing to rank
    assert len(bm25.search(["Quarvik"], 50)[0]) <= len(CORPUS)
    with pytest.raises(ValueError, match="k must be positive"):
        bm25.search(["x"], 0)
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Retriever.build([])


def test_not_an_index_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an index folder"):
        load_retriever(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_dense_build_save_load(tmp_path, kind):
    from retrieval_adapt.dense import DenseRetriever, FaissOptions
    from retrieval_adapt.encoders import MeanPoolingEncoder

    enc = MeanPoolingEncoder.from_name("minilm")
    many = [Passage(f"{p.id}{i}", p.title, p.text) for i in range(20) for p in CORPUS]
    dense = DenseRetriever.build(many if kind == "ivf" else CORPUS, enc,
                                 faiss_options=FaissOptions(kind=kind, nlist=2), show_progress=False)
    top = dense.search(["Who founded Kelmora Records?"], 2)[0]
    assert top[0].passage.id[0] in ("b", "c")
    dense.save(tmp_path / "d")
    again = load_retriever(tmp_path / "d")
    assert [h.passage.id for h in again.search(["Who founded Kelmora Records?"], 2)[0]] == [h.passage.id for h in top]
    assert np.allclose(again.passage_embeddings([0]).numpy(), dense.embeddings[:1], atol=1e-6)


@pytest.mark.slow
def test_world_recall_table_bm25_and_dense():
    from data_builders.world import build_world
    from retrieval_adapt.dense import DenseRetriever
    from retrieval_adapt.encoders import MeanPoolingEncoder
    from retrieval_adapt.recall import recall_table

    world = build_world()
    bm25 = BM25Retriever.build(world.passages, show_progress=False)
    dense = DenseRetriever.build(world.passages, MeanPoolingEncoder.from_name("minilm"), show_progress=False)
    print("\nretriever  recall@1  recall@3  recall@10  (world single-hop)")
    for name, r in (("bm25", bm25), ("dense", dense)):
        table = recall_table(r, world.single_hop, ks=(1, 3, 10))
        print(f"{name:9s}  {table['recall@1']:.3f}     {table['recall@3']:.3f}     {table['recall@10']:.3f}")
        assert table["recall@3"] >= 0.8


# ---- index folders: written whole, damaged ones refused in one line ------------------------------------------------


def _build_cli(argv: list[str]) -> int:
    from adaptive_rag.plumbing.cli import run_cli
    from retrieval_adapt.build_index import main

    return run_cli(main, argv=argv)


def _corpus_file(tmp_path, passages=CORPUS):
    from data_builders.readers import write_passages_jsonl

    return write_passages_jsonl(passages, tmp_path / "corpus.jsonl")


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def _truncate(path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize("damage", ["delete index.faiss", "truncate index.faiss", "truncate embeddings.npy",
                                    "delete passages.jsonl", "delete meta.json"])
def test_damaged_dense_index_is_one_clear_error(tmp_path, tiny_encoder, capsys, damage):
    from retrieval_adapt.search import main as search_main

    out = tmp_path / "idx"
    assert _build_cli(["--corpus", str(_corpus_file(tmp_path)), "--kind", "dense", "--encoder", str(tiny_encoder),
                       "--out", str(out)]) == 0
    assert load_retriever(out).search(["Quarvik"], 1)[0]
    action, name = damage.split()
    (out / name).unlink() if action == "delete" else _truncate(out / name)
    from adaptive_rag.plumbing.cli import run_cli

    capsys.readouterr()
    assert run_cli(search_main, argv=[str(out), "Quarvik"]) == 2
    err = _one_line_error(capsys)
    assert str(out) in err and name in err
    # the exact command that rebuilds it, from the folder's config.yaml
    assert f"rebuild the index: python -m retrieval_adapt.build_index --corpus {tmp_path}/corpus.jsonl --kind dense " \
           f"--encoder {tiny_encoder} --faiss flat --max_length 256 --output_dir {out}" in err


def test_damaged_files_of_an_index_without_manifest(tmp_path, tiny_encoder):
    """Folders written before the manifest existed: faiss' and numpy's errors become the same one-line error."""
    import json

    from adaptive_rag.plumbing.errors import DataError
    from retrieval_adapt.dense import DenseRetriever
    from retrieval_adapt.encoders import MeanPoolingEncoder

    DenseRetriever.build(CORPUS, MeanPoolingEncoder.from_name(str(tiny_encoder)), show_progress=False).save(
        tmp_path / "d")
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    del meta["files"]
    (tmp_path / "d" / "meta.json").write_text(json.dumps(meta))
    for name in ("embeddings.npy", "index.faiss"):
        _truncate(tmp_path / "d" / name)
        rebuild = "rebuild the index: python -m retrieval_adapt.build_index --corpus CORPUS --kind dense --encoder"
        with pytest.raises(DataError, match=f"{name} is unreadable.*{rebuild}"):
            load_retriever(tmp_path / "d")


@pytest.mark.parametrize("name", ["bm25/vocab.index.json", "bm25/data.csc.index.npy", "passages.jsonl"])
def test_damaged_bm25_index_is_one_clear_error(tmp_path, name):
    from adaptive_rag.plumbing.errors import DataError

    BM25Retriever.build(CORPUS, show_progress=False).save(tmp_path / "b")
    _truncate(tmp_path / "b" / name)
    with pytest.raises(DataError, match=f"{name} has .* bytes.*rebuild the index"):
        load_retriever(tmp_path / "b")
    (tmp_path / "b" / name).unlink()
    with pytest.raises(DataError, match=f"{name} is missing"):
        load_retriever(tmp_path / "b")


def test_rebuild_replaces_the_index_only_when_complete(tmp_path, monkeypatch):
    import retrieval_adapt.bm25_stream as bm25_stream

    out = tmp_path / "idx"
    corpus = _corpus_file(tmp_path)
    assert _build_cli(["--corpus", str(corpus), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    def killed(work, manifest, state, settings, folder, show_progress=True):
        (folder / "passages.jsonl").write_text("{")  # half written, then the kill
        raise KeyboardInterrupt

    monkeypatch.setattr(bm25_stream, "assemble", killed)
    assert _build_cli(["--corpus", str(corpus), "--out", str(out)]) == 130  # run_cli's exit status for Ctrl-C
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # the old index, untouched
    # no staging folder, no lock; the finished chunks stay for the rerun to resume from
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "idx", "idx.build"]
    assert [h.passage.id for h in load_retriever(out).search(["Quarvik"], 1)[0]] == ["a"]
    monkeypatch.undo()
    assert _build_cli(["--corpus", str(corpus), "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "idx"]


def test_interrupted_swap_is_recovered(tmp_path, capsys):
    out = tmp_path / "idx"
    BM25Retriever.build(CORPUS, show_progress=False).save(out)
    out.rename(tmp_path / "idx.old")  # a kill between the two renames of a replace
    with pytest.raises(Exception, match="idx.old holds the index an interrupted rebuild moved aside"):
        load_retriever(out)
    assert _build_cli(["--corpus", str(_corpus_file(tmp_path)), "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "idx"]


def test_build_index_on_an_empty_corpus_writes_nothing(tmp_path, capsys, monkeypatch):
    import retrieval_adapt.build_index as build_index

    blank = tmp_path / "blank.jsonl"
    blank.write_text('{"id": "a", "title": "", "text": ""}\n')
    assert _build_cli(["--corpus", str(blank), "--out", str(tmp_path / "idx")]) == 2
    err = _one_line_error(capsys)
    assert str(blank) in err and "no passages" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blank.jsonl"]
    # a reader that returns no passages without complaining (e.g. a custom format): build_index's own check
    monkeypatch.setattr(build_index, "load_corpus", lambda cfg: [])
    assert _build_cli(["--corpus", str(blank), "--kind", "dense", "--out", str(tmp_path / "idx")]) == 2
    assert "blank.jsonl: the corpus holds no passages" in _one_line_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blank.jsonl"]


def test_build_index_refuses_a_folder_that_is_not_an_index(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert _build_cli(["--corpus", str(_corpus_file(tmp_path)), "--out", str(out)]) == 2
    assert "holds more than an index (notes.txt)" in _one_line_error(capsys)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_build_index_lock(tmp_path, capsys, caplog):
    import json
    import logging
    import os
    import socket
    import subprocess
    import sys

    out = tmp_path / "idx"
    out.mkdir()
    lock = out / ".lock"
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))  # a live process
    argv = ["--corpus", str(_corpus_file(tmp_path)), "--out", str(out)]
    assert _build_cli(argv) == 2
    assert "is being written: another run" in _one_line_error(capsys)
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    with caplog.at_level(logging.WARNING):
        assert _build_cli(argv) == 0
    assert "taking over a stale lock" in caplog.text
    assert sorted(p.name for p in out.iterdir()) == ["bm25", "config.yaml", "meta.json", "passages.jsonl",
                                                     "passages.offsets.npy"]
