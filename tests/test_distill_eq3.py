"""Iter-RetGen's Eq. 3 as the default: candidates D_{y1||q} (the top_k paragraphs retrieved with y1 and the question),
the teacher's relevance probabilities through exp(s / tau) at the student's tau (the earlier teacher a named option),
a TART checkpoint refused in one line, the paper-settings files, and demos that carry knowledge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.records import Passage, QAExample
from adaptive_rag.plumbing.retriever import Hit
from retrieval_adapt.distill_config import DistillConfig
from retrieval_adapt.distill_data import collate, relevance_probability, stored_score_kind
from retrieval_adapt.losses import KLDistillationLoss
from training.distill_set import RetrievalAdaptDataConfig, candidate_rows

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_are_eq3():
    data = RetrievalAdaptDataConfig()
    assert data.candidate_query == "question_y1" and data.pool_size() == data.top_k == 5
    assert RetrievalAdaptDataConfig(num_candidates=16).pool_size() == 16
    assert DistillConfig().teacher_distribution == "eq3"


class _Retriever:
    def __init__(self):
        self.calls: list[tuple[list[str], int]] = []

    def search(self, queries, k):
        self.calls.append((list(queries), k))
        return [[Hit(Passage(f"p{i}", f"T{i}", f"text {i}"), 1.0 - i / 10) for i in range(k)] for _ in queries]


class _Teacher:
    score_kind = "log_probability"

    def score_batch(self, items):
        return [[-0.1 * i for i in range(len(item.passages))] for item in items]


def test_candidates_are_retrieved_with_y1_and_the_question():
    retriever, cfg = _Retriever(), RetrievalAdaptDataConfig()
    ex = QAExample(id="q1", question="Who founded Kelmora?", answers=["Osk"])
    [row] = candidate_rows([ex], ["Osk founded it."], ["Osk"], retriever, _Teacher(), cfg,
                           {f"p{i}": i for i in range(10)})
    [(queries, k)] = retriever.calls
    assert k == 5 and "Osk founded it." in queries[0] and "Who founded Kelmora?" in queries[0]
    assert len(row["candidate_ids"]) == 5


def test_relevance_probability_of_each_score_kind():
    scores = torch.tensor([-0.1, -2.0, 0.5])
    assert torch.allclose(relevance_probability(scores[:2], "log_probability"), scores[:2].exp())
    assert torch.allclose(relevance_probability(scores, "logit"), torch.sigmoid(scores))
    with pytest.raises(ValueError, match="unknown teacher score kind"):
        relevance_probability(scores, "rank")


def test_eq3_teacher_is_exp_of_probability_over_the_students_tau():
    """P_phi(d) = exp(s(d)/tau) / sum exp(s(d')/tau), s the relevance probability: built by collate (s) and the loss
    at the student's tau; the earlier teacher softmaxes the stored log-probabilities at its own tau."""
    rows = [{"question": "q", "y1": "y", "candidate_positions": [0, 1, 2],
             "teacher_scores": [-0.05, -1.0, -3.0], "retriever_scores": [0.0, 0.0, 0.0]}]
    tau = 0.1
    s = torch.tensor([-0.05, -1.0, -3.0]).exp()
    batch = collate(rows, "question", probability="log_probability")
    assert torch.allclose(batch.teacher_scores[0], s)
    loss = KLDistillationLoss(temperature=tau, teacher_temperature=tau)
    q, p = torch.zeros(1, 4), torch.zeros(1, 3, 4)
    _, stats = loss.compute_loss_from_embeddings(q, p, batch.teacher_scores)
    expected = torch.softmax(s / tau, dim=0)
    assert stats["teacher_entropy"] == pytest.approx(float(-(expected * expected.log()).sum()), abs=1e-5)
    plain = collate(rows, "question")  # teacher_distribution softmax: the stored scores as they are
    assert torch.allclose(plain.teacher_scores[0], torch.tensor([-0.05, -1.0, -3.0]))


def test_the_score_kind_comes_from_the_data_builders_stats(tmp_path):
    (tmp_path / "stats.json").write_text(json.dumps({"teacher_score_kind": "logit"}))
    assert stored_score_kind(tmp_path) == "logit"
    (tmp_path / "stats.json").write_text(json.dumps({}))
    assert stored_score_kind(tmp_path) == "log_probability"


def test_a_tart_checkpoint_is_refused_in_one_line_before_weights_load(tmp_path, monkeypatch):
    from transformers import T5Config

    from retrieval_adapt import rerankers

    folder = tmp_path / "tart"
    T5Config(d_model=8, d_ff=16, num_layers=1, num_heads=1, d_kv=8, vocab_size=32,
             architectures=["EncT5ForSequenceClassification"]).save_pretrained(folder)
    monkeypatch.setattr(rerankers, "resolve_model", lambda name: str(folder))
    with pytest.raises(ConfigError) as err:
        rerankers.CrossEncoderReranker.from_name("facebook/tart-full-flan-t5-xl")
    assert "EncT5ForSequenceClassification" in str(err.value) and "\n" not in str(err.value)


def test_a_cross_encoders_score_kind_follows_its_labels():
    from transformers import BertConfig, BertForSequenceClassification

    from retrieval_adapt.rerankers import CrossEncoderReranker

    def head(labels: int):
        cfg = BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                         intermediate_size=16, num_labels=labels)
        return CrossEncoderReranker(BertForSequenceClassification(cfg), tokenizer=None)

    assert head(1).score_kind == "logit" and head(2).score_kind == "log_probability"


def test_paper_settings_files():
    (distill,) = parse_config((DistillConfig,), [str(ROOT / "retrieval_adapt" / "configs" / "distill_paper.yaml")])
    assert distill.teacher_distribution == "eq3" and "contriever-msmarco" in distill.index
    from data_builders.question_loader import QuestionsConfig

    _, data = parse_config((QuestionsConfig, RetrievalAdaptDataConfig),
                           [str(ROOT / "retrieval_adapt" / "configs" / "data_paper.yaml")])
    assert data.candidate_query == "question_y1" and data.num_candidates is None and data.prompt_style == "paper"
    assert "wiki" in data.index


def test_every_demo_carries_knowledge_before_it():
    from inference.iter_retgen.prompts import PAPER_DEMOS, paper_prompt

    text = paper_prompt("Who founded Kelmora?", [Passage("p", "Kelmora", "Osk founded Kelmora.")]).user
    blocks = text.split("Question: ")
    assert len(blocks) == len(PAPER_DEMOS) + 2
    assert all("Title: " in block and "Context: " in block for block in blocks[:-1])
    assert text.rstrip().endswith("Question: Who founded Kelmora?\nLet's think step by step.")
