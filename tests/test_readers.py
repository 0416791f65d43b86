"""Every reader on a small file written here, plus the malformed variants it must reject."""

from __future__ import annotations

import json
import logging
import sys
import types
from pathlib import Path

import pytest

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders.readers import (
    CORPUS_FORMATS,
    QA_FORMATS,
    detect_format,
    passage_id,
    read_corpus,
    read_hf_qa,
    read_passages_jsonl,
    read_qa,
    write_passages_jsonl,
    write_qa_jsonl,
)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


# ---- canonical JSONL ---------------------------------------------------------------------------


def test_qa_jsonl_round_trip_with_unicode(tmp_path):
    gold = Passage("p1", "Zürich", "Zürich liegt am Zürichsee.\u2028Line separator inside.")
    examples = [
        QAExample("q1", "Où est Zürich ?", ["Suisse", "Schweiz"], [gold], {"source": "x", "popularity": 3}),
        QAExample("q2", "日本の首都は?", ["東京"]),
    ]
    path = write_qa_jsonl(examples, tmp_path / "out" / "qa.jsonl")
    assert read_qa(path, format="qa_jsonl") == examples
    assert read_qa(path) == examples  # detected as qa_jsonl
    assert read_qa(path, limit=1) == examples[:1]


def test_qa_jsonl_malformed_line_names_line(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"id": "1", "question": "q?", "answers": ["a"]}\n{"id": "2", "question": \n', encoding="utf-8")
    with pytest.raises(DataError, match=r"qa\.jsonl, line 2: malformed JSON"):
        read_qa(path, format="qa_jsonl")


@pytest.mark.parametrize(
    ("row", "pattern"),
    [
        ({"id": "1", "answers": ["a"]}, r"line 1, field 'question': missing"),
        ({"id": "1", "question": "q?", "answers": []}, r"line 1, field 'answers': no non-empty answer"),
        ({"id": "1", "question": "q?", "answers": ["  "]}, r"field 'answers': no non-empty answer"),
        ({"id": "1", "question": "q?", "answers": [3]}, r"field 'answers': expected a list of strings"),
    ],
)
def test_qa_jsonl_bad_records(tmp_path, row, pattern):
    with pytest.raises(DataError, match=pattern):
        read_qa(write_jsonl(tmp_path / "qa.jsonl", [row]), format="qa_jsonl")


def test_nonexistent_path(tmp_path):
    with pytest.raises(DataError, match=r"missing\.jsonl: no such file"):
        read_qa(tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match="no such file"):
        read_corpus(tmp_path / "missing.tsv")


def test_passages_jsonl_round_trip_drops_empty_and_rejects_id_clash(tmp_path, caplog):
    passages = [Passage("a", "T", "x y"), Passage("b", "", "ü")]
    path = write_passages_jsonl(passages, tmp_path / "c.jsonl")
    assert read_passages_jsonl(path) == passages
    write_jsonl(path, [p.to_dict() for p in passages] + [{"id": "c", "title": "E", "text": "  "}])
    with caplog.at_level(logging.WARNING):
        assert read_corpus(path) == passages
    assert "skipped 1 passages with empty text" in caplog.text
    write_jsonl(path, [{"id": "a", "text": "one"}, {"id": "a", "text": "two"}])
    with pytest.raises(DataError, match=r"line 2, field 'id': id 'a' already names a different passage"):
        read_passages_jsonl(path)
    write_jsonl(path, [{"id": "a", "text": 5}])
    with pytest.raises(DataError, match=r"line 1, field 'text'"):
        read_passages_jsonl(path)


def test_detect_format_unknown_lists_formats(tmp_path):
    with pytest.raises(DataError, match=r"cannot tell the format.*'qa_jsonl'.*'dpr_tsv'"):
        detect_format(write_jsonl(tmp_path / "x.jsonl", [{"foo": 1}]))
    with pytest.raises(DataError, match="cannot tell the format"):
        detect_format(write_json(tmp_path / "x.yaml", {}))
    with pytest.raises(DataError, match="empty file"):
        detect_format(write_jsonl(tmp_path / "e.jsonl", []))


def test_wrong_kind_of_file(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "title": "t", "text": "x"}])
    with pytest.raises(DataError, match="holds passages, not questions"):
        read_qa(corpus)
    nq = write_jsonl(tmp_path / "nq.jsonl", [{"question": "q", "answer": ["a"]}])
    with pytest.raises(DataError, match="ships no paragraphs"):
        read_corpus(nq)
    with pytest.raises(DataError, match="unknown format 'nope'"):
        read_qa(nq, format="nope")  # type: ignore[arg-type]
    assert "hf" in QA_FORMATS and "dpr_tsv" in CORPUS_FORMATS


def test_passage_id_stable_and_whitespace_insensitive():
    assert passage_id("T", "a  b\nc") == passage_id(" T", "a b c")
    assert passage_id("T", "a b") != passage_id("U", "a b")


# ---- Hugging Face hub (a fake `datasets` module; no network in tests) ----------------------------


def _fake_datasets(monkeypatch, load):
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load))


def test_hf_reader_with_fake_hub(monkeypatch):
    rows = [
        {"id": "a", "question": "q1?", "answers": {"text": ["x", "x"], "answer_start": [0, 0]}},
        {"id": "b", "question": "q2?", "answers": '["y", "z"]', "s_pop": 7},
    ]
    _fake_datasets(monkeypatch, lambda name, config, split: rows)
    out = read_hf_qa("squad", "validation", answers_field="answers")
    assert [(e.id, e.answers) for e in out] == [("a", ["x"]), ("b", ["y", "z"])]
    assert out[1].metadata == {"source": "squad", "popularity": 7}
    with pytest.raises(DataError, match=r"squad\[validation\], record 0, field 'answer': missing"):
        read_hf_qa("squad", "validation")


def test_hf_reader_hub_unreachable(monkeypatch):
    def offline(name, config, split):
        raise ConnectionError("Couldn't reach 'nq_open' on the Hub")

    _fake_datasets(monkeypatch, offline)
    with pytest.raises(DataError, match=r"nq_open: could not load split 'test' from the Hugging Face hub"):
        read_qa("nq_open@test", format="hf")


# ---- original release formats -------------------------------------------------------------------

POPQA_HEADER = "id\tsubj\tprop\tobj\ts_pop\tquestion\tpossible_answers\n"


def test_popqa_tsv(tmp_path):
    path = tmp_path / "popQA.tsv"
    path.write_text(
        POPQA_HEADER + "7\tGeorge Rankin\toccupation\tpolitician\t142\t\"What is George Rankin's "
        'occupation?"\t"[""politician"", ""político""]"\n',
        encoding="utf-8",
    )
    [ex] = read_qa(path)
    assert ex.id == "7" and ex.answers == ["politician", "político"]
    assert ex.metadata == {
        "source": "popqa",
        "popularity": 142,
        "relation": "occupation",
        "subject": "George Rankin",
        "object": "politician",
    }


@pytest.mark.parametrize(
    ("row", "pattern"),
    [
        ('8\ts\tp\to\t5\tq?\t["a"\n', r"line 2, field 'possible_answers': malformed JSON list string"),
        ("8\ts\tp\to\t5\tq?\t[]\n", r"line 2, field 'possible_answers': no non-empty answer"),
        ('8\ts\tp\to\tlots\tq?\t["a"]\n', r"line 2, field 's_pop': expected an integer"),
        ("8\ts\tp\n", r"line 2: expected 7 tab-separated columns, got 3"),
    ],
)
def test_popqa_tsv_bad_rows(tmp_path, row, pattern):
    path = tmp_path / "popQA.tsv"
    path.write_text(POPQA_HEADER + row, encoding="utf-8")
    with pytest.raises(DataError, match=pattern):
        read_qa(path, format="popqa_tsv")


def _hotpot_record(**extra):
    return {
        "_id": "h1",
        "question": "Which is older?",
        "answer": "A",
        "type": "comparison",
        "level": "hard",
        "context": [["A", ["A is old.", " Very old."]], ["B", ["B is new."]], ["C", ["Distractor."]]],
        "supporting_facts": [["A", 0], ["B", 0]],
        **extra,
    }


def test_hotpotqa_json(tmp_path):
    path = write_json(tmp_path / "hotpot_dev_distractor_v1.json", [_hotpot_record()])
    [ex] = read_qa(path)
    assert ex.metadata == {"source": "hotpotqa", "hop_type": "comparison", "level": "hard"}
    assert [(p.title, p.text) for p in ex.gold_passages] == [("A", "A is old. Very old."), ("B", "B is new.")]
    assert [p.title for p in read_corpus(path)] == ["A", "B", "C"]


def test_hotpotqa_bad_context(tmp_path):
    path = write_json(tmp_path / "h.json", [_hotpot_record(context=[["A", "not a list"]])])
    with pytest.raises(DataError, match=r"record 0/context 0, field 'context': expected \[title"):
        read_qa(path, format="hotpotqa")
    path = write_json(tmp_path / "h.json", [{"_id": "x", "question": "q"}])
    with pytest.raises(DataError, match=r"record 0, field 'answer': missing"):
        read_qa(path, format="hotpotqa")


def test_2wiki_jsonl_in_json_file_with_and_without_context(tmp_path):
    first_row = _hotpot_record(type="bridge_comparison", evidences=[])
    del first_row["level"]  # HotpotQA-only field
    rows = [
        first_row,
        {
            "_id": "w2",
            "type": "inference",
            "question": "Who is the father of X?",
            "answer": "Y",
            "supporting_facts": [["X", 0]],
        },
    ]
    path = write_jsonl(tmp_path / "wikihop.json", rows)  # MIGRES ships JSON Lines named .json
    assert detect_format(path) == "2wikimultihopqa"
    first, second = read_qa(path)
    assert first.metadata["hop_type"] == "bridge_comparison" and len(first.gold_passages) == 2
    assert second.gold_passages == [] and second.metadata == {"source": "2wikimultihopqa", "hop_type": "inference"}


def test_nq_open_jsonl(tmp_path):
    path = write_jsonl(tmp_path / "NQ-open.dev.jsonl", [{"question": "who?", "answer": ["Ann", "Ann", "A. B."]}])
    [ex] = read_qa(path)
    assert detect_format(path) == "nq_open"
    assert (ex.id, ex.answers, ex.metadata) == ("nq-0", ["Ann", "A. B."], {"source": "nq"})
    write_jsonl(path, [{"question": "who?", "answer": []}])
    with pytest.raises(DataError, match=r"line 1, field 'answer': no non-empty answer"):
        read_qa(path, format="nq_open")


def _squad(qas):
    return {"version": "1.1", "data": [{"title": "Super_Bowl_50", "paragraphs": [{"context": "Ctx é.", "qas": qas}]}]}


def test_squad_json_and_v2_skips(tmp_path, caplog):
    qas = [
        {"id": "s1", "question": "Who?", "answers": [{"text": "Broncos", "answer_start": 0}] * 2},
        {"id": "s2", "question": "Nobody?", "answers": [], "is_impossible": True},
    ]
    path = write_json(tmp_path / "dev-v1.1.json", _squad(qas))
    with caplog.at_level(logging.WARNING):
        [ex] = read_qa(path)
    assert "skipped 1 records (unanswerable" in caplog.text
    assert ex.answers == ["Broncos"] and ex.gold_passages[0].title == "Super Bowl 50"
    assert read_corpus(path) == ex.gold_passages
    path = write_json(tmp_path / "dev-v1.1.json", _squad([{"id": "s3", "question": "Who?", "answers": []}]))
    with pytest.raises(DataError, match=r"record data 0/paragraph 0/qa 0, field 'answers': no non-empty"):
        read_qa(path, format="squad")


def test_plain_qa_json(tmp_path):
    rows = [
        {"question": "q1?", "answer": "a", "type": "bridge"},
        {"test_id": 5, "question": "q2?", "answer": ["b", "c"]},
    ]
    path = write_json(tmp_path / "bamboogle" / "test.json", rows)
    first, second = read_qa(path)
    assert (first.id, first.metadata) == ("bamboogle-0", {"source": "bamboogle", "hop_type": "bridge"})
    assert (second.id, second.answers) == ("5", ["b", "c"])
    write_json(path, [{"question": "", "answer": "a"}])
    with pytest.raises(DataError, match=r"record 0, field 'question': empty"):
        read_qa(path)


def test_dpr_question_tsv(tmp_path):
    path = tmp_path / "topics.dpr.trivia.dev.txt"
    path.write_text("Who sang \"Hey\"?\t['X', 'Y']\n\"tab\tin question\"\t['Z']\n", encoding="utf-8")
    first, second = read_qa(path)
    assert first.answers == ["X", "Y"] and second.question == "tab\tin question"
    assert first.metadata["source"] == "triviaqa"
    path.write_text("q?\t['unclosed\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 1, field 'answers': not a Python list literal"):
        read_qa(path, format="dpr_qa_tsv")


def test_dpr_passage_tsv(tmp_path, caplog):
    path = tmp_path / "psgs_w100.tsv"
    path.write_text('id\ttext\ttitle\n1\t"Aaron is a ""prophet""."\tAaron\n2\t\tEmpty\n', encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert read_corpus(path) == [Passage("1", "Aaron", 'Aaron is a "prophet".')]
    assert "skipped 1 passages with empty text" in caplog.text
    path.write_text("id\ttext\ttitle\n1\tonly two\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2: expected 3 tab-separated columns, got 2"):
        read_corpus(path, format="dpr_tsv")
    path.write_text("pid\ttext\ttitle\n1\tx\tT\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"field 'id': header .* lacks column"):
        read_corpus(path, format="dpr_tsv")


def test_dpr_passage_tsv_stray_quote_names_the_line_where_the_record_starts(tmp_path):
    path = tmp_path / "psgs_w100.tsv"
    # a quote opening the text of passage 2 and closing inside passage 4's: csv reads lines 3-5 as one record of
    # three columns, which passed silently (passages 3 and 4 swallowed into 2's text) and was reported as line 5
    path.write_text('id\ttext\ttitle\n1\tfine\tA\n2\t"stray\tB\n3\tgone\tC\n4\tend" of it\tD\n5\tok\tE\n',
                    encoding="utf-8")
    with pytest.raises(DataError, match=r"psgs_w100\.tsv, line 3: a field opens a quote .* runs on to line 5"):
        read_corpus(path, format="dpr_tsv")
    path.write_text('id\ttext\ttitle\r\n1\tfine\tA\r\n2\tx\t"B\r\n', encoding="utf-8")  # open at the end
    with pytest.raises(DataError, match=r"line 3: a field opens a quote \(\"\) that does not close on its line;"):
        read_corpus(path, format="dpr_tsv")
    path.write_text('id\ttext\ttitle\n1\t"a\tb ""c"""\tA\n2\tin"side\tB\n', encoding="utf-8")  # DPR's quoting
    assert [(p.id, p.text) for p in read_corpus(path)] == [("1", 'a\tb "c"'), ("2", 'in"side')]


def test_tsv_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "psgs_w100.tsv"
    path.write_bytes("id\ttext\ttitle\n1\tfine\tA\n2\tZürich\tB\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"psgs_w100\.tsv, line 3: not UTF-8 \(invalid start byte at byte 3 of"):
        read_corpus(path, format="dpr_tsv")
    jsonl = tmp_path / "qa.jsonl"
    jsonl.write_bytes(b'{"id": "1", "question": "q?", "answers": ["a"]}\n{"id": "\xff"}\n')
    with pytest.raises(DataError, match=r"qa\.jsonl, line 2: not UTF-8"):
        read_qa(jsonl)


def test_inputs_with_no_records_are_errors_naming_the_file(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match=r"empty\.jsonl: no questions \(it holds no records\)"):
        read_qa(empty, format="qa_jsonl")
    with pytest.raises(DataError, match=r"empty\.jsonl: no passages"):
        read_passages_jsonl(empty)
    with pytest.raises(DataError, match=r"empty\.jsonl: empty file"):
        read_qa(empty)
    with pytest.raises(DataError, match=r"list\.json: no questions"):
        read_qa(write_json(tmp_path / "list.json", []), format="qa_json")
    header_only = tmp_path / "psgs_w100.tsv"
    header_only.write_text("id\ttext\ttitle\n\n")
    with pytest.raises(DataError, match=r"psgs_w100\.tsv: no passages \(it holds no records\)"):
        read_corpus(header_only)
    popqa = tmp_path / "popQA.tsv"
    popqa.write_text("id\tquestion\tpossible_answers\ts_pop\n")
    with pytest.raises(DataError, match=r"popQA\.tsv: no questions"):
        read_qa(popqa, format="popqa_tsv")
    blank = write_jsonl(tmp_path / "blank.jsonl", [{"id": "a", "text": " "}, {"id": "b", "text": ""}])
    with pytest.raises(DataError, match=r"blank\.jsonl: no passages \(all 2 have empty text\)"):
        read_corpus(blank)
    v2 = write_json(tmp_path / "dev-v2.0.json", _squad([{"id": "s", "question": "?", "answers": [],
                                                          "is_impossible": True}]))
    with pytest.raises(DataError, match=r"no questions \(1 records skipped: unanswerable"):
        read_qa(v2)


# ---- processed formats of shared/data ----------------------------------------------------------


def _ctx(i, title, text, gold):
    return {"id": str(i), "title": title, "paragraph_text": text, "is_supporting": gold}


def test_ircot_jsonl(tmp_path):
    shared = _ctx(1, "Shared", "Same  paragraph.", False)
    rows = [
        {
            "question_id": "5a8c",
            "question_text": "Who?",
            "contexts": [_ctx(0, "G", "Gold.", True), shared],
            "answers_objects": [{"number": "", "date": {"day": "", "month": "", "year": ""}, "spans": ["Ann"]}],
        },
        {
            "question_id": "5a8d",
            "question_text": "When?",
            "contexts": [shared],
            "answers_objects": [{"number": "", "date": {"day": "7", "month": "May", "year": "1999"}, "spans": []}],
        },
    ]
    path = write_jsonl(tmp_path / "hotpotqa" / "dev_subsampled.jsonl", rows)
    first, second = read_qa(path)
    assert first.answers == ["Ann"] and [p.text for p in first.gold_passages] == ["Gold."]
    assert second.answers == ["7 May 1999"] and second.metadata == {"source": "hotpotqa"}
    assert [p.title for p in read_corpus(path)] == ["G", "Shared"]  # the shared paragraph once, one id
    rows[1]["answers_objects"] = [{"number": "", "spans": []}]
    with pytest.raises(DataError, match=r"line 2, field 'answers_objects': no non-empty answer"):
        read_qa(write_jsonl(path, rows))


def _musique(qid, answerable=True):
    paragraphs = [
        {"idx": 0, "title": "P", "paragraph_text": "Para.", "is_supporting": True},
        {"idx": 1, "title": "D", "paragraph_text": "Distractor.", "is_supporting": False},
    ]
    return {
        "id": qid,
        "question": "Seat of X?",
        "answer": "Stanley",
        "answer_aliases": ["Stanley, ND"],
        "answerable": answerable,
        "paragraphs": paragraphs,
        "question_decomposition": [],
    }


def test_musique_skips_unanswerable(tmp_path, caplog):
    path = write_json(tmp_path / "musique.json", [_musique("3hop1__1_2"), _musique("2hop__3_4", answerable=False)])
    with caplog.at_level(logging.WARNING):
        [ex] = read_qa(path)
    assert "skipped 1 records (unanswerable" in caplog.text
    assert ex.answers == ["Stanley", "Stanley, ND"] and ex.metadata == {"source": "musique", "hop_type": "3hop1"}
    assert [p.title for p in ex.gold_passages] == ["P"] and len(read_corpus(path)) == 2
    bad = _musique("2hop__5")
    bad["paragraphs"][1].pop("paragraph_text")
    with pytest.raises(DataError, match=r"record 0/paragraphs 1, field 'paragraph_text': missing"):
        read_qa(write_json(path, [bad]), format="musique")


def test_popqa_json_with_paragraphs_and_model_collaboration(tmp_path):
    rec = {
        "id": 0,
        "prop": "occupation",
        "s_pop": 142,
        "question": "What is G's occupation?",
        "possible_answers": '["politician"]',
        "paragraphs": [{"title": "G", "text": "G was a politician.", "is_supporting": True}],
    }
    [ex] = read_qa(write_json(tmp_path / "popqa.json", [rec]))
    assert ex.metadata["popularity"] == 142 and ex.gold_passages[0].title == "G"
    mc = {
        "name": "popqa",
        "dev": [{"input": "q1?", "output": '["a"]', "id": 11, "s_pop": 5}],
        "test": [{"input": "q2?", "output": '["b"]', "id": 12, "s_pop": 6}],
    }
    dev, test = read_qa(write_json(tmp_path / "mc" / "popqa.json", mc))
    assert (dev.id, dev.metadata["split"], test.answers) == ("11", "dev", ["b"])
    mc["test"][0]["s_pop"] = None
    with pytest.raises(DataError, match=r"record test 0, field 's_pop': expected an integer"):
        read_qa(write_json(tmp_path / "mc" / "popqa.json", mc))


def test_strategyqa_with_evidence_paragraphs(tmp_path, caplog):
    evidence = [[[["Albany, Georgia-1"]], ["operation"]], [[["Albany, Georgia-1", "Nowhere-9"]], ["no_evidence"]]]
    rows = [
        {
            "qid": "e004",
            "term": "Albany",
            "question": "Will Albany grow?",
            "answer": False,
            "facts": ["f"],
            "decomposition": ["d"],
            "evidence": evidence,
        }
    ]
    path = write_json(tmp_path / "strategy.json", rows)
    [ex] = read_qa(path)  # no evidence file beside it: no gold passages
    assert ex.answers == ["no"] and ex.gold_passages == [] and ex.metadata["facts"] == ["f"]
    aug = [
        {
            "title": "Albany, Georgia",
            "section": "",
            "headers": [""],
            "para_index": 1,
            "contents": "Albany…",
            "id": "strategy_0",
        }
    ]
    write_jsonl(tmp_path / "strategyQA_aug_context.jsonl", aug)
    with caplog.at_level(logging.WARNING):
        [ex] = read_qa(path)
    assert "1 cited evidence paragraphs are not in" in caplog.text
    assert [p.text for p in ex.gold_passages] == ["Albany…"] and read_corpus(path) == ex.gold_passages
    assert [p.title for p in read_corpus(tmp_path / "strategyQA_aug_context.jsonl")] == ["Albany, Georgia"]
    rows[0]["answer"] = "maybe"
    with pytest.raises(DataError, match=r"record 0, field 'answer': expected a boolean or yes/no"):
        read_qa(write_json(path, rows), format="strategyqa")


def test_flashrag_and_title_text_corpora(tmp_path):
    rows = [
        {"id": "0", "contents": '"Evan Morris"\nEvan Morris was a lobbyist.'},
        {"id": "1", "contents": "Tappet\nthe valve movement"},
        {"id": "2", "contents": "no title line"},
    ]
    got = read_corpus(write_jsonl(tmp_path / "sample_data.jsonl", rows))
    assert [(p.id, p.title) for p in got] == [("0", "Evan Morris"), ("1", "Tappet"), ("2", "")]
    corpus = write_json(tmp_path / "corpus.json", [{"title": "Teutberga", "text": "Queen."}, {"title": "X", "text": 1}])
    with pytest.raises(DataError, match=r"record 1, field 'text': expected a string"):
        read_corpus(corpus)
    write_json(corpus, [{"title": "Teutberga", "text": "Queen."}])
    assert read_corpus(corpus) == [Passage(passage_id("Teutberga", "Queen."), "Teutberga", "Queen.")]


def test_malformed_json_file_and_bom(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[{"question": "q", "answer": "a"},\n {"question": }]', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.json: malformed JSON \(Expecting value, line 2"):
        read_qa(path, format="qa_json")
    path.write_text('\ufeff[{"question": "q?", "answer": "a"}]', encoding="utf-8")
    assert read_qa(path)[0].answers == ["a"]


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs the shared/data development files beside the checkout")
def test_real_shared_files_parse():
    expected = {
        "hotpotqa/dev_subsampled.jsonl": 500,
        "2wikimultihopqa/migres/wikihop.json": 200,
        "musique/migres/musique.json": 200,
        "strategyqa/migres/strategy.json": 229,
        "popqa/hipporag2_subset_via_NeuroPath/popqa.json": 1000,
        "squad/dev-v1.1.json": 4961,
        "squad/test-v1.1.json": 5609,
        "nq/NQ-open.dev.jsonl": 3610,
        "triviaqa/topics.dpr.trivia.test.txt": 11313,
        "bamboogle/bamboogle_test_questions_and_answers.json": 125,
        "popqa/model_collaboration/popqa.json": 2000,
    }
    for rel, n in expected.items():
        assert len(read_qa(SHARED_DATA / rel)) == n, rel
    hotpot = read_qa(SHARED_DATA / "hotpotqa/dev_subsampled.jsonl")
    assert all(len(e.gold_passages) == 2 for e in hotpot)
    popqa = read_qa(SHARED_DATA / "popqa/hipporag2_subset_via_NeuroPath/popqa.json")
    assert all(isinstance(e.metadata["popularity"], int) for e in popqa)
    assert len(read_corpus(SHARED_DATA / "wiki_corpus/2wikimultihopqa_corpus.json")) == 6119
