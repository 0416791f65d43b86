"""Triggers and query formers on hand-made rounds, and every method end to end on a tiny model."""

from __future__ import annotations

import pytest
import torch

from adaptive_rag.plumbing.records import Passage, QAExample
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig, QuestionState, qfs_eligible
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig
from inference.dynamic_rag.queries import form_query
from inference.dynamic_rag.round_view import Event, RoundView
from inference.dynamic_rag.triggers import check_trigger


def make_view(pieces, probs=None, entropies=None, rows=None, prompt=(" Who", " is", " Osk", "?")):
    n = len(pieces)
    return RoundView("Who is Osk?", list(pieces), list(probs or [0.9] * n), list(entropies or [1.0] * n),
                     rows or [], list(prompt), [True] * len(prompt))


PIECES = [" Osk", " was", " born", " in", " Quarvik", ".", " She", " founded", " Kelmora", "."]


def test_method_defaults_and_validation():
    assert (MethodConfig(method="dragin").trigger, MethodConfig(method="dragin").query) == ("rind", "qfs")
    # FLARE's own look_ahead_filter_prob and look_ahead_mask_prob (jzbjyb/FLARE)
    assert (MethodConfig(method="flare").flare_threshold, MethodConfig(method="flare").flare_mask_prob) == (0.8, 0.4)
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
    assert form_query(view, event, cfg) == "She founded ."  # FLARE blanks "Kelmora" with a space


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
    entropies[8] = entropies[9] = 2.0  # "Kelmora." (one word: the full stop stays in it) is uncertain
    rows = rows_for(PIECES, 4, hot_source=9, hot_target=8)  # the final "." attends to "Kelmora"
    view = make_view(PIECES, entropies=entropies, rows=rows)
    cfg = MethodConfig(method="dragin", theta=1.0)
    event = check_trigger(view, cfg, sentence_end=True, final=False)
    assert event.token == 8 and event.score == pytest.approx(2.0 * 0.9, abs=0.02)
    assert event.keep == 8  # the paper profile cuts before the triggering word
    cfg_sent = MethodConfig(method="dragin", theta=1.0, truncation="sentence")  # the reference's cut
    assert check_trigger(view, cfg_sent, sentence_end=True, final=False).keep == 6
    assert MethodConfig(method="dragin", dragin_profile="reference").truncation == "sentence"
    # FLARE regenerates the tentative sentence and keeps its documents, whatever the profile
    flare = MethodConfig(method="flare", dragin_profile="reference")
    assert (flare.truncation, flare.docs_scope) == ("sentence", "until_replaced")
    assert check_trigger(view, MethodConfig(method="dragin", theta=5.0), sentence_end=True, final=False) is None


def test_qfs_query_uses_triggering_row():
    rows = rows_for(PIECES, 4, hot_source=8, hot_target=4)  # "Kelmora" attends to "Quarvik"
    rows[8][2] = 0.5  # ... and to "Osk" in the prompt
    view = make_view(PIECES, rows=rows)
    from inference.dynamic_rag.round_view import Event

    q = form_query(view, Event(token=8, score=1.0, keep=6), MethodConfig(method="dragin", qfs_top_n=2))
    assert q == "Osk? Quarvik."  # the words as the reference forms them, punctuation attached


def world_examples(n=3):
    return [QAExample(f"q{i}", f"Where was person {i} born?", ["Quarvik"],
                      [Passage(f"p{i}", "Person", "Born in Quarvik.")]) for i in range(n)]


@pytest.mark.parametrize("method", ["wo-rag", "sr-rag", "fl-rag", "fs-rag", "flare", "dragin"])
def test_every_method_runs_on_the_engine(method, tiny_model, smol_tokenizer, fake_retriever):
    cfg = MethodConfig(method=method, fixed_length=4, theta=0.0, flare_threshold=1.0, max_rounds=2)
    engine = DynamicRAGEngine(tiny_model, smol_tokenizer, fake_retriever, PromptBuilder(smol_tokenizer),
                              cfg, EngineConfig(batch_size=2, max_new_tokens=12))
    records = [r.to_dict() for r in engine.run(world_examples(), show_progress=False)]
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


def test_progress_guarantee_keeps_the_first_sentence_after_a_retrieval():
    entropies = [2.0] * 10  # every word is uncertain: RIND fires wherever it may look
    rows = rows_for(PIECES, 4, hot_source=9, hot_target=8)
    cfg = MethodConfig(method="dragin", theta=0.01, truncation="sentence")
    first = make_view(PIECES[:6], entropies=entropies[:6], rows=rows[:6])
    assert check_trigger(first, cfg, sentence_end=True, final=False).token == 0  # round 1: fires at once
    first.after_retrieval = True  # the same text right after a retrieval: its first sentence is kept unchecked
    assert check_trigger(first, cfg, sentence_end=True, final=False) is None
    both = make_view(PIECES, entropies=entropies, rows=rows)
    both.after_retrieval, both.checked = True, 6
    event = check_trigger(both, cfg, sentence_end=True, final=False)
    assert event.token == 7 and event.keep == 6  # "founded" fires; the kept first sentence stays
    flare = MethodConfig(method="flare", flare_threshold=0.95)
    first.checked = 0
    assert check_trigger(first, flare, sentence_end=True, final=True) is None
    assert check_trigger(first, MethodConfig(method="flare", flare_threshold=0.95, keep_sentence_after_retrieval=False),
                         sentence_end=True, final=True).token == 0


def test_reference_threshold_fires_on_a_stopword_and_qfs_reads_content_hits():
    # uniform rows: a_max(i) = 1 / (6 + i). Scores H·a: Osk .1/6, was .1/7, born .1/8, in 3/9 = .33 (a stopword),
    # "Quarvik." (one word: the full stop stays in it) 1/10 + 0 = .1; θ = .09 lets "in" and "Quarvik." pass
    entropies = [0.1, 0.1, 0.1, 3.0, 1.0, 1.0]
    rows = [torch.full((4 + j + 1,), 1.0 / (4 + j + 1)) for j in range(6)]
    view = make_view(PIECES[:6], entropies=entropies, rows=rows)
    paper = MethodConfig(method="dragin", theta=0.09)
    reference = MethodConfig(method="dragin", theta=0.09, content_filter="after_threshold")
    event = check_trigger(view, reference, sentence_end=True, final=False)
    assert event.token == 3 and event.hits == [[4, 5]] and not event.stopword_hits
    assert check_trigger(view, paper, sentence_end=True, final=False).token == 4  # the stopword never counts
    only_stop = make_view(PIECES[:6], entropies=[0.1, 0.1, 0.1, 3.0, 0.1, 0.1], rows=rows)
    event = check_trigger(only_stop, reference, sentence_end=True, final=False)
    assert event.token == 3 and event.hits == [[3]] and event.stopword_hits  # no content hit: QFS reads "in"
    assert check_trigger(only_stop, paper, sentence_end=True, final=False) is None


def test_round_scope_judges_the_round_once_it_ends():
    entropies = [2.0] * 10
    rows = rows_for(PIECES, 4, hot_source=9, hot_target=8)
    view = make_view(PIECES, entropies=entropies, rows=rows)
    cfg = MethodConfig(method="dragin", theta=0.01, rind_scope="round")
    assert check_trigger(view, cfg, sentence_end=True, final=False) is None
    view.checked = 6  # sentence ends already passed do not hide them from the round's judgement
    assert check_trigger(view, cfg, sentence_end=True, final=True).token == 0


def test_reference_qfs_reads_the_rows_before_the_hit_words():
    prompt = (" Who", " is", " Osk", "?")
    rows = [torch.full((4 + j + 1,), 1.0 / (4 + j + 1)) for j in range(6)]
    rows[3] = torch.tensor([0.0, 0.0, 0.1, 0.0, 0.1, 0.1, 0.6, 0.1])  # "in" chose "Quarvik": looked at "born"
    view = make_view(PIECES[:6], rows=rows, prompt=prompt)
    view.prompt_row = torch.tensor([0.0, 0.0, 0.9, 0.1])  # the last prompt position chose "Osk": looked at "Osk"
    cfg = MethodConfig(method="dragin", qfs_attention="reference", qfs_top_n=1)
    assert form_query(view, Event(token=4, score=1.0, keep=0, hits=[[4]]), cfg) == "born"
    assert form_query(view, Event(token=0, score=1.0, keep=0, hits=[[0]]), cfg) == "Osk?"  # the prompt's "Osk?"
    # the paper's QFS reads the triggering token's own row instead
    assert form_query(view, Event(token=4, score=1.0, keep=0), MethodConfig(method="dragin", qfs_top_n=1)) != "born"


def test_profiles_fill_the_switches_left_unset():
    paper = MethodConfig(method="dragin")
    assert (paper.rind_attention, paper.rind_normalisation, paper.content_filter, paper.rind_scope,
            paper.docs_scope, paper.qfs_attention, paper.max_rounds) == (
        "paper", "paper", "score", "sentence", "until_replaced", "paper", 5)
    ref = MethodConfig(method="dragin", dragin_profile="reference", rind_scope="sentence")
    assert (ref.rind_attention, ref.rind_normalisation, ref.content_filter, ref.docs_scope, ref.qfs_attention) == (
        "reference", "reference", "after_threshold", "next_sentence", "reference")
    assert ref.rind_scope == "sentence"  # a switch set explicitly wins over the profile
    assert paper.resolved("x").qfs_top_n == 25
    assert ref.resolved("/data/hotpotqa/dev.jsonl").qfs_top_n == 35
    assert ref.resolved(None, "2wikimultihopqa").qfs_top_n == 25
    assert ref.resolved("world-two-hop", "world").qfs_top_n == 35
    assert MethodConfig(method="dragin", dragin_profile="reference", qfs_top_n=7).resolved("hotpotqa").qfs_top_n == 7
    assert MethodConfig(method="fs-rag", dragin_profile="reference").retrieves_first
    assert not MethodConfig(method="fs-rag").retrieves_first and not ref.retrieves_first
    with pytest.raises(ValueError, match="dragin_profile must be one of paper, reference"):
        MethodConfig(method="dragin", dragin_profile="authors")


def test_qfs_eligibility_overlaps_the_question():
    # "Question: Scott Derrickson?" with the question at 10..26: " Scott" spans 9..15 (its space lies outside)
    offsets = [(0, 8), (8, 9), (9, 15), (15, 26), (26, 27), (27, 35), (35, 40), (0, 0)]
    assert qfs_eligible(offsets, (10, 26), prior_start=35) == [False, False, True, True, False, False, True, False]


def test_qfs_can_use_the_questions_first_word(tiny_model, smol_tokenizer, fake_retriever):
    engine = DynamicRAGEngine(tiny_model, smol_tokenizer, fake_retriever,
                              PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", num_demos=1)),
                              MethodConfig(method="dragin", qfs_top_n=10))
    state = QuestionState(QAExample("q", "Scott Derrickson directed which horror film?", ["Sinister"]))
    engine._start_round(state)
    view = state.view
    view.pieces, view.rows = [" The"], [torch.ones(len(view.prompt_pieces) + 1)]  # attends to everything alike
    assert form_query(view, Event(token=0, score=1.0, keep=0), engine.method) == \
        "Scott Derrickson directed horror film?"


@pytest.mark.parametrize("style", ["paper", "chat"])
def test_engine_prompt_has_bos_exactly_once(style, tiny_model, smol_tokenizer, fake_retriever):
    import copy

    bos_tok = copy.deepcopy(smol_tokenizer)
    bos_tok.add_bos_token = True  # as Llama-2's tokenizer does (SmolLM2's chat template writes its own)
    for tok, bos in ((bos_tok, True), (smol_tokenizer, False)):
        engine = DynamicRAGEngine(tiny_model, tok, fake_retriever,
                                  PromptBuilder(tok, PromptConfig(prompt_style=style, num_demos=1)),
                                  MethodConfig(method="dragin"))
        state = QuestionState(QAExample("q", "Who founded Kelmora?", ["Osk"]))
        seq = engine._start_round(state)
        ids = seq.prompt_ids
        assert (ids[0] == tok.bos_token_id) == (bos or style == "chat") and ids[1] != tok.bos_token_id
        if style == "paper":  # (SmolLM2's BOS, <|im_start|>, also opens every chat turn)
            assert ids.count(tok.bos_token_id) == int(bos)
        assert len(state.view.eligible) == len(ids) == len(state.view.prompt_pieces)
