"""bench/agreement_dragin.py: the adapter that stands where the DRAGIN authors' Elasticsearch search stood, the
import-time adaptations of their code, and the question-by-question comparison, on fixtures shaped like their files
(written here: no network, no copy of their text). The full run is a benchmark (docs/agreement_dragin.md)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from bench_modules import bench_module

from adaptive_rag.plumbing.records import Passage
from retrieval_adapt.es_bm25 import ElasticsearchBM25Retriever

PASSAGES = [Passage("p1", "Paris", "Paris is the capital of France."),
            Passage("p2", "Lyon", "Lyon is a city in France on the Rhone."),
            Passage("p3", "Berlin", "Berlin is the capital of Germany."),
            Passage("p4", "Rhone", "The Rhone flows through Lyon.")]

# A module shaped like their retriever.py's BM25 (written for this test): the search object is set in __init__
# (BEIR over Elasticsearch there), and retrieve() cuts each query to its last max_query_length tokens, asks the
# search object for {qid: {doc_id: (score, text)}}, takes the first topk in order and pads with empty documents.
FIXTURE_RETRIEVER = textwrap.dedent('''
    import numpy as np

    class BM25:
        def __init__(self, tokenizer=None, index_name=None, engine="elasticsearch", **kwargs):
            raise RuntimeError("needs an Elasticsearch server")

        def retrieve(self, queries, topk=1, max_query_length=None):
            if max_query_length:
                ids = [q.split()[-max_query_length:] for q in queries]
                queries = [" ".join(x) for x in ids]
            results = self.retriever.retrieve(None, dict(zip(range(len(queries)), queries)), disable_tqdm=True)
            docids, docs = [], []
            for qid, query in enumerate(queries):
                got_ids, got = [], []
                if qid in results:
                    for did, (score, text) in results[qid].items():
                        got_ids.append(did)
                        got.append(text)
                        if len(got_ids) >= topk:
                            break
                got_ids += ["dummy"] * (topk - len(got_ids))
                got += [""] * (topk - len(got))
                docids.extend(got_ids)
                docs.extend(got)
            return np.array(docids).reshape(len(queries), topk), np.array(docs).reshape(len(queries), topk)
''')

# shaped like their generate.py's two uses of Llama-2's newline id
FIXTURE_GENERATE = textwrap.dedent('''
    class Generator:
        def generate_attn(self, ids):
            starts = []
            for i in range(len(ids)):
                starts.append(i == 0 or ids[i] == 13)
            return starts

    class Rag:
        def keep_real_words(self, ids):
            def match(tok):
                return tok == 13  # a nested function's constant stays
            hits = []
            for t in ids:
                hits.append(t == 13)
            return hits, match(ids[-1])
''')


@pytest.fixture(scope="module")
def authors():
    return bench_module("agreement_authors")


@pytest.fixture(scope="module")
def comparison():
    return bench_module("agreement_compare")


@pytest.fixture
def their_folder(tmp_path, monkeypatch):
    (tmp_path / "retriever.py").write_text(FIXTURE_RETRIEVER)
    (tmp_path / "generate.py").write_text(FIXTURE_GENERATE)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("retriever", "generate"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def test_index_search_stands_where_their_elasticsearch_stood(authors, their_folder):
    import importlib

    index = ElasticsearchBM25Retriever.build(PASSAGES)
    search = authors.IndexSearch(index)
    retriever = importlib.import_module("retriever")

    def adapter_init(self, tokenizer=None, index_name=None, engine="elasticsearch", **kwargs):
        self.tokenizer, self.retriever = tokenizer, search

    retriever.BM25.__init__ = adapter_init
    bm25 = retriever.BM25(index_name="wiki")
    # their retrieve() runs as written: the left cut (here to 3 words), the top-k in rank order, bodies only
    ids, docs = bm25.retrieve(["ignored words here capital of France"], topk=2, max_query_length=3)
    expected = [h.passage.id for h in index.search(["capital of France"], 2)[0]]
    assert ids[0].tolist() == expected and expected[0] == "p1"
    assert docs[0][0] == "Paris is the capital of France."  # the body without its title, as BEIR's txt field
    assert search.log[-1] == {"query": "capital of France", "doc_ids": [h.passage.id for h in
                                                                         index.search(["capital of France"], 10)[0]]}
    # a query without an indexed term has no hits: left out of the results, so their code pads with empty documents
    ids, docs = bm25.retrieve(["the of and"], topk=2, max_query_length=64)
    assert docs[0].tolist() == ["", ""] and search.log[-1]["doc_ids"] == []


def test_newline_constant_replaced_in_the_code_object_only(authors, their_folder):
    import importlib

    generate = importlib.import_module("generate")
    source = (their_folder / "generate.py").read_text()
    assert authors.replace_int_constant(generate.Generator.generate_attn, 13, 198) == 1
    assert authors.replace_int_constant(generate.Rag.keep_real_words, 13, 198) == 1
    assert generate.Generator().generate_attn([5, 198, 13]) == [True, True, False]
    assert generate.Rag().keep_real_words([198, 13]) == ([True, False], True)  # the nested match() keeps its 13
    assert (their_folder / "generate.py").read_text() == source  # their file untouched


def test_standin_pipeline_splits_sentences_and_tags_real_words(authors):
    nlp = authors.standin_pipeline()
    doc = nlp("The film was directed by Scott Derrickson. He was born in 1966.")
    assert [s.text.strip() for s in doc.sents] == ["The film was directed by Scott Derrickson.", "He was born in 1966."]
    real = {t.text for t in doc if t.pos_ in ("NOUN", "ADJ", "VERB", "PROPN", "NUM")}
    assert real == {"film", "directed", "Scott", "Derrickson", "born", "1966"}
    assert authors.standin_pipeline() is not nlp  # a second call builds again (the factory registered once)


def test_stubs_only_what_is_missing(authors, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", sys.modules.get("pandas") or __import__("types").ModuleType("pandas"))
    for name in [n for n in sys.modules if n == "beir" or n.startswith("beir.")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        import beir  # noqa: F401
        pytest.skip("beir is installed here")
    except ImportError:
        pass
    stubbed = authors.stub_missing_modules()
    try:
        assert "beir.retrieval.search.lexical.elastic_search" in stubbed and "pandas" not in stubbed
        from beir.retrieval.evaluation import EvaluateRetrieval

        EvaluateRetrieval(object(), k_values=[1000])  # constructible, does nothing
    finally:
        for name in stubbed:
            sys.modules.pop(name, None)


def test_observers_count_rounds_and_time_each_question(authors):
    class Gen:
        def generate(self, prompt, n):
            return prompt.upper()

    class Loop:
        def __init__(self):
            self.gen = Gen()
            self.counter = type("Counter", (), {})()
            self.counter.generate = 0

        def inference(self, question, demo, case):
            return self.gen.generate(question, 1) + self.gen.generate(case, 1)

    obs = authors.Observer()
    authors._count_rounds(Gen, "generate", obs)
    authors._observe_inference(Loop, obs)
    seen = []
    obs.finished = lambda record, prediction: seen.append((record["question"], prediction))
    loop = Loop()
    assert loop.inference("q", [], " c ") == "Q C "
    loop.inference("r", [], "d")
    assert [r["rounds"] for r in obs.records] == [2, 2] and [r["question"] for r in obs.records] == ["q", "r"]
    assert all(r["seconds"] >= 0 and r["retrievals"] == [] for r in obs.records)
    assert seen == [("q", "Q C"), ("r", "RD")]  # each question handed on as it ends, stripped as main.py writes it


def _trace(records: list[dict]) -> str:
    return "\n".join([json.dumps({"adaptations": {"retriever": "adapter"}})] + [json.dumps(r) for r in records])


def _ret(round_, position, query, ids):
    return {"round": round_, "position": position, "query": query, "doc_ids": ids}


THEIRS = [  # what bench/agreement_authors.py writes per question
    {"id": "a", "question": "Q1", "rounds": 3, "generated_tokens": 120, "seconds": 5.0, "output": "x",
     "final": "Foo. So the answer is Paris.", "retrievals": [{**_ret(1, 0, "capital France", ["p1", "p3"]),
                                                                "query_raw": "capital France"}]},
    {"id": "b", "question": "Q2", "rounds": 1, "generated_tokens": 80, "seconds": 2.0, "output": "y",
     "final": "So the answer is Berlin.", "retrievals": []},
    {"id": "c", "question": "Q3", "rounds": 4, "generated_tokens": 150, "seconds": 6.0, "output": "z",
     "final": "So the answer is Lyon.", "retrievals": [{**_ret(1, 7, "Rhone city", ["p2", "p4"]), "query_raw": ""},
                                                       {**_ret(3, 20, "Lyon", ["p4", "p2"]), "query_raw": ""}]},
]
ENGINE = [  # the engine's predictions.jsonl rows (the fields compared)
    {"id": "a", "answers": ["Paris"], "output": "Foo. So the answer is Paris.", "generated_tokens": 120,
     "batch_mean_seconds": 1.0, "retrievals": [{**_ret(1, 0, "capital France", ["p1", "p3"]), "trigger_score": 2.0}]},
    # the engine's output as the loop wrote it: the final text compared is eval.py's cut of it (their `final`)
    {"id": "b", "answers": ["Berlin"], "output": "So the answer is Berlin.\nQuestion: next?", "generated_tokens": 80,
     "batch_mean_seconds": 1.0, "retrievals": []},
    {"id": "c", "answers": ["Lyon"], "output": "So the answer is Lyons.", "generated_tokens": 140,
     "batch_mean_seconds": 1.0, "retrievals": [{**_ret(1, 7, "Rhone city", ["p2", "p4"]), "trigger_score": 1.0},
                                               {**_ret(3, 21, "Lyon Rhone", ["p4", "p1"]), "trigger_score": 1.0}]},
]
GOLDS = {"a": ["Paris"], "b": ["Berlin"], "c": ["Lyon"]}


def test_comparison_question_by_question(comparison, tmp_path):
    path = tmp_path / "authors.jsonl"
    path.write_text(_trace(THEIRS))
    header, records = comparison.read_trace(path)
    assert header["adaptations"] == {"retriever": "adapter"}
    rows = comparison.compare(comparison.authors_sides(records, GOLDS), comparison.engine_sides(ENGINE))
    agree = {r.id: r.agree for r in rows}
    assert all(agree["a"].values()) and all(agree["b"].values())  # b: neither side retrieved
    assert agree["c"] == {"first_trigger": True, "first_query": True, "queries": False, "first_docs": True,
                          "docs": False, "retrievals": True, "final": False, "answer": False}
    s = comparison.summary(rows)
    assert (s["n"], s["first_query_agree"], s["queries_agree"], s["final_agree"]) == (3, 3, 2, 2)
    assert s["first_query_rate"] == 1.0 and s["queries_rate"] == pytest.approx(2 / 3)
    assert (s["authors_retrievals"], s["engine_retrievals"], s["retrievals_diff"]) == (3, 3, 0)
    assert (s["authors_tokens"], s["engine_tokens"]) == (350, 340)
    assert s["authors_em"] == 1.0 and s["engine_em"] == pytest.approx(2 / 3)  # "Lyons" is not "Lyon"
    header, body = comparison.question_table(rows)
    assert len(body) == 3 and body[2][2] == (1, 7) and body[2][5] == "2/2" and body[2][6] == "differ"
    header, body = comparison.method_table({"dragin": s})
    assert body[0][:4] == ["dragin", 3, "3/3", "3/3"]


def test_comparison_refuses_a_question_the_engine_lacks(comparison):
    theirs = comparison.authors_sides(THEIRS, GOLDS)
    with pytest.raises(ValueError, match="no prediction for 1"):
        comparison.compare(theirs, comparison.engine_sides(ENGINE[:2]))


def test_batch_flips_counted_apart(comparison):
    a = comparison.engine_sides(ENGINE)
    b = comparison.engine_sides([ENGINE[0], ENGINE[1], {**ENGINE[2], "output": "So the answer is Lyon."}])
    assert comparison.flips(a, b) == ["c"] and comparison.flips(a, a) == []


def test_without_their_code_one_line_names_the_command(tmp_path, monkeypatch, capsys):
    bench = bench_module("agreement_dragin")
    monkeypatch.setattr(sys, "argv", ["agreement_dragin.py", "--dataset", "x.jsonl", "--index", "idx",
                                      "--authors_code", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_info:
        bench.main()
    assert exit_info.value.code == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "python -m data_builders.download dragin-code --output_dir data/" in out[0]


def test_configs_follow_their_hotpotqa_rows(tmp_path):
    bench = bench_module("agreement_dragin")
    config = bench.their_config("dragin", "/m", tmp_path, 64, tmp_path / "out")
    assert (config["hallucination_threshold"], config["retrieve_keep_top_k"], config["fewshot"],
            config["generate_max_length"], config["retrieve_topk"], config["sample"]) == (0.8, 35, 8, 100, 3, 64)
    assert "retriever" not in bench.their_config("wo-rag", "/m", tmp_path, 4, tmp_path)
    assert bench.their_config("fl-rag", "/m", tmp_path, 4, tmp_path)["fix_length"] == bench.FIX_LENGTH
    assert set(bench.METHODS) == {"dragin", "wo-rag", "sr-rag", "fl-rag", "fs-rag", "token-rag"}
