"""metrics.json's answer-quality part: which normalisation scored it, and yes/no EM only where it means something."""

from __future__ import annotations

import json

import pytest

from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.records import PredictionRecord, QAExample
from adaptive_rag.plumbing.scoring import score_record, summarise
from data_builders.readers import write_qa_jsonl
from inference.adapt_gate.gate_eval import GateMethodConfig
from inference.commands import evaluate as ev
from inference.dynamic_rag.engine import EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptConfig


def _rec(output: str, answers: list) -> PredictionRecord:
    return PredictionRecord("q", "?", answers, output, [], llm_forward_passes=1, generated_tokens=1,
                            batch_mean_seconds=0.0)


def test_summarise_records_official_by_default_and_robust_on_request():
    recs = [_rec("So the answer is Paris – Lyon.", ["Paris Lyon"]), _rec("So the answer is the.", ["The"])]
    official = summarise(recs)
    # q1: [paris, –, lyon] vs [paris, lyon]: EM 0, F1 4/5; q2: "" == "" -> EM 1, F1 0 (no shared token)
    assert official["answer_normalisation"] == "official"
    assert official["em"] == pytest.approx(0.5) and official["f1"] == pytest.approx(0.4)
    robust = summarise(recs, normalisation="robust")
    # q1: EM 1, F1 1; q2: an empty prediction earns nothing
    assert robust["answer_normalisation"] == "robust"
    assert robust["em"] == pytest.approx(0.5) and robust["f1"] == pytest.approx(0.5)
    assert summarise([])["answer_normalisation"] == "official"


def test_yes_no_em_only_when_the_dataset_has_yes_no_golds():
    plain = summarise([_rec("Paris", ["Paris"]), _rec("No, Lyon.", ["Lyon"])])
    assert "yes_no_em" not in plain and "n_yes_no" not in plain
    assert "yes_no_em" not in score_record(_rec("no", ["Paris"]))
    # mixed (HotpotQA-like): yes_no_em is the mean over the yes/no questions alone: (1 + 0) / 2
    mixed = summarise([_rec("Paris", ["Paris"]), _rec("Yes, it is.", ["yes"]), _rec("No.", [True])])
    assert mixed["n_yes_no"] == 2 and mixed["yes_no_em"] == pytest.approx(0.5)
    assert mixed["n"] == 3


def test_evaluate_writes_answer_normalisation(tmp_path, monkeypatch):
    data = tmp_path / "qa.jsonl"
    write_qa_jsonl([QAExample("q0", "Which cities?", ["Paris Lyon"])], data)

    def run(examples):
        return [PredictionRecord(e.id, e.question, e.answers, "So the answer is Paris – Lyon.", [],
                                 llm_forward_passes=1, generated_tokens=1, batch_mean_seconds=0.0) for e in examples]

    monkeypatch.setattr(ev, "make_runner", lambda *a: run)
    monkeypatch.setattr(ev, "check_resources", lambda *a: None)  # no model or index is opened by the fake runner
    out = tmp_path / "out"
    cfg = ev.EvalConfig(dataset=str(data), index="unused", output_dir=str(out), show_progress=False)
    metrics = ev.evaluate(cfg, MethodConfig(method="sr-rag"), PromptConfig(), EngineConfig())
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["answer_normalisation"] == "official" and saved["em"] == 0.0 and metrics["em"] == 0.0
    assert "yes_no_em" not in saved
    # rescoring the same predictions robustly is a resume, not a settings clash
    cfg.answer_normalisation = "robust"
    saved = ev.evaluate(cfg, MethodConfig(method="sr-rag"), PromptConfig(), EngineConfig())
    assert saved["answer_normalisation"] == "robust" and saved["em"] == 1.0


def test_bad_answer_normalisation_is_a_config_error(tmp_path):
    # on the command line argparse's choices refuse it; a YAML value reaches __post_init__
    types = (ev.EvalConfig, MethodConfig, PromptConfig, EngineConfig, GateMethodConfig)
    yaml_path = tmp_path / "c.yaml"
    yaml_path.write_text("answer_normalisation: squad2\n")
    with pytest.raises(ConfigError, match=r"answer_normalisation' expects one of official, robust, got a string "
                                          r"\('squad2'\)"):
        parse_config(types, [str(yaml_path)])
