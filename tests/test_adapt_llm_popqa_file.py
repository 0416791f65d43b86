"""The ADAPT-LLM authors' PopQA evaluation file: read by its own format, its passage answered from without an index."""

from __future__ import annotations

import json

import pytest

from adaptive_rag.plumbing.errors import DataError
from data_builders.readers import detect_format, read_qa

# shaped like their popqa_test_test.json (keyed by question id), written for this test
FILE = {
    "2276352": {"question": "In what city was Aarno Maliniemi born?", "possible_answers": ["Oulu", "Uleåborg"],
                "gold_passage": "", "contriever_passage": "Aarno Raninen Aarno Raninen (1944) was a singer.",
                "contriever_score": "1.83", "s_pop": 40.0},
    "223230": {"question": "In what city was Aina Kusuda born?", "possible_answers": ["Chiba Prefecture"],
               "gold_passage": "", "contriever_passage": "Aina Kusuda is a voice actress.", "s_pop": 7},
}


def test_their_file_is_read_with_its_passages_and_popularity(tmp_path):
    path = tmp_path / "popqa_test_test.json"
    path.write_text(json.dumps(FILE, ensure_ascii=False))
    assert detect_format(path) == "adapt_llm_popqa"
    a, b = read_qa(path)
    assert (a.id, a.answers, a.metadata["popularity"]) == ("2276352", ["Oulu", "Uleåborg"], 40)
    assert a.metadata["context_passage"] == "Aarno Raninen Aarno Raninen (1944) was a singer."
    assert b.metadata["popularity"] == 7


def test_a_question_without_its_passage_is_named(tmp_path):
    broken = {**FILE, "9": {"question": "Q?", "possible_answers": ["A"], "contriever_passage": None, "s_pop": 1}}
    path = tmp_path / "popqa_test_test.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(DataError, match="contriever_passage"):
        read_qa(path, "adapt_llm_popqa")


def test_a_gate_answering_from_the_files_passage_needs_no_index():
    from inference.adapt_gate.gate_eval import GateMethodConfig
    from inference.commands.evaluate import needs_retrieval
    from inference.dynamic_rag.methods import MethodConfig

    ar = MethodConfig(method="ar")
    assert not needs_retrieval(ar, GateMethodConfig(gate_context_source="file"))
    assert needs_retrieval(ar, GateMethodConfig())
    assert needs_retrieval(ar, GateMethodConfig(gate_context_source="file", gate_inner="fs-rag"))
