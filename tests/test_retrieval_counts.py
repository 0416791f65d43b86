"""Every method's retrievals, counted and placed by hand: how many per question, in which round, at which position
(tokens of the answer kept before it) and with which query.

The model is tests/scripted_lm.py's, made fully predictable: it writes SCRIPT over and over whatever the prompt
says (the prompt's last token, ":" or a newline, leads into the script), every attention row is uniform (queries
and keys are zero), and it writes every token surely (p ≈ 1, entropy ≈ 0) except "Rome" (p ≈ 3e-4, entropy ≈ ln V).
So the text is two sentences repeating, one token per word or mark:

    S1 = " Ada built Rome."          tokens 0-3 of each 9-token cycle ("Rome" is token 2)
    S2 = " Then she sailed north!"   tokens 4-8

and a sentence ends after 4, 9, 13, 18, 22, 27, ... tokens. Every expected list below follows from this; each test
names the plausible bugs it catches (each was checked by breaking the method in a scratch copy of the code).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import FakeRetriever
from scripted_lm import CountingPrompts, scripted_llama
from tokenizer_matrix import TOKENIZERS, shared_tokenizer

from adaptive_rag.lm.tokenization import continuation_ids, prompt_ids
from adaptive_rag.plumbing.records import QAExample
from inference.adapt_gate.gate_eval import GateMethodConfig, gate_runner
from inference.commands.evaluate import method_runner
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig

SCRIPT = " Ada built Rome. Then she sailed north!"
S1, S2 = "Ada built Rome.", "Then she sailed north!"
QUESTION = "Who built Rome?"
SURE, UNSURE = 4.0, 0.5  # LM-head strength of a sure and an unsure token
PAPER = PromptConfig(prompt_style="paper", num_demos=1)
FLARE_QUERY = "Ada built ."  # S1 with its one uncertain token ("Rome") blanked


def script_model(tokenizer, script: str = SCRIPT, unsure: tuple[str, ...] = ("Rome",)):
    """``scripted_llama`` with uniform attention, an entry from any prompt, and ``unsure`` words written unsurely."""
    model = scripted_llama(tokenizer, script, strength=SURE)
    ids = continuation_ids(tokenizer, script)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.zero_()
            layer.self_attn.k_proj.weight.zero_()
        # The paper prompt ends with "Answer:", chat and Alpaca prompts with a newline: both read as the script's
        # last token, so the script starts right after any prompt.
        for entry in (":", "\n"):
            [token] = continuation_ids(tokenizer, entry)
            model.model.embed_tokens.weight[token] = model.model.embed_tokens.weight[ids[-1]]
        for k, token in enumerate(ids):
            if tokenizer.decode([token]).strip() in unsure:  # the token before decides how surely this one comes
                model.lm_head.weight[token, (k - 1) % len(ids)] = UNSURE
    return model


def entropy_and_prob(model, strength: float) -> tuple[float, float]:
    """Entropy and greedy probability of a scripted step: the final RMSNorm turns the one-hot hidden state into
    1/sqrt(1/d + eps), so the successor's logit is z = strength times that and every other logit is 0."""
    z = strength / math.sqrt(1 / model.config.hidden_size + model.config.rms_norm_eps)
    total = math.exp(z) + model.config.vocab_size - 1
    p = math.exp(z) / total
    return math.log(total) - p * z, p


@pytest.fixture(scope="module", params=TOKENIZERS)
def tokenizer(request):
    """Every test here runs on each tokenizer family (tests/tokenizer_matrix.py): the counts are the same."""
    return shared_tokenizer(request.param)


@pytest.fixture(scope="module")
def model(tokenizer):
    return script_model(tokenizer)




def field(obj, name):
    """A record field, whether records are dicts or dataclasses."""
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


def retrievals(record, *names: str) -> list[tuple]:
    names = names or ("round", "position", "query")
    return [tuple(field(r, n) for n in names) for r in field(record, "retrievals")]


def run(tokenizer, model, method: MethodConfig, *, max_new_tokens: int, questions=(QUESTION,), batch_size: int = 2):
    retriever = FakeRetriever()
    prompts = CountingPrompts(tokenizer, PAPER)
    engine = DynamicRAGEngine(model, tokenizer, retriever, prompts, method,
                              EngineConfig(batch_size=batch_size, max_new_tokens=max_new_tokens))
    examples = [QAExample(f"q{i}", q, ["Ada"]) for i, q in enumerate(questions)]
    records = engine.run(examples, show_progress=False)
    return records, retriever.queries, prompts.doc_counts


def first_prompt_length(tokenizer) -> int:
    """Tokens of round 1's prompt (no documents, no answer yet)."""
    return len(prompt_ids(tokenizer, PromptBuilder(tokenizer, PAPER).build(QUESTION, []).text))


def qfs_words(cycles: int) -> str:
    """QFS's query when every attention row is uniform: all content words it may read (the question's, then the
    answer's before the triggering "Rome"), in text order; ``cycles`` whole cycles precede the triggering S1."""
    return "built Rome?" + " Ada built Rome. sailed north!" * cycles + " Ada built"  # words keep their punctuation


def test_wo_rag_never_retrieves_and_the_script_is_as_described(tokenizer, model):
    # One round without documents, no retrieval. Catches a "never" trigger that fires or a question-first call.
    [record], queries, docs = run(tokenizer, model, MethodConfig(method="wo-rag"), max_new_tokens=20)
    assert retrievals(record) == [] and queries == [] and docs == [0]
    assert field(record, "output") == f"{S1} {S2} {S1} {S2} Ada built"  # 4 + 5 + 4 + 5 + 2 = 20 tokens


def test_sr_rag_retrieves_once_with_the_question_before_generating(tokenizer, model):
    # Catches SR-RAG retrieving after generation starts (round 1 / a position > 0), again at a sentence end, with
    # another question's text in a batch, or forgetting the documents (docs 0).
    questions = (QUESTION, "Where did Ada sail?", "Who sailed north?")
    records, queries, docs = run(tokenizer, model, MethodConfig(method="sr-rag"), max_new_tokens=20,
                                 questions=questions)
    assert [retrievals(r) for r in records] == [[(0, 0, q)] for q in questions]
    assert queries == list(questions) and docs == [3, 3, 3]


def test_fl_rag_retrieves_every_n_tokens_with_the_last_n(tokenizer, model):
    # n = 4: after tokens 4, 8, ..., 24, each with the window just written. The round after 24 has 4 tokens of
    # budget left: its 4th token ends the answer, so nothing is retrieved at 28.
    # Catches a window of n ± 1 tokens (positions and queries shift), a retrieval once the budget is spent (a 7th
    # at 28), and a count that does not restart after each retrieval.
    method = MethodConfig(method="fl-rag", fixed_length=4, max_rounds=20)
    [record], queries, docs = run(tokenizer, model, method, max_new_tokens=28)
    windows = [S1, "Then she sailed north", "! Ada built Rome", ". Then she sailed", "north! Ada built",
               "Rome. Then she"]
    assert retrievals(record) == [(k, 4 * k, w) for k, w in enumerate(windows, 1)]
    assert queries == windows and docs == [0] + [3] * 6


@pytest.mark.parametrize("profile", ["paper", "reference"])
def test_fs_rag_retrieves_after_every_sentence_with_that_sentence(profile, tokenizer, model):
    # After 4, 9, 13, 18 and 22 tokens; the round after 22 writes S2 to the last token of the budget (27): the
    # answer is over, nothing is retrieved. The reference profile first asks the question (round 0).
    # Catches a trigger that fires mid-sentence or only at the first sentence, a retrieval after the final
    # sentence, and the reference's question-first call missing (or present in the paper profile).
    # answer_extraction project: no forced-answer round after the script (tests/test_dragin_eval.py has that)
    # the engine's text joins: the authors' (round_join authors) are counted in tests/test_authors_loop_text.py
    method = MethodConfig(method="fs-rag", max_rounds=20, dragin_profile=profile, answer_extraction="project",
                          round_join="tokens", special_text="drop")
    [record], queries, docs = run(tokenizer, model, method, max_new_tokens=27)
    first = [(0, 0, QUESTION)] if profile == "reference" else []
    expected = first + [(1, 4, S1), (2, 9, S2), (3, 13, S1), (4, 18, S2), (5, 22, S1)]
    assert retrievals(record) == expected and queries == [q for _, _, q in expected]
    assert docs == ([3] if profile == "reference" else [0]) + [3] * 5


def test_flare_retrieves_first_then_at_each_uncertain_sentence(tokenizer, model):
    # The question first; then round 1 meets "Rome" in its first sentence: retrieve, cut back to that sentence
    # (position 0), query S1 with "Rome" blanked. Each later round keeps its first sentence unchecked (the
    # progress guarantee), passes S2 (sure) and meets "Rome" again one cycle on: positions 9, 18, and 27, where
    # "Rome" is the last token of the budget (FLARE judges the unfinished sentence too, so no "." in its query).
    # The round from 27 has 3 tokens left, all in its kept first sentence.
    # Catches no question-first call, a trigger on a sure sentence (S2 would cut at 4, 13, ...), the probability
    # of the wrong token read by the trigger (its score) or by the mask (the query would blank another token), no
    # progress guarantee (every retrieval at 0), and a final unfinished sentence left unjudged (none at 27).
    [record], queries, docs = run(tokenizer, model, MethodConfig(method="flare", max_rounds=20),
                                  max_new_tokens=30)
    expected = [(0, 0, QUESTION)] + [(k, 9 * (k - 1), FLARE_QUERY) for k in range(1, 4)] + [(4, 27, "Ada built")]
    assert retrievals(record) == expected and queries == [q for _, _, q in expected]
    assert docs == [3] * 5
    _, p_rome = entropy_and_prob(model, UNSURE)
    assert field(field(record, "retrievals")[1], "trigger_score") == pytest.approx(1 - p_rome, rel=1e-5)


@pytest.mark.parametrize("truncation, cut", [("sentence", 0), ("token", 2)])
def test_dragin_fires_exactly_at_the_uncertain_word(truncation, cut, tokenizer, model):
    # θ 0.01: "Rome" scores H·a ≈ 10.8 / (prompt + 4) > 0.04 in every round here, every sure word < 1e-5.
    # Round 1 fires at "Rome" (token 2); each later round keeps its first sentence (the progress guarantee), passes
    # S2 and fires at the next "Rome": one retrieval per cycle, at the start of "Rome"'s sentence (9k) or at
    # "Rome" itself (9k + 2). The round after the 5th has 4 tokens left, no "Rome" among them.
    # Catches firing on a sure word, an entropy or attention read one token off (the "token" cut moves), no
    # progress guarantee (every retrieval at the same place), and QFS reading words other than the question's
    # and the answer's before the trigger.
    method = MethodConfig(method="dragin", theta=0.01, truncation=truncation, max_rounds=20)
    [record], queries, docs = run(tokenizer, model, method, max_new_tokens=40)
    expected = [(k + 1, 9 * k + cut, qfs_words(k)) for k in range(5)]
    assert retrievals(record) == expected and queries == [q for _, _, q in expected]
    assert docs == [0] + [3] * 5


def test_dragin_fires_where_entropy_times_attention_exceeds_theta(tokenizer, model):
    # Round 1's "Rome" (token 2) scores H · a_max with a_max = 1/(P + 4): the row of "." (token 3) spreads evenly
    # over the P prompt tokens and 4 answer tokens; later rounds' prompts are longer (documents), so they score
    # less. θ just under the hand-computed score: exactly that one retrieval; θ just over: none.
    # Catches a_max read from the token's own row (1/(P + 3)) or a later one, the wrong token's entropy, and a
    # comparison with another θ.
    # The word is "Rome." (the full stop stays in it): entropy the mean of the unsure "Rome" and the sure ".",
    # attention the sum of "Rome"'s 1/(P + 4) and the 0 of ".", which no later row covers when S1 is judged.
    entropy = (entropy_and_prob(model, UNSURE)[0] + entropy_and_prob(model, SURE)[0]) / 2
    score = entropy / (first_prompt_length(tokenizer) + 4)
    below = MethodConfig(method="dragin", theta=score * 0.999, max_rounds=20, truncation="sentence")
    [record], _, _ = run(tokenizer, model, below, max_new_tokens=40)
    assert retrievals(record) == [(1, 0, qfs_words(0))]
    assert field(field(record, "retrievals")[0], "trigger_score") == pytest.approx(score, rel=1e-4)
    above = MethodConfig(method="dragin", theta=score * 1.001, max_rounds=20)
    [record], queries, _ = run(tokenizer, model, above, max_new_tokens=40)
    assert retrievals(record) == [] and queries == []


def test_dragin_never_fires_on_a_stopword_unless_the_threshold_comes_first(tokenizer):
    # A model unsure only of "she", a stopword (S2's token 5 of the cycle). The paper's s_i = 0 keeps RIND silent.
    # The reference's reading (content_filter after_threshold: H·a > θ fires, stopword or not) fires at each S2 it
    # may judge: round 1 at 4 (S2's start); each later round keeps its first sentence (S2) unchecked, passes S1 and
    # fires at the next S2: 13, 22. The round from 22 has 8 tokens left (S2 and part of S1). QFS reads the content
    # words before "she", and the record says that the hits were stopwords.
    # Catches the stopword indicator left out of the paper's score (it would fire as the reference does), and the
    # reference's threshold applied after the filter (it would never fire).
    model = script_model(tokenizer, unsure=("she",))
    paper = MethodConfig(method="dragin", theta=0.01, max_rounds=20, truncation="sentence")
    [record], queries, _ = run(tokenizer, model, paper, max_new_tokens=30)
    assert retrievals(record) == [] and queries == []
    reference = MethodConfig(method="dragin", theta=0.01, max_rounds=20, content_filter="after_threshold",
                             truncation="sentence")
    [record], queries, _ = run(tokenizer, model, reference, max_new_tokens=30)
    expected = [(k + 1, 4 + 9 * k, "built Rome? Ada built Rome." + " sailed north! Ada built Rome." * k)
                for k in range(3)]
    assert retrievals(record) == expected and queries == [q for _, _, q in expected]
    assert [field(r, "stopword_hits") for r in field(record, "retrievals")] == [True] * 3


def test_dragin_reference_profile(tokenizer, model):
    # The reference judges a round once it has ended (here at the token budget): round 1 fires at its first "Rome"
    # (position 0); the documents write one sentence (S1, kept) and the next round runs without them, writes to
    # the budget and fires at the "Rome" after S2: positions 0, 9, 18, 27, 36 in rounds 1, 3, 5, 7, 9. Round 10
    # writes S1 with the documents up to the budget. Score: H times "Rome"'s attention renormalised over S1
    # ("Ada", "built", "Rome."), each token's a_max(i) = 1/(P + i + 1) (the token's own row counts).
    # Catches documents kept past their sentence (docs 3, 3), judging before the round ends, a missing or
    # different renormalisation (score), and firing on sure words.
    # the remaining budget and the project's extraction keep this hand count (tests/test_dragin_eval.py covers the
    # per-round budget and the forced answer)
    method = MethodConfig(method="dragin", dragin_profile="reference", theta=1.0, round_budget="remaining",
                          answer_extraction="project", round_join="tokens", special_text="drop")
    [record], queries, docs = run(tokenizer, model, method, max_new_tokens=40)
    expected = [(2 * k + 1, 9 * k, qfs_words(k)) for k in range(5)]
    assert retrievals(record) == expected and queries == [q for _, _, q in expected]
    assert docs == [0, 3] * 5
    p = first_prompt_length(tokenizer)
    attention = [1 / (p + i + 1) for i in range(4)]
    # S1 is three words, "Ada", "built", "Rome." (the full stop stays in it): its entropy the mean of the unsure
    # "Rome" and the sure ".", its attention the sum of both tokens'
    entropy = (entropy_and_prob(model, UNSURE)[0] + entropy_and_prob(model, SURE)[0]) / 2
    score = entropy * (attention[2] + attention[3]) / sum(attention) * 3
    assert field(field(record, "retrievals")[0], "trigger_score") == pytest.approx(score, rel=1e-3)


def test_retrievals_stay_with_their_question_in_a_batch(tokenizer, model):
    # Two questions decode together, leave and rejoin the batch at the same steps: each keeps its own five
    # retrievals (as alone) and its own question's words in QFS. Catches retrievals or documents handed to the
    # wrong question when sequences leave and rejoin.
    questions = (QUESTION, "Where did Ada sail?")
    method = MethodConfig(method="dragin", theta=0.01, max_rounds=20, truncation="sentence")
    records, queries, _ = run(tokenizer, model, method, max_new_tokens=40, questions=questions)
    assert [retrievals(r, "round", "position") for r in records] == [[(k + 1, 9 * k) for k in range(5)]] * 2
    assert [q for _, _, q in retrievals(records[0])] == [qfs_words(k) for k in range(5)]
    assert [q for _, _, q in retrievals(records[1])] == [
        qfs_words(k).replace("built Rome?", "Ada sail?", 1) for k in range(5)]
    assert sorted(queries) == sorted(q for r in records for _, _, q in retrievals(r))


@pytest.mark.parametrize("method, max_new_tokens, expected", [
    # the paper profile's cap, 5: without it a 6th at 45 (the budget has room for it)
    (MethodConfig(method="dragin", theta=0.01, truncation="sentence"), 60, [(k + 1, 9 * k) for k in range(5)]),
    (MethodConfig(method="fs-rag", max_rounds=2), 27, [(1, 4), (2, 9)]),
    # the question-first call counts: a cap of 1 leaves no trigger-fired retrieval
    (MethodConfig(method="flare", max_rounds=1), 30, [(0, 0)]),
    (MethodConfig(method="sr-rag", max_rounds=0), 20, []),
])
def test_the_round_cap(method, max_new_tokens, expected, tokenizer, model):
    # Catches a cap off by one, a cap that ignores the question-first retrieval, and an answer cut short when the
    # cap is reached (it must still run to the token budget).
    [record], queries, _ = run(tokenizer, model, method, max_new_tokens=max_new_tokens)
    assert retrievals(record, "round", "position") == expected and len(queries) == len(expected)
    written = continuation_ids(tokenizer, " " + field(record, "output"))
    assert len(written) == max_new_tokens


def test_iter_retgen_retrieves_once_per_iteration(tokenizer, model):
    # T = 3: the question, then y_{t-1} joined to it; y is one cycle of the script (9 tokens; the chat prompt
    # ends with a newline, which leads into the script). Catches T ± 1 retrievals, a query that ignores y_{t-1},
    # and a record that keeps only some iterations.
    retriever = FakeRetriever()
    runner = method_runner(model, tokenizer, retriever, MethodConfig(method="iter-retgen", iterations=3, top_k=2),
                           PromptConfig(), EngineConfig(max_new_tokens=9))
    [record] = runner([QAExample("q0", QUESTION, ["Ada"])])
    joined = f"{S1} {S2} {QUESTION}"
    assert retrievals(record, "round", "query") == [(1, QUESTION), (2, joined), (3, joined)]
    assert retriever.queries == [QUESTION, joined, joined]
    assert [len(field(r, "doc_ids")) for r in field(record, "retrievals")] == [2, 2, 2]


@pytest.fixture(scope="module")
def ret_tokenizer(tokenizer):
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<RET>"]})
    return tokenizer


@pytest.mark.parametrize("method, asks, expected", [
    ("nr", True, [[], []]),
    ("ar", False, [[(1, "a")], [(1, "b")]]),
    ("popularity", True, [[(1, "a")], []]),  # popularity a 10, b 1e7; threshold 1e4
    ("adapt-llm", True, [[(1, "a")], [(1, "b")]]),  # the model writes <RET>: both retrieve
    ("adapt-llm", False, [[], []]),  # it answers: neither does
])
def test_gate_methods_retrieve_at_most_once_with_the_question(method, asks, expected, ret_tokenizer):
    # Catches a gate that retrieves for a question it keeps (or the reverse), more than one retrieval per
    # question, and retrievals recorded for another question than the one searched.
    model = script_model(ret_tokenizer, " Rome<RET>" if asks else SCRIPT, unsure=())
    retriever = FakeRetriever()
    questions = {"a": "Who built Rome?", "b": "Where did Ada sail?"}
    examples = [QAExample(i, q, ["Ada"], metadata={"popularity": pop}) for (i, q), pop in zip(questions.items(),
                                                                                            (10.0, 1e7))]
    gate = GateMethodConfig(popularity_threshold=1e4, gate_max_new_tokens=4)
    records = gate_runner(model, ret_tokenizer, retriever, MethodConfig(method=method), gate, batch_size=2)(examples)
    assert [retrievals(r, "round", "query") for r in records] == [
        [(n, questions[q]) for n, q in row] for row in expected]
    assert retriever.queries == [questions[q] for row in expected for _, q in row]


def test_token_rag_judges_the_round_then_keeps_the_documents_round_whole(tokenizer, model):
    # DRAGIN's FLARE row as their TokenRAG runs it. Round 1 (20 tokens, no documents) is judged at its end: S1's
    # window (its 4 tokens and the next one) has mean 1-p ≈ 1/5 > 0.08 for "Rome": retrieve at token 0 with S1 minus
    # "Rome". Round 2 is written with the documents to the full budget and kept whole, unchecked; a round 3 would
    # have none. Their loop ends once the answer, counted by tokenizer.encode (BOS included), passes 20 tokens.
    # Catches a documents scope of one sentence, a check of the regenerated round, a query that keeps the unsure
    # token, and a loop that goes on past the budget.
    # the engine's text joins (the authors' double space before an empty ptext changes this last-token model's
    # output; their joins are tests/test_authors_loop_text.py's) and the engine's sentence windows (word_text
    # pieces): their modifier's str.find alignment, which a byte-level token's leading space defeats, is
    # tests/test_reference_loops.py's
    method = MethodConfig(method="token-rag", dragin_profile="reference", answer_extraction="project",
                          token_rag_threshold=0.08, round_join="tokens", special_text="drop", word_text="pieces")
    assert (method.docs_scope, method.round_budget) == ("next_round", "per_round")
    [record], queries, docs = run(tokenizer, model, method, max_new_tokens=20)
    assert retrievals(record)[0] == (1, 0, "Ada built .") and queries[0] == "Ada built ."
    assert docs[:3] == [0, 3, 0][: len(docs)] and len(docs) in (2, 4)
    assert field(record, "output").startswith(S1 + " " + S2 + " " + S1)  # round 2, kept whole
    assert len(prompt_ids(tokenizer, field(record, "output"))) > 20
    assert field(record, "generated_tokens") == 20 * len(docs)
