"""Iter-RetGen (Shao et al. 2023): iterative retrieval-generation synergy, batched over questions.

Iteration 1 retrieves the top-k paragraphs (``top_k``, 5 in the paper) with the question q; iteration t > 1
retrieves with y_{t-1} joined to q. Each iteration generates y_t from the paragraphs prepended to q
(:mod:`inference.iter_retgen.prompts`). The answer is y_T. Every iteration is recorded (query, doc ids, output,
extracted answer, answer recall of the retrieved set, EM/F1/contained accuracy of y_t), so one run with T
iterations also gives the curves for every T' < T: the loop is greedy and deterministic, so the first T'
iterations of a T run are a T' run.

    loop = IterRetGen(retriever, LMGenerator.from_name("smollm2-135m"), IterRetGenConfig(iterations=2))
    records = loop.run(examples)       # [r.to_prediction(seconds) for r in records]: the evaluate command's records
    curve = iteration_curve(records)   # one metrics dict per iteration
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from adaptive_rag.lm import generation
from adaptive_rag.lm.generation import Generator
from adaptive_rag.plumbing.metrics import aggregate, extract_answer, score
from adaptive_rag.plumbing.progress import bar_options
from adaptive_rag.plumbing.records import IterationScore, PredictionRecord, QAExample, RetrievalRecord
from adaptive_rag.plumbing.retriever import Hit, Retriever, join_query
from inference.dynamic_rag.methods import PRESETS
from inference.iter_retgen.prompts import PromptStyle, build_prompt
from retrieval_adapt.recall import answer_recall, gold_recall


@dataclass
class IterRetGenConfig:
    iterations: int = 2  # T; the paper finds T = 2 gives most of the gain
    top_k: int = PRESETS["iter-retgen"].top_k  # paragraphs per retrieval (the method's preset: the paper's 5)
    prompt_style: PromptStyle = "chat"  # "paper" = 3-shot CoT (scores ~0 on SmolLM2), "chat" = short answer

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ValueError(f"iterations must be >= 1, got {self.iterations}")
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.prompt_style not in ("paper", "chat"):
            raise ValueError(f"prompt_style must be 'paper' or 'chat', got '{self.prompt_style}'")


class LMGenerator(generation.LMGenerator):
    """The model-backed :class:`~adaptive_rag.lm.generation.Generator` as Iter-RetGen uses it: one line each.

    Stopping at the first newline suits both prompt styles: the paper demos put the whole chain of thought on
    one line, and the chat style asks for a short phrase.
    """

    def __init__(self, model, tokenizer, *, max_new_tokens: int = 64, batch_size: int = 16,
                 stop_at_newline: bool = True, show_progress: bool = False):
        super().__init__(model, tokenizer, max_new_tokens=max_new_tokens, batch_size=batch_size,
                         stop_at_newline=stop_at_newline, show_progress=show_progress)


@dataclass
class IterationRecord:
    query: str
    doc_ids: list[str]
    output: str  # y_t, the whole generation
    answer: str  # extracted from y_t
    metrics: dict[str, float]  # answer_recall, gold_recall (with gold passages), em, f1, precision, recall, acc
    generated_tokens: int = 0  # new tokens of y_t
    forward_passes: int = 0  # model calls y_t's prompt took part in

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "doc_ids": list(self.doc_ids), "output": self.output, "answer": self.answer,
                "metrics": dict(self.metrics)}


@dataclass
class IterRetGenRecord:
    """One question's provenance: every iteration's retrieval and generation; ``prediction`` is y_T's answer."""

    id: str
    question: str
    answers: list[str]
    iterations: list[IterationRecord] = field(default_factory=list)

    @property
    def prediction(self) -> str:
        return self.iterations[-1].answer if self.iterations else ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "answers": list(self.answers),
                "iterations": [it.to_dict() for it in self.iterations], "prediction": self.prediction}

    def to_prediction(self, batch_mean_seconds: float) -> PredictionRecord:
        """The evaluate command's record: y_T as the output, one retrieval per iteration, each iteration's scores,
        and this question's own generated tokens and forward passes summed over its iterations."""
        its = self.iterations
        return PredictionRecord(
            id=self.id, question=self.question, answers=list(self.answers), output=its[-1].output,
            retrievals=[RetrievalRecord(round=t + 1, query=it.query, doc_ids=list(it.doc_ids))
                        for t, it in enumerate(its)],
            iterations=[IterationScore(it.answer, dict(it.metrics)) for it in its],
            llm_forward_passes=sum(it.forward_passes for it in its),
            generated_tokens=sum(it.generated_tokens for it in its), rounds=len(its),
            batch_mean_seconds=batch_mean_seconds)


def retrieval_metrics(hits: list[Hit], example: QAExample) -> dict[str, float]:
    out = {"answer_recall": answer_recall(hits, example, len(hits))}
    if example.gold_passages:
        out["gold_recall"] = gold_recall(hits, example, len(hits))
    return out


class IterRetGen:
    """The loop: ``run(examples) -> records``. Retriever and generator are passed in (FlashRAG's pattern)."""

    def __init__(self, retriever: Retriever, generator: Generator, config: IterRetGenConfig | None = None):
        self.retriever, self.generator = retriever, generator
        self.config = config or IterRetGenConfig()
        self.retrieval_calls = self.llm_calls = 0  # per question: both equal T

    def step(self, examples: list[QAExample], previous: list[str | None]) -> list[IterationRecord]:
        """One iteration for all ``examples``: one batched search, one batched generation."""
        queries = [join_query(ex.question, prev) for ex, prev in zip(examples, previous)]
        hits = self.retriever.search(queries, self.config.top_k)
        prompts = [build_prompt(self.config.prompt_style, ex.question, [h.passage for h in row])
                   for ex, row in zip(examples, hits)]
        outputs = self.generator.generate(prompts)
        if len(outputs) != len(prompts):
            raise ValueError(f"the generator returned {len(outputs)} outputs for {len(prompts)} prompts")
        self.retrieval_calls += len(queries)
        self.llm_calls += len(prompts)
        out = []
        for ex, query, row, gen in zip(examples, queries, hits, outputs):
            answer = extract_answer(gen.text)
            metrics = {**retrieval_metrics(row, ex), **score(answer, ex.answers, extract=False)}
            out.append(IterationRecord(query, [h.passage.id for h in row], gen.text, answer, metrics,
                                       gen.num_tokens, gen.forward_passes))
        return out

    def run(self, examples: list[QAExample], *, show_progress: bool = False) -> list[IterRetGenRecord]:
        records = [IterRetGenRecord(ex.id, ex.question, list(ex.answers)) for ex in examples]
        previous: list[str | None] = [None] * len(examples)
        for _ in tqdm(range(self.config.iterations), desc="iter-retgen", unit="iter",
                      **bar_options(disable=not show_progress)):
            for rec, it in zip(records, self.step(examples, previous)):
                rec.iterations.append(it)
            previous = [rec.iterations[-1].output for rec in records]
        return records


def iteration_curve(records: list[IterRetGenRecord]) -> list[dict[str, float]]:
    """Mean metrics per iteration t = 1 … T (``t`` and ``n`` included): the data of the iteration curve."""
    if not records:
        return []
    depth = min(len(r.iterations) for r in records)
    return [{"t": t + 1, **aggregate(r.iterations[t].metrics for r in records)} for t in range(depth)]
