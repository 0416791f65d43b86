"""End to end with the real embedded models (MiniLM, SmolLM2) on a handful of world questions: dense index ->
distillation data (Iter-RetGen y1 + LLM re-ranker) -> query-encoder distillation -> before/after evaluation."""

from __future__ import annotations

import json

import pytest

from adaptive_rag.plumbing.question_set import QuestionSet
from data_builders.question_loader import QuestionsConfig, load_questions
from retrieval_adapt.dense import DenseRetriever
from retrieval_adapt.distill import train
from retrieval_adapt.distill_config import DistillConfig
from retrieval_adapt.encoders import MeanPoolingEncoder
from training.distill_set import RetrievalAdaptDataConfig, build
from training.evaluate_adapted import EvaluateAdaptedConfig, evaluate


@pytest.mark.slow
def test_pipeline_with_real_models(tmp_path):
    train_q = QuestionsConfig(dataset="world-two-hop", limit=3)
    held_q = QuestionsConfig(dataset="world-two-hop", start=3, limit=2)
    from data_builders.world import WorldConfig, build_world

    world = build_world(WorldConfig(seed=0))
    gold = {p.id: p for ex in load_questions(QuestionSet("world-two-hop", limit=5)) for p in ex.gold_passages}
    corpus = list(gold.values()) + [p for p in world.passages if p.id not in gold][:10]  # small: fast to encode
    DenseRetriever.build(corpus, MeanPoolingEncoder.from_name("minilm"), show_progress=False).save(tmp_path / "index")

    data_cfg = RetrievalAdaptDataConfig(index=str(tmp_path / "index"), num_candidates=4, top_k=2, max_new_tokens=12,
                                        output_dir=str(tmp_path / "data"), validation_fraction=0.34,
                                        show_progress=False)
    dataset, stats = build(train_q, data_cfg)
    assert (len(dataset["train"]), len(dataset["validation"])) == (2, 1)
    assert stats["gold_in_candidates"] > 0 and all(s < 0 for s in dataset["train"][0]["teacher_scores"])
    assert all(isinstance(y, str) and y for y in dataset["train"]["y1"])

    result = train(DistillConfig(data_dir=str(tmp_path / "data"), index=str(tmp_path / "index"),
                                 output_dir=str(tmp_path / "distill"), batch_size=2, max_steps=2, eval_steps=1,
                                 learning_rate=1e-4))
    assert result["steps"] == 2

    report = evaluate(held_q, EvaluateAdaptedConfig(index=str(tmp_path / "index"),
                                                    query_encoder=str(tmp_path / "distill" / "query_encoder"),
                                                    output_dir=str(tmp_path / "eval"), recall_ks=[1, 5],
                                                    iterations=2, top_k=2, max_new_tokens=12))
    assert set(report["recall"]) == {"base", "adapted"} and "recall@5" in report["recall"]["base"]
    curves = report["iter_retgen"]["curves"]
    assert [row["t"] for row in curves["adapted"]] == [1, 2] and curves["base"][0]["n"] == 2
    records = [json.loads(line) for line in (tmp_path / "eval" / "iter_retgen_base.jsonl").read_text().splitlines()]
    assert records[0]["iterations"][1]["query"].endswith(records[0]["question"])
    assert "| adapted | 2 |" in (tmp_path / "eval" / "report.md").read_text()
