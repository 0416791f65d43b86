"""The reference profile's text as the DRAGIN authors' loops write it (oneal2000/DRAGIN src/generate.py), on each
tokenizer family: ``special_text: keep`` (a round is decoded without skip_special_tokens, so the stop token that ends
it stays in the text, the next prompt and the count) and ``round_join: authors`` (``text.strip() + " " +
new_text.strip()`` per round, the sentences before a triggering one joined by one space, and DRAGIN's and TokenRAG's
loops going on after a round without a retrieval until their end tests stop them).

The model writes ``SCRIPT`` then EOS after any prompt (tests/test_tokenizer_paths.py ``known_model``), so each
round's text is known and every prior can be stated.
"""

from __future__ import annotations

import pytest
from test_tokenizer_paths import SCRIPT, known_model, run
from tokenizer_matrix import TOKENIZERS, shared_tokenizer

from adaptive_rag.lm.tokenization import continuation_ids, prompt_ids
from inference.dynamic_rag.methods import MethodConfig

FIRST, SECOND = "The city was founded in 1970.", "Its port opened!"


@pytest.fixture(scope="module", params=TOKENIZERS)
def tokenizer(request):
    return shared_tokenizer(request.param)


def authors(method: str, **kw) -> MethodConfig:
    return MethodConfig(method=method, dragin_profile="reference", answer_extraction="project", **kw)


def rounds_until_long(tokenizer, round_text: str, budget: int) -> int:
    """Their loop's length test: stop once ``tokenizer.encode(text)`` (BOS included) exceeds the budget."""
    n, text = 0, ""
    while True:
        n += 1
        text = text.strip() + " " + round_text
        if len(prompt_ids(tokenizer, text)) > budget:
            return n


def test_the_profiles_set_the_switches():
    assert (authors("dragin").special_text, authors("dragin").round_join) == ("keep", "authors")
    assert (authors("fl-rag").special_text, authors("wo-rag").round_join) == ("keep", "authors")
    paper = MethodConfig(method="dragin")
    assert (paper.special_text, paper.round_join) == ("drop", "tokens")


@pytest.mark.parametrize("method", ["dragin", "token-rag"])
def test_their_loop_goes_on_after_a_round_without_retrieval_with_the_stop_tokens_text(tokenizer, method):
    """No trigger fires (θ out of reach): their while-loop writes round after round, each ending in the EOS text
    (Llama-2's "</s>"), joined with one space, until the answer's tokens exceed the budget."""
    model = known_model(tokenizer, unsure=())
    eos = tokenizer.eos_token
    one = f"{SCRIPT.strip()}{eos}"
    record, priors, queries = run(tokenizer, model, authors(method, theta=1e9, token_rag_threshold=1.0),
                                  max_new_tokens=20)
    n = rounds_until_long(tokenizer, one, 20)
    assert n >= 2 and queries == []
    assert record.output == " ".join([one] * n)
    # the first round's text starts with their join's space: " " + new_text.strip()
    assert priors == ["", f" {one}"] + [" ".join([one] * k) for k in range(2, n)]
    assert record.generated_tokens == n * (len(continuation_ids(tokenizer, SCRIPT)) + 1)  # the stop token counts
    assert record.rounds == n


def test_without_the_authors_switches_a_round_that_ends_ends_the_question(tokenizer):
    model = known_model(tokenizer, unsure=())
    record, priors, _ = run(tokenizer, model, authors("dragin", theta=1e9, special_text="drop", round_join="tokens"),
                            max_new_tokens=20)
    assert (record.output, priors, record.rounds) == (SCRIPT.strip(), [""], 1)


THREE = " The city was founded in 1970. Its port opened! It grew fast"  # "opened" unsure: RIND fires in sentence 2


def test_the_text_before_a_triggering_sentence_is_their_ptext(tokenizer):
    """AttnWeightRAG: the prompt holds ``" ".join([text, ptext])`` (ptext: the sentences before the one that fired);
    the round with the documents keeps its first sentence (their get_top_sentence) and joins the three; with the
    one retrieval allowed spent, the loop goes on, rounds joining with one space, each to EOS."""
    model = known_model(tokenizer, THREE, unsure=("opened",))
    record, priors, queries = run(tokenizer, model, authors("dragin", theta=1e-3, max_rounds=1), max_new_tokens=30)
    eos = tokenizer.eos_token
    assert len(queries) == 1
    assert priors[:4] == ["", FIRST, f"{FIRST} {SECOND}", f"{FIRST} {SECOND} It grew fast{eos}"]
    assert record.output.startswith(f"{FIRST} {SECOND} It grew fast{eos} {THREE.strip()}{eos}")


def test_token_rag_joins_always_with_one_space(tokenizer):
    """TokenRAG writes ``case + " " + text + " " + ptext.strip()`` and then ``text.strip() + " " + ptext.strip() + " "
    + new_text.strip()``, spaces whatever is empty; its documents' round is kept whole, to EOS. (The engine's own
    sentence windows fire it here on every tokenizer; their modifier's are tests/test_reference_loops.py's.)"""
    model = known_model(tokenizer, THREE, unsure=("opened",))
    method = authors("token-rag", token_rag_threshold=0.1, max_rounds=1, word_text="pieces")
    record, priors, queries = run(tokenizer, model, method, max_new_tokens=30)
    eos = tokenizer.eos_token
    assert len(queries) == 1
    assert priors[:3] == ["", f" {FIRST}", f" {FIRST} {SECOND} It grew fast{eos}"]


@pytest.mark.parametrize("method", ["wo-rag", "sr-rag", "fl-rag", "fs-rag", "token-rag"])
def test_the_row_configs_attention_pass_is_harmless_where_no_attention_is_read(method):
    """The row configs set ``attention_pass: authors`` for all six methods; only RIND and QFS read attention, so the
    others run as without it (it once stopped them with "needs the attention capture installed")."""
    tok = shared_tokenizer("bpe")
    with_pass, _, _ = run(tok, known_model(tok), authors(method, attention_pass="authors"), max_new_tokens=20)
    without, _, _ = run(tok, known_model(tok), authors(method), max_new_tokens=20)
    assert with_pass.output == without.output and "1970" in with_pass.output


def test_the_round_with_documents_runs_to_its_end_before_its_first_sentence_is_kept(tokenizer):
    """Their AttnWeightRAG writes the round with the documents to EOS or the budget and keeps get_top_sentence of
    it: under a sentencizer that does not split at newlines (spaCy's, theirs), the first sentence runs past the
    newline that the engine's own sentence end would stop at."""
    import spacy
    from conftest import FakeRetriever
    from test_tokenizer_paths import PAPER, QUESTION, RecordingPrompts

    from adaptive_rag.plumbing.records import QAExample
    from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
    from inference.dynamic_rag.text_units import TextRules

    script = " The city was founded in 1970. Its port opened\nand it grew fast!"
    model = known_model(tokenizer, script, unsure=("opened",))
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    prompts = RecordingPrompts(tokenizer, PAPER)
    engine = DynamicRAGEngine(model, tokenizer, FakeRetriever(), prompts,
                              authors("dragin", theta=1e-3, max_rounds=1), EngineConfig(batch_size=1,
                                                                                       max_new_tokens=30))
    engine.rules = TextRules(nlp)
    [record] = engine.run([QAExample("q0", QUESTION, ["1970"])], show_progress=False)
    assert len(record.retrievals) == 1
    eos = tokenizer.eos_token
    # round 1 fires in its second sentence ("opened"); the round with the documents writes the rest of the script
    # and EOS; its first sentence under the sentencizer runs past the newline to the end (the stop token's text,
    # glued to "!", stays in it as in theirs); the engine's own sentence end would have kept "Its port opened"
    assert prompts.priors[1] == FIRST
    assert prompts.priors[2] == f"{FIRST} Its port opened\nand it grew fast!{eos}"
