"""ADAPT-LLM's gate and its baselines as methods of the evaluate command.

    python -m inference.evaluate --method adapt-llm --model runs/adapt_llm_demo/model --dataset world-single-hop
    python -m inference.evaluate --method popularity --popularity_threshold 707000 --dataset PATH/popqa.json \\
        --index runs/index/bm25
    python -m inference.evaluate --method adapt-llm --gate_inner dragin --theta 0.8 ...   # <RET> -> DRAGIN

Methods: ``adapt-llm`` (the learned ``<RET>`` gate), ``nr`` (never retrieve), ``ar`` (always retrieve),
``popularity`` (retrieve when ``metadata["popularity"]``, PopQA's ``s_pop``, is below a threshold). The gate and
its prompts are :mod:`inference.adapt_gate`; this module holds their knobs (:class:`GateMethodConfig`), the runner
the evaluate command calls, and the one conversion from :class:`GateRecord` to a prediction record.

Beyond the paper, ``gate_inner`` names who answers the questions the gate sends to retrieval: ``single`` (the
paper: top ``gate_k`` passages for the question, then ``context_prompt``) or any method of the evaluate command
(``dragin``, ``flare``, ``iter-retgen``, ...) with its own knobs (``--theta``, ``--top_k``, ``--iterations`` ...).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from data_builders.adapt_llm_prompts import RET_TOKEN, PromptVariant
from inference.adapt_gate import AdaptGate, GateConfig, GateRecord, GateRule, InnerMethod, model_generator
from inference.core.config import ConfigError
from inference.core.records import QAExample
from inference.methods import MethodConfig

# evaluate's method name -> the gate's policy
GATE_METHODS = {"adapt-llm": "adapt_llm", "nr": "never_retrieve", "ar": "always_retrieve", "popularity": "popularity"}
InnerName = Literal["single", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin", "custom", "iter-retgen"]
INNER_NAMES: tuple[str, ...] = get_args(InnerName)
Runner = Callable[[list[QAExample]], list[dict[str, Any]]]


@dataclass
class GateMethodConfig:
    """Knobs of the gate methods (adapt-llm, nr, ar, popularity); other methods ignore them.
    Defaults follow ADAPT-LLM's evaluation."""

    gate_rule: GateRule = "token"  # token: the output says <RET> (paper); threshold: p(<RET> first) > ret_threshold
    ret_threshold: float = 0.5
    popularity_threshold: float = 707_000.0  # the paper's PopQA s_pop threshold
    gate_k: int = 1  # passages in the single path's context prompt (training showed one gold passage)
    gate_inner: InnerName = "single"  # who answers the questions sent to retrieval
    gate_prompt_variant: PromptVariant = "paper"  # must match the variant the model was trained on
    gate_max_passage_words: int | None = 200
    gate_max_new_tokens: int = 20  # the authors' evaluation; an inner method uses --max_new_tokens

    def __post_init__(self) -> None:
        if self.gate_inner not in INNER_NAMES:
            raise ValueError(f"gate_inner must be one of {', '.join(INNER_NAMES)}, got '{self.gate_inner}'")
        if self.gate_max_new_tokens < 1:
            raise ValueError(f"gate_max_new_tokens must be >= 1, got {self.gate_max_new_tokens}")
        self.gate_config("adapt-llm")  # the gate's own checks (rule, threshold, k, prompt variant)

    def gate_config(self, method: str) -> GateConfig:
        return GateConfig(policy=GATE_METHODS[method], gate_rule=self.gate_rule, ret_threshold=self.ret_threshold,
                          popularity_threshold=self.popularity_threshold, k=self.gate_k,
                          prompt_variant=self.gate_prompt_variant, max_passage_words=self.gate_max_passage_words)


def inner_method(method: MethodConfig, gate: GateMethodConfig) -> MethodConfig | None:
    """The inner method's config: the command's knobs with the inner method's own trigger and query."""
    if gate.gate_inner == "single" or method.method == "nr":
        return None
    own = {} if gate.gate_inner == "custom" else {"trigger": None, "query": None}
    return replace(method, method=gate.gate_inner, **own)


def check_examples(method: MethodConfig, examples: Sequence[QAExample], dataset: str) -> None:
    """Fail before any model loads when the popularity policy meets questions without popularity."""
    if method.method != "popularity":
        return
    missing = [ex.id for ex in examples if ex.metadata.get("popularity") is None]
    if missing:
        raise ConfigError(f"--method popularity needs metadata 'popularity' (PopQA's s_pop) on every question; "
                          f"{len(missing)} of {len(examples)} in {dataset} have none (first: {missing[:3]})")


def to_record(rec: GateRecord, seconds: float) -> dict[str, Any]:
    """A gate record as the evaluate command's prediction record (one per question)."""
    inner = {k: v for k, v in (rec.inner or {}).items() if k not in ("id", "question", "answers", "method")}
    if rec.retrieved and rec.inner is not None:
        retrievals = inner.get("retrievals", [])
    elif rec.retrieved:
        retrievals = [{"round": 1, "query": rec.question, "doc_ids": list(rec.doc_ids)}]
    else:
        retrievals = []
    return {"id": rec.question_id, "question": rec.question, "answers": rec.answers, "output": rec.output,
            "policy": rec.policy, "retrieved": rec.retrieved, "answered_by": rec.answered_by, "p_ret": rec.p_ret,
            "popularity": rec.popularity, "retrievals": retrievals, "parametric_output": rec.parametric_output,
            "closed_book_output": rec.closed_book_output, "context_output": rec.context_output,
            "llm_forward_passes": rec.forward_passes + (inner.get("llm_forward_passes") or 0),
            "generated_tokens": rec.generated_tokens + (inner.get("generated_tokens") or 0),
            "seconds": seconds, **({"inner": inner} if rec.inner is not None else {})}


def gate_runner(model: Any, tokenizer: Any, retriever: Any, method: MethodConfig, gate: GateMethodConfig,
                batch_size: int, inner: Runner | None = None) -> Runner:
    """``examples -> records`` for a gate method; ``inner`` answers the retrieval path when given."""
    if method.method == "adapt-llm" and RET_TOKEN not in tokenizer.get_vocab():
        raise ConfigError(f"--method adapt-llm needs a model trained with the {RET_TOKEN} token (training/"
                          f"adapt_llm.py); the tokenizer of '{getattr(tokenizer, 'name_or_path', '?')}' has none")
    generate = model_generator(model, tokenizer, batch_size, gate.gate_max_new_tokens)
    wrapped = None if inner is None else InnerMethod(gate.gate_inner, inner)
    adapt = AdaptGate(generate, retriever, gate.gate_config(method.method), inner=wrapped)

    def run(examples: list[QAExample]) -> list[dict[str, Any]]:
        start = time.perf_counter()
        records = adapt.run(examples)
        seconds = (time.perf_counter() - start) / max(1, len(examples))  # the chunk's wall time shared evenly
        return [to_record(r, seconds) for r in records]

    return run
