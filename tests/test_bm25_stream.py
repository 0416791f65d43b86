"""BM25 built from a stream in chunks: the same index as in-memory bm25s, resumable after kill -9, loaded without a
passage list; the streamed corpus readers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import bm25s
import numpy as np
import pytest

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage
from data_builders.passage_stream import iter_passages
from data_builders.readers import write_passages_jsonl
from data_builders.world import build_world, scale_passages
from retrieval_adapt.bm25 import BM25Retriever
from retrieval_adapt.bm25_stream import StreamSettings, build_dir, build_streamed
from retrieval_adapt.corpus_store import PassageStore
from retrieval_adapt.loading import load_retriever

ROOT = Path(__file__).resolve().parents[1]
N = 12_000  # enough for several chunks and several assembly passes; 100k was run by hand (docs/scale.md)
CHUNK = 2_500


@pytest.fixture(scope="module")
def corpus() -> list[Passage]:
    return scale_passages(build_world(), N)


@pytest.fixture(scope="module")
def streamed(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("s") / "idx"
    build_streamed(corpus, out, settings=StreamSettings(chunk_size=CHUNK), show_progress=False)
    return out


def _columns(index: bm25s.BM25) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """term -> (document ids, scores): the score matrix whatever the vocabulary's numbering."""
    s = index.scores
    return {t: (np.asarray(s["indices"][s["indptr"][i]:s["indptr"][i + 1]]),
                np.asarray(s["data"][s["indptr"][i]:s["indptr"][i + 1]]))
            for t, i in index.vocab_dict.items() if t}


def test_streamed_index_equals_in_memory_bm25s(corpus, streamed):
    memory = BM25Retriever.build(corpus, show_progress=False)
    on_disk = bm25s.BM25.load(streamed / "bm25", mmap=True)  # bm25s's own loader reads the layout
    assert on_disk.scores["num_docs"] == len(corpus)
    assert len(on_disk.scores["indptr"]) == len(memory.index.scores["indptr"])
    mem_cols, disk_cols = _columns(memory.index), _columns(on_disk)
    assert mem_cols.keys() == disk_cols.keys()
    for term, (docs, scores) in mem_cols.items():
        assert np.array_equal(docs, disk_cols[term][0]), term
        assert np.array_equal(scores, disk_cols[term][1]), term  # bit for bit, not approximately
    loaded = load_retriever(streamed)
    queries = [p.title for p in corpus[::397]] + [p.text[:80] for p in corpus[5::911]] + ["the of", "zzqx unseen"]
    for want, got in zip(memory.search(queries, 10), loaded.search(queries, 10)):
        assert [(h.passage, h.score) for h in want] == [(h.passage, h.score) for h in got]


def test_loaded_index_holds_no_passage_list(streamed, corpus):
    retriever = load_retriever(streamed)
    assert isinstance(retriever.passages, PassageStore) and not isinstance(retriever.passages, list)
    assert not hasattr(retriever.passages, "__dict__") or all(
        not isinstance(v, list) for v in vars(retriever.passages).values())
    assert isinstance(retriever.index.scores["data"], np.memmap)  # the matrix stays on disk too
    assert len(retriever.passages) == len(corpus)
    assert retriever.passages[7] == corpus[7] and retriever.passages[-1] == corpus[-1]
    with pytest.raises(IndexError):
        retriever.passages[len(corpus)]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


KILLER = textwrap.dedent("""
    import os, signal, sys
    from data_builders.world import build_world, scale_passages
    import retrieval_adapt.bm25_stream as s
    out, chunk, where, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    write, assemble, seen = s._write_chunk, s.assemble, []
    def write_then_die(folder, arrays, new):
        seen.append(folder)
        if where == "chunk" and len(seen) == 3:
            (folder.parent / (folder.name + ".tmp")).mkdir()  # a half-written chunk folder, then kill -9
            os.kill(os.getpid(), signal.SIGKILL)
        write(folder, arrays, new)
    def assemble_then_die(*args, **kwargs):
        assemble(*args, **kwargs)  # every index file written into the staging folder
        os.kill(os.getpid(), signal.SIGKILL)
    s._write_chunk = write_then_die
    if where == "assemble":
        s.assemble = assemble_then_die
    s.build_streamed(scale_passages(build_world(), n), out, settings=s.StreamSettings(chunk_size=chunk),
                     show_progress=False)
""")


@pytest.mark.parametrize("where", ["chunk", "assemble"])
def test_kill_9_then_rerun_gives_the_same_index(corpus, streamed, tmp_path, monkeypatch, where):
    out = tmp_path / "idx"
    run = subprocess.run([sys.executable, "-c", KILLER, str(out), str(CHUNK), where, str(N)], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == -9, run.stderr
    assert not (out / "meta.json").exists()
    manifest = json.loads((build_dir(out) / "manifest.json").read_text())
    assert len(manifest["chunks"]) == (2 if where == "chunk" else -(-N // CHUNK))
    import retrieval_adapt.bm25_stream as s

    tokenized = []
    real = s._tokenize_chunk
    monkeypatch.setattr(s, "_tokenize_chunk", lambda *a: tokenized.append(1) or real(*a))
    build_streamed(corpus, out, settings=StreamSettings(chunk_size=CHUNK), show_progress=False)
    assert len(tokenized) == -(-N // CHUNK) - len(manifest["chunks"])  # finished chunks were not redone
    assert _files(out) == _files(streamed)
    assert not build_dir(out).exists()


def test_other_settings_start_over(corpus, tmp_path):
    small = corpus[:300]
    out = tmp_path / "idx"
    build_dir(out).mkdir()
    (build_dir(out) / "manifest.json").write_text(json.dumps({"settings": {"chunk_size": 7}, "chunks": [
        {"name": "chunk-00000", "records": 100, "docs": 100, "empty": 0, "tokens": 1, "entries": 1}]}))
    build_streamed(small, out, settings=StreamSettings(chunk_size=100), show_progress=False)
    assert len(load_retriever(out).passages) == 300


def test_duplicate_ids_and_empty_texts(tmp_path):
    ok = [Passage("a", "T", "alpha beta"), Passage("e", "", "  "), Passage("b", "T", "gamma delta")]
    meta = build_streamed(ok, tmp_path / "i", settings=StreamSettings(chunk_size=2), show_progress=False)
    assert meta["num_passages"] == 2 and meta["empty_skipped"] == 1
    dup = [Passage("a", "T", "alpha"), Passage("b", "T", "beta"), Passage("a", "T", "gamma")]
    with pytest.raises(DataError, match="passage id 'a' appears more than once"):
        build_streamed(dup, tmp_path / "j", settings=StreamSettings(chunk_size=2), show_progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i"]  # no chunks kept for a corpus that must change
    with pytest.raises(ValueError, match="chunk_size must be positive"):
        StreamSettings(chunk_size=0)


def test_stream_readers_agree(tmp_path):
    import datasets

    ps = [Passage("1", "Aaron", 'He said "hi"\tthere'), Passage("2", "", "no title"), Passage("3", "Zed", "Zürich")]
    jsonl = write_passages_jsonl(ps, tmp_path / "p.jsonl")
    tsv = tmp_path / "p.tsv"
    rows = ["id\ttext\ttitle"] + ['{}\t"{}"\t{}'.format(p.id, p.text.replace('"', '""'), p.title) for p in ps]
    tsv.write_text("\n".join(rows) + "\n", encoding="utf-8")
    datasets.Dataset.from_list([p.to_dict() for p in ps]).save_to_disk(str(tmp_path / "ds"))
    flash = tmp_path / "f.jsonl"
    flash.write_text("".join(json.dumps({"id": p.id, "contents": f'"{p.title}"\n{p.text}'}) + "\n" for p in ps))
    assert list(iter_passages(jsonl)) == ps
    assert list(iter_passages(tsv)) == ps
    assert list(iter_passages(tmp_path / "ds")) == ps
    assert [(p.id, p.text) for p in iter_passages(flash)] == [(p.id, p.text) for p in ps]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "text": "x"}\n{"id": \n')
    with pytest.raises(DataError, match="bad.jsonl, line 2: malformed JSON"):
        list(iter_passages(bad))
