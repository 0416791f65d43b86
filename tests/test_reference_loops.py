"""DRAGIN's baselines as the authors' own loops run them (oneal2000/DRAGIN src/generate.py), under the reference
profile: TokenRAG's ``modifier`` over each token decoded alone, FixLengthRAG's fix-sentence round written whole
before its first sentence is kept, its fix-length round searched with after EOS too, and their BM25 class's empty
documents where a search finds fewer than top-k.

The model writes a known script after any prompt (tests/test_tokenizer_paths.py ``known_model``), so every query
can be stated by hand on each tokenizer family.
"""

from __future__ import annotations

import pytest
from conftest import FakeRetriever
from test_tokenizer_paths import PAPER, QUESTION, RecordingPrompts, known_model
from tokenizer_matrix import TOKENIZERS, shared_tokenizer

from adaptive_rag.plumbing.records import Passage, QAExample
from adaptive_rag.plumbing.retriever import Hit
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.triggers.token_rag import _SOLVERS, authors_modifier

SENTENCES = ["The city was founded in 1970.", "Its port opened!"]
MEAN = _SOLVERS["avg"]


def unsure_at(n: int, where: dict[int, float]) -> list[float]:
    return [where.get(i, 0.01) for i in range(n)]


def test_their_modifier_over_tokens_without_leading_spaces():
    """Llama-2's decode of one token drops its space, so ``find`` follows the sentence. Their ``pos`` is the offset
    inside the slice searched (``apr + len``, not ``pos + apr + len``), so the scan wanders but finds every token of
    sentence 1 and stops at "Its": sentence 1's window is tokens 0-7 ("Its" included, ``tr + 1``), sentence 2's
    starts at 8 ("port"): [0.01, 0.9, 0.01], mean 0.3067 > 0.1. In "Its port opened!" "opened" becomes [xxx]."""
    tokens = ["The", "city", "was", "founded", "in", "1970", ".", "Its", "port", "opened", "!"]
    fired = authors_modifier(SENTENCES, tokens, unsure_at(11, {9: 0.9}), 0.1, MEAN)
    assert (fired.sentence, fired.token, fired.query) == (1, 8, "Its port !")
    assert fired.score == pytest.approx((0.01 + 0.9 + 0.01) / 3)
    # "Its" (token 7) is judged with sentence 1: unsure there, it fires sentence 1, whose 8 tokens average 0.1225
    fired = authors_modifier(SENTENCES, tokens, unsure_at(11, {7: 0.92}), 0.1, MEAN)
    assert (fired.sentence, fired.token) == (0, 0) and fired.score == pytest.approx((7 * 0.01 + 0.92) / 8)


def test_their_modifier_over_tokens_with_leading_spaces():
    """Byte-level BPE decodes " city" with its space; a stripped sentence never starts with it, so each sentence's
    window is one token (the first one ``find`` misses) and "opened" is never judged. An unsure first token fires
    sentence 1, and ``find``'s -1 puts [xxx] one character before the end: the query doubles the sentence."""
    tokens = [" The", " city", " was", " founded", " in", " 1970", ".", " Its", " port", " opened", "!"]
    assert authors_modifier(SENTENCES, tokens, unsure_at(11, {9: 0.99}), 0.1, MEAN) is None
    fired = authors_modifier(SENTENCES, tokens, unsure_at(11, {0: 0.5}), 0.1, MEAN)
    assert (fired.sentence, fired.token, fired.score) == (0, 0, 0.5)
    assert fired.query == "The city was founded in 1970 city was founded in 1970."


def test_their_modifier_never_fires_on_an_empty_window():
    assert authors_modifier(["A."], [], [], 0.0, MEAN) is None
    assert authors_modifier([], [" x"], [1.0], 0.0, MEAN) is None


THREE = " The city was founded in 1970. Its port opened! It grew fast"


@pytest.fixture(scope="module", params=TOKENIZERS)
def tokenizer(request):
    return shared_tokenizer(request.param)


class TextPrompts(RecordingPrompts):
    """Also remembers each prompt's text."""

    def __init__(self, tokenizer, cfg):
        super().__init__(tokenizer, cfg)
        self.texts: list[str] = []

    def build(self, question, docs, prior="", **kw):
        prompt = super().build(question, docs, prior, **kw)
        self.texts.append(prompt.text)
        return prompt


def run(tokenizer, model, method: MethodConfig, retriever=None, max_new_tokens: int = 30):
    prompts = TextPrompts(tokenizer, PAPER)
    retriever = retriever or FakeRetriever()
    engine = DynamicRAGEngine(model, tokenizer, retriever, prompts, method,
                              EngineConfig(batch_size=2, max_new_tokens=max_new_tokens))
    [record] = engine.run([QAExample("q0", QUESTION, ["1970"])], show_progress=False)
    return record, prompts, retriever.queries


def reference(method: str, **kw) -> MethodConfig:
    return MethodConfig(method=method, dragin_profile="reference", answer_extraction="project", **kw)


@pytest.mark.parametrize("unsure", ["opened", "The"])
def test_token_rag_under_the_reference_profile_is_their_modifier(tokenizer, unsure):
    """On BPE (with or without BOS) each sentence's window is its first token: "opened" is never judged, an unsure
    "The" fires with the doubled query. On SentencePiece the windows hold the sentences: "opened" fires sentence 2
    at its token 12 ("port", one past "Its"); "The" is one unsure token of 12 in sentence 1 ("1970" is 5 tokens),
    mean 0.083 < 0.1."""
    model = known_model(tokenizer, THREE, unsure=(unsure,))
    record, prompts, queries = run(tokenizer, model, reference("token-rag", token_rag_threshold=0.1, max_rounds=1))
    spm = tokenizer.convert_ids_to_tokens(tokenizer.encode(" city", add_special_tokens=False))[0].startswith("▁")
    expected = {("opened", False): [], ("The", False): ["The city was founded in 1970 city was founded in 1970."],
                ("opened", True): ["Its port !"], ("The", True): []}[(unsure, spm)]
    assert queries == expected
    if expected:
        kept = "" if unsure == "The" else "The city was founded in 1970."
        assert prompts.priors[1] == f" {kept}"  # their prompt: case + " " + text + " " + ptext


def test_fix_sentence_round_is_written_whole_and_its_first_sentence_kept(tokenizer):
    """FS-RAG: their round runs to EOS, is stripped and split; the first sentence is kept and searched with. Under a
    sentencizer that does not end a sentence at a newline (spaCy's, theirs) the first sentence runs past it, where
    the engine's own sentence end would have stopped the round."""
    import spacy

    from inference.dynamic_rag.text_units import TextRules

    script = " Its port opened\nand it grew fast! The city was founded in 1970."
    model = known_model(tokenizer, script, unsure=())
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    prompts = RecordingPrompts(tokenizer, PAPER)
    retriever = FakeRetriever()
    engine = DynamicRAGEngine(model, tokenizer, retriever, prompts, reference("fs-rag"),
                              EngineConfig(batch_size=1, max_new_tokens=30))
    engine.rules = TextRules(nlp)
    [record] = engine.run([QAExample("q0", QUESTION, ["1970"])], show_progress=False)
    first, second = "Its port opened\nand it grew fast!", "The city was founded in 1970."
    # round 2's prompt ends in "!", a script token: this last-token model writes the rest of the script there
    assert retriever.queries[:3] == [QUESTION, first, second]
    # their join: text.strip() + " " + sentences[0]; the sentencizer glues the stop token's text to "1970."
    assert prompts.priors[1:3] == [f" {first}", f"{first} {second}{tokenizer.eos_token}"]
    # round 1 ran past its first sentence to EOS: the whole script and the stop token were generated
    script_tokens = len(tokenizer.encode(script, add_special_tokens=False))
    assert record.generated_tokens >= script_tokens + 1


def test_fix_length_round_that_ends_early_is_searched_with_and_the_loop_goes_on(tokenizer):
    """FL-RAG: a round that EOS ends before the window is full still joins the text and is searched with
    (``new_text.strip()``, the stop token's text dropped by their query cut); their loop then goes on until the
    answer passes the budget."""
    model = known_model(tokenizer, " The city was founded in 1970.", unsure=())
    record, prompts, queries = run(tokenizer, model, reference("fl-rag", fixed_length=32), max_new_tokens=20)
    # retrieve, write, test the end, retrieve: round 2 writes past the budget, so no third search
    assert queries == [QUESTION, "The city was founded in 1970."] and record.rounds == 2
    eos = tokenizer.eos_token
    assert prompts.priors[1] == f" The city was founded in 1970.{eos}"


def test_fix_length_rounds_generate_exactly_their_length(tokenizer):
    """Their FixLengthRAG writes each round with ``generate(prompt, fix_length)``: a round of 4 tokens costs 4
    generated tokens. Here: retrieve, write 4, retrieve, write 4, past the budget of 6: 8 tokens, not one more per
    round for the step that saw the window full."""
    model = known_model(tokenizer, " The city was founded in 1970 by many people of the old town and its port.",
                        unsure=())
    record, _, queries = run(tokenizer, model, reference("fl-rag", fixed_length=4), max_new_tokens=6)
    assert len(queries) == record.rounds == 2
    assert record.generated_tokens == 8


class OneHit(FakeRetriever):
    def search(self, queries, k):
        self.queries.extend(queries)
        return [[Hit(Passage(f"d{len(self.queries)}", "T", f"About {q}."), 1.0)] for q in queries]


def test_a_short_document_list_is_filled_with_empty_documents_as_their_bm25_class_does():
    tok = shared_tokenizer("bpe")
    record, prompts, _ = run(tok, known_model(tok), reference("sr-rag"), retriever=OneHit())
    assert "Context:\n[1] T: About " in prompts.texts[0] and ".\n[2] \n[3] \n" in prompts.texts[0]
    assert record.retrievals[0].doc_ids == ["d1"]  # the trace names only what the search found


def test_the_answers_length_is_counted_on_their_text_with_its_leading_space(tokenizer):
    """Their loop ends once ``len(tokenizer.encode(text)) > generate_max_length``; TokenRAG's and FixLengthRAG's
    joins leave ``text`` starting with a space, which is a token of its own before a digit on each family here."""
    from adaptive_rag.lm.tokenization import prompt_ids
    from inference.dynamic_rag.engine import QuestionState

    text = " 1970."
    budget = len(prompt_ids(tokenizer, text.strip()))
    assert len(prompt_ids(tokenizer, text)) == budget + 1
    engine = DynamicRAGEngine(known_model(tokenizer), tokenizer, FakeRetriever(), TextPrompts(tokenizer, PAPER),
                              reference("fl-rag", fixed_length=32), EngineConfig(batch_size=1, max_new_tokens=budget))
    state = QuestionState(example=QAExample("q0", QUESTION, ["1970"]), prior=text)
    assert engine._answer_done(state)
    state.prior = text.strip()
    assert not engine._answer_done(state)


def test_the_reference_loops_have_no_retrieval_cap_of_their_own(tokenizer):
    """Their loops stop only by their own tests (the kept text past the budget, a round that adds nothing): one
    token a round runs more than 20 rounds, each one retrieving (their FS-RAG ran 34 on a HotpotQA question, where a
    cap of 20 had cut the engine short). After EOS the last-token model starts the script again, so it never stops."""
    model = known_model(tokenizer, " The city was founded in 1970.", unsure=())
    record, _, queries = run(tokenizer, model, reference("fl-rag", fixed_length=1), max_new_tokens=30)
    assert record.rounds > 20 and len(queries) == record.rounds
    assert reference("fl-rag").retrieval_cap(30) == 31  # budget + 1: each round adds a token or ends the loop
    record, _, queries = run(tokenizer, model, reference("fl-rag", fixed_length=1, max_rounds=20), max_new_tokens=30)
    assert len(queries) == 20  # a cap set by hand still holds
    assert MethodConfig(method="fl-rag").retrieval_cap(30) == 5  # the paper profile's
