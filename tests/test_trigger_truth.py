"""The trigger against the truth: AUROC, thresholds by the share they fire on, and the answer's signals."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml

from adaptive_rag.plumbing.bootstrap import auroc, auroc_ci
from adaptive_rag.plumbing.errors import ConfigError, DataError
from inference.commands.knowing_claims import answer_signals
from inference.commands.trigger_thresholds import best_run, main, quantile_thresholds


def test_auroc_hand_computed_with_a_tie():
    # positives 0.9 and 0.4 against negatives 0.8, 0.4, 0.1: 0.9 beats 3, 0.4 beats 1 and ties 1 -> 4.5 / 6
    assert auroc([0.9, 0.8, 0.4, 0.4, 0.1], [True, False, True, False, False]) == pytest.approx(0.75)
    assert auroc([1, 2, 3], [False, False, True]) == 1.0
    assert auroc([1, 2, 3], [True, False, False]) == 0.0
    assert auroc([1, 2], [True, True]) is None  # one class: undefined


def test_auroc_interval_brackets_the_point_and_bad_input():
    scores = [0.1 * i for i in range(20)]
    positives = [i % 3 == 0 or i > 14 for i in range(20)]
    point, lo, hi = auroc_ci(scores, positives)
    assert lo <= point <= hi and point == auroc(scores, positives)
    assert auroc_ci([1, 2], [False, False]) is None
    with pytest.raises(ValueError, match="one label per score"):
        auroc([1, 2], [True])


def test_quantile_thresholds_fire_on_the_share_asked():
    highest = [float(i) for i in range(10)]  # 0 .. 9
    t20, t50, t80 = quantile_thresholds(highest, [0.2, 0.5, 0.8])
    assert sum(h > t20 for h in highest) == 2 and sum(h > t50 for h in highest) == 5
    assert sum(h > t80 for h in highest) == 8
    with pytest.raises(ConfigError, match="share"):
        quantile_thresholds(highest, [1.0])
    with pytest.raises(DataError, match="keep_signals"):
        quantile_thresholds([], [0.5])


def _run(folder, acc, calls, theta):
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"acc": acc, "retrieval_calls": calls}))
    (folder / "config.yaml").write_text(yaml.safe_dump({"theta": theta}))
    return folder


def test_best_run_prefers_accuracy_then_fewer_retrievals(tmp_path, capsys):
    a = _run(tmp_path / "a", 0.5, 0.9, 0.1)
    b = _run(tmp_path / "b", 0.6, 0.8, 0.2)
    c = _run(tmp_path / "c", 0.6, 0.3, 0.4)
    assert best_run([a, b, c]) == c
    main(["best", str(a), str(b), str(c)])
    assert capsys.readouterr().out.strip() == "0.4"
    with pytest.raises(DataError, match="metrics.json"):
        best_run([tmp_path / "missing"])
    with pytest.raises(ConfigError, match="action"):
        main(["nonsense", str(a)])


def _record(words):  # answer_signals reads the record's signals only
    return SimpleNamespace(signals=[{"round": 1, "theta": 1.0, "words": words}])


def test_answer_signals_take_the_highest_over_words_with_text():
    words = [{"text": "Fal", "score": 0.2, "entropy": 1.5, "min_prob": 0.4},
             {"text": "ulm", "score": 0.7, "entropy": 0.5, "min_prob": 0.9},
             {"text": ".", "score": 9.0, "entropy": 9.0, "min_prob": 0.01}]  # punctuation alone never fires
    got = answer_signals(_record(words))
    assert got == {"rind": 0.7, "entropy": 1.5, "low_prob": pytest.approx(0.6)}
    assert answer_signals(_record([])) == {"rind": 0.0, "entropy": 0.0, "low_prob": 0.0}
    assert answer_signals(SimpleNamespace(signals=[])) is None


def test_hindsight_gate_hand_computed():
    from inference.commands.knowing_claims import hindsight_gate

    scores = {"a": 0.1, "b": 0.5, "c": 0.9}
    no_ret = {"a": 1.0, "b": 1.0, "c": 0.0}
    ret = {"a": 0.0, "b": 1.0, "c": 1.0}
    # retrieve above θ: all 2/3; above 0.1 (b, c) 3/3; above 0.5 (c) 3/3 with fewer retrievals; none 2/3
    assert hindsight_gate(scores, no_ret, ret) == (1.0, pytest.approx(1 / 3))
    tied = {"a": 0.5, "b": 0.5, "c": 0.9}  # a and b cannot be split: a threshold passes both or neither
    assert hindsight_gate(tied, no_ret, ret) == (1.0, pytest.approx(1 / 3))
    assert hindsight_gate({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0}) == (0.5, 0.0)


def test_thresholds_command_bad_input(tmp_path):
    with pytest.raises(DataError, match="no predictions.jsonl"):
        main(["quantiles", str(tmp_path / "nowhere")])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "predictions.jsonl").write_text("")
    with pytest.raises(ConfigError, match="fractions"):
        main(["quantiles", str(tmp_path / "run"), "--shares", "20%"])
    no_theta = _run(tmp_path / "no-theta", 0.5, 0.1, None)
    with pytest.raises(DataError, match="sets no 'theta'"):
        main(["best", str(no_theta)])


def test_auroc_interval_of_two_questions_does_not_fail():
    # one resample of two questions keeps both classes half the time: a lost class must not end in an error
    for seed in range(4):
        point, lo, hi = auroc_ci([0.1, 0.9], [False, True], n_resamples=1, seed=seed)
        assert point == 1.0 and (lo != lo or lo <= hi)  # NaN bounds, or an interval


def test_claims_route_signals_runs_refuse_competing_runs_and_skip_tuning_halves(tmp_path):
    from pathlib import Path

    from inference.commands.knowing_claims import _is_signals_run, claims_report
    from inference.commands.report import EvalRun
    from tests.test_report import record, write_run

    def run(method, calls, keep):
        return EvalRun("r", Path("."), {"keep_signals": keep}, {"method": method, "retrieval_calls": calls})

    assert _is_signals_run(run("dragin", 0.0, True))
    assert not _is_signals_run(run("dragin", 0.4, True))  # it retrieved: an ordinary DRAGIN run
    assert not _is_signals_run(run("wo-rag", 0.0, True))  # keep_signals for the trace view
    assert not _is_signals_run(run("dragin", 0.0, False))
    for name in ("a", "b"):
        write_run(tmp_path / "dup" / name, [record(0, True, 0)], method="wo-rag", dataset="world-two-hop")
    with pytest.raises(DataError, match="2 runs of 'wo-rag' on world-two-hop"):
        claims_report([str(tmp_path / "dup")])
    write_run(tmp_path / "tune" / "a", [record(0, True, 0)], method="wo-rag", dataset="knowing-adapt-tune")
    write_run(tmp_path / "tune" / "b", [record(0, True, 0)], method="wo-rag", dataset="knowing-adapt-tune")
    assert claims_report([str(tmp_path / "tune")]).strip().count("\n") == 0  # the header alone
