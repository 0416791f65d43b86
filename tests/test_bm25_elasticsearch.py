"""The ``elasticsearch`` BM25 scoring (DRAGIN's index): Elasticsearch's English analyzer, Lucene's BM25 per field with
its one-byte length norm, ``best_fields`` with tie breaker 0.5, against values computed by hand; streamed builds,
resumes and bad input as the default scoring has them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage
from retrieval_adapt import es_scoring
from retrieval_adapt.bm25 import BM25Retriever
from retrieval_adapt.bm25_stream import StreamSettings, build_dir, build_streamed
from retrieval_adapt.es_analysis import ENGLISH_STOP_WORDS, EnglishAnalyzer, tokenize
from retrieval_adapt.es_bm25 import ElasticsearchBM25Retriever
from retrieval_adapt.loading import load_retriever

# ---- the analyzer ------------------------------------------------------------------------------------------------


def test_standard_tokenizer_word_breaks():
    # the expected tokens are what Lucene 9.9's StandardTokenizer gives (checked with pyserini's jar)
    text = ("John's U.S.A. don't 3.14 1,000 10:30 foo_bar e.g. co-operate a:b O\u2019Neil "
            "\u6771\u4eac\u30bf\u30ef\u30fc __ x")
    assert tokenize(text) == ["John's", "U.S.A", "don't", "3.14", "1,000", "10", "30", "foo_bar", "e.g", "co",
                              "operate", "a:b", "O\u2019Neil", "\u6771", "\u4eac", "\u30bf\u30ef\u30fc", "x"]
    assert tokenize("x" * 300) == ["x" * 255, "x" * 45]  # StandardTokenizer cuts at maxTokenLength


def test_english_analyzer_chain():
    analyzer = EnglishAnalyzer()
    assert len(ENGLISH_STOP_WORDS) == 33 and "will" in ENGLISH_STOP_WORDS and "from" not in ENGLISH_STOP_WORDS
    # possessive before lowercase, stopwords after it, then Porter (1980: "generously" -> "gener", Snowball's
    # english keeps "generous")
    assert analyzer.analyze("The Beatles' drummer's BAND was generously running") == [
        "beatl", "drummer", "band", "gener", "run"]
    assert analyzer.analyze("It IS the") == []
    # Lucene's Porter (the C version) differs from Snowball's "porter" on "bli", "logi" and two-letter words
    assert analyzer.analyze("technology possibly anthropologie us ostensibly revving trekked desiccated") == [
        "technolog", "possibl", "anthropologi", "us", "ostens", "rev", "trek", "desicc"]
    # symbols Lucene keeps as words, Hebrew gershayim, Java's one-to-one lowercasing (no final sigma; dotted I)
    text = 'D\u266f \u2605 \u216b \u05e8\u05d0\u05d1"\u05d9 \u0130stanbul \u039f\u0394\u039f\u03a3'
    assert analyzer.analyze(text) == [
        "d", "\u266f", "\u2605", "\u217b", '\u05e8\u05d0\u05d1"\u05d9', "istanbul", "\u03bf\u03b4\u03bf\u03c3"]


# ---- scoring by hand -----------------------------------------------------------------------------------------------

TINY = [Passage("p0", "Alpha", "alpha beta"),
        Passage("p1", "", "beta gamma gamma"),  # no title: not counted in the title field's statistics
        Passage("p2", "Gamma", "delta")]


def _bm25(tf, length, avgdl, df, n, k1=1.2, b=0.75):
    """Elasticsearch 7's BM25 (with the (k1 + 1) factor), in plain floats."""
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return (k1 + 1) * idf * tf / (tf + k1 * (1 - b + b * length / avgdl))


def test_field_statistics_and_best_fields_by_hand():
    es = ElasticsearchBM25Retriever.build(TINY)
    stats = es.params["fields"]
    assert stats["title"] == {"doc_count": 2, "sum_total_term_freq": 2, "avgdl": 1.0}
    assert stats["body"] == {"doc_count": 3, "sum_total_term_freq": 6, "avgdl": 2.0}
    # "gamma": title of p2 (1 of 2 titles, length 1, avgdl 1); body of p1 (1 of 3 bodies, tf 2, length 3, avgdl 2)
    title_p2 = _bm25(1, 1, 1.0, 1, 2)
    body_p1 = _bm25(2, 3, 2.0, 1, 3)
    assert title_p2 == pytest.approx(math.log(2))
    assert body_p1 == pytest.approx(2.2 * math.log(1 + 2.5 / 1.5) * 2 / 3.65)
    hits = es.search(["gamma"], 3)[0]
    assert [h.passage.id for h in hits] == ["p1", "p2"]
    assert [h.score for h in hits] == pytest.approx([body_p1, title_p2], rel=1e-6)
    # "alpha gamma": p0 matches alpha in both fields, so best field + 0.5 x the other (a plain sum would be higher)
    title_p0, body_p0 = _bm25(1, 1, 1.0, 1, 2), _bm25(1, 2, 2.0, 1, 3)
    hits = es.search(["Alpha gamma?"], 3)[0]
    assert [h.passage.id for h in hits] == ["p0", "p1", "p2"]
    assert [h.score for h in hits] == pytest.approx([max(title_p0, body_p0) + 0.5 * min(title_p0, body_p0),
                                                     body_p1, title_p2], rel=1e-6)
    assert es.search(["gamma gamma"], 1)[0][0].score == pytest.approx(2 * body_p1, rel=1e-6)  # a term asked twice


def test_best_fields_combination():
    title = np.array([0.0, 2.0, 1.0], dtype=np.float32)
    body = np.array([3.0, 1.0, 1.0], dtype=np.float32)
    assert es_scoring.best_fields([title, body]).tolist() == [3.0, 2.5, 1.5]
    assert es_scoring.best_fields([title, body], tie_breaker=0.0).tolist() == [3.0, 2.0, 1.0]


def test_lucene_one_byte_length_norm():
    lengths = np.array([0, 1, 23, 24, 25, 40, 88, 100, 120, 1000, 2**31 - 1])
    # SmallFloat.byte4ToInt(SmallFloat.intToByte4(n)), as Lucene 9 computes them
    assert es_scoring.stored_length(lengths).tolist() == [0, 1, 23, 24, 25, 40, 88, 96, 120, 984, 2013265944]
    assert es_scoring.encode_length(lengths).max() == 255
    # a body of 100 distinct terms is scored as 96 long, against the exact average length
    long = Passage("long", "", " ".join(f"w{i}" for i in range(100)))
    corpus = [long, Passage("s", "", "w5 other"), Passage("t", "", "more words")]
    es = ElasticsearchBM25Retriever.build(corpus)
    avgdl = 104 / 3
    score = {h.passage.id: h.score for h in es.search(["w5"], 3)[0]}
    assert score["long"] == pytest.approx(_bm25(1, 96, avgdl, 2, 3), rel=1e-6)
    assert score["long"] != pytest.approx(_bm25(1, 100, avgdl, 2, 3), rel=1e-6)
    assert score["s"] == pytest.approx(_bm25(1, 2, avgdl, 2, 3), rel=1e-6)


def test_ties_go_to_the_earlier_passage_and_edge_cases():
    es = ElasticsearchBM25Retriever.build([Passage("x", "T", "same words"), Passage("y", "T", "same words"),
                                           Passage("z", "U", "other")])
    assert [h.passage.id for h in es.search(["same words"], 2)[0]] == ["x", "y"]
    assert es.search([], 3) == []
    assert es.search(["the of and", "zzqx unseen"], 3) == [[], []]  # no indexed term: no hits
    assert len(es.search(["same"], 50)[0]) == 2
    with pytest.raises(ValueError, match="k must be positive"):
        es.search(["x"], 0)
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Retriever.build([], scoring="elasticsearch")
    with pytest.raises(ValueError, match="scoring must be"):
        BM25Retriever.build(TINY, scoring="bm42")


# ---- the index: streamed, resumed, saved, loaded -----------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus() -> list[Passage]:
    from data_builders.world import build_world, scale_passages

    return scale_passages(build_world(), 3000)


ES = StreamSettings(chunk_size=700, scoring="elasticsearch")


def _columns(retriever: ElasticsearchBM25Retriever) -> dict[tuple[str, str], tuple[list, list]]:
    out = {}
    for field, (data, indices, indptr) in retriever.matrices.items():
        for term, i in retriever.vocab.items():
            s, e = int(indptr[i]), int(indptr[i + 1])
            out[field, term] = (np.asarray(indices[s:e]).tolist(), np.asarray(data[s:e]).tobytes())
    return out


def test_streamed_equals_in_memory(corpus, tmp_path):
    meta = build_streamed(corpus, tmp_path / "idx", settings=ES, show_progress=False)
    assert meta["scoring"] == "elasticsearch" and meta["num_passages"] == len(corpus)
    loaded = load_retriever(tmp_path / "idx")
    memory = BM25Retriever.build(corpus, scoring="elasticsearch")
    assert isinstance(loaded, ElasticsearchBM25Retriever) and loaded.scoring == "elasticsearch"
    assert loaded.vocab == memory.vocab  # numbered in order of first use whatever the chunk size
    assert _columns(loaded) == _columns(memory)  # bit for bit
    assert loaded.params == json.loads(json.dumps(memory.params))
    queries = [p.title for p in corpus[::97]] + [p.text[:80] for p in corpus[5::211]] + ["the of", "zzqx"]
    for want, got in zip(memory.search(queries, 10), loaded.search(queries, 10)):
        assert [(h.passage, h.score) for h in want] == [(h.passage, h.score) for h in got]
    memory.save(tmp_path / "mem")  # the in-memory index saves in the same layout
    again = load_retriever(tmp_path / "mem")
    assert _columns(again) == _columns(memory)
    assert isinstance(loaded.matrices["body"][0], np.memmap)  # the matrices stay on disk


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_killed_build_resumes_to_the_same_index(corpus, tmp_path, monkeypatch):
    import retrieval_adapt.bm25_stream as s

    build_streamed(corpus, tmp_path / "whole", settings=ES, show_progress=False)
    real, written = s._write_chunk, []

    def write_then_die(folder, arrays, new):
        if len(written) == 2:
            raise KeyboardInterrupt
        written.append(folder)
        real(folder, arrays, new)

    monkeypatch.setattr(s, "_write_chunk", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        build_streamed(corpus, tmp_path / "idx", settings=ES, show_progress=False)
    assert len(json.loads((build_dir(tmp_path / "idx") / "manifest.json").read_text())["chunks"]) == 2
    monkeypatch.undo()
    tokenized, real_tokenize = [], s.tokenize_fields
    monkeypatch.setattr(s, "tokenize_fields", lambda *a: tokenized.append(1) or real_tokenize(*a))
    build_streamed(corpus, tmp_path / "idx", settings=ES, show_progress=False)
    assert len(tokenized) == -(-len(corpus) // ES.chunk_size) - 2  # finished chunks were not redone
    assert _files(tmp_path / "idx") == _files(tmp_path / "whole")
    assert not build_dir(tmp_path / "idx").exists()


def test_bad_input_as_the_default_scoring(tmp_path):
    ok = [Passage("a", "T", "alpha beta"), Passage("e", "X", "  "), Passage("b", "", "gamma delta")]
    meta = build_streamed(ok, tmp_path / "i", settings=StreamSettings(chunk_size=2, scoring="elasticsearch"),
                          show_progress=False)
    assert meta["num_passages"] == 2 and meta["empty_skipped"] == 1
    dup = [Passage("a", "T", "alpha"), Passage("b", "T", "beta"), Passage("a", "T", "gamma")]
    with pytest.raises(DataError, match="passage id 'a' appears more than once"):
        build_streamed(dup, tmp_path / "j", settings=ES, show_progress=False)
    with pytest.raises(DataError, match="no passages"):
        build_streamed([Passage("a", "T", " ")], tmp_path / "k", settings=ES, show_progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i"]
    with pytest.raises(ValueError, match="scoring must be bm25s or elasticsearch"):
        StreamSettings(scoring="bm42")
    assert StreamSettings(scoring="elasticsearch").k1 == 1.2 and StreamSettings().k1 == 1.5


# ---- the command line and the recorded setting ---------------------------------------------------------------------


def _build_cli(argv: list[str]) -> int:
    from adaptive_rag.plumbing.cli import run_cli
    from retrieval_adapt.build_index import main

    return run_cli(main, argv=argv)


def test_build_index_flag_meta_and_retriever_attribute(tmp_path, capsys):
    from data_builders.readers import write_passages_jsonl
    from retrieval_adapt.check_index import check

    corpus = write_passages_jsonl(TINY, tmp_path / "c.jsonl")
    assert _build_cli(["--corpus", str(corpus), "--bm25_scoring", "elasticsearch", "--out", str(tmp_path / "es")]) == 0
    assert _build_cli(["--corpus", str(corpus), "--out", str(tmp_path / "default")]) == 0
    assert json.loads((tmp_path / "es" / "meta.json").read_text())["scoring"] == "elasticsearch"
    assert json.loads((tmp_path / "default" / "meta.json").read_text())["scoring"] == "bm25s"
    assert load_retriever(tmp_path / "es").scoring == "elasticsearch"
    assert load_retriever(tmp_path / "default").scoring == "bm25s"
    assert check(tmp_path / "es", str(corpus)).startswith("ok: ")
    capsys.readouterr()
    assert _build_cli(["--corpus", str(corpus), "--kind", "dense", "--bm25_scoring", "elasticsearch",
                       "--out", str(tmp_path / "d")]) == 2
    assert "bm25_scoring applies to BM25 indexes" in capsys.readouterr().err
    # a damaged file: one line, as for the default scoring
    data = tmp_path / "es" / "bm25" / "title" / "data.csc.index.npy"
    data.write_bytes(data.read_bytes()[:10])
    with pytest.raises(DataError, match="bm25/title/data.csc.index.npy has 10 bytes.*rebuild the index"):
        load_retriever(tmp_path / "es")


def test_a_corpus_with_no_indexable_word_is_one_line():
    from adaptive_rag.plumbing.errors import DataError
    from adaptive_rag.plumbing.records import Passage
    from retrieval_adapt.bm25 import BM25Retriever

    with pytest.raises(DataError, match="has a word BM25 can index"):
        BM25Retriever.build([Passage("1", "", "a b c"), Passage("2", "", "")], show_progress=False)
