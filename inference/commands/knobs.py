"""Which knobs a method reads, so that a sweep does not cross a method with knobs it ignores (and a report does
not show them): θ only for RIND, ``flare_threshold`` only for FLARE, ``iterations`` only for Iter-RetGen, the gate's
knobs only for the gate methods (and the knobs of a gate's inner method through it).

``knob_applies(knob, cfg)`` takes a resolved config dict, as ``config.yaml`` holds it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from inference.adapt_gate.gate_eval import GATE_METHODS, GateMethodConfig
from inference.dynamic_rag.methods import KNOB_OWNERS, PRESETS, MethodConfig
from inference.dynamic_rag.queries import QUERIES
from inference.dynamic_rag.triggers import TRIGGERS


def _triggered(m: dict) -> bool:
    """Retrieval fired during generation (not once up front, not Iter-RetGen's loop)."""
    return m["trigger"] not in ("never", "single") and m["method"] != "iter-retgen"


def _plugin_reads(knob: str, m: dict) -> bool:
    """A plug-in's knob counts when the method's trigger or query former owns it or declares that it reads it."""
    trigger, query = TRIGGERS.get(m["trigger"]), QUERIES.get(m["query"])
    return KNOB_OWNERS.get(knob) in (("trigger", m["trigger"]), ("query", m["query"])) or \
        knob in trigger.reads or knob in query.reads


def _judged(m: dict) -> bool:
    return TRIGGERS.get(m["trigger"]).judges_content


# Which method (its resolved method, trigger and query: method_view) reads each shared MethodConfig setting; the
# plug-ins' own knobs follow their owner (_plugin_reads). A new shared setting needs a rule here or a place in
# READ_BY_EVERY_METHOD (tests/test_sweep.py checks that), else a sweep over it would either run duplicates or,
# worse, merge runs that differ.
METHOD_KNOB_RULES: dict[str, Callable[[dict], bool]] = {
    "truncation": _judged,  # only triggers that judge the text cut a sentence short
    "keep_sentence_after_retrieval": _judged,
    "fixed_question_first": lambda m: _plugin_reads("fixed_question_first", m),
    "docs_scope": _triggered,
    # it fills the switches above, max_rounds and answer_extraction (which every engine method reads)
    "dragin_profile": lambda m: m["method"] in ENGINE_METHODS,
    "answer_extraction": lambda m: m["method"] in ENGINE_METHODS,
    "round_budget": _triggered,
    "attention_pass": lambda m: m["trigger"] == "rind",
    "sampling": lambda m: m["method"] in ENGINE_METHODS,
    "sampling_seed": lambda m: m["method"] in ENGINE_METHODS and m.get("sampling") == "checkpoint",
    "reference_config": lambda m: m["method"] in ENGINE_METHODS and m.get("dragin_profile") == "reference",
    "iterations": lambda m: m["method"] == "iter-retgen",
    "search_max_passage_words": lambda m: m["method"] == "search-r1",
    "top_k": lambda m: m["trigger"] != "never",
    "max_rounds": lambda m: m["trigger"] != "never" and m["method"] != "iter-retgen",
    "query_max_words": lambda m: m["trigger"] != "never" and m["method"] != "iter-retgen",
    "query_cut": lambda m: m["trigger"] != "never" and m["method"] != "iter-retgen",
    "text_rules": lambda m: m["method"] in ENGINE_METHODS,
    "special_text": lambda m: m["method"] in ENGINE_METHODS,  # every engine round's text
    "round_join": lambda m: m["method"] in ENGINE_METHODS,
    "word_text": lambda m: m["trigger"] == "rind" or m["query"] == "qfs",  # RIND's and QFS's words
} | {knob: (lambda m, knob=knob: _plugin_reads(knob, m)) for knob in KNOB_OWNERS}
READ_BY_EVERY_METHOD = frozenset({"trigger", "query"})  # a trigger or query set explicitly overrides the method's
RETRIEVING_GATES = ("adapt-llm", "ar", "popularity")
ENGINE_METHODS = frozenset(name for name, preset in PRESETS.items() if preset.runner == "engine")


def _single_context(c: dict) -> bool:
    """The gate's own context prompt runs: a retrieving gate without an inner method, or every path's answer."""
    return c.get("gate_inner", "single") == "single" and (c["method"] in RETRIEVING_GATES
                                                           or bool(c.get("gate_all_answers")))


GATE_KNOB_RULES: dict[str, Callable[[dict], bool]] = {
    "gate_rule": lambda c: c["method"] == "adapt-llm",
    "ret_threshold": lambda c: c["method"] == "adapt-llm" and c["gate_rule"] == "threshold",
    "popularity_threshold": lambda c: c["method"] == "popularity",
    "gate_inner": lambda c: c["method"] in RETRIEVING_GATES,
    "gate_context_source": lambda c: c["method"] in RETRIEVING_GATES,
    "gate_max_passage_words": _single_context,
    "gate_context_ban_ret": _single_context,
}
READ_BY_EVERY_GATE = frozenset({"gate_prompt_variant", "gate_max_new_tokens", "gate_all_answers"})
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
    if knob == "top_k" and cfg["method"] in GATE_METHODS and _single_context(cfg):
        return True  # the passages of the gate's own context prompt
    if knob in METHOD_KNOBS:
        view = method_view(cfg)
        rule = METHOD_KNOB_RULES.get(knob)
        return view is not None and (rule is None or rule(view))
    return True
