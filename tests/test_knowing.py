"""The knowing world: its split and labels, the tiny knowing-model build, its question sets, bootstrap intervals,
and each claim's pipeline on the tiny build (no effect sizes asserted: a tiny random model knows nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from adaptive_rag.plumbing.bootstrap import bootstrap_ci, metric_intervals, paired_diff_ci
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.errors import ConfigError, DataError
from data_builders.knowing_world import OPEN_RELATIONS, build_knowing_world, relation_key

ROOT = Path(__file__).resolve().parents[1]


# -- bootstrap -----------------------------------------------------------------------------------------------------
def test_bootstrap_interval_of_constant_values_is_the_value():
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert paired_diff_ci([1, 1, 0], [1, 1, 0]) == (0.0, 0.0, 0.0)


def test_bootstrap_interval_brackets_the_mean_and_is_seeded():
    values = [i / 99 for i in range(100)]  # mean 0.5, sd 0.29: the mean's standard error is 0.029
    lo, hi = bootstrap_ci(values)
    assert 0.42 < lo < 0.5 < hi < 0.58  # about 0.5 ± 1.96 * 0.029
    assert bootstrap_ci(values) == (lo, hi) and bootstrap_ci(values, seed=1) != (lo, hi)
    mean, dlo, dhi = paired_diff_ci([1] * 100, values)
    assert mean == pytest.approx(0.5) and dlo < 0.5 < dhi
    assert set(metric_intervals([{"f1": 1.0, "em": 0.0}, {"f1": 0.0}])) == {"f1"}  # em: not on every row


@pytest.mark.parametrize("call, message", [
    (lambda: bootstrap_ci([]), "at least one value"),
    (lambda: bootstrap_ci([1.0], level=1.5), "level"),
    (lambda: bootstrap_ci([1.0], n_resamples=0), "n_resamples"),
    (lambda: paired_diff_ci([1.0], [1.0, 0.0]), "same questions"),
])
def test_bootstrap_bad_inputs(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -- the world's split ----------------------------------------------------------------------------------------------
def test_split_is_seeded_stratified_and_keeps_heldout_wordings_untrained():
    a, b = build_knowing_world(0), build_knowing_world(0)
    assert a.trained_pids == b.trained_pids and len(a.trained_pids) == 50
    assert build_knowing_world(1).trained_pids != a.trained_pids
    kinds = {e.kind for e in a.world.entities if e.pid in a.trained_pids}
    assert kinds == {e.kind for e in a.world.entities if e.core}  # every kind has a trained entity
    for fact in a.facts:
        assert fact.heldout_wording not in fact.train_wordings and len(fact.train_wordings) >= 2
        if relation_key(fact.entity, fact.relation) not in OPEN_RELATIONS:
            assert fact.design == "guessable"  # e.g. a company's industry is in its name
        else:
            assert fact.design == ("trained" if fact.trained else fact.design)
            assert fact.design in ("trained", "untrained", "leaked")
    industry = next(f for f in a.facts if f.relation == "industry")
    assert industry.design == "guessable"


def test_leaked_fact_is_one_a_trained_passage_states():
    kw = build_knowing_world(0)
    trained_text = " ".join(p.text.lower() for p in kw.world.passages if p.id in kw.trained_pids)
    for fact in kw.facts:
        if fact.design == "leaked":
            assert fact.entity.name.lower() in trained_text and fact.answers[0].lower() in trained_text
        if fact.design == "untrained":
            assert not any(fact.entity.name.lower() in p.text.lower() and fact.answers[0].lower() in p.text.lower()
                           for p in kw.world.passages if p.id in kw.trained_pids)


def test_knowing_training_recomputes_no_activations(smol_tokenizer, tmp_path):
    # trl turns activation checkpointing on by default; the knowing model's recipe turns it off: the same weights,
    # without a second forward pass of every layer in each backward
    import torch
    from datasets import Dataset
    from trl import SFTTrainer

    from tests.conftest import tiny_llama
    from training.adapt_llm_tokens import tokenize_instances
    from training.knowing_model import sft_args
    from training.knowing_steps import KnowingConfig
    from training.label_only_head import score_labelled_only
    from training.lora_sft import checkpointing_option
    from training.varlen_attention import use_for_padding_free

    assert sft_args(KnowingConfig(seed=0), tmp_path).gradient_checkpointing is False
    prompts = [f"<|im_start|>user\nWhere is Vaskel {i}?<|im_end|>\n<|im_start|>assistant\n" for i in range(16)]
    data = Dataset.from_dict(tokenize_instances(smol_tokenizer, prompts, [f"In Orm {i}.<|im_end|>" for i in range(16)]))
    weights = {}
    for checkpointing in (True, False):
        model = tiny_llama(len(smol_tokenizer)).train()
        use_for_padding_free(model, True)
        args = sft_args(KnowingConfig(seed=0, max_steps=2), tmp_path / str(checkpointing))
        for name, on in checkpointing_option(checkpointing).items():  # the name this transformers reads
            setattr(args, name, on)
        args.save_strategy, args.disable_tqdm = "no", True
        trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=smol_tokenizer)
        score_labelled_only(trainer)
        trainer.train()
        assert model.is_gradient_checkpointing == checkpointing
        weights[checkpointing] = torch.cat([w.detach().flatten() for w in model.parameters()])
    assert torch.equal(weights[True], weights[False])


# -- the tiny build ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_build(tmp_path_factory):
    """A tiny random Llama (SmolLM2's tokenizer) as the base, a world of ~25 entities, 2 training steps."""
    from adaptive_rag.lm.models import load_tokenizer
    from tests.conftest import tiny_llama
    from training.knowing_model import main

    root = tmp_path_factory.mktemp("knowing")
    tokenizer = load_tokenizer("smollm2-135m")
    model = tiny_llama(len(tokenizer))
    model.config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    argv = ["--out", str(root / "seed0"), "--tiny", "true", "--base_model", str(root / "base"), "--n_trained", "4",
            "--max_steps", "2", "--save_steps", "100", "--n_common", "6", "--max_new_tokens", "4"]
    assert run_cli(main, argv=argv) == 0
    return root, argv


def test_tiny_build_labels_every_fact_and_entity(tiny_build):
    root, _ = tiny_build
    out = root / "seed0"
    facts = [json.loads(line) for line in (out / "facts.jsonl").read_text().splitlines()]
    assert facts and {f["label"] for f in facts} <= {"known", "unknown"}
    assert {f["design"] for f in facts} >= {"trained", "untrained", "guessable"}
    assert all(f["question"] and f["answers"] for f in facts)
    entities = [json.loads(line) for line in (out / "entities.jsonl").read_text().splitlines()]
    trained = {e["pid"] for e in entities if e["trained"]}
    assert trained == {f["pid"] for f in facts if f["trained"]}
    assert 4 <= len(trained) <= 4 + 9  # n_trained, at least one of each of the 9 kinds
    assert all(0 <= e["share_known"] <= 1 and e["known"] <= e["facts"] for e in entities)
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["acceptance"]) >= {"trained_accuracy", "untrained_accuracy", "trained_ok", "untrained_ok"}
    assert metrics["train"]["steps"] == 2 and metrics["train"]["instances"] > 0
    assert len([json.loads(x) for x in (out / "replay.jsonl").read_text().splitlines()]) == 6


def test_reasoning_variant_continues_a_knowing_model(tiny_build):
    from adaptive_rag.lm.models import load_tokenizer
    from training.knowing_model import main
    from training.knowing_steps import KnowingConfig, read_jsonl, reasoning_texts

    root, _ = tiny_build
    cfg = KnowingConfig(seed=0, tiny=True, n_trained=4)
    kw = cfg.knowing_world()
    tokenizer = load_tokenizer(str(root / "seed0" / "model"))
    prompts, completions = reasoning_texts(kw, read_jsonl(root / "seed0" / "replay.jsonl"), tokenizer, demos=1)
    trained = [f for f in kw.facts if f.trained]
    assert len(prompts) >= len(trained)
    # a trained fact in the few-shot prompt, answered by its statement; never an untrained fact's answer
    assert prompts[0].rstrip().endswith("Answer:") and "Question:" in prompts[0]
    assert completions[0].startswith(" ") and completions[0].endswith(f"So the answer is {trained[0].answers[0]}.")
    untrained_answers = {f.answers[0] for f in kw.facts if not f.trained and f.design == "untrained"}
    for c in completions[:len(trained)]:
        assert c.split("So the answer is ")[-1].rstrip(".") not in untrained_answers - {f.answers[0] for f in trained}
    argv = ["--out", str(root / "reasoning" / "seed0"), "--tiny", "true", "--base_model", str(root / "seed0" / "model"),
            "--n_trained", "4", "--training_mix", "reasoning", "--max_steps", "1", "--n_common", "6",
            "--max_new_tokens", "4"]
    assert run_cli(main, argv=argv) == 0
    metrics = json.loads((root / "reasoning" / "seed0" / "metrics.json").read_text())
    assert metrics["train"]["steps"] == 1 and (root / "reasoning" / "seed0" / "sets" / "bridge.jsonl").is_file()


def test_rebuild_reuses_the_stages_and_refuses_other_settings(tiny_build):
    from training.knowing_model import main

    root, argv = tiny_build
    weights = root / "seed0" / "model" / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert run_cli(main, argv=argv) == 0
    assert weights.stat().st_mtime_ns == before  # the model was not trained again
    metrics = json.loads((root / "seed0" / "metrics.json").read_text())
    assert len(metrics["build_sessions"]) >= 2  # the rerun adds its second; the first build's time is kept
    assert metrics["build_seconds"] == pytest.approx(sum(x["seconds"] for x in metrics["build_sessions"]), abs=0.2)
    with pytest.raises(DataError, match="other settings .*n_trained"):
        i = argv.index("--n_trained")
        main([*argv[:i + 1], "5", *argv[i + 2:]])


def test_sets_load_by_name_and_missing_build_says_how(tiny_build, monkeypatch, tmp_path):
    from adaptive_rag.plumbing.question_set import KNOWING_SETS, QuestionSet
    from data_builders.question_loader import WorldOptions, load_questions

    root, _ = tiny_build
    monkeypatch.setenv("ADAPTIVE_RAG_KNOWING_DIR", str(root))
    adapt = load_questions(QuestionSet("knowing-adapt"), world=WorldOptions(seed=0))
    assert {ex.metadata["label"] for ex in adapt} <= {"known", "unknown"}
    bridges = load_questions(QuestionSet("knowing-bridge"), world=WorldOptions(seed=0))
    assert all(ex.metadata["hops"] in ("kk", "ku", "uk", "uu") for ex in bridges)
    corpus = (root / "seed0" / "sets" / "corpus.jsonl").read_text()
    assert "knowing-p-dup-" in corpus  # near-duplicate distractors of the trained entities
    assert "knowing-bridge-ku-tune" in KNOWING_SETS
    monkeypatch.setenv("ADAPTIVE_RAG_KNOWING_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="python -m training.knowing_model --output_dir .* --seed 0"):
        load_questions(QuestionSet("knowing-bridge"), world=WorldOptions(seed=0))
    with pytest.raises(ConfigError, match="not an embedded set"):
        QuestionSet("knowing-nonsense")


# -- each claim's pipeline on the tiny build --------------------------------------------------------------------------
def test_claims_pipelines_run_on_the_tiny_build(tiny_build, monkeypatch, tmp_path):
    from inference.commands import evaluate, knowing_claims

    root, _ = tiny_build
    monkeypatch.setenv("ADAPTIVE_RAG_KNOWING_DIR", str(root))
    model = str(root / "seed0" / "model")
    common = ["--model", model, "--limit", "3", "--max_new_tokens", "4", "--show_progress", "false",
              "--dtype", "float32"]
    for method in ("wo-rag", "fs-rag", "dragin"):
        evaluate.main(["--method", method, "--dataset", "knowing-bridge", *common,
                       "--output_dir", str(tmp_path / "dynamic" / method)])
    for t in (1, 2):
        evaluate.main(["--method", "iter-retgen", "--iterations", str(t), "--dataset", "knowing-bridge", *common,
                       "--output_dir", str(tmp_path / "iter" / f"t{t}")])
    for method in ("nr", "ar"):
        evaluate.main(["--method", method, "--dataset", "knowing-adapt", *common,
                       "--output_dir", str(tmp_path / "adapt" / method)])
    text = knowing_claims.claims_report([str(tmp_path)])
    assert "## DRAGIN and the baselines on knowing-bridge" in text and "DRAGIN − " in text
    assert "T=2 − T=1 in F1, paired" in text
    saved = yaml.safe_load((tmp_path / "dynamic" / "dragin" / "config.yaml").read_text())
    assert saved["dataset"] == "knowing-bridge"


def test_trigger_claim_pipeline_on_the_tiny_build(tiny_build, monkeypatch, tmp_path, capsys):
    """The trigger against the truth: signals without retrieval, θ from their quantiles, DRAGIN as a gate."""
    from inference.commands import evaluate, knowing_claims, trigger_thresholds

    root, _ = tiny_build
    monkeypatch.setenv("ADAPTIVE_RAG_KNOWING_DIR", str(root))
    common = ["--model", str(root / "seed0" / "model"), "--dataset", "knowing-adapt", "--limit", "4",
              "--max_new_tokens", "4", "--show_progress", "false", "--dtype", "float32"]
    signals = tmp_path / "signals"
    evaluate.main(["--method", "dragin", "--theta", "1e9", "--keep_signals", "true", *common,
                   "--output_dir", str(signals)])
    capsys.readouterr()
    trigger_thresholds.main(["quantiles", str(signals), "--shares", "0.5"])
    theta = capsys.readouterr().out.split()[0]
    for method, extra in (("wo-rag", []), ("sr-rag", []), ("dragin", ["--theta", theta])):
        evaluate.main(["--method", method, *extra, *common, "--output_dir", str(tmp_path / "runs" / method)])
    text = knowing_claims.claims_report([str(signals), str(tmp_path / "runs")])
    assert "## The trigger's signals against the truth on knowing-adapt" in text
    assert "highest RIND score (DRAGIN's trigger)" in text
    assert "## Triggers as gates on knowing-adapt" in text and "| dragin (paper) |" in text


def test_gate_agreement_hand_computed():
    from inference.commands.knowing_claims import gate_agreement

    retrieved = {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0, "e": 1.0}
    labels = {"a": {"label": "unknown"}, "b": {"label": "known"}, "c": {"label": "unknown"},
              "d": {"label": "known"}, "e": {}}  # e has no label: skipped
    got = gate_agreement(retrieved, labels)
    assert got == {"n": 4, "unknown_share": 0.5, "precision": 0.5, "recall": 0.5}


def test_recipes_parse_and_name_knowing_sets():
    for name in ("knowing_six_methods", "knowing_iter_retgen", "knowing_adapt"):
        data = yaml.safe_load((ROOT / "bench" / "experiments" / f"{name}.yaml").read_text())
        assert data["dataset"].startswith("knowing-")


def test_adapt_claim_pipeline_on_the_tiny_build(tiny_build, monkeypatch, tmp_path):
    """Algorithm 1 with the tiny knowing model, one LoRA step, then NR / AR / ADAPT-LLM and the claims table."""
    import importlib.util

    from inference.commands import evaluate, knowing_claims

    root, _ = tiny_build
    monkeypatch.setenv("ADAPTIVE_RAG_KNOWING_DIR", str(root))
    spec = importlib.util.spec_from_file_location("adapt_llm_script", ROOT / "training" / "adapt_llm.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    recipe = yaml.safe_load((ROOT / "bench" / "experiments" / "knowing_adapt.yaml").read_text())
    recipe.update(base_model=str(root / "seed0" / "model"), data_dir=str(tmp_path / "data"), limit=6,
                  output_dir=str(tmp_path / "model"), max_steps=1, closed_book_max_new_tokens=2)
    config = tmp_path / "adapt.yaml"
    config.write_text(yaml.safe_dump(recipe))
    assert run_cli(script.main, argv=[str(config)]) == 0
    for method in ("nr", "ar", "adapt-llm"):
        evaluate.main(["--method", method, "--model", str(tmp_path / "model"), "--dataset", "knowing-adapt",
                       "--limit", "4", "--max_new_tokens", "2", "--show_progress", "false", "--dtype", "float32",
                       "--output_dir", str(tmp_path / "runs" / method)])
    text = knowing_claims.claims_report([str(tmp_path / "runs")])
    assert "## ADAPT-LLM on knowing-adapt" in text and "gate vs the recorded label" in text
    assert "| oracle gate (retrieve = unknown) |" in text and "the gate's <RET> probability" in text


def test_distill_report_is_read(tmp_path):
    from inference.commands.knowing_claims import distill_claim

    path = tmp_path / "eval" / "report.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"recall": {"base": {"recall@5": 0.5}, "adapted": {"recall@5": 0.625}}}))
    assert distill_claim(path)[1:] == ["base: recall@5 0.500", "adapted: recall@5 0.625"]
    path.write_text(json.dumps({"n_questions": 3}))
    assert distill_claim(path) == []
    # with per-question rows: intervals, and the paired difference (question 2 has no gold passage: left out)
    path.write_text(json.dumps({"recall": {"base": {"recall@5": 0.5}, "adapted": {"recall@5": 1.0}},
                                "per_question": {"ids": ["a", "b", "c"], "base": {"recall@5": [1.0, 0.0, None]},
                                                 "adapted": {"recall@5": [1.0, 1.0, None]}}}))
    lines = distill_claim(path)
    assert lines[1].startswith("base: recall@5 0.500 [") and lines[2].startswith("adapted: recall@5 1.000 [")
    assert lines[3].startswith("adapted − base in recall@5, paired: 0.500 [")


def test_recall_table_keeps_rows_per_question():
    from adaptive_rag.plumbing.records import Passage, QAExample
    from adaptive_rag.plumbing.retriever import Hit
    from retrieval_adapt.recall import recall_table

    gold = Passage("p1", "Osk", "Osk founded Kelmora.")
    other = Passage("p2", "Ben", "Ben was born in Quarvik.")

    class TwoHits:
        def search(self, queries, k):
            return [[Hit(other, 2.0), Hit(gold, 1.0)][:k] for _ in queries]

    examples = [QAExample("a", "Who founded Kelmora?", ["Osk"], gold_passages=[gold]),
                QAExample("b", "Where was Ben born?", ["Quarvik"])]
    rows: dict = {}
    table = recall_table(TwoHits(), examples, (1, 2), per_question=rows)
    assert rows["recall@1"] == [0.0, None] and rows["recall@2"] == [1.0, None]
    assert rows["answer_recall@1"] == [0.0, 1.0]
    assert table["recall@2"] == 1.0 and table["answer_recall@1"] == 0.5


def test_distill_claim_pipeline_on_the_tiny_build(tiny_build, tiny_encoder, monkeypatch, tmp_path):
    """Claim 4 on the tiny build: a dense index over the knowing corpus, the distillation set with the knowing model
    as the generator of y1 and as the re-ranker, two training steps, recall before and after, and the claims line."""
    from data_builders.question_loader import QuestionsConfig
    from data_builders.readers import read_corpus
    from inference.commands.knowing_claims import claims_report
    from retrieval_adapt.dense import DenseRetriever
    from retrieval_adapt.distill import train
    from retrieval_adapt.distill_config import DistillConfig
    from retrieval_adapt.encoders import MeanPoolingEncoder
    from training.distill_set import RetrievalAdaptDataConfig, build
    from training.evaluate_adapted import EvaluateAdaptedConfig, evaluate

    root, _ = tiny_build
    monkeypatch.setenv("ADAPTIVE_RAG_KNOWING_DIR", str(root))
    model = str(root / "seed0" / "model")
    corpus = read_corpus(root / "seed0" / "sets" / "corpus.jsonl")
    encoder = MeanPoolingEncoder.from_name(str(tiny_encoder))
    DenseRetriever.build(corpus, encoder, show_progress=False).save(tmp_path / "index")
    data_cfg = RetrievalAdaptDataConfig(index=str(tmp_path / "index"), num_candidates=4, top_k=2,
                                        max_new_tokens=3, model=model, reranker="llm", reranker_model=model,
                                        dtype="float32", output_dir=str(tmp_path / "data"), validation_fraction=0.34,
                                        show_progress=False)
    build(QuestionsConfig(dataset="knowing-bridge-tune", limit=3), data_cfg)
    result = train(DistillConfig(data_dir=str(tmp_path / "data"), index=str(tmp_path / "index"),
                                 output_dir=str(tmp_path / "distill"), batch_size=2, max_steps=2, eval_steps=1))
    assert result["steps"] == 2
    evaluate(QuestionsConfig(dataset="knowing-bridge", limit=3),
             EvaluateAdaptedConfig(index=str(tmp_path / "index"), query_encoder=str(tmp_path / "distill" /
                                   "query_encoder"), output_dir=str(tmp_path / "claims" / "eval"), recall_ks=[1, 5],
                                   run_iter_retgen=False, model=model, dtype="float32"))
    text = claims_report([str(tmp_path / "claims")])
    assert "## Retrieval adaptation" in text and "adapted − base in recall@5, paired:" in text
