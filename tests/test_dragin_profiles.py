"""The engine on a scripted model (known text, real sentences): the progress guarantee, DRAGIN's reference profile
(documents for one sentence; FL/FS-RAG asking the question first), the paper prompt's stop, and the benchmark's
one-question-at-a-time replay making the engine's decisions."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from scripted_lm import CountingPrompts, scripted_llama

from adaptive_rag.plumbing.records import PredictionRecord, QAExample
from data_builders.readers import write_qa_jsonl
from inference.commands import evaluate as ev
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig

SCRIPT = " Osk founded Kelmora. Then he left:"  # the paper prompt ends with "Answer:", so the script starts there
ROOT = Path(__file__).resolve().parents[1]




def run(tokenizer, method: MethodConfig, fake_retriever, *, script=SCRIPT, max_new_tokens=30):
    prompts = CountingPrompts(tokenizer, PromptConfig(prompt_style="paper", num_demos=1))
    engine = DynamicRAGEngine(scripted_llama(tokenizer, script), tokenizer, fake_retriever, prompts, method,
                              EngineConfig(batch_size=2, max_new_tokens=max_new_tokens))
    [record] = engine.run([QAExample("q", "Who founded Kelmora?", ["Osk"])], show_progress=False)
    return record.to_dict(), prompts.doc_counts


def positions(record) -> list[int]:
    return [r["position"] for r in record["retrievals"]]


@pytest.mark.parametrize("method", [dict(method="dragin", theta=0.0), dict(method="flare", flare_threshold=1.0)])
def test_progress_guarantee_every_retrieval_keeps_a_sentence(method, smol_tokenizer, fake_retriever):
    # θ 0 / threshold 1: the trigger fires wherever it may. Without the guarantee every retrieval happens at the
    # same place (nothing kept) until the cap; with it each one keeps the sentence written after the last.
    old, _ = run(smol_tokenizer, MethodConfig(**method, keep_sentence_after_retrieval=False, max_rounds=4),
                 fake_retriever)
    assert len(set(positions(old))) == 1 and len(old["retrievals"]) == 4
    cfg = MethodConfig(**method, max_rounds=4)
    record, _ = run(smol_tokenizer, cfg, fake_retriever)
    pos = positions(record)[1:] if cfg.retrieves_first else positions(record)  # FLARE asks the question first
    assert len(pos) >= 3 and all(a < b for a, b in zip(pos, pos[1:]))
    assert record["output"].startswith("Osk founded Kelmora. Then he left: Osk founded Kelmora.")


def test_reference_profile_documents_serve_one_sentence(smol_tokenizer, fake_retriever):
    method = MethodConfig(method="dragin", dragin_profile="reference", theta=0.0)
    record, docs = run(smol_tokenizer, method, fake_retriever)
    # round 1 without documents fires at its first word; then each retrieval's documents write one sentence, and
    # the round after that is prompted without them
    assert docs[:5] == [0, 3, 0, 3, 0]
    pos = positions(record)
    assert pos[0] == 0 and all(a < b for a, b in zip(pos, pos[1:]))
    assert record["output"].startswith("Osk founded Kelmora. Then he left: Osk founded Kelmora.")
    assert record["rounds"] == len(docs)


def test_reference_profile_fixed_methods_ask_the_question_first(smol_tokenizer, fake_retriever):
    record, docs = run(smol_tokenizer, MethodConfig(method="fs-rag", dragin_profile="reference", max_rounds=3),
                       fake_retriever)
    assert fake_retriever.queries[0] == "Who founded Kelmora?" and docs[0] == 3
    assert fake_retriever.queries[1] == "Osk founded Kelmora."  # then the sentence just written
    fake_retriever.queries.clear()
    run(smol_tokenizer, MethodConfig(method="fs-rag", max_rounds=3), fake_retriever)
    assert fake_retriever.queries[0] == "Osk founded Kelmora."  # the paper's FS-RAG: no question-first call


def test_paper_prompt_stops_when_the_model_starts_a_new_question(smol_tokenizer, fake_retriever):
    record, _ = run(smol_tokenizer, MethodConfig(method="wo-rag"), fake_retriever,
                    script=" Osk founded Kelmora.\nQuestion:")
    assert record["output"] == "Osk founded Kelmora."


def test_evaluate_records_the_profile_and_its_values(tmp_path, monkeypatch):
    data = tmp_path / "2wikimultihopqa_dev.jsonl"
    write_qa_jsonl([QAExample("q0", "Question 0?", ["a"])], data)
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "meta.json").write_text('{"kind": "bm25"}')
    seen = {}

    def make_runner(cfg, method, prompt, engine, gate):
        seen.update(method=method, prompt=prompt, engine=engine)
        return lambda examples: [
            PredictionRecord(e.id, e.question, e.answers, "So the answer is a.", [], llm_forward_passes=1,
                             generated_tokens=1, rounds=1, batch_mean_seconds=0.1) for e in examples]

    monkeypatch.setattr(ev, "make_runner", make_runner)
    monkeypatch.setattr(ev, "check_resources", lambda *a: None)
    cfg = ev.EvalConfig(dataset=str(data), index=str(tmp_path / "index"), output_dir=str(tmp_path / "out"),
                        show_progress=False)
    ev.evaluate(cfg, MethodConfig(method="dragin", dragin_profile="reference"), PromptConfig(), EngineConfig())
    saved = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    # one row of the authors' configs (Llama2-7b-chat, 2Wiki): θ 1.0, top-n 25, 64 tokens, 6 demos; none of
    # HotpotQA's (0.8, 35, 100, 8) leaks in
    assert saved["dragin_profile"] == "reference" and saved["reference_config"] == "Llama2-7b-chat"
    assert (saved["theta"], saved["qfs_top_n"], saved["max_new_tokens"], saved["num_demos"]) == (1.0, 25, 64, 6)
    assert (seen["method"].theta, seen["engine"].max_new_tokens, seen["prompt"].num_demos) == (1.0, 64, 6)
    assert (saved["rind_attention"], saved["content_filter"], saved["docs_scope"], saved["max_rounds"]) == (
        "reference", "after_threshold", "next_sentence", None)  # None: no cap, their loops' own ends
    assert (saved["answer_extraction"], saved["round_budget"]) == ("dragin", "per_round")
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["answer_extraction"] == "dragin" and metrics["em"] == 1.0


def load_bench_reference():
    spec = importlib.util.spec_from_file_location("dragin_replay", ROOT / "bench" / "dragin_replay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DraginReplay


@pytest.mark.parametrize("model, dataset, expected", [
    ("meta-llama/Llama-2-13b-chat-hf", "iirc_dev.jsonl", ("Llama2-13b-chat", 1.0, 25, 128, 8)),
    ("lmsys/vicuna-13b-v1.5", "strategyqa.json", ("Vicuna-13b-v1.5", 1.5, 25, 100, 6)),
    ("smollm2-135m", "hotpotqa/dev.jsonl", ("Llama2-7b-chat", 0.8, 35, 100, 8)),
    ("smollm2-135m", "world-two-hop", ("Llama2-7b-chat", 0.8, 35, 100, None)),  # not theirs: HotpotQA's, all demos
])
def test_reference_settings_come_from_one_row(model, dataset, expected):
    from inference.dynamic_rag.dragin_settings import resolve_run

    demos = "world" if dataset.startswith("world") else "hotpotqa"  # the demos' name is the second hint
    method = MethodConfig(method="dragin", dragin_profile="reference").resolved(dataset, demos, model=model)
    prompt, engine = resolve_run(method, PromptConfig(), EngineConfig(), dataset, demos)
    assert (method.reference_config, method.theta, method.qfs_top_n, engine.max_new_tokens,
            prompt.num_demos) == expected
    paper = MethodConfig(method="dragin").resolved(dataset, model=model)
    assert (paper.theta, paper.qfs_top_n, resolve_run(paper, PromptConfig(), EngineConfig(), dataset)[1]
            .max_new_tokens) == (0.8, 25, 100)
    explicit = MethodConfig(method="dragin", dragin_profile="reference", theta=0.3).resolved(dataset, model=model)
    assert explicit.theta == 0.3  # a value given explicitly wins
    assert resolve_run(method, PromptConfig(num_demos=2), EngineConfig(max_new_tokens=9), dataset)[0].num_demos == 2
    with pytest.raises(ValueError, match="reference_config must be one of"):
        MethodConfig(method="dragin", dragin_profile="reference", reference_config="gpt").resolved(dataset)


@pytest.mark.parametrize("profile", ["paper", "reference"])
def test_bench_replay_makes_the_engines_decisions(profile, smol_tokenizer, fake_retriever):
    # the replay reproduces the trigger and query decisions, not eval.py's forced answer, the per-round budget or the
    # authors' text joins and special-token text
    method = MethodConfig(method="dragin", dragin_profile=profile, theta=0.0, max_rounds=3, answer_extraction="project",
                          round_budget="remaining", round_join="tokens", special_text="drop")
    record, _ = run(smol_tokenizer, method, fake_retriever, max_new_tokens=20)
    queries, fake_retriever.queries[:] = list(fake_retriever.queries), []
    prompts = PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", num_demos=1))
    replay = load_bench_reference()(scripted_llama(smol_tokenizer, SCRIPT), smol_tokenizer, fake_retriever, prompts,
                                    method, max_new_tokens=20)
    [again], _ = replay.run([QAExample("q", "Who founded Kelmora?", ["Osk"])])
    assert again["output"] == record["output"]
    assert fake_retriever.queries == queries and len(queries) == len(record["retrievals"])


def test_forced_answers_are_the_same_in_a_batch_as_one_at_a_time(smol_tokenizer, fake_retriever):
    # the reference profile's forced answer (eval.py's regenerate_answer) is one more round for each question whose
    # output has no "the answer is", decoded in a batch of its own once all have finished; questions that end at
    # different steps get the same outputs and retrievals as when run one at a time
    method = MethodConfig(method="dragin", dragin_profile="reference", theta=0.8)
    questions = [QAExample(str(i), q, ["Osk"]) for i, q in enumerate(
        ["Who founded Kelmora?", "Where is the river Tane?", "When did the Vaskel empire fall?", "Who wrote it?",
         "Which city is older, Orm or Brel?"])]
    prompts = PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", num_demos=1))
    budgets = [3, 12, 5, 9, 2]  # answer budgets: the questions finish at different steps

    def records(batch_size: int):
        engine = DynamicRAGEngine(scripted_llama(smol_tokenizer, SCRIPT), smol_tokenizer, fake_retriever, prompts,
                                  method, EngineConfig(batch_size=batch_size, max_new_tokens=12))
        start_round = engine._start_round

        def budgeted(st):
            seq = start_round(st)
            if not st.regenerating:
                seq.max_new_tokens = min(seq.max_new_tokens, budgets[int(st.example.id)])
            return seq

        engine._start_round = budgeted
        return [r.to_dict() for r in engine.run(questions, show_progress=False)]

    alone, together = records(1), records(5)
    assert [r["output"] for r in together] == [r["output"] for r in alone]
    assert [len(r["retrievals"]) for r in together] == [len(r["retrievals"]) for r in alone]
    assert all(" So the answer is" in r["output"] for r in together)  # the script never writes it itself
