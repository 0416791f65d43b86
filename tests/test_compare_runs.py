"""compare_runs: two evaluation folders of the same questions, compared by hand-built records."""

from __future__ import annotations

import json

import pytest

from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.records import PredictionRecord, RetrievalRecord
from inference.commands import compare_runs


def _write(folder, records, extraction="project"):
    folder.mkdir()
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    (folder / "metrics.json").write_text(json.dumps({"answer_extraction": extraction}))


def _rec(qid, output, retrievals):
    return PredictionRecord(id=qid, question="q", answers=["Osk"], output=output,
                            retrievals=[RetrievalRecord(round=i, query=q, doc_ids=["d"], position=p)
                                        for i, (p, q) in enumerate(retrievals)],
                            llm_forward_passes=1, generated_tokens=1, batch_mean_seconds=0.1)


def test_compare_counts_positions_queries_and_f1(tmp_path, capsys):
    _write(tmp_path / "a", [_rec("1", "So the answer is Osk.", [(3, "Kelmora founder")]),
                            _rec("2", "So the answer is Ben.", [(5, "x"), (9, "y")]),
                            _rec("3", "So the answer is Osk.", [])])
    _write(tmp_path / "b", [_rec("1", "So the answer is Osk.", [(3, "founder Kelmora")]),
                            _rec("2", "So the answer is Osk.", [(5, "x")]),
                            _rec("4", "unrelated", [])])
    compare_runs.main([str(tmp_path / "a"), str(tmp_path / "b"), "--json", str(tmp_path / "c.json")])
    [row] = json.loads((tmp_path / "c.json").read_text())
    assert row["questions"] == 2  # ids 1 and 2: 3 and 4 are in one run only
    assert row["retrievals_per_q_base"] == 1.5 and row["retrievals_per_q"] == 1.0
    assert row["same_trigger_positions"] == 0.5  # q1 same position (other query); q2 lost its second retrieval
    assert row["same_first_position"] == 1.0 and row["same_first_query"] == 0.5
    assert row["f1_base"] == 0.5 and row["f1"] == 1.0
    assert "| " in capsys.readouterr().out


def test_compare_refuses_what_it_cannot_compare(tmp_path):
    _write(tmp_path / "a", [_rec("1", "x", [])])
    _write(tmp_path / "b", [_rec("2", "x", [])])
    with pytest.raises(ConfigError, match="no question id"):
        compare_runs.main([str(tmp_path / "a"), str(tmp_path / "b")])
    with pytest.raises(ConfigError, match="not an evaluation folder"):
        compare_runs.main([str(tmp_path / "a"), str(tmp_path / "missing")])
    with pytest.raises(ConfigError, match="at least two"):
        compare_runs.main([str(tmp_path / "a")])
