"""ADAPT-LLM's gate and its baselines as methods of the evaluate command.

    python -m inference.commands.evaluate --method adapt-llm --model runs/adapt_llm_demo/model --dataset \\
        world-single-hop
    python -m inference.commands.evaluate --method popularity --popularity_threshold 707000 --dataset PATH/popqa.json \\
        --index runs/index/bm25
    python -m inference.commands.evaluate --method adapt-llm --gate_inner dragin --theta 0.8 ...   # <RET> -> DRAGIN

Methods: ``adapt-llm`` (the learned ``<RET>`` gate), ``nr`` (never retrieve), ``ar`` (always retrieve),
``popularity`` (retrieve when ``metadata["popularity"]``, PopQA's ``s_pop``, is below a threshold). The gate and
its prompts are :mod:`inference.adapt_gate.gate`; this module holds their knobs (:class:`GateMethodConfig`), the runner
the evaluate command calls, and the one conversion from :class:`GateRecord` to a prediction record.

Beyond the paper, ``gate_inner`` names who answers the questions the gate sends to retrieval: ``single`` (the
paper: the ``top_k`` passages for the question, 1 unless set, then ``context_prompt``) or any method of the evaluate
command (``dragin``, ``flare``, ``iter-retgen``, ...) with its own knobs (``--theta``, ``--top_k``, ``--iterations``
...). ``gate_all_answers`` generates every path's answer for every question (parametric, NR, context), so that NR,
AR, popularity and any ``<RET>`` threshold can be re-decided from ``predictions.jsonl`` without generating again
(:mod:`inference.commands.popularity_threshold`, the training job's held-out table); it costs all three prompts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.records import GateDecision, PredictionRecord, QAExample, RetrievalRecord
from data_builders.adapt_llm_prompts import RET_TOKEN, PromptVariant
from inference.adapt_gate.gate import (
    SOURCES,
    AdaptGate,
    ContextSource,
    GateConfig,
    GateRecord,
    GateRule,
    InnerMethod,
    model_generator,
    redecide,
)
from inference.adapt_gate.ret_token import MARKER_FILE, ret_signal
from inference.dynamic_rag.methods import PRESETS, MethodConfig

# evaluate's method name -> the gate's policy
GATE_METHODS = {"adapt-llm": "adapt_llm", "nr": "never_retrieve", "ar": "always_retrieve", "popularity": "popularity"}
# Who may answer the questions the gate sends to retrieval: its own single context prompt, or any method of the
# registry that retrieves (the engine's and Iter-RetGen; a new preset is an inner method without an edit here).
INNER_NAMES: tuple[str, ...] = ("single", *(name for name, preset in PRESETS.items()
                                            if preset.runner != "gate" and preset.trigger != "never"))
InnerName = Literal[INNER_NAMES]  # type: ignore[valid-type]
Runner = Callable[[list[QAExample]], list[PredictionRecord]]
@dataclass
class GateMethodConfig:
    """Knobs of the gate methods (adapt-llm, nr, ar, popularity); other methods ignore them.
    Defaults follow ADAPT-LLM's evaluation. Passages per context prompt: --top_k (1 for these methods)."""

    gate_rule: GateRule = "token"  # token: the output says <RET> (paper); threshold: p(<RET> first) > ret_threshold
    ret_threshold: float = 0.5
    popularity_threshold: float = 707_000.0  # the paper's PopQA s_pop threshold
    gate_inner: InnerName = "single"  # who answers the questions sent to retrieval
    gate_prompt_variant: PromptVariant = "paper"  # must match the variant the model was trained on
    gate_max_passage_words: int | None = 200
    gate_max_new_tokens: int = 20  # the authors' evaluation; an inner method uses --max_new_tokens
    # also generate the answers of the paths not taken, so every policy and threshold can be re-decided offline
    gate_all_answers: bool = False
    # the context prompt's passage: retrieved with the question (--top_k of them, title and text), or the one the
    # question's file ships (the authors' PopQA file: its precomputed Contriever passage, title included)
    gate_context_source: ContextSource = "retrieve"
    # never let <RET> be the answer to the context prompt (off: as the authors evaluate; docs/knowing_world.md shows an
    # RL-trained gate that answers it with <RET>)
    gate_context_ban_ret: bool = False

    RENAMED: ClassVar[dict[str, str]] = {"gate_k": "top_k (passages per context prompt, 1 unless set)"}

    def __post_init__(self) -> None:
        if self.gate_inner not in INNER_NAMES:
            raise ValueError(f"gate_inner must be one of {', '.join(INNER_NAMES)}, got '{self.gate_inner}'")
        if self.gate_max_new_tokens < 1:
            raise ValueError(f"gate_max_new_tokens must be >= 1, got {self.gate_max_new_tokens}")
        self.gate_config("adapt-llm")  # the gate's own checks (rule, threshold, prompt variant)

    def gate_config(self, method: str, top_k: int | None = None) -> GateConfig:
        """The gate's settings for ``method``; ``top_k`` None: the method's preset depth."""
        top_k = PRESETS[method].top_k if top_k is None else top_k
        return GateConfig(policy=GATE_METHODS[method], gate_rule=self.gate_rule, ret_threshold=self.ret_threshold,
                          popularity_threshold=self.popularity_threshold, top_k=top_k,
                          prompt_variant=self.gate_prompt_variant, max_passage_words=self.gate_max_passage_words,
                          context_source=self.gate_context_source, context_ban_ret=self.gate_context_ban_ret)


def inner_method(method: MethodConfig, gate: GateMethodConfig) -> MethodConfig | None:
    """The inner method's config: the command's knobs with the inner method's own trigger and query."""
    if gate.gate_inner == "single" or method.method == "nr":
        return None
    own = {} if gate.gate_inner == "custom" else {"trigger": None, "query": None}
    return replace(method, method=gate.gate_inner, **own)


def resolved_method(method: MethodConfig, gate: GateMethodConfig, *dataset_hints: str | None,
                    model: str | None = None) -> MethodConfig:
    """``method.resolved(...)``, where a gate method that hands its retrieval path to an inner method takes that
    method's own depth when ``top_k`` is unset (DRAGIN's 3, not the single context prompt's 1)."""
    if method.method in GATE_METHODS and method.top_k is None:
        inner = inner_method(method, gate)
        if inner is not None:
            method = replace(method, top_k=inner.resolved(*dataset_hints, model=model).top_k)
    return method.resolved(*dataset_hints, model=model)


def check_examples(method: MethodConfig, examples: Sequence[QAExample], dataset: str) -> None:
    """Fail before any model loads when the popularity policy meets questions without popularity."""
    if method.method != "popularity":
        return
    missing = [ex.id for ex in examples if ex.metadata.get("popularity") is None]
    if missing:
        raise ConfigError(f"--method popularity needs metadata 'popularity' (PopQA's s_pop) on every question; "
                          f"{len(missing)} of {len(examples)} in {dataset} have none (first: {missing[:3]})")


def to_record(rec: GateRecord, seconds: float) -> PredictionRecord:
    """A gate record as the evaluate command's prediction record (one per question); ``seconds``: the batch's
    wall time per question."""
    inner = rec.inner
    if rec.retrieved and inner is not None:
        retrievals = list(inner.retrievals)
    elif rec.retrieved:
        retrievals = [RetrievalRecord(round=1, query=rec.question, doc_ids=list(rec.doc_ids))]
    else:
        retrievals = []
    decision = GateDecision(policy=rec.policy, retrieved=rec.retrieved, answered_by=rec.answered_by, p_ret=rec.p_ret,
                            popularity=rec.popularity, parametric_output=rec.parametric_output,
                            closed_book_output=rec.closed_book_output, context_output=rec.context_output, inner=inner)
    return PredictionRecord(
        id=rec.question_id, question=rec.question, answers=list(rec.answers), output=rec.output, retrievals=retrievals,
        llm_forward_passes=rec.forward_passes + (inner.llm_forward_passes if inner is not None else 0),
        generated_tokens=rec.generated_tokens + (inner.generated_tokens if inner is not None else 0),
        batch_mean_seconds=seconds, gate=decision)


def gate_record(pred: PredictionRecord) -> GateRecord:
    """A gate method's prediction record back as the gate's record, for :func:`~inference.adapt_gate.gate.redecide`
    (``correct`` is left to it). An inner method's name is known only where it answered (``answered_by``)."""
    g = pred.gate
    if g is None:
        raise DataError("not a record of a gate method (no 'policy')", record=pred.id)
    inner = g.inner
    name = None if inner is None else g.answered_by if g.answered_by not in SOURCES.values() else "inner"
    return GateRecord(
        question_id=pred.id, question=pred.question, answers=list(pred.answers), policy=g.policy, output=pred.output,
        retrieved=g.retrieved, p_ret=g.p_ret, doc_ids=[d for r in pred.retrievals for d in r.doc_ids],
        parametric_output=g.parametric_output, closed_book_output=g.closed_book_output,
        context_output=g.context_output, popularity=g.popularity, answered_by=g.answered_by,
        generated_tokens=pred.generated_tokens - (inner.generated_tokens if inner is not None else 0),
        forward_passes=pred.llm_forward_passes - (inner.llm_forward_passes if inner is not None else 0),
        inner_method=name, inner=inner)


def gate_runner(model: Any, tokenizer: Any, retriever: Any, method: MethodConfig, gate: GateMethodConfig,
                batch_size: int, inner: Runner | None = None, show_progress: bool = False) -> Runner:
    """``examples -> records`` for a gate method; ``inner`` answers the retrieval path when given;
    ``show_progress``: a bar per prompt set."""
    signal = ret_signal(tokenizer)  # an added <RET> token, or plain text as the model folder records
    if method.method == "adapt-llm" and signal is None:
        raise ConfigError(f"--method adapt-llm needs a model trained to answer {RET_TOKEN} (training/adapt_llm.py); "
                          f"the tokenizer of '{getattr(tokenizer, 'name_or_path', '?')}' has no {RET_TOKEN} token and "
                          f"its folder no {MARKER_FILE} (plain-text {RET_TOKEN}, ret_token: text)")
    watch = signal.watch if signal is not None else None
    generator = model_generator(model, tokenizer, batch_size, gate.gate_max_new_tokens, show_progress=show_progress,
                                watch=watch)
    wrapped = None if inner is None else InnerMethod(gate.gate_inner, inner)
    cfg = replace(gate.gate_config(method.method, method.resolved().top_k), ret_watch=watch or RET_TOKEN)
    adapt = AdaptGate(generator, retriever, cfg, inner=wrapped)

    def run(examples: list[QAExample]) -> list[PredictionRecord]:
        start = time.perf_counter()
        if gate.gate_all_answers:  # every path's answer; this method's policy decides which one answers
            records = redecide(adapt.run(examples, "sweep"), adapt.cfg.policy, adapt.cfg, adapt.judge)
        else:
            records = adapt.run(examples)
        seconds = (time.perf_counter() - start) / max(1, len(examples))  # the chunk's wall time shared evenly
        return [to_record(r, seconds) for r in records]

    return run
