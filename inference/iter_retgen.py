"""Iter-RetGen (Shao et al. 2023): iterative retrieval-generation synergy, batched over questions.

Iteration 1 retrieves the top-k paragraphs with the question q; iteration t > 1 retrieves with y_{t-1} joined to
q. Each iteration generates y_t from the paragraphs prepended to q (:mod:`inference.iter_retgen_prompts`).
The answer is y_T. Every iteration is recorded (query, doc ids, output, extracted answer, answer recall of the
retrieved set, EM/F1/contained accuracy of y_t), so one run with T iterations also gives the curves for
every T' < T: the loop is greedy and deterministic, so the first T' iterations of a T run are a T' run.

    loop = IterRetGen(retriever, LMGenerator.from_name("smollm2-135m"), IterRetGenConfig(iterations=2))
    records = loop.run(examples)
    curve = iteration_curve(records)   # one metrics dict per iteration
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from tqdm.auto import tqdm

from inference.core.metrics import aggregate, extract_answer, score
from inference.core.progress import bar_options
from inference.core.records import QAExample
from inference.core.retriever import Hit, Retriever, join_query
from inference.iter_retgen_prompts import Prompt, PromptStyle, build_prompt


@dataclass
class IterRetGenConfig:
    iterations: int = 2  # T; the paper finds T = 2 gives most of the gain
    k: int = 5  # paragraphs per retrieval (paper: top-5 Contriever-MSMARCO)
    prompt_style: PromptStyle = "chat"  # "paper" = 3-shot CoT (scores ~0 on SmolLM2), "chat" = short answer

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ValueError(f"iterations must be >= 1, got {self.iterations}")
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.prompt_style not in ("paper", "chat"):
            raise ValueError(f"prompt_style must be 'paper' or 'chat', got '{self.prompt_style}'")


class Generator(Protocol):
    """``generate(prompts) -> texts``, one output per prompt, in order."""

    def generate(self, prompts: list[Prompt]) -> list[str]: ...


class LMGenerator:
    """Greedy generation on the engine's decoder (:func:`inference.core.generation.generate_texts`); one line each.

    Stopping at the first newline suits both prompt styles: the paper demos put the whole chain of thought on
    one line, and the chat style asks for a short phrase.
    """

    def __init__(self, model, tokenizer, *, max_new_tokens: int = 64, batch_size: int = 16,
                 stop_at_newline: bool = True, show_progress: bool = False):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.stop_at_newline, self.show_progress = stop_at_newline, show_progress
        self.generated_tokens = 0  # efficiency figures: total new tokens over all calls, and the forward
        self.forward_passes = 0  # passes each prompt took part in, summed over prompts

    @classmethod
    def from_name(cls, name: str, *, dtype: str = "auto", device: str = "auto", **kwargs) -> LMGenerator:
        from inference.core.models import ModelOptions, load_causal_lm

        model, tokenizer = load_causal_lm(name, ModelOptions(dtype=dtype, device=device))  # type: ignore[arg-type]
        return cls(model, tokenizer, **kwargs)

    def render(self, prompt: Prompt) -> str:
        from inference.core.generation import chat_prompt

        return chat_prompt(self.tokenizer, prompt.user, prompt.system) if prompt.chat else prompt.user

    def generate(self, prompts: list[Prompt]) -> list[str]:
        from inference.core.generation import generate_texts

        gens = generate_texts(self.model, self.tokenizer, [self.render(p) for p in prompts],
                              max_new_tokens=self.max_new_tokens, batch_size=self.batch_size,
                              show_progress=self.show_progress, stop_at_newline=self.stop_at_newline)
        self.generated_tokens += sum(g.num_tokens for g in gens)
        self.forward_passes += sum(g.forward_passes for g in gens)
        return [g.text for g in gens]



@dataclass
class IterationRecord:
    query: str
    doc_ids: list[str]
    output: str  # y_t, the whole generation
    answer: str  # extracted from y_t
    metrics: dict[str, float]  # answer_recall, gold_recall (with gold passages), em, f1, precision, recall, acc


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
        return {**asdict(self), "prediction": self.prediction}


def retrieval_metrics(hits: list[Hit], example: QAExample) -> dict[str, float]:
    from retrieval_adapt.recall import answer_recall, gold_recall

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
        hits = self.retriever.search(queries, self.config.k)
        prompts = [build_prompt(self.config.prompt_style, ex.question, [h.passage for h in row])
                   for ex, row in zip(examples, hits)]
        outputs = self.generator.generate(prompts)
        if len(outputs) != len(prompts):
            raise ValueError(f"the generator returned {len(outputs)} outputs for {len(prompts)} prompts")
        self.retrieval_calls += len(queries)
        self.llm_calls += len(prompts)
        out = []
        for ex, query, row, text in zip(examples, queries, hits, outputs):
            answer = extract_answer(text)
            metrics = {**retrieval_metrics(row, ex), **score(answer, ex.answers, extract=False)}
            out.append(IterationRecord(query, [h.passage.id for h in row], text, answer, metrics))
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
