"""Which knobs a method reads, so that a sweep does not cross a method with knobs it ignores (and a report does
not show them): θ only for RIND, ``flare_threshold`` only for FLARE, ``iterations`` only for Iter-RetGen, the gate's
knobs only for the gate methods (and the knobs of a gate's inner method through it).

``knob_applies(knob, cfg)`` takes a resolved config dict, as ``config.yaml`` holds it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from inference.gate_eval import GATE_METHODS, GateMethodConfig
from inference.methods import MethodConfig


def _rind(m: dict) -> bool:
    return m["trigger"] == "rind"


def _triggered(m: dict) -> bool:
    """Retrieval fired during generation (not once up front, not Iter-RetGen's loop)."""
    return m["trigger"] not in ("never", "single") and m["method"] != "iter-retgen"


# Which method (its resolved method, trigger and query: method_view) reads each MethodConfig knob. A new knob
# needs a rule here or a place in READ_BY_EVERY_METHOD (tests/test_sweep.py checks that), else a sweep over it would
# either run duplicates or, worse, merge runs that differ.
METHOD_KNOB_RULES: dict[str, Callable[[dict], bool]] = {
    "theta": _rind, "rind_normalisation": _rind, "entropy_agg": _rind, "attention_agg": _rind,
    "rind_attention": _rind, "content_filter": _rind, "rind_scope": _rind,
    "qfs_top_n": lambda m: m["query"] == "qfs", "qfs_attention": lambda m: m["query"] == "qfs",
    "flare_threshold": lambda m: m["trigger"] == "flare",
    "flare_mask_prob": lambda m: m["query"] == "flare_masked",
    "fixed_length": lambda m: m["trigger"] == "fixed_length" or m["query"] == "last_window",
    "fixed_question_first": lambda m: m["trigger"] in ("fixed_length", "fixed_sentence"),
    "truncation": lambda m: m["trigger"] in ("rind", "flare"),  # only these cut a sentence short
    "keep_sentence_after_retrieval": lambda m: m["trigger"] in ("rind", "flare"),
    "docs_scope": _triggered,
    "dragin_profile": _triggered,  # it fills the switches above and max_rounds (which only counts when triggered)
    "iterations": lambda m: m["method"] == "iter-retgen",
    "top_k": lambda m: m["trigger"] != "never",
    "max_rounds": lambda m: m["trigger"] != "never" and m["method"] != "iter-retgen",
    "query_max_words": lambda m: m["trigger"] != "never" and m["method"] != "iter-retgen",
}
READ_BY_EVERY_METHOD = frozenset({"trigger", "query"})  # a trigger or query set explicitly overrides the method's
RETRIEVING_GATES = ("adapt-llm", "ar", "popularity")
GATE_KNOB_RULES: dict[str, Callable[[dict], bool]] = {
    "gate_rule": lambda c: c["method"] == "adapt-llm",
    "ret_threshold": lambda c: c["method"] == "adapt-llm" and c["gate_rule"] == "threshold",
    "popularity_threshold": lambda c: c["method"] == "popularity",
    "gate_k": lambda c: c["method"] in RETRIEVING_GATES and c["gate_inner"] == "single",
    "gate_inner": lambda c: c["method"] in RETRIEVING_GATES,
    "gate_max_passage_words": lambda c: c["method"] in RETRIEVING_GATES and c["gate_inner"] == "single",
}
READ_BY_EVERY_GATE = frozenset({"gate_prompt_variant", "gate_max_new_tokens"})
METHOD_KNOBS = frozenset(f.name for f in dataclasses.fields(MethodConfig)) - {"method"}
GATE_KNOBS = frozenset(f.name for f in dataclasses.fields(GateMethodConfig))


def method_view(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The method whose knobs count: the method itself, or for a gate method the inner method answering its
    retrieval path (None when there is none: the gate's own single context prompt, or NR)."""
    if cfg["method"] not in GATE_METHODS:
        return cfg
    inner = cfg.get("gate_inner", "single")
    if inner == "single" or cfg["method"] == "nr":
        return None
    if inner == "custom":
        return {**cfg, "method": inner}
    own = MethodConfig(method=inner)  # the inner method's own trigger and query (gate_eval.inner_method)
    return {**cfg, "method": inner, "trigger": own.trigger, "query": own.query}


def knob_applies(knob: str, cfg: dict[str, Any]) -> bool:
    """Whether the run described by ``cfg`` (a resolved config dict, as in config.yaml) reads ``knob``."""
    if knob in GATE_KNOBS:
        rule = GATE_KNOB_RULES.get(knob)
        return cfg["method"] in GATE_METHODS and (rule is None or rule(cfg))
    if knob in METHOD_KNOBS:
        view = method_view(cfg)
        rule = METHOD_KNOB_RULES.get(knob)
        return view is not None and (rule is None or rule(view))
    return True
