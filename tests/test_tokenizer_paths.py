"""Every path from ids to text, on each tokenizer family the papers' checkpoints use (tests/tokenizer_matrix.py).

The model writes a known text whatever its prompt says (``known_model``): after any token outside the script it
writes the script's first token, after each script token the next, after the last one EOS. So every method's final
output, and the answer-so-far inside every round's prompt, can be stated exactly: what one decode of all kept
tokens gives, never rounds decoded one by one (a SentencePiece decoder drops a chunk's leading space, and rounds
fused into "founded.Its" or "thecity"). Every registered trigger and query former runs here, so one added later is
checked without a new test.
"""

from __future__ import annotations

import pytest
import torch
from conftest import FakeRetriever
from scripted_lm import scripted_llama
from tokenizer_matrix import TOKENIZERS, shared_tokenizer

from adaptive_rag.lm.tokenization import continuation_ids, decode_continuation, prompt_ids
from adaptive_rag.plumbing.records import QAExample
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig
from inference.dynamic_rag.queries import QUERIES
from inference.dynamic_rag.text_units import TokenText
from inference.dynamic_rag.triggers import TRIGGERS

SCRIPT = " The city was founded in 1970. Its port opened!"
QUESTION = "When was the city founded?"
SURE, UNSURE = 4.0, 0.5
PAPER = PromptConfig(prompt_style="paper", num_demos=1)


@pytest.fixture(scope="module", params=TOKENIZERS)
def tokenizer(request):
    return shared_tokenizer(request.param)


def known_model(tokenizer, script: str = SCRIPT, unsure: tuple[str, ...] = ("founded", "opened")):
    """Writes ``script`` then EOS after any prompt; uniform attention; ``unsure`` words come with p ≈ 1e-4."""
    ids = continuation_ids(tokenizer, script)
    model = scripted_llama(tokenizer, script, strength=SURE)
    entry = len(ids)  # the hidden slot of every token outside the script
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.zero_()
            layer.self_attn.k_proj.weight.zero_()
        embed = model.model.embed_tokens.weight
        scripted = embed[ids].clone()
        embed.zero_()
        embed[:, entry] = 1.0
        embed[ids] = scripted
        model.lm_head.weight[ids[0], entry] = SURE
        model.lm_head.weight[ids[0], len(ids) - 1] = 0.0
        model.lm_head.weight[tokenizer.eos_token_id, len(ids) - 1] = SURE
        for k, token in enumerate(ids):
            if decode_continuation(tokenizer, [token]).strip() in unsure:
                model.lm_head.weight[token, entry if k == 0 else k - 1] = UNSURE
    return model


@pytest.fixture(scope="module")
def model(tokenizer):
    return known_model(tokenizer)


class RecordingPrompts(PromptBuilder):
    """Remembers the answer-so-far each round's prompt was built with."""

    def __init__(self, tokenizer, cfg):
        super().__init__(tokenizer, cfg)
        self.priors: list[str] = []

    def build(self, question, docs, prior="", **kw):
        self.priors.append(prior)
        return super().build(question, docs, prior, **kw)


def run(tokenizer, model, method: MethodConfig, *, max_new_tokens: int = 40):
    prompts = RecordingPrompts(tokenizer, PAPER)
    retriever = FakeRetriever()
    engine = DynamicRAGEngine(model, tokenizer, retriever, prompts, method,
                              EngineConfig(batch_size=2, max_new_tokens=max_new_tokens))
    [record] = engine.run([QAExample("q0", QUESTION, ["1970"])], show_progress=False)
    return record, prompts.priors, retriever.queries


def assert_whole(text: str, sources: tuple[str, ...] = (QUESTION, SCRIPT)) -> None:
    """Every word of ``text`` occurs in one of ``sources``: no two pieces fused across a round or a space."""
    for word in text.split():
        assert any(word in s for s in sources), f"{word!r} of {text!r} is in none of the source texts"


def test_the_sentencepiece_family_behaves_as_llama2s():
    """The sanity of the matrix itself: BOS added, a leading space dropped by decode, a lone "▁" before digits,
    byte fallback."""
    tok = shared_tokenizer("sentencepiece")
    ids = continuation_ids(tok, " The city in 1970")
    assert tok.convert_ids_to_tokens(ids) == ["▁The", "▁city", "▁in", "▁", "1", "9", "7", "0"]
    assert tok.decode(ids) == "The city in 1970"  # what fused the rounds
    assert decode_continuation(tok, ids) == " The city in 1970"
    assert prompt_ids(tok, "The")[0] == tok.bos_token_id == 1 and (tok.unk_token_id, tok.eos_token_id) == (0, 2)
    assert tok(" Paris", add_special_tokens=False)["input_ids"][0] != continuation_ids(tok, " Paris")[0]
    assert "<0xE6>" in tok.convert_ids_to_tokens(continuation_ids(tok, " 日"))


TEXTS = [SCRIPT, " Yes, Paris.\nThe café in 日本 is old 🙂.", "\n\nQuestion: who?\nAnswer: 12 ½"]


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_join_to_one_decode_also_fed_token_by_token(tokenizer, text):
    ids = continuation_ids(tokenizer, text)
    text_ids = TokenText(tokenizer)
    assert decode_continuation(tokenizer, ids) == text
    assert "".join(text_ids.pieces(ids)) == text
    stream = text_ids.stream()
    assert "".join(p for i in ids for p in stream.push([i])) == text


def test_a_character_split_over_byte_tokens_belongs_to_the_token_that_completes_it():
    tok = shared_tokenizer("sentencepiece")
    ids = continuation_ids(tok, " 日本")
    assert tok.convert_ids_to_tokens(ids) == ["▁", "<0xE6>", "<0x97>", "<0xA5>", "<0xE6>", "<0x9C>", "<0xAC>"]
    assert TokenText(tok).pieces(ids) == [" ", "", "", "日", "", "", "本"]
    stream = TokenText(tok).stream()  # across steps: the engine feeds a round a token at a time
    assert [stream.push([i]) for i in ids] == [[" "], [""], [""], ["日"], [""], [""], ["本"]]


@pytest.mark.parametrize("method, rounds", [
    (MethodConfig(method="fl-rag", fixed_length=4), 4),
    (MethodConfig(method="fs-rag"), 2),
    (MethodConfig(method="flare", max_rounds=10), 2),
    (MethodConfig(method="dragin", theta=1e-3), 2),
    (MethodConfig(method="dragin", dragin_profile="reference", theta=1e-3, answer_extraction="project",
                  round_join="tokens", special_text="drop"), 2),
], ids=["fl-rag", "fs-rag", "flare", "dragin", "dragin-reference"])
def test_multi_round_methods_write_the_text_one_decode_gives(tokenizer, model, method, rounds):
    record, priors, queries = run(tokenizer, model, method)
    assert record.output == SCRIPT.strip()
    assert record.rounds >= rounds
    for prior in priors:  # each round's prompt carries a prefix of the text, never two rounds fused
        assert SCRIPT.startswith(prior), (prior, priors)
    assert any(priors) or method.method == "sr-rag"
    for query in queries:
        assert_whole(query)


def test_the_forced_answer_follows_the_answer_with_one_space(tokenizer, model):
    """answer_extraction dragin: an output without "the answer is" gets " So the answer is " (eval.py's trailing
    space) and 20 tokens more. The prompt ends in a lone space piece, which the script has before "1970": the model
    goes on from there."""
    method = MethodConfig(method="dragin", dragin_profile="reference", theta=1e-3, round_join="tokens",
                          special_text="drop")  # the authors' text: tests/test_authors_loop_text.py
    record, priors, _ = run(tokenizer, model, method)
    assert priors[-1] == SCRIPT + " So the answer is "
    assert record.output == f"{SCRIPT.strip()} So the answer is 1970. Its port opened!"


@pytest.mark.parametrize("trigger", TRIGGERS.names())
def test_every_trigger_keeps_the_text_whole(tokenizer, model, trigger):
    record, priors, queries = run(tokenizer, model, MethodConfig(method="custom", trigger=trigger,
                                                                 query="last_sentence", max_rounds=6, theta=1e-3))
    assert record.output == SCRIPT.strip()
    assert all(SCRIPT.startswith(p) for p in priors), priors
    for query in queries:
        assert_whole(query)


@pytest.mark.parametrize("query", QUERIES.names())
def test_every_query_former_draws_whole_words(tokenizer, model, query):
    record, priors, queries = run(tokenizer, model, MethodConfig(method="custom", trigger="fixed_length", query=query,
                                                                 fixed_length=5, max_rounds=6))
    assert record.output == SCRIPT.strip()
    assert all(SCRIPT.startswith(p) for p in priors), priors
    assert len(queries) >= 2
    for q in queries:
        assert_whole(q)


def test_iter_retgen_joins_the_last_output_to_the_question_whole(tokenizer, model):
    from inference.commands.evaluate import method_runner

    retriever = FakeRetriever()
    runner = method_runner(model, tokenizer, retriever, MethodConfig(method="iter-retgen", iterations=2, top_k=1),
                           PromptConfig(), EngineConfig(max_new_tokens=40))
    [record] = runner([QAExample("q0", QUESTION, ["1970"])])
    assert record.output == SCRIPT.strip()
    assert retriever.queries == [QUESTION, f"{SCRIPT.strip()} {QUESTION}"]


def test_the_gate_hands_its_retrieval_path_to_a_multi_round_method(tokenizer, model):
    """AR (always retrieve) with FS-RAG answering: the inner engine's rounds join as one decode, also under the
    gate."""
    from inference.adapt_gate.gate_eval import GateMethodConfig, gate_runner

    retriever = FakeRetriever()
    prompts = RecordingPrompts(tokenizer, PAPER)
    engine = DynamicRAGEngine(model, tokenizer, retriever, prompts, MethodConfig(method="fs-rag"),
                              EngineConfig(batch_size=2, max_new_tokens=40))
    run = gate_runner(model, tokenizer, retriever, MethodConfig(method="ar"), GateMethodConfig(gate_inner="fs-rag"),
                      batch_size=2, inner=lambda examples: engine.run(examples, show_progress=False))
    [record] = run([QAExample("q0", QUESTION, ["1970"])])
    assert record.output == SCRIPT.strip()
    assert prompts.priors == ["", " The city was founded in 1970."]


def test_training_ids_are_the_joint_texts_with_one_bos(tokenizer):
    """ADAPT-LLM's instances: the prompt as inference feeds it, then the completion's ids as they follow it in
    the joint text (no dummy "▁" before it on SentencePiece), then EOS."""
    from data_builders.adapt_llm_prompts import parametric_prompt
    from training.adapt_llm_tokens import tokenize_instances

    prompt, completion = parametric_prompt(QUESTION), " founded in 1970."
    out = tokenize_instances(tokenizer, [prompt], [completion])
    head = prompt_ids(tokenizer, prompt)
    ids = out["input_ids"][0]
    assert ids[:len(head)] == head and ids[-1] == tokenizer.eos_token_id
    assert decode_continuation(tokenizer, ids[len(head):-1]) == completion
    assert ids[len(head):-1] == continuation_ids(tokenizer, completion)
    assert out["completion_mask"][0] == [0] * len(head) + [1] * (len(ids) - len(head))


def test_the_trace_views_words_are_the_references_words(tokenizer, model):
    """keep_signals (the trace view): each word's text is its pieces joined; a number is one word with the lone
    space piece before it ("▁", "1", "9", "7", "0", "." on both families)."""
    prompts = RecordingPrompts(tokenizer, PAPER)
    engine = DynamicRAGEngine(model, tokenizer, None, prompts, MethodConfig(method="wo-rag"),
                              EngineConfig(batch_size=1, max_new_tokens=40, keep_signals=True))
    [record] = engine.run([QAExample("q0", QUESTION, ["1970"])], show_progress=False)
    [round_signals] = record.signals
    words = [w["text"] for w in round_signals["words"]]
    assert words == [" The", " city", " was", " founded", " in", " 1970.", " Its", " port", " opened!"]
    assert "".join(words) == SCRIPT

