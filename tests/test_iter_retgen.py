"""Iter-RetGen loop with a fake retriever and an echo generator; prompt styles; the real-model generator path."""

from __future__ import annotations

import pytest

from adaptive_rag.lm.generation import Generation
from adaptive_rag.plumbing.records import Passage, QAExample
from adaptive_rag.plumbing.retriever import Hit, join_query
from inference.iter_retgen.loop import (
    IterRetGen,
    IterRetGenConfig,
    LMGenerator,
    iteration_curve,
)
from inference.iter_retgen.prompts import PAPER_DEMOS, Prompt, build_prompt


class EchoGenerator:
    """Answers "y<call> about <question>" (as many tokens as the question's number of words, one forward pass each)
    and keeps every prompt batch it was given."""

    def __init__(self, answers: dict[str, str] | None = None):
        self.batches: list[list[Prompt]] = []
        self.answers = answers or {}

    def generate(self, prompts: list[Prompt]) -> list[Generation]:
        self.batches.append(prompts)
        call = len(self.batches)
        out = []
        for p in prompts:
            question = p.user.rsplit("Question: ", 1)[1].split("\n")[0]
            n = len(question.split())
            out.append(Generation(self.answers.get(question, f"y{call} about {question}"), n, {}, forward_passes=n))
        return out


def examples() -> list[QAExample]:
    gold = Passage("g1", "Gold", "The answer is Zorara.")
    return [QAExample("q1", "Where is X based?", ["Zorara"], [gold]),
            QAExample("q2", "Who wrote Y?", ["Ann Lee"])]


def test_queries_iterations_and_records(fake_retriever):
    gen = EchoGenerator()
    loop = IterRetGen(fake_retriever, gen, IterRetGenConfig(iterations=3, top_k=2))
    records = loop.run(examples())
    assert len(gen.batches) == 3 and all(len(b) == 2 for b in gen.batches)  # batched over questions
    assert fake_retriever.queries[:2] == ["Where is X based?", "Who wrote Y?"]  # iteration 1: q alone
    # iteration t > 1: y_{t-1} joined to q
    assert fake_retriever.queries[2:4] == ["y1 about Where is X based? Where is X based?",
                                           "y1 about Who wrote Y? Who wrote Y?"]
    assert fake_retriever.queries[4] == "y2 about Where is X based? Where is X based?"
    rec = records[0]
    assert [len(r.iterations) for r in records] == [3, 3]
    assert rec.iterations[1].query == join_query(rec.question, rec.iterations[0].output)
    assert rec.iterations[0].doc_ids == ["doc-2-0", "doc-2-1"]
    assert rec.prediction == rec.iterations[-1].answer == "y3 about Where is X based?"
    assert set(rec.iterations[0].metrics) >= {"answer_recall", "gold_recall", "em", "f1", "acc"}
    assert "gold_recall" not in records[1].iterations[0].metrics  # no gold passages: no gold recall
    assert loop.retrieval_calls == loop.llm_calls == 6
    d = rec.to_dict()
    assert d["prediction"] == rec.prediction and d["iterations"][2]["query"].startswith("y2")


def test_paragraphs_prepended_and_metrics(fake_retriever):
    gen = EchoGenerator(answers={"Where is X based?": "It is in Zorara. So the answer is Zorara."})
    records = IterRetGen(fake_retriever, gen, IterRetGenConfig(iterations=1, top_k=1)).run(examples())
    prompt = gen.batches[0][0]
    assert prompt.chat and prompt.user.startswith("Title: Doc 0\nContext: About Where is X based?.")
    it = records[0].iterations[0]
    assert it.answer == "Zorara" and it.metrics["em"] == 1.0 and it.metrics["acc"] == 1.0
    assert it.metrics["answer_recall"] == 0.0 and it.metrics["gold_recall"] == 0.0
    assert records[1].iterations[0].metrics["em"] == 0.0


def test_iteration_curve(fake_retriever):
    gen = EchoGenerator(answers={"Who wrote Y?": "Ann Lee"})
    curve = iteration_curve(IterRetGen(fake_retriever, gen, IterRetGenConfig(iterations=2, top_k=1)).run(examples()))
    assert [c["t"] for c in curve] == [1, 2] and all(c["n"] == 2 for c in curve)
    assert curve[0]["em"] == 0.5 and curve[1]["acc"] == 0.5
    assert iteration_curve([]) == []


def test_answer_recall_counts_the_retrieved_set():
    class Fixed:
        def search(self, queries, k):
            return [[Hit(Passage("a", "A", "Ann Lee wrote it."), 1.0)][:k] for _ in queries]

    records = IterRetGen(Fixed(), EchoGenerator(), IterRetGenConfig(iterations=1, top_k=1)).run(examples())
    assert [r.iterations[0].metrics["answer_recall"] for r in records] == [0.0, 1.0]


def test_prompt_styles():
    passages = [Passage("1", "Zorara", "Zorara is a city."), Passage("2", "B", "Text B.")]
    paper = build_prompt("paper", "Where?", passages)
    assert not paper.chat
    assert paper.user.endswith("Title: B\nContext: Text B.\n\nQuestion: Where?\nLet's think step by step.\n")
    assert paper.user.count("So the answer is") == len(PAPER_DEMOS) == 3
    chat = build_prompt("chat", "Where?", passages)
    assert chat.chat and "Title: Zorara\nContext: Zorara is a city." in chat.user and "short phrase" in chat.user
    assert "Title:" not in build_prompt("chat", "Where?", []).user
    with pytest.raises(ValueError, match="unknown prompt style 'cot'"):
        build_prompt("cot", "Where?", passages)  # type: ignore[arg-type]


def test_join_query():
    assert join_query("Q?", None) == "Q?" and join_query("Q?", "  ") == "Q?"
    assert join_query("Q?", " y1 text ") == "y1 text Q?"


@pytest.mark.parametrize("kwargs,match", [({"iterations": 0}, "iterations must be >= 1"),
                                          ({"top_k": 0}, "top_k must be"),
                                          ({"prompt_style": "cot"}, "prompt_style must be")])
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        IterRetGenConfig(**kwargs)


def test_generator_output_count_checked(fake_retriever):
    class Short:
        def generate(self, prompts):
            return [Generation("x", 1, {})]

    with pytest.raises(ValueError, match="returned 1 outputs for 2 prompts"):
        IterRetGen(fake_retriever, Short()).run(examples())


def test_lm_generator_with_tiny_model(tiny_model, smol_tokenizer, fake_retriever):
    gen = LMGenerator(tiny_model, smol_tokenizer, max_new_tokens=3, batch_size=2)
    assert gen.render(Prompt("hi", chat=True)).startswith("<|im_start|>")
    assert gen.render(Prompt("plain text")) == "plain text"
    records = IterRetGen(fake_retriever, gen, IterRetGenConfig(iterations=2, top_k=1)).run(examples())
    assert all(isinstance(r.iterations[1].output, str) for r in records)
    assert 0 < gen.generated_tokens <= 2 * 2 * 3


def test_prediction_record_counts_each_questions_own_generation(fake_retriever):
    """Tokens and forward passes of a question are its own iterations' (the echo writes one token per question
    word), not the batch's total shared evenly: "Where is X based?" 4 + 4, "Who wrote Y?" 3 + 3."""
    records = IterRetGen(fake_retriever, EchoGenerator(), IterRetGenConfig(iterations=2, top_k=1)).run(examples())
    preds = [r.to_prediction(0.25) for r in records]
    assert [p.generated_tokens for p in preds] == [8, 6] and [p.llm_forward_passes for p in preds] == [8, 6]
    assert preds[0].output == records[0].iterations[-1].output and preds[0].rounds == 2
    assert [r.round for r in preds[0].retrievals] == [1, 2] and preds[0].retrievals[0].position is None
    assert preds[0].iterations[1].answer == records[0].iterations[1].answer
    assert preds[0].batch_mean_seconds == 0.25
    d = records[0].to_dict()  # the iteration log of training.evaluate_adapted keeps its keys
    assert set(d) == {"id", "question", "answers", "iterations", "prediction"}
    assert set(d["iterations"][0]) == {"query", "doc_ids", "output", "answer", "metrics"}


def test_depth_is_declared_once_by_the_preset_and_reaches_every_entry_point(fake_retriever, monkeypatch):
    """The evaluate command, the library config and the distillation jobs all take Iter-RetGen's depth from its
    preset (the paper's 5); an explicit --top_k wins. Checked on the runner the evaluate command builds."""
    from inference.commands import evaluate as ev
    from inference.dynamic_rag.engine import EngineConfig
    from inference.dynamic_rag.methods import PRESETS, MethodConfig
    from inference.dynamic_rag.prompts import PromptConfig
    from training.distill_set import RetrievalAdaptDataConfig
    from training.evaluate_adapted import EvaluateAdaptedConfig

    assert PRESETS["iter-retgen"].top_k == IterRetGenConfig().top_k == RetrievalAdaptDataConfig().top_k == 5
    assert EvaluateAdaptedConfig().top_k == 5
    seen = []
    monkeypatch.setattr(ev, "IterRetGen", lambda retriever, gen, cfg: seen.append(cfg.top_k))
    monkeypatch.setattr(ev, "LMGenerator", lambda *a, **k: None)
    for top_k, want in ((None, 5), (2, 2)):
        method = MethodConfig(method="iter-retgen", top_k=top_k)
        ev.iter_retgen_runner(None, None, fake_retriever, method.resolved(), PromptConfig(), EngineConfig())
        assert seen[-1] == want


def test_answer_recall_matches_whole_words_only():
    from adaptive_rag.plumbing.records import QAExample
    from retrieval_adapt.recall import answer_recall

    hits = [Hit(Passage("a", "A", "It is well known that nothing was built."), 1.0),
            Hit(Passage("b", "B", "The answer is no, said the Café's owner."), 0.5)]
    no = QAExample("q", "Was it built?", ["no"])
    assert answer_recall(hits, no, 1) == 0.0  # "known", "nothing" do not contain the word "no"
    assert answer_recall(hits, no, 2) == 1.0
    assert answer_recall(hits, QAExample("q", "Whose?", ["the cafe's owner", "x"]), 2) == 0.0  # accents count
    assert answer_recall(hits, QAExample("q", "Whose?", ["Café's owner"]), 2) == 1.0
    assert answer_recall(hits, QAExample("q", "?", []), 2) == 0.0
    assert answer_recall(hits, QAExample("q", "?", ["  "]), 2) == 0.0
