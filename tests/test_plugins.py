"""Triggers and query formers are plug-ins: registered by name, found by the engine through the registry.

The proof that adding one needs no edit elsewhere: a trigger and a query former defined in this test module run on
the engine, with their own knobs' defaults, and a method that asks for attention gets it captured."""

from __future__ import annotations

import dataclasses

import pytest
from scripted_lm import scripted_llama

from adaptive_rag.plumbing.records import Passage, QAExample
from inference.adapt_gate.gate_eval import INNER_NAMES
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import KNOB_OWNERS, PRESETS, MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder
from inference.dynamic_rag.queries import QUERIES, QueryFormer, register_query
from inference.dynamic_rag.round_view import Event
from inference.dynamic_rag.triggers import TRIGGERS, Trigger, register_trigger

SCRIPT = " Red fox runs far. Blue cat sleeps now! Green owl hoots loud?"


@pytest.fixture()
def every_fourth_token():
    """A per-token trigger that fires at generated token 4 of every round (so it is not a sentence end), once per
    round, and a query former that sends the round's text upper-cased; both removed again after the test."""
    seen_rows: list[int] = []

    @register_trigger("every_fourth_token")
    class EveryFourthToken(Trigger):
        per_token = True

        def needs(self, cfg, head_reduce):
            return frozenset({"attention"})

        def check(self, view, cfg, *, final):
            seen_rows.append(len(view.rows))
            n = len(view.pieces)
            return Event(n - 1, 1.0, n) if n == 4 and not final else None

    @register_query("shouted")
    class Shouted(QueryFormer):
        def form(self, view, event, cfg):
            return "".join(view.pieces[: event.token + 1]).upper()

    yield seen_rows
    TRIGGERS.unregister("every_fourth_token")
    QUERIES.unregister("shouted")


def test_a_trigger_defined_in_a_test_module_runs_on_the_engine(every_fourth_token, smol_tokenizer, fake_retriever):
    model = scripted_llama(smol_tokenizer, SCRIPT)
    cfg = MethodConfig(method="custom", trigger="every_fourth_token", query="shouted", max_rounds=2)
    engine = DynamicRAGEngine(model, smol_tokenizer, fake_retriever, PromptBuilder(smol_tokenizer), cfg,
                              EngineConfig(batch_size=2, max_new_tokens=16, stop_after_answer=False))
    ex = QAExample("q0", "Which letters?", ["alpha"], [Passage("p", "T", "t")])
    (record,) = engine.run([ex], show_progress=False)
    # fired at token 4 in rounds 1 and 2, then the cap of 2 retrievals lets round 3 run to the budget
    assert [r.round for r in record.retrievals] == [1, 2]
    # each round kept its 4 tokens before retrieving: the answer grew by 4 tokens per retrieval
    assert [r.position for r in record.retrievals] == [4, 8]
    assert all(r.query.isupper() for r in record.retrievals)
    # per token, not only at sentence ends: called with 1, 2, 3 and 4 tokens in the first round
    assert every_fourth_token[:4] == [1, 2, 3, 4]
    # it asked for attention and got a row per fed token
    assert engine.decoder.buffer is not None


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown trigger 'rnd' \(known: .*fixed_length.*rind"):
        MethodConfig(method="custom", trigger="rnd", query="qfs")
    with pytest.raises(ValueError, match=r"unknown query 'qfz' \(known: .*qfs"):
        MethodConfig(method="custom", trigger="rind", query="qfz")


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="already registered"):
        @register_trigger("rind")
        class Other(Trigger):
            pass


def test_presets_pair_registered_plugins():
    for name, preset in PRESETS.items():
        if preset.trigger is not None:
            assert preset.trigger in TRIGGERS.names() and preset.query in QUERIES.names(), name
    # the gate's inner methods come from the same registry: every method that retrieves, and its own prompt
    assert INNER_NAMES == ("single", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin", "custom", "token-rag",
                           "iter-retgen", "search-r1")


def test_each_plugin_owns_its_knobs_and_they_are_method_config_fields():
    fields = {f.name for f in dataclasses.fields(MethodConfig)}
    assert KNOB_OWNERS["theta"] == ("trigger", "rind") and KNOB_OWNERS["qfs_top_n"] == ("query", "qfs")
    assert KNOB_OWNERS["flare_threshold"] == ("trigger", "flare")
    assert KNOB_OWNERS["fixed_length"] == ("trigger", "fixed_length")
    assert set(KNOB_OWNERS) <= fields


@pytest.mark.parametrize("method,head_reduce,needs", [
    ("wo-rag", "mean", set()), ("fl-rag", "mean", set()), ("flare", "mean", set()),
    ("dragin", "mean", {"attention"}), ("dragin", "max", {"attention"}),
])
def test_the_engine_captures_what_the_plugins_need(method, head_reduce, needs):
    assert MethodConfig(method=method).needs(head_reduce) == needs


def test_reference_profile_needs_rows_per_head():
    assert "attention_per_head" in MethodConfig(method="dragin", dragin_profile="reference").needs("mean")
    # QFS alone needs heads kept only when rows would otherwise be reduced by max
    cfg = MethodConfig(method="custom", trigger="flare", query="qfs", qfs_attention="reference")
    assert cfg.needs("mean") == {"attention"} and "attention_per_head" in cfg.needs("max")


def test_method_config_help_names_each_knob():
    from adaptive_rag.plumbing.config import config_parser

    text = config_parser((MethodConfig,)).format_help()
    assert "--theta" in text and "RIND's θ" in text and "--flare_mask_prob" in text
    assert "--trigger {" in text and "every_fourth_token" not in text


def test_the_readme_trigger_example_runs(smol_tokenizer, fake_retriever):
    """README's "Adding a trigger" block, executed as written: it registers, its knob reads as its default, and the
    engine runs it (FLARE's masked query, as README's command line pairs them)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    block = re.search(r"### Adding a trigger.*?```python\n(.*?)```", readme, re.S).group(1)
    try:
        exec(compile(block, "README.md", "exec", dont_inherit=True), {"__name__": "readme_example"})
        cfg = MethodConfig(method="custom", trigger="low_margin", query="flare_masked", max_rounds=1)
        assert cfg.margin == 0.3 and cfg.docs_for_next_sentence_only is False
        model = scripted_llama(smol_tokenizer, SCRIPT, strength=0.5)  # unsure: every p well below 0.3
        engine = DynamicRAGEngine(model, smol_tokenizer, fake_retriever, PromptBuilder(smol_tokenizer), cfg,
                                  EngineConfig(batch_size=1, max_new_tokens=12, stop_after_answer=False))
        (record,) = engine.run([QAExample("q0", "Which animals?", ["fox"])], show_progress=False)
        assert len(record.retrievals) == 1 and record.retrievals[0].round == 1
    finally:
        TRIGGERS.unregister("low_margin")
