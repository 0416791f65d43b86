"""The multi-turn search protocol (Search-R1): reading turns, the loop's retrievals and its mask over the
environment's ids, the decoder's stops, and the evaluation method's records."""

from __future__ import annotations

import pytest
import torch
from scripted_lm import scripted_llama

from adaptive_rag.lm.sampling import Sampler
from adaptive_rag.lm.tokenization import continuation_ids
from adaptive_rag.plumbing.records import QAExample
from inference.search_agent import loop as loop_module
from inference.search_agent.decoding import Decoded, decode_until
from inference.search_agent.loop import SearchSettings, run_search
from inference.search_agent.method import SearchAgent
from inference.search_agent.protocol import (
    check_format,
    final_answer,
    information_block,
    search_prompt,
    turn_query,
)


def test_turn_query_is_the_text_the_policy_wrote():
    assert turn_query("I lack it. <search>  Osk   founder </search>") == "Osk founder"
    assert turn_query("<search>a</search> then <search>b c</search>\n") == "b c"  # the last block
    assert turn_query("<search>   </search>") is None  # empty: nothing to search
    assert turn_query("<search>a</search> and more") is None  # the turn did not end by closing it
    assert final_answer("<answer>x</answer> <answer> Lima  Peru </answer>") == "Lima Peru"
    assert final_answer("no tags") is None


@pytest.mark.parametrize("turns,ended,ok,problem", [
    (["<search>q</search>", "<answer>Lima</answer>"], "eos", True, ""),
    (["<answer>Lima</answer>"], "stop", True, ""),
    (["<answer>Lima</answer>"], "length", False, "ran out of tokens"),
    (["<search></search>", "<answer>Lima</answer>"], "eos", False, "a search turn"),
    (["<search>q</search>"], "stop", False, "no single non-empty answer"),
    (["<answer>Lima</answer> because"], "eos", False, "text after the answer"),
    (["<answer></answer>"], "eos", False, "no single non-empty answer"),
])
def test_format_check(turns, ended, ok, problem):
    got = check_format(turns, ended)
    assert got.ok is ok and problem in got.problem


def test_information_block_numbers_the_passages():
    assert information_block(["a  b", "c"]) == "\n\n<information>Doc 1: a b\nDoc 2: c</information>\n\n"
    assert "Question: Who?" in search_prompt(" Who? ") and "<search> query </search>" in search_prompt("x")


def eos_after(model, tokenizer, script: str):
    """The scripted model, made to write EOS after the script's last token instead of starting it again."""
    ids = continuation_ids(tokenizer, script)
    with torch.no_grad():
        model.lm_head.weight[ids[0], len(ids) - 1] = 0.0
        model.lm_head.weight[tokenizer.eos_token_id, len(ids) - 1] = 2.0
    return model


def test_decode_until_stops_on_text_and_keeps_eos(smol_tokenizer):
    script = " Red fox runs far. Blue cat sleeps now!"
    model = scripted_llama(smol_tokenizer, script)
    prompt = continuation_ids(smol_tokenizer, script)[:1]  # " Red": the model goes on with the script
    (out,) = decode_until(model, smol_tokenizer, [prompt], max_new_tokens=20, stop_texts=("far.",))
    assert smol_tokenizer.decode(out.ids) == " fox runs far." and out.reason == "stop"
    assert out.stop_text == "far." and len(out.logprobs) == len(out.ids)
    eos_after(model, smol_tokenizer, script)
    (out,) = decode_until(model, smol_tokenizer, [prompt], max_new_tokens=20)
    assert out.reason == "eos" and out.ids[-1] == smol_tokenizer.eos_token_id  # EOS is part of the completion
    assert smol_tokenizer.decode(out.ids[:-1]) == " fox runs far. Blue cat sleeps now!"
    (out,) = decode_until(model, smol_tokenizer, [prompt], max_new_tokens=3)
    assert out.reason == "length" and len(out.ids) == 3
    # sampled: the log-probabilities are of the tempered distribution the token was drawn from (all <= 0)
    (out,) = decode_until(model, smol_tokenizer, [prompt], max_new_tokens=4, sampler=Sampler(temperature=2.0))
    assert len(out.logprobs) == len(out.ids) == 4 and all(lp <= 0 for lp in out.logprobs)
    assert model.training is False


class TurnScript:
    """Stands in for the decoder: each call returns the next turn's text for every row (as ids, EOS on answers)."""

    def __init__(self, tokenizer, turns: list[str]):
        self.tokenizer, self.turns, self.calls = tokenizer, list(turns), []

    def __call__(self, model, tokenizer, contexts, **kwargs):
        self.calls.append([list(c) for c in contexts])
        text = self.turns.pop(0)
        ids = continuation_ids(tokenizer, text)
        answer = "</answer>" in text
        ids = ids + [tokenizer.eos_token_id] if answer else ids
        return [Decoded(list(ids), [-0.5] * len(ids), "eos" if answer else "stop",
                        None if answer else "</search>") for _ in contexts]


def test_the_loop_searches_the_query_written_and_masks_the_information(monkeypatch, smol_tokenizer, fake_retriever):
    script = TurnScript(smol_tokenizer, [" <search> Osk founder </search>", " <answer> Kelmora </answer>"])
    monkeypatch.setattr(loop_module, "decode_until", script)
    settings = SearchSettings(max_searches=2, top_k=2, chat=False)
    (t,) = run_search(None, smol_tokenizer, fake_retriever, ["Who founded Osk?"], settings)
    assert fake_retriever.queries == ["Osk founder"]  # exactly what the policy wrote
    assert t.searches == [("Osk founder", ["doc-1-0", "doc-1-1"])]
    assert t.answer == "Kelmora" and t.format.ok and len(t.turns) == 2
    info = continuation_ids(smol_tokenizer, information_block(["Doc 0 About Osk founder.", "Doc 1 About Osk founder."]))
    first = continuation_ids(smol_tokenizer, " <search> Osk founder </search>")
    # the loss mask: 1 on the policy's ids, 0 on exactly the <information> block's ids, in order
    assert t.env_mask == [1] * len(first) + [0] * len(info) + [1] * (len(t.completion_ids) - len(first) - len(info))
    assert t.completion_ids[len(first):len(first) + len(info)] == info
    assert t.logprobs[len(first):len(first) + len(info)] == [0.0] * len(info)
    # the second turn continued the ids the first left, information included (never re-tokenized text)
    assert script.calls[1][0] == t.prompt_ids + first + info
    assert t.generated_tokens == sum(t.env_mask)


def test_a_search_past_the_budget_is_not_run(monkeypatch, smol_tokenizer, fake_retriever):
    monkeypatch.setattr(loop_module, "decode_until", TurnScript(smol_tokenizer, [" <search> a </search>"] * 2))
    (t,) = run_search(None, smol_tokenizer, fake_retriever, ["Q?"], SearchSettings(max_searches=1, chat=False))
    assert fake_retriever.queries == ["a"] and len(t.turns) == 2
    assert t.answer is None and not t.format.ok


def test_the_method_records_each_search(monkeypatch, smol_tokenizer, fake_retriever):
    monkeypatch.setattr(loop_module, "decode_until",
                        TurnScript(smol_tokenizer, [" <search> fox </search>", " <answer> Red </answer>"]))
    agent = SearchAgent(None, smol_tokenizer, fake_retriever, SearchSettings(top_k=1, chat=False))
    (rec,) = agent.run([QAExample("q1", "Which fox?", ["red"])])
    assert rec.output == "Red" and rec.rounds == 2
    assert [(r.round, r.query, r.doc_ids) for r in rec.retrievals] == [(1, "fox", ["doc-1-0"])]
    assert rec.to_dict()["answer"] == "Red"


def test_settings_refuse_bad_values():
    with pytest.raises(ValueError, match="max_searches must be >= 0"):
        SearchSettings(max_searches=-1)


def test_an_opened_row_starts_with_search_and_writes_its_own_query(monkeypatch, smol_tokenizer, fake_retriever):
    """Training's exploration: the first turn of an opened row begins with <search> written for the policy (trained,
    log-probabilities unknown); the policy's own text closes the query, which is what is searched."""
    import math

    script = TurnScript(smol_tokenizer, [" Osk </search>", " <answer> Kelmora </answer>"])
    monkeypatch.setattr(loop_module, "decode_until", script)
    trajs = run_search(None, smol_tokenizer, fake_retriever, ["Who?", "Who?"], SearchSettings(chat=False), opened={0})
    opening = continuation_ids(smol_tokenizer, "<search>")
    assert script.calls[0][0][-len(opening):] == opening and script.calls[0][1] == trajs[1].prompt_ids
    t = trajs[0]
    assert t.completion_ids[:len(opening)] == opening and t.env_mask[:len(opening)] == [1] * len(opening)
    assert all(math.isnan(x) for x in t.logprobs[:len(opening)])
    assert fake_retriever.queries == ["Osk"] and t.turns[0] == "<search> Osk </search>"
    assert trajs[1].searches == [] and not trajs[1].format.ok  # " Osk </search>" alone opens no search


def test_the_evaluate_command_runs_search_r1_as_a_method(monkeypatch, smol_tokenizer, fake_retriever):
    """``--method search-r1`` reaches the search agent (not the engine's SR-RAG, whose trigger it names)."""
    from inference.commands.evaluate import method_runner
    from inference.dynamic_rag.engine import EngineConfig
    from inference.dynamic_rag.methods import MethodConfig
    from inference.dynamic_rag.prompts import PromptConfig

    monkeypatch.setattr(loop_module, "decode_until",
                        TurnScript(smol_tokenizer, [" <search> fox </search>", " <answer> Red </answer>"]))
    run = method_runner(None, smol_tokenizer, fake_retriever, MethodConfig(method="search-r1", top_k=2),
                        PromptConfig(), EngineConfig(max_new_tokens=16, batch_size=2))
    (rec,) = run([QAExample("q1", "Which fox?", ["red"])])
    assert rec.output == "Red" and fake_retriever.queries == ["fox"]
    assert [r.doc_ids for r in rec.retrievals] == [["doc-1-0", "doc-1-1"]]


def test_search_r1_cuts_each_passage_to_search_max_passage_words(monkeypatch, smol_tokenizer, fake_retriever):
    """``--search_max_passage_words`` reaches the <information> block (the GRPO recipe and the warm start cut at 40)."""
    from inference.commands.evaluate import method_runner
    from inference.dynamic_rag.engine import EngineConfig
    from inference.dynamic_rag.methods import MethodConfig
    from inference.dynamic_rag.prompts import PromptConfig

    script = TurnScript(smol_tokenizer, [" <search> fox </search>", " <answer> Red </answer>"])
    monkeypatch.setattr(loop_module, "decode_until", script)
    run = method_runner(None, smol_tokenizer, fake_retriever,
                        MethodConfig(method="search-r1", top_k=1, search_max_passage_words=2),
                        PromptConfig(), EngineConfig(max_new_tokens=16, batch_size=2))
    run([QAExample("q1", "Which fox?", ["red"])])
    first = continuation_ids(smol_tokenizer, " <search> fox </search>")
    context = script.calls[1][0]
    shown = smol_tokenizer.decode(context[-(len(context) - len(script.calls[0][0]) - len(first)):])
    assert "Doc 1: Doc 0</information>" in shown  # "Doc 0 About fox." cut to its first two words
    with pytest.raises(ValueError, match="search_max_passage_words"):
        MethodConfig(method="search-r1", search_max_passage_words=0)
