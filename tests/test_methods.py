"""Triggers and query formers on hand-made rounds, and every method end to end on a tiny model."""

from __future__ import annotations

import pytest
import torch

from data_builders.schema import Passage, QAExample
from inference.engine import DynamicRAGEngine, EngineConfig
from inference.methods import MethodConfig, RoundView, check_trigger, form_query
from inference.prompts import PromptBuilder, PromptConfig


def make_view(pieces, probs=None, entropies=None, rows=None, prompt=(" Who", " is", " Osk", "?")):
    n = len(pieces)
    return RoundView("Who is Osk?", list(pieces), list(probs or [0.9] * n), list(entropies or [1.0] * n),
                     rows or [], list(prompt), [True] * len(prompt))


PIECES = [" Osk", " was", " born", " in", " Quarvik", ".", " She", " founded", " Kelmora", "."]


def test_method_defaults_and_validation():
    assert (MethodConfig(method="dragin").trigger, MethodConfig(method="dragin").query) == ("rind", "qfs")
    assert MethodConfig(method="flare").retrieves_first and MethodConfig(method="sr-rag").retrieves_first
    assert MethodConfig(method="custom", trigger="rind", query="last_sentence").query == "last_sentence"
    with pytest.raises(ValueError, match="unknown method"):
        MethodConfig(method="self-rag")
    with pytest.raises(ValueError, match="needs both"):
        MethodConfig(method="custom", trigger="rind")


def test_fixed_sentence_trigger_and_last_sentence_query():
    view = make_view(PIECES[:6])
    cfg = MethodConfig(method="fs-rag")
    assert check_trigger(view, cfg, sentence_end=False, final=False) is None
    event = check_trigger(view, cfg, sentence_end=True, final=False)
    assert event.keep == 6
    assert form_query(view, event, cfg) == "Osk was born in Quarvik."


def test_fixed_length_trigger_and_window_query():
    cfg = MethodConfig(method="fl-rag", fixed_length=4)
    assert check_trigger(make_view(PIECES[:3]), cfg, sentence_end=False, final=False) is None
    view = make_view(PIECES[:5])
    event = check_trigger(view, cfg, sentence_end=False, final=False)
    assert event.keep == 5 and form_query(view, event, cfg) == "was born in Quarvik"


def test_flare_trigger_truncates_sentence_and_masks_uncertain_tokens():
    probs = [0.9] * 6 + [0.9, 0.9, 0.1, 0.9]
    view = make_view(PIECES, probs=probs)
    view.checked = 6  # first sentence already cleared
    cfg = MethodConfig(method="flare", flare_threshold=0.4, flare_mask_prob=0.4)
    event = check_trigger(view, cfg, sentence_end=True, final=False)
    assert event.token == 8 and event.keep == 6  # regenerate the uncertain sentence
    assert form_query(view, event, cfg) == "She founded."


def rows_for(pieces, prompt_len, hot_source: int, hot_target: int):
    """Uniform attention rows, except that generated token ``hot_source`` puts 0.9 on generated ``hot_target``."""
    rows = []
    for j in range(len(pieces)):
        row = torch.full((prompt_len + j + 1,), 0.1 / (prompt_len + j + 1))
        if j == hot_source:
            row[prompt_len + hot_target] = 0.9
        rows.append(row)
    return rows


def test_rind_trigger_and_truncation_modes():
    entropies = [0.1] * 10
    entropies[8] = 2.0  # "Kelmora" is uncertain
    rows = rows_for(PIECES, 4, hot_source=9, hot_target=8)  # the final "." attends to it
    view = make_view(PIECES, entropies=entropies, rows=rows)
    cfg = MethodConfig(method="dragin", theta=1.0)
    event = check_trigger(view, cfg, sentence_end=True, final=False)
    assert event.token == 8 and event.score == pytest.approx(2.0 * 0.9, abs=0.02)
    assert event.keep == 6  # cut at the start of the triggering sentence
    cfg_tok = MethodConfig(method="dragin", theta=1.0, truncation="token")
    assert check_trigger(view, cfg_tok, sentence_end=True, final=False).keep == 8
    assert check_trigger(view, MethodConfig(method="dragin", theta=5.0), sentence_end=True, final=False) is None


def test_qfs_query_uses_triggering_row():
    rows = rows_for(PIECES, 4, hot_source=8, hot_target=4)  # "Kelmora" attends to "Quarvik"
    rows[8][2] = 0.5  # ... and to "Osk" in the prompt
    view = make_view(PIECES, rows=rows)
    from inference.methods import Event

    q = form_query(view, Event(token=8, score=1.0, keep=6), MethodConfig(method="dragin", qfs_top_n=2))
    assert q == "Osk Quarvik"


def world_examples(n=3):
    return [QAExample(f"q{i}", f"Where was person {i} born?", ["Quarvik"],
                      [Passage(f"p{i}", "Person", "Born in Quarvik.")]) for i in range(n)]


@pytest.mark.parametrize("method", ["wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin"])
def test_every_method_runs_on_the_engine(method, tiny_model, smol_tokenizer, fake_retriever):
    cfg = MethodConfig(method=method, fixed_length=4, theta=0.0, flare_threshold=1.0, max_rounds=2)
    engine = DynamicRAGEngine(tiny_model, smol_tokenizer, fake_retriever, PromptBuilder(smol_tokenizer),
                              cfg, EngineConfig(batch_size=2, max_new_tokens=12))
    records = engine.run(world_examples(), show_progress=False)
    assert [r["id"] for r in records] == ["q0", "q1", "q2"]
    for r in records:
        assert isinstance(r["output"], str)
        assert len(r["retrievals"]) <= 2
        assert r["llm_forward_passes"] > 0 and r["generated_tokens"] > 0
        for ret in r["retrievals"]:
            assert len(ret["doc_ids"]) == 3 and ret["query"]
    calls = [len(r["retrievals"]) for r in records]
    if method == "wo-rag":
        assert calls == [0, 0, 0] and fake_retriever.queries == []
    if method == "sr-rag":
        assert calls == [1, 1, 1]
        assert fake_retriever.queries == [e.question for e in world_examples()]
    if method in ("fl-rag", "flare"):
        assert all(c >= 1 for c in calls)


def test_retrieving_method_needs_retriever(tiny_model, smol_tokenizer):
    with pytest.raises(ValueError, match="no retriever"):
        DynamicRAGEngine(tiny_model, smol_tokenizer, None, PromptBuilder(smol_tokenizer),
                         MethodConfig(method="dragin"))


def test_paper_prompt_has_demos_docs_and_question(smol_tokenizer):
    builder = PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", demos="hotpotqa", num_demos=2))
    p = builder.build("Who founded Kelmora?", [Passage("1", "Kelmora", "Founded by Osk.")], prior=" Osk")
    assert p.text.count("Question: ") == 3  # two demos and the question
    assert "Context:\n[1] Kelmora: Founded by Osk.\n" in p.text
    assert p.text.endswith("Question: Who founded Kelmora?\nAnswer: Osk")
    assert p.text[p.question_span[0]:p.question_span[1]] == "Who founded Kelmora?"
    with pytest.raises(ValueError, match="no few-shot template"):
        PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", demos="nope"))
