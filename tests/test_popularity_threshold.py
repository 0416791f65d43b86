"""The PopQA popularity policy: threshold tuned on one slice, policies reported on another (hand-checked)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from adaptive_rag.plumbing.errors import DataError
from inference.adapt_gate.gate import GateRecord
from inference.commands.popularity_threshold import main, read_records, report, tune_threshold


def _rec(i: int, popularity: float, nr_right: bool, ctx_right: bool, wants_ret: bool = True) -> GateRecord:
    return GateRecord(f"q{i}", f"question {i}?", ["paris"], popularity=popularity,
                      parametric_output="<RET>" if wants_ret else ("paris" if nr_right else "rome"),
                      closed_book_output="paris" if nr_right else "rome",
                      context_output="paris" if ctx_right else "rome")


# popularity: 10, 20, 30, 40 -> retrieval helps the rare ones, memory the popular ones
RECORDS = [_rec(0, 10, False, True), _rec(1, 20, False, True), _rec(2, 30, True, False), _rec(3, 40, True, True)]


def test_tune_threshold_picks_the_best_and_lowest_on_ties():
    # thresholds: 0 -> NR 2/4; 10 -> 2/4; 20 -> 3/4; 30 -> 4/4; 40 -> 3/4; inf -> AR 3/4
    assert tune_threshold(RECORDS) == (30.0, 1.0)
    # all answers right either way: every threshold ties at 1.0, the lowest (never retrieve) wins
    assert tune_threshold([_rec(0, 5, True, True), _rec(1, 9, True, True)]) == (0.0, 1.0)


def test_report_on_the_held_out_slice():
    records = RECORDS + [_rec(4, 15, False, True, wants_ret=False), _rec(5, 35, True, False, wants_ret=True)]
    out = report(records, slice(0, 4), slice(4, 6))
    assert out["threshold"] == 30.0
    rows = out["rows"]
    assert rows["NR (never retrieve)"]["accuracy"] == 0.5  # q5 right from memory
    assert rows["AR (always retrieve)"]["accuracy"] == 0.5  # q4 right with context
    adapt = rows["ADAPT-LLM (token)"]  # q4 kept (parametric "rome": wrong), q5 retrieved (context wrong)
    assert adapt["accuracy"] == 0.0 and adapt["retrieval_share"] == 0.5
    tuned = rows["popularity < 30 (tuned)"]  # q4 (15) retrieves: right; q5 (35) from memory: right
    assert tuned["accuracy"] == 1.0 and tuned["retrieval_share"] == 0.5
    assert rows["popularity < 707,000 (paper)"]["retrieval_share"] == 1.0


def test_missing_popularity_is_a_clear_error():
    with pytest.raises(ValueError, match="popularity"):
        tune_threshold([_rec(0, 1, True, True), GateRecord("q1", "?", ["a"], parametric_output="a")])


def test_cli_reads_records_and_rejects_bad_input(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps({**asdict(r), "kind": "all"}) + "\n" for r in RECORDS))
    assert [r.question_id for r in read_records(path)] == ["q0", "q1", "q2", "q3"]
    main([str(path), "--tune", "0:4", "--test", "2:4", "--json", str(tmp_path / "out.json")])
    assert "popularity < 30 (tuned)" in capsys.readouterr().out
    assert json.loads((tmp_path / "out.json").read_text())["threshold"] == 30.0
    with pytest.raises(SystemExit) as err:
        main([str(path), "--tune", "0:4", "--test", "4:9"])
    assert err.value.code == 2 and "has 4 records" in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_text('{"question_id": "q0"\n')
    with pytest.raises(SystemExit) as err:
        main([str(tmp_path / "bad.jsonl"), "--tune", "0:1", "--test", "0:1"])
    assert err.value.code == 2 and "bad.jsonl, line 1: not JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.jsonl")])


@pytest.mark.parametrize(("change", "message"), [
    ({"context_output": None}, "line 2, field 'context_output': missing"),
    ({"popularity": None}, "line 2, field 'popularity': missing"),
    ({"answers": "paris"}, "line 2, field 'answers': expected list, got str"),
    ({"answers": [1]}, "line 2, field 'answers': expected a list of strings"),
    ({"popularity": "high"}, "line 2, field 'popularity': expected int or float, got str"),
])
def test_records_missing_fields_name_file_line_and_field(tmp_path, capsys, change, message):
    rows = [asdict(r) for r in RECORDS]
    rows[1] = {k: v for k, v in {**rows[1], **change}.items() if v is not None}
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=message.replace("(", r"\(")):
        read_records(path)
    with pytest.raises(SystemExit) as err:
        main([str(path), "--tune", "0:2", "--test", "2:4"])
    out = capsys.readouterr().err.strip()
    assert err.value.code == 2 and out.startswith(f"error: {path}, {message}") and len(out.splitlines()) == 1


def test_other_bad_files_are_one_line(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    for content, message in [(b"", "no records"), (b"[1, 2]\n", "line 1: expected a JSON object, got list"),
                             (b'{"question_id": "\xff"}\n', "line 1: not UTF-8")]:
        path.write_bytes(content)
        with pytest.raises(SystemExit) as err:
            main([str(path), "--tune", "0:1", "--test", "0:1"])
        out = capsys.readouterr().err.strip()
        assert err.value.code == 2 and message in out and len(out.splitlines()) == 1, out
    with pytest.raises(SystemExit) as err:
        main([str(path), "--tune", "7"])
    out = capsys.readouterr().err.strip()
    assert err.value.code == 2 and out.startswith("error: argument --tune: expected START:STOP") and "\n" not in out
