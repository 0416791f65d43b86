"""Dynamic-RAG methods as "when to retrieve" (a trigger) × "what to query" (a query former), and their settings.

Triggers live in ``inference/dynamic_rag/triggers/`` and query formers in ``inference/dynamic_rag/queries/``, one
file each, registered
by name; :class:`MethodConfig` holds the settings shared by all methods plus the ``Knobs`` each plug-in owns, and
``PRESETS`` maps each method name to its (trigger, query former, runner, depth).

Every method of the DRAGIN paper is one pair; any trigger combines with any query former (its Tables 4 and 6):

=========  ===================  ==========================
method     trigger              query
=========  ===================  ==========================
wo-rag     never                —
sr-rag     once, before         question
fl-rag     every n tokens       last window of n tokens
fs-rag     every sentence       last sentence
flare      low-probability tok  sentence minus uncertain tokens
dragin     RIND > θ             QFS top-n attended words
=========  ===================  ==========================

``dragin_profile`` chooses between two readings of DRAGIN (each setting is also a switch of its own; a switch set
explicitly wins over the profile). ``paper`` follows the paper's text; ``reference`` reproduces the authors' code
(oneal2000/DRAGIN ``src/generate.py``, ``AttnWeightRAG`` and ``FixLengthRAG``; SPEC.md):

========================  =====================================  ============================================
setting                   paper                                  reference
========================  =====================================  ============================================
rind_attention            heads reduced per row, then            per head the max over query rows j >= i
                          a_max(i) = max_{j>i} A[j, i]           (diagonal included), then the mean over heads
rind_normalisation        none                                   per sentence: attention / sum × word count
content_filter            ``score``: s_i inside the score        ``after_threshold``: H·a > θ fires (also on a
                                                                 stopword); stopwords are then dropped from
                                                                 the hits QFS averages
rind_scope                ``sentence``: each sentence judged     ``round``: the round is generated to its end,
                          when it ends                           then its sentences are judged in order
docs_scope                ``until_replaced``                     ``next_sentence``: the documents serve the
                                                                 one sentence after the retrieval; later
                                                                 rounds are prompted without them
qfs_attention             the triggering token's own row         rows of the positions before the hit words'
                                                                 tokens, averaged over the hits
qfs_top_n                 25                                     the reference's dataset configs: HotpotQA 35,
                                                                 2Wiki 25, IIRC 35, StrategyQA 35
fixed_question_first      no                                     FL-RAG and FS-RAG retrieve with the question
                                                                 before generating (Table 3 counts that call)
max_rounds                5                                      none of its own: the loop ends by its own tests
                                                                 (the kept text past the token budget, a round
                                                                 that adds nothing), within budget + 1 rounds
========================  =====================================  ============================================

Progress guarantee (both profiles, ``keep_sentence_after_retrieval``): after a retrieval fired by a trigger (RIND,
FLARE), the first sentence generated with the new documents is kept without being checked; the trigger may fire
again only after it. Without it a trigger that fires in the first sentence after every retrieval keeps nothing and
retrieves again at the same position until the retrieval cap (measured on HotpotQA with the paper prompt). The
reference code does this (it keeps the first sentence of the generation after a retrieval, unchecked), FLARE does
it (the regenerated sentence is accepted), and the paper implies it (a later trigger is at a *subsequent* position
j). One sentence, not one token: the sentence truncation would otherwise cut the kept token away again.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from adaptive_rag.plumbing.config import field_comments
from inference.dynamic_rag.dragin_settings import reference_config_for, row_for
from inference.dynamic_rag.queries import QUERIES
from inference.dynamic_rag.triggers import TRIGGERS

Truncation = Literal["sentence", "token", "none"]
Profile = Literal["paper", "reference"]
Runner = Literal["engine", "iter-retgen", "gate", "search-agent"]


@dataclass(frozen=True)
class Preset:
    """A method name: its trigger and query former (None: set both, ``custom``), what runs it, and its depth."""

    trigger: str | None
    query: str | None
    runner: Runner = "engine"
    # documents per retrieval (DRAGIN: 3 via BM25; FLARE used 2). The one place a method's depth is declared:
    # MethodConfig.resolved() fills an unset --top_k from here, and each runner's own config defaults to it.
    top_k: int = 3


PRESETS: dict[str, Preset] = {
    "wo-rag": Preset("never", "question"), "sr-rag": Preset("single", "question"),
    "fl-rag": Preset("fixed_length", "last_window"), "fs-rag": Preset("fixed_sentence", "last_sentence"),
    "flare": Preset("flare", "flare_masked"), "dragin": Preset("rind", "qfs"), "custom": Preset(None, None),
    # the FLARE row of DRAGIN's Table 2 as the authors' code ran it (their TokenRAG; triggers/token_rag.py)
    "token-rag": Preset("token_rag", "token_rag"),
    # Iter-RetGen is a loop of whole generations (inference/iter_retgen/loop.py), not a trigger; the paper retrieves
    # the top-5 paragraphs (Contriever-MSMARCO)
    "iter-retgen": Preset("single", "question", "iter-retgen", top_k=5),
    # ADAPT-LLM's gate and its baselines (inference/adapt_gate/gate_eval.py): at most one decision to retrieve;
    # training showed one gold passage in the context prompt
    "adapt-llm": Preset("single", "question", "gate", top_k=1), "nr": Preset("never", "question", "gate", top_k=1),
    "ar": Preset("single", "question", "gate", top_k=1),
    "popularity": Preset("single", "question", "gate", top_k=1),
    # Search-R1's multi-turn protocol (inference/search_agent/): the policy writes <search>query</search> turns and an
    # <answer>; top_k passages per search, max_rounds searches at most
    "search-r1": Preset("single", "question", "search-agent", top_k=3),
}

# Settings each DRAGIN profile gives to the switches left unset (None); see the module docstring.
PROFILES: dict[str, dict[str, object]] = {
    "paper": {"rind_attention": "paper", "rind_normalisation": "paper", "content_filter": "score",
              "rind_scope": "sentence", "docs_scope": "until_replaced", "qfs_attention": "paper",
              "fixed_question_first": False, "max_rounds": 5, "answer_extraction": "project",
              "round_budget": "remaining", "truncation": "token", "query_cut": "words",
              "text_rules": "rules", "special_text": "drop", "round_join": "tokens", "word_text": "pieces"},
    "reference": {"rind_attention": "reference", "rind_normalisation": "reference", "content_filter": "after_threshold",
                  "rind_scope": "round", "docs_scope": "next_sentence", "qfs_attention": "reference",
                  "fixed_question_first": True, "max_rounds": None, "answer_extraction": "dragin",
                  "round_budget": "per_round", "truncation": "sentence", "query_cut": "tokens",
                  "text_rules": "authors", "special_text": "keep", "round_join": "authors",
                  "word_text": "tokens"},
}


# Profile settings that are DRAGIN's alone; other triggers keep these. Documents for one sentence are the authors'
# AttnWeightRAG's: FLARE accepts its regenerated sentence and goes on with the documents (their TokenRAG keeps its
# whole regeneration). FLARE regenerates the tentative sentence, so it always cuts at the sentence start. The
# per-round budget is AttnWeightRAG's loop; the other loops keep the remaining budget.
NOT_DRAGIN: dict[str, object] = {"docs_scope": "until_replaced", "truncation": "sentence", "round_budget": "remaining"}
# The authors' FixLengthRAG (FL-RAG, FS-RAG) and TokenRAG loops give every round the full budget too; TokenRAG's
# documents serve the one round written after its retrieval (its regeneration, kept whole).
PER_ROUND_LOOPS = ("fixed_length", "fixed_sentence", "token_rag")
OWN_DOCS_SCOPE = {"token_rag": "next_round"}


@dataclass
class SharedSettings:
    """Settings every method shares; each trigger and query former adds its own ``Knobs`` after these."""

    method: str = "dragin"
    trigger: str | None = None  # None: the method's own; set both for ablations ("custom")
    query: str | None = None
    # documents per retrieval; None: the method's own (3; 1 for the gate's context prompt)
    top_k: int | None = None
    # Retrieval cap per question; None: the profile's (paper 5; reference: none, retrieval_cap below)
    max_rounds: int | None = None
    dragin_profile: Profile = "paper"  # which reading of DRAGIN fills the switches left unset
    # for retrievals a trigger fired: until_replaced, next_sentence (DRAGIN's reference) or next_round (TokenRAG)
    docs_scope: Literal["until_replaced", "next_sentence", "next_round"] | None = None
    fixed_question_first: bool | None = None  # FL-RAG / FS-RAG retrieve with the question before generating
    keep_sentence_after_retrieval: bool = True  # the progress guarantee (module docstring)
    # None: the profile's (paper: token, cut before the triggering word; reference: sentence, cut at the start of
    # the sentence holding it); none keeps the whole round
    truncation: Truncation | None = None
    query_max_words: int = 64  # the query cut to its last 64 words (query_cut tokens: 64 generator tokens)
    # words; or tokens: the authors' BM25 class cuts the query to its last max_query_length generator tokens (left
    # truncation) and decodes it back. None: the profile's (paper: words, reference: tokens)
    query_cut: Literal["words", "tokens"] | None = None
    # how sentences and content words are found: rules (a rule-based sentencizer, spaCy's stopword list) or authors
    # (spaCy's en_core_web_sm parser and its real words by POS tag, when installed: the [dragin] extra). None: the
    # profile's (paper: rules, reference: authors)
    text_rules: Literal["rules", "authors"] | None = None
    # project: the last "the answer is"/"Answer:" marker (adaptive_rag.plumbing.metrics.extract_answer); dragin: the
    # authors' eval.py (cut at "Question:"/"Note:", 20 tokens forced after " So the answer is" when it is missing,
    # the first marker; adaptive_rag.plumbing.dragin_eval). None: the profile's (paper: project, reference: dragin)
    answer_extraction: Literal["project", "dragin"] | None = None
    # remaining: a round may generate max_new_tokens minus the answer so far; per_round: every round the full
    # max_new_tokens, and no new round once the answer exceeds it or holds "the answer is" (the authors' loop).
    # None: the profile's (paper: remaining, reference: per_round)
    round_budget: Literal["remaining", "per_round"] | None = None
    # drop: a special token adds no text; keep: as the authors' code decodes a round (no skip_special_tokens), the
    # stop token that ends it ("<|im_end|>", "</s>") and any other special token stay in its text, its words and
    # the answer put back into the next prompt, and the stop token counts as generated. None: the profile's (paper:
    # drop, reference: keep)
    special_text: Literal["drop", "keep"] | None = None
    # tokens: the answer so far is the kept tokens decoded together; authors: their loops' text (each round's text
    # stripped and joined with one space; the text before a triggering sentence as its sentences joined by one
    # space), and DRAGIN's and TokenRAG's loops go on after a round without a retrieval until their end tests (the
    # length, no progress, "the answer is") stop them. None: the profile's (paper: tokens, reference: authors)
    round_join: Literal["tokens", "authors"] | None = None
    # pieces: RIND's and QFS's words are decoded text; tokens: the authors' words, raw token strings
    # (convert_ids_to_tokens, grouped at the word marker, the newline token and after "</s>"; "Ċ1." for a newline
    # before "1."), read as their modifier reads them (sentences found among the words by a substring test, real
    # words as substrings of the raw strings, punctuation words may fire) and, with attention_pass authors, their
    # keep_real_words (the triggering sentence's raw words joined and encoded again; the query is made of raw words).
    # inference/dynamic_rag/token_words.py. None: the profile's (paper: pieces, reference: tokens)
    word_text: Literal["pieces", "tokens"] | None = None
    iterations: int = 2  # Iter-RetGen's T
    # search-r1: each passage inside <information> cut to this many words (as the GRPO search task's
    # max_passage_words and the warm start cut them); None: whole passages
    search_max_passage_words: int | None = 60
    # greedy; or checkpoint: sample as the model's generation_config.json says (the authors' generate calls never
    # pass do_sample=False: Llama-2 chat samples at T 0.6, top-p 0.9), seeded; entropies then of the processed scores
    sampling: Literal["greedy", "checkpoint"] = "greedy"
    sampling_seed: int = 0
    # where RIND's and QFS's attention come from: in_flight (rows captured during generation, over prompt + text) or
    # authors (DRAGIN's extra passes: RIND over the round's generated text alone, QFS over question + text + the
    # triggering sentence; inference/dynamic_rag/authors_pass.py)
    attention_pass: Literal["in_flight", "authors"] = "in_flight"
    # which of the authors' model configs gives the reference profile's θ, top-n, length and demo count
    # (inference/dynamic_rag/dragin_settings.py). None: read from the model's name (13b, vicuna; else Llama2-7b-chat)
    reference_config: Literal["Llama2-7b-chat", "Llama2-13b-chat", "Vicuna-13b-v1.5"] | None = None


class MethodLogic:
    """Validation, profile filling and what the engine asks of a method (MethodConfig's behaviour)."""

    def __post_init__(self):
        if self.method not in PRESETS:
            raise ValueError(f"unknown method '{self.method}' (known: {', '.join(PRESETS)})")
        preset = PRESETS[self.method]
        self.trigger = self.trigger or preset.trigger
        self.query = self.query or preset.query
        if self.trigger is None or self.query is None:
            raise ValueError("method 'custom' needs both 'trigger' and 'query'")
        trigger, query = TRIGGERS.get(self.trigger), QUERIES.get(self.query)
        if self.dragin_profile not in PROFILES:
            raise ValueError(f"dragin_profile must be one of {', '.join(PROFILES)}, got '{self.dragin_profile}'")
        for name, value in PROFILES[self.dragin_profile].items():
            if getattr(self, name, None) is None:
                if name in NOT_DRAGIN and self.trigger != "rind" \
                        and not (name == "round_budget" and self.trigger in PER_ROUND_LOOPS):
                    value = NOT_DRAGIN[name]
                if name == "docs_scope" and self.trigger in OWN_DOCS_SCOPE:
                    value = OWN_DOCS_SCOPE[self.trigger]
                setattr(self, name, value)
        if (self.top_k is not None and self.top_k <= 0) or (self.max_rounds is not None and self.max_rounds < 0):
            raise ValueError("top_k must be positive; max_rounds non-negative")
        if self.search_max_passage_words is not None and self.search_max_passage_words < 1:
            raise ValueError(f"search_max_passage_words must be >= 1 or null, got {self.search_max_passage_words}")
        trigger.validate(self)
        query.validate(self)

    def __getattr__(self, name: str) -> Any:
        # Only for names that are not fields: the knobs of a plug-in registered after MethodConfig was made (one
        # defined in a test module or a notebook) read as their defaults.
        if not name.startswith("__"):
            for registry in (TRIGGERS, QUERIES):
                for _, plugin in registry.items():
                    if plugin.Knobs is not None:
                        for f in dataclasses.fields(plugin.Knobs):
                            if f.name == name:
                                return f.default
        raise AttributeError(f"{type(self).__name__} has no setting '{name}'")

    @property
    def retrieves_first(self) -> bool:
        """SR-RAG and FLARE retrieve with the question before generating; FL-RAG and FS-RAG when
        ``fixed_question_first`` (the reference code)."""
        return TRIGGERS.get(self.trigger).retrieves_first(self)

    def retrieval_cap(self, max_new_tokens: int) -> int:
        """Retrievals per question at most. The reference profile has no cap of its own: every round of the authors'
        loops adds at least one token to the kept text or ends the loop, and the kept text past ``max_new_tokens``
        ends it, so it never runs more than ``max_new_tokens + 1`` rounds. (A cap of 20 stopped the engine's FS-RAG
        where theirs ran 34 rounds, on a HotpotQA question.)"""
        return self.max_rounds if self.max_rounds is not None else max_new_tokens + 1

    @property
    def round_tokens(self) -> int | None:
        """What one round writes under ``round_budget: per_round`` when the trigger fixes it (FL-RAG's window)."""
        return TRIGGERS.get(self.trigger).round_tokens(self)

    @property
    def docs_for_next_sentence_only(self) -> bool:
        """After a retrieval a trigger fired, do the documents serve one sentence (reference) or one round (TokenRAG)
        only?"""
        return self.docs_scope in ("next_sentence", "next_round") and TRIGGERS.get(self.trigger).judges_content

    @property
    def retrieves(self) -> bool:
        """Can this method retrieve at all (else it needs no retriever)?"""
        return TRIGGERS.get(self.trigger).retrieves

    @property
    def runner(self) -> str:
        return PRESETS[self.method].runner

    def needs(self, head_reduce: str) -> frozenset[str]:
        """What the decoder must capture for this method's trigger and query former."""
        return TRIGGERS.get(self.trigger).needs(self, head_reduce) | QUERIES.get(self.query).needs(self, head_reduce)

    def resolved(self, *dataset_hints: str | None, model: str | None = None):
        """This config with what depends on the run filled: ``top_k`` (the method's own when unset), the query
        former's own, and the profile's row for the model and dataset (inference/dynamic_rag/dragin_settings.py): θ and
        ``qfs_top_n`` (paper 0.8 and 25; reference the authors' config) and, under reference, ``reference_config``."""
        filled: dict[str, Any] = {} if self.top_k is not None else {"top_k": PRESETS[self.method].top_k}
        config = self.reference_config
        if self.dragin_profile == "reference" and config is None:
            config = filled["reference_config"] = reference_config_for(model)
        row = row_for(self.dragin_profile, config, *dataset_hints)
        columns = {"theta": "theta", "qfs_top_n": "qfs_top_n", "token_rag_threshold": "token_threshold"}
        for name, column in columns.items():
            if getattr(self, name) is None:
                filled[name] = getattr(row, column)
        filled.update(QUERIES.get(self.query).resolve(self, dataset_hints))
        return replace(self, **filled) if filled else self


def _knob_fields() -> list[tuple[str, Any, Any]]:
    """(name, type, field) of every plug-in's Knobs, in registry order; a name owned twice must agree."""
    out: dict[str, tuple[str, Any, Any]] = {}
    owners: dict[str, str] = {}
    for kind, registry in (("trigger", TRIGGERS), ("query", QUERIES)):
        for name, plugin in registry.items():
            knobs = plugin.Knobs
            if knobs is None:
                continue
            hints, helps = typing.get_type_hints(knobs), field_comments(knobs)
            for f in dataclasses.fields(knobs):
                if f.name in out:
                    raise TypeError(f"knob '{f.name}' of {kind} '{name}' is already owned by {owners[f.name]}")
                meta = dict(f.metadata) or ({"help": helps[f.name]} if f.name in helps else {})
                out[f.name] = (f.name, hints[f.name], field(default=f.default, metadata=meta))
                owners[f.name] = f"{kind} '{name}'"
    return list(out.values())


def _method_config() -> type:
    hints, helps = typing.get_type_hints(SharedSettings), field_comments(SharedSettings)
    choices = {"method": Literal[tuple(PRESETS)], "trigger": Literal[tuple(TRIGGERS.names())] | None,  # type: ignore
               "query": Literal[tuple(QUERIES.names())] | None}  # type: ignore[valid-type]
    shared = [(f.name, choices.get(f.name, hints[f.name]),
               field(default=f.default, metadata={"help": helps[f.name]} if f.name in helps else {}))
              for f in dataclasses.fields(SharedSettings)]
    cls = dataclasses.make_dataclass("MethodConfig", shared + _knob_fields(), bases=(MethodLogic,))
    cls.__module__ = __name__  # for pickling (data-parallel evaluation) and repr
    cls.__doc__ = "All knobs of a dynamic-RAG method. Defaults follow the DRAGIN paper and its public configuration."
    return cls


MethodConfig = _method_config()
KNOB_OWNERS: dict[str, tuple[str, str]] = {  # knob -> ("trigger" | "query", plug-in name)
    f.name: (kind, name) for kind, reg in (("trigger", TRIGGERS), ("query", QUERIES)) for name, plugin in reg.items()
    if plugin.Knobs is not None for f in dataclasses.fields(plugin.Knobs)}
