"""Typed prediction records: lines written before read back with the same keys (``seconds`` now
``batch_mean_seconds``), the engine builds its record whole, one name for retrieval depth (old names fail naming
``top_k``), one generator protocol, and one gate evaluation path (the training job's evaluation is the evaluate
command's, with the same decisions as the gate run directly)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from conftest import FakeRetriever, tiny_llama

from adaptive_rag.lm.generation import LMGenerator, Prompt, chat_prompt, generate_texts, render_prompt
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.records import Passage, PredictionRecord, QAExample, RetrievalRecord
from adaptive_rag.plumbing.scoring import summarise
from data_builders.adapt_closed_book import model_closed_book_fn
from data_builders.adapt_llm import AdaptDataConfig
from data_builders.adapt_llm_prompts import never_retrieve_prompt, response_text
from data_builders.readers import write_qa_jsonl
from inference.adapt_gate.gate import AdaptGate, model_generator, redecide, summarize, sweep_threshold
from inference.adapt_gate.gate_eval import GateMethodConfig, resolved_method
from inference.commands import evaluate as ev
from inference.commands import report, sweep
from inference.commands.popularity_threshold import read_records, tune_threshold
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig
from retrieval_adapt.rerankers import SYSTEM, LLMReranker, RerankItem
from training import adapt_llm_eval
from training.adapt_llm_config import AdaptEvalConfig, AdaptTrainConfig

# Lines as the runners wrote them before the records were typed (keys and order of that code).
ENGINE_LINE = {
    "id": "q1", "question": "Where is Quarvik?", "answers": ["Tessna"], "output": "So the answer is Tessna.",
    "retrievals": [{"round": 1, "position": 0, "trigger_score": 0.0, "query": "Where is Quarvik?",
                    "doc_ids": ["d1", "d2"]},
                   {"round": 2, "position": 7, "trigger_score": 1.25, "query": "Quarvik lies", "doc_ids": ["d3"],
                    "stopword_hits": True}],
    "llm_forward_passes": 12, "generated_tokens": 15, "output_tokens": 6, "rounds": 2,
    "signals": [{"round": 1, "kept_tokens": 3, "theta": 0.8, "words": [], "trigger": None, "docs": []}],
    "seconds": 0.5, "answer": "Tessna"}
ITER_RETGEN_LINE = {
    "id": "q2", "question": "Who wrote Y?", "answers": ["Ann Lee"], "output": "Ann Lee",
    "retrievals": [{"round": 1, "query": "Who wrote Y?", "doc_ids": ["a"]},
                   {"round": 2, "query": "Ann Lee Who wrote Y?", "doc_ids": ["b"]}],
    "iterations": [{"answer": "Bo", "answer_recall": 0.0, "em": 0.0, "f1": 0.0, "precision": 0.0, "recall": 0.0,
                    "acc": 0.0},
                   {"answer": "Ann Lee", "answer_recall": 1.0, "em": 1.0, "f1": 1.0, "precision": 1.0, "recall": 1.0,
                    "acc": 1.0}],
    "llm_forward_passes": 4.5, "generated_tokens": 10.0, "rounds": 2, "seconds": 0.25, "answer": "Ann Lee"}
GATE_LINE = {
    "id": "q3", "question": "Question b?", "answers": ["Toulouse"], "output": "So the answer is Toulouse.",
    "policy": "adapt_llm", "retrieved": True, "answered_by": "dragin", "p_ret": 0.9, "popularity": None,
    "retrievals": [{"round": 1, "position": 0, "trigger_score": 2.0, "query": "Question b", "doc_ids": ["x"]}],
    "parametric_output": "<RET>", "closed_book_output": None, "context_output": "So the answer is Toulouse.",
    "llm_forward_passes": 14, "generated_tokens": 17, "seconds": 0.75,
    "inner": {"output": "So the answer is Toulouse.",
              "retrievals": [{"round": 1, "position": 0, "trigger_score": 2.0, "query": "Question b",
                              "doc_ids": ["x"]}],
              "llm_forward_passes": 12, "generated_tokens": 15, "output_tokens": 6, "rounds": 1, "seconds": 0.75},
    "answer": "Toulouse"}
SINGLE_GATE_LINE = {
    "id": "q4", "question": "Question d?", "answers": ["Tromso"], "output": "Oslo", "policy": "never_retrieve",
    "retrieved": False, "answered_by": "closed_book", "p_ret": None, "popularity": 2000.0, "retrievals": [],
    "parametric_output": None, "closed_book_output": "Oslo", "context_output": None, "llm_forward_passes": 20,
    "generated_tokens": 2, "seconds": 0.1, "answer": "Oslo"}


def renamed(line: dict) -> dict:
    """The line as it is written now: ``seconds`` is ``batch_mean_seconds``, everything else as before."""
    out = {("batch_mean_seconds" if k == "seconds" else k): v for k, v in line.items()}
    if isinstance(out.get("inner"), dict):
        out["inner"] = renamed(out["inner"])
    return out


@pytest.mark.parametrize("line", [ENGINE_LINE, ITER_RETGEN_LINE, GATE_LINE, SINGLE_GATE_LINE],
                         ids=["engine", "iter-retgen", "gate-with-inner", "gate"])
def test_lines_written_before_read_back_with_the_same_keys(line):
    rec = PredictionRecord.from_dict(line)
    assert rec.to_dict() == renamed(line)
    assert PredictionRecord.from_dict(rec.to_dict()) == rec  # and the new form reads back to the same record
    assert rec.answer == line["answer"]


def test_typed_fields_and_what_the_scorer_reads():
    engine, gate = PredictionRecord.from_dict(ENGINE_LINE), PredictionRecord.from_dict(GATE_LINE)
    assert engine.retrievals[1] == RetrievalRecord(2, "Quarvik lies", ["d3"], position=7, trigger_score=1.25,
                                                   stopword_hits=True)
    assert engine.batch_mean_seconds == 0.5 and engine.gate is None and engine.output_tokens == 6
    assert gate.gate.inner.rounds == 1 and gate.gate.inner.batch_mean_seconds == 0.75 and gate.gate.retrieved
    m = summarise([engine, PredictionRecord.from_dict(ITER_RETGEN_LINE)])
    # (0.5 + 0.25) / 2 seconds, (2 + 2) / 2 retrievals, (12 + 4.5) / 2 passes, by hand
    assert m["seconds_per_question"] == 0.375 and m["retrieval_calls"] == 2.0 and m["llm_forward_passes"] == 8.25
    assert "retrieval_share" not in m  # only when every record is a gate's
    both = summarise([gate, PredictionRecord.from_dict(SINGLE_GATE_LINE)])
    assert (both["retrieval_share"], both["acc_retrieved"], both["acc_not_retrieved"]) == (0.5, 1.0, 0.0)


def test_resume_reads_predictions_written_before_the_rename(tmp_path, monkeypatch):
    data = tmp_path / "qa.jsonl"
    write_qa_jsonl([QAExample(f"q{i}", f"Question {i}?", [f"a{i}"]) for i in range(4)], data)
    calls: list[str] = []

    def run(examples):
        calls.extend(e.id for e in examples)
        return [PredictionRecord(e.id, e.question, e.answers, e.answers[0], [], llm_forward_passes=1,
                                 generated_tokens=1, batch_mean_seconds=1.0) for e in examples]

    monkeypatch.setattr(ev, "make_runner", lambda *a: run)
    cfg = ev.EvalConfig(dataset=str(data), index="unused", output_dir=str(tmp_path / "out"), limit=2,
                        show_progress=False)
    monkeypatch.setattr(ev, "check_resources", lambda *a: None)
    ev.evaluate(cfg, MethodConfig(method="sr-rag"), PromptConfig(), EngineConfig())
    pred = tmp_path / "out" / "predictions.jsonl"
    old = [json.loads(line) for line in pred.read_text().splitlines()]
    assert all("batch_mean_seconds" in r and "seconds" not in r for r in old)
    # as an earlier version wrote them: "seconds", 3.0 each
    pred.write_text("".join(json.dumps({**{k: v for k, v in r.items() if k != "batch_mean_seconds"},
                                        "seconds": 3.0}) + "\n" for r in old))
    cfg.limit = 4
    metrics = ev.evaluate(cfg, MethodConfig(method="sr-rag"), PromptConfig(), EngineConfig())
    assert calls == ["q0", "q1", "q2", "q3"] and metrics["n"] == 4
    assert metrics["seconds_per_question"] == (3.0 + 3.0 + 1.0 + 1.0) / 4


def test_the_engine_builds_its_record_whole(tiny_model, smol_tokenizer, fake_retriever):
    """output_tokens was written as None and patched after the batch; the record now comes out complete."""
    eng = DynamicRAGEngine(tiny_model, smol_tokenizer, fake_retriever, PromptBuilder(smol_tokenizer),
                           MethodConfig(method="sr-rag"), EngineConfig(batch_size=2, max_new_tokens=5))
    recs = eng.run([QAExample("q", "Where is Quarvik?", ["Tessna"]), QAExample("r", "Who?", ["Bo"])],
                   show_progress=False)
    for rec in recs:
        assert rec.output_tokens == len(smol_tokenizer.encode(rec.output, add_special_tokens=False))
        assert rec.rounds == 1 and rec.batch_mean_seconds > 0
        assert [(r.round, r.position, r.trigger_score) for r in rec.retrievals] == [(0, 0, 0.0)]
    line = recs[0].to_dict()
    assert None not in (line["output_tokens"], line["rounds"]) and "seconds" not in line


# --- one name for retrieval depth ---------------------------------------------------------------------------

EVAL_TYPES = (ev.EvalConfig, MethodConfig, PromptConfig, EngineConfig, GateMethodConfig)


@pytest.mark.parametrize("old", ["gate_k"])
def test_the_gates_old_depth_name_fails_naming_top_k(tmp_path, old):
    config = tmp_path / "c.yaml"
    config.write_text(f"method: adapt-llm\n{old}: 2\n")
    with pytest.raises(ConfigError, match=f"{old} was renamed: use top_k"):
        parse_config(EVAL_TYPES, [str(config)])
    with pytest.raises(ConfigError, match=f"--{old} was renamed: use --top_k"):
        parse_config(EVAL_TYPES, ["--method", "adapt-llm", f"--{old}", "2"])
    recipe = tmp_path / "sweep.yaml"
    recipe.write_text(yaml.safe_dump({"method": "adapt-llm", "sweep": {old: [1, 2]}}))
    with pytest.raises(ConfigError, match=f"{old} was renamed: use top_k"):
        sweep.main([str(recipe)])
    assert parse_config(EVAL_TYPES, ["--method", "adapt-llm", "--top_k", "2"])[1].top_k == 2


def test_the_training_jobs_old_depth_name_fails_naming_top_k(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("eval_k: 2\n")
    types = (AdaptDataConfig, AdaptTrainConfig, AdaptEvalConfig)
    with pytest.raises(ConfigError, match="eval_k was renamed: use top_k"):
        parse_config(types, [str(config)])
    with pytest.raises(ConfigError, match="--eval_k was renamed: use --top_k"):
        parse_config(types, ["--eval_k", "2"])
    assert parse_config(types, ["--top_k", "2"])[2].top_k == 2


def test_the_gates_depth_is_one_unless_its_inner_method_answers():
    unset = MethodConfig(method="adapt-llm")
    assert unset.top_k is None and unset.resolved().top_k == 1 == GateMethodConfig().gate_config("ar").top_k
    assert MethodConfig(method="ar", top_k=4).resolved().top_k == 4
    assert resolved_method(unset, GateMethodConfig()).top_k == 1
    dragin = resolved_method(unset, GateMethodConfig(gate_inner="dragin"), "world-two-hop")
    assert dragin.top_k == MethodConfig(method="dragin").resolved().top_k == 3  # DRAGIN's own, not the prompt's 1
    assert resolved_method(MethodConfig(method="adapt-llm", top_k=5), GateMethodConfig(gate_inner="dragin")).top_k == 5


# --- one generator protocol ---------------------------------------------------------------------------------

def test_one_generator_protocol_gives_generate_texts_outputs(tiny_model, smol_tokenizer, monkeypatch):
    prompts = ["The capital of France", "Hello", "Numbers: 1, 2, 3"]
    direct = generate_texts(tiny_model, smol_tokenizer, prompts, max_new_tokens=4, batch_size=2)
    gen = LMGenerator(tiny_model, smol_tokenizer, max_new_tokens=4, batch_size=2)
    assert gen.generate(prompts) == direct
    assert gen.generated_tokens == sum(g.num_tokens for g in direct)
    chat = Prompt("hi", system="sys", chat=True)
    assert gen.render(chat) == render_prompt(smol_tokenizer, chat) == chat_prompt(smol_tokenizer, "hi", "sys")
    assert render_prompt(smol_tokenizer, Prompt("plain")) == render_prompt(smol_tokenizer, "plain") == "plain"
    # Algorithm 1's closed-book answers: the same protocol, the same answers as generate_texts gave them
    import adaptive_rag.lm.models

    monkeypatch.setattr(adaptive_rag.lm.models, "load_causal_lm", lambda name, opts=None: (tiny_model, smol_tokenizer))
    examples = [QAExample("a", "Where is Town1?", ["x"]), QAExample("b", "Who wrote Hamlet?", ["y"])]
    answers = model_closed_book_fn("tiny", "paper", max_new_tokens=4, batch_size=2)(examples)
    before = generate_texts(tiny_model, smol_tokenizer, [never_retrieve_prompt(e.question, "paper") for e in examples],
                            max_new_tokens=4, batch_size=2)
    assert answers == [response_text(g.text) for g in before]
    # the re-ranker's prompt goes through the same rendering
    reranker = LLMReranker(tiny_model, smol_tokenizer)
    text = reranker.prompt(RerankItem("Where?", "", [], ["x"]), Passage("p", "T", "x"))
    assert text == chat_prompt(smol_tokenizer, "Paragraph: T: x\nQuestion: Where?", SYSTEM)


# --- one gate evaluation path -------------------------------------------------------------------------------

@pytest.fixture()
def gate_model(smol_tokenizer):
    tokenizer = copy.deepcopy(smol_tokenizer)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<RET>"]})
    return tiny_llama(len(tokenizer), seed=3), tokenizer


def test_the_training_jobs_evaluation_is_the_evaluate_commands(tmp_path, gate_model, monkeypatch):
    """Same files as any evaluation folder; NR / AR / ADAPT-LLM, per kind and the threshold sweep exactly as the
    gate's own sweep pass decides them (what this evaluation computed before it ran through evaluate)."""
    model, tokenizer = gate_model
    qa = tmp_path / "qa.jsonl"
    write_qa_jsonl([QAExample(f"q{i}", f"Where is Town{i}?", [f"Land{i}"],
                              metadata={"kind": "fictional" if i % 2 else "common", "popularity": 10.0 * (i + 1)})
                    for i in range(6)], qa)
    data_cfg = AdaptDataConfig(data_dir=str(tmp_path / "data"), dataset=str(qa), max_passage_words=20)
    eval_cfg = AdaptEvalConfig(eval_dataset=str(qa), eval_batch_size=4, eval_max_new_tokens=3, top_k=2)
    monkeypatch.setattr(adapt_llm_eval, "eval_retriever", lambda *a: FakeRetriever())
    out = tmp_path / "model" / "eval"
    out.mkdir(parents=True)
    (out / "records.jsonl").write_text("{}\n")  # an earlier version's file: replaced, not left to mislead
    result = adapt_llm_eval.evaluate_gate(model, tokenizer, data_cfg, eval_cfg, out, model_dir="runs/m")
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "metrics.json", "predictions.jsonl",
                                                     "summary.json", "table.txt"]
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert (saved["method"], saved["model"], saved["top_k"], saved["gate_all_answers"]) == ("adapt-llm", "runs/m", 2,
                                                                                          True)
    assert json.loads((out / "metrics.json").read_text())["n"] == 6 == result["metrics"]["n"]
    # the gate run directly, as this evaluation ran before
    examples = adapt_llm_eval.eval_questions(data_cfg, eval_cfg)
    cfg = adapt_llm_eval.gate_config(data_cfg, eval_cfg)
    direct = AdaptGate(model_generator(model, tokenizer, 4, 3), FakeRetriever(), cfg).run(examples, "sweep")
    lines = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    for rec, line in zip(direct, lines):
        assert (line["parametric_output"], line["closed_book_output"], line["context_output"], line["p_ret"]) == (
            rec.parametric_output, rec.closed_book_output, rec.context_output, rec.p_ret)
        assert line["output"] == rec.output and line["retrieved"] == rec.retrieved
    for name, policy in (("NR (never retrieve)", "never_retrieve"), ("AR (always retrieve)", "always_retrieve"),
                         ("ADAPT-LLM (token)", "adapt_llm")):
        assert result["summaries"][name] == summarize(redecide(direct, policy, cfg))
    assert result["sweep"] == sweep_threshold(direct, eval_cfg.sweep_thresholds, cfg)
    assert set(result["by_kind"]) == {f"{p} [{k}]" for p in ("NR", "AR", "ADAPT-LLM") for k in ("common", "fictional")}
    assert json.loads((out / "summary.json").read_text())["summaries"] == result["summaries"]
    # what reads this folder: the popularity tool (no answer generated again) and the report (its three rows)
    from_file = read_records(out / "predictions.jsonl")
    assert tune_threshold(from_file, cfg) == tune_threshold(direct, cfg)
    runs = report.find_runs([str(tmp_path / "model")])
    assert [g.name for g in runs.gates] == ["model/eval"] and runs.evals == []
    rows = report.table_rows(runs)
    assert [r["method"] for r in rows] == ["NR (never retrieve)", "AR (always retrieve)", "ADAPT-LLM (token)"]
    assert len(report.popularity_curve(runs.gates[0].records_file)) > 1


def test_popularity_tool_reads_old_records_and_new_predictions_alike(tmp_path):
    old = tmp_path / "records.jsonl"
    old.write_text(json.dumps({"question_id": "q0", "question": "Q?", "answers": ["Paris"], "popularity": 5.0,
                               "parametric_output": "Rome", "closed_book_output": "Rome",
                               "context_output": "Paris", "p_ret": 0.2, "kind": "all", "inner": None}) + "\n")
    new = tmp_path / "predictions.jsonl"
    new.write_text(json.dumps({**{k: v for k, v in SINGLE_GATE_LINE.items() if k != "id"}, "id": "q0",
                               "question": "Q?", "answers": ["Paris"], "popularity": 5.0,
                               "parametric_output": "Rome", "closed_book_output": "Rome",
                               "context_output": "Paris", "p_ret": 0.2}) + "\n")
    (a,), (b,) = read_records(old), read_records(new)
    keys = ("question_id", "question", "answers", "popularity", "parametric_output", "closed_book_output",
            "context_output", "p_ret")
    assert [getattr(a, k) for k in keys] == [getattr(b, k) for k in keys]


def test_policy_rows_name_the_model_that_was_trained():
    """The job's table says NR / AR / ADAPT-LLM only for the ADAPT-LLM model: a --mode nr or ar model's rows are
    named after it (the paper's NR and AR rows are separately trained models, not policies of one model)."""
    from training.adapt_llm_eval import policy_labels

    assert policy_labels("adapt", "argmax") == ("NR (never retrieve)", "AR (always retrieve)", "ADAPT-LLM (argmax)")
    for mode, model in (("nr", "NR-LLM"), ("ar", "AR-LLM")):
        labels = policy_labels(mode, "argmax")
        assert all(label.startswith(f"{model} model") for label in labels) and len(set(labels)) == 3
        assert not any(label.startswith(("NR (", "AR (", "ADAPT-LLM")) for label in labels)
