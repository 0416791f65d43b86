"""DRAGIN as its authors ran it (oneal2000/DRAGIN ``src/data.py``, ``src/eval.py``, ``src/generate.py``): the parts
of the ``reference`` profile that read their files or follow their loops, each on a fixture shaped like theirs."""

from __future__ import annotations

import json

import pytest

from adaptive_rag.plumbing.dragin_eval import score_dragin
from adaptive_rag.plumbing.errors import DataError
from data_builders.readers import read_qa


def _two_wiki(tmp_path, aliases_lines):
    dev = [{"_id": "a1", "question": "Where was the director of Film X born?", "answer": "New York City",
            "answer_id": "Q60", "type": "compositional"},
           {"_id": "a2", "question": "Who is older?", "answer": "Ann", "answer_id": "Q9"},
           {"_id": "a3", "question": "Is it?", "answer": "yes"}]
    (tmp_path / "dev.json").write_text(json.dumps(dev))
    if aliases_lines is not None:
        (tmp_path / "id_aliases.json").write_text("\n".join(aliases_lines) + "\n")
    return tmp_path / "dev.json"


def test_2wiki_golds_are_the_answer_and_its_id_aliases(tmp_path):
    path = _two_wiki(tmp_path, [json.dumps({"Q_id": "Q60", "aliases": ["NYC", "New York", "New York City"]}),
                                json.dumps({"Q_id": "Q5", "aliases": ["nobody"]})])
    a1, a2, a3 = read_qa(path, "2wikimultihopqa")
    assert a1.answers == ["New York City", "NYC", "New York"] and a1.metadata["answer_id"] == "Q60"
    assert a2.answers == ["Ann"] and a2.metadata["answer_id"] == "Q9"  # an id without aliases keeps its answer
    assert a3.answers == ["yes"] and "answer_id" not in a3.metadata
    # the authors' eval.py: "NYC" is exact under the aliases, and was 0 without them
    assert score_dragin("So the answer is NYC.", a1.answers, "2wiki")["em"] == 1.0
    assert score_dragin("So the answer is NYC.", ["New York City"], "2wiki")["em"] == 0.0


def test_2wiki_without_the_aliases_file_keeps_the_answer(tmp_path):
    a1, *_ = read_qa(_two_wiki(tmp_path, None), "2wikimultihopqa")
    assert a1.answers == ["New York City"]


def test_a_malformed_aliases_line_names_the_file_and_line(tmp_path):
    path = _two_wiki(tmp_path, [json.dumps({"Q_id": "Q60", "aliases": ["NYC"]}), json.dumps({"Q_id": 60})])
    with pytest.raises(DataError, match="id_aliases.json"):
        read_qa(path, "2wikimultihopqa")
