"""The shared-head KV cache: every output and signal equals the full prefill's; the head is cut where tokenization
is stable."""

from __future__ import annotations

import pytest
import torch
from conftest import FakeRetriever, bos_tokenizer, tiny_llama

from adaptive_rag.lm.decoder import BatchDecoder, Sequence, shared_head_ids
from adaptive_rag.lm.profiling import Profile
from adaptive_rag.lm.tokenization import prompt_ids
from adaptive_rag.plumbing.records import Passage, QAExample
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig, load_demos

HEAD = list(range(200, 240))  # 40 shared ids


def decode_schedule(model, tokenizer, prompts: list[list[int]], late: list[list[int]], *, head=None,
                    reduce="mean", profile=None, **decoder_options) -> list[Sequence]:
    """Admit, step, admit more mid-flight, remove one early, run to the end: the engine's pattern."""
    dec = BatchDecoder(model, tokenizer, reduce=reduce, **decoder_options)
    dec.profile = profile
    dec.set_shared_prefix(head)
    seqs = [Sequence(i, p, max_new_tokens=5 + i % 3) for i, p in enumerate(prompts)]
    dec.admit(seqs)
    for _ in range(2):
        dec.step()
    extra = [Sequence(f"late{i}", p, max_new_tokens=4) for i, p in enumerate(late)]
    dec.admit(extra)
    dec.step()
    dec.remove([seqs[0]])  # leaves mid-flight (to retrieve)
    while dec.active:
        dec.step()
    return seqs + extra


def assert_same(cached: list[Sequence], full: list[Sequence], atol: float = 1e-5) -> None:
    for a, b in zip(cached, full, strict=True):
        assert a.gen_ids == b.gen_ids
        assert a.forward_passes == b.forward_passes
        assert torch.allclose(torch.tensor(a.probs), torch.tensor(b.probs), atol=atol)
        assert torch.allclose(torch.tensor(a.entropies), torch.tensor(b.entropies), atol=atol)
        assert a.prompt_row.shape[-1] == len(a.prompt_ids)  # the head's positions are in the row
        assert torch.allclose(a.prompt_row, b.prompt_row, atol=atol)
        assert len(a.rows) == len(b.rows)
        for ra, rb in zip(a.rows, b.rows):
            assert ra.shape == rb.shape
            assert torch.allclose(ra, rb, atol=atol)


@pytest.mark.parametrize("reduce", ["mean", "none"])
def test_shared_head_gives_the_full_prefills_tokens_probabilities_and_rows(tiny_model, smol_tokenizer, reduce):
    prompts = [HEAD + [5, 6, 7, 8, 9, 10], HEAD + [300], HEAD + [40, 41, 42],  # own parts of 6, 1 and 3 tokens
               [7, 8, 9]]  # no head: the full prefill, in the same admission
    late = [HEAD + list(range(100, 113)), HEAD[:20] + [1, 2], HEAD]  # a head cut short; the head alone: full
    full = decode_schedule(tiny_model, smol_tokenizer, prompts, late, reduce=reduce)
    profile = Profile()
    cached = decode_schedule(tiny_model, smol_tokenizer, prompts, late, head=HEAD, reduce=reduce, profile=profile)
    assert_same(cached, full)
    own = 6 + 1 + 3 + 13
    fallback = 3 + 22 + 40
    assert profile.counts["prefill_tokens"] == len(HEAD) + own + fallback  # the head once, then only own tokens
    assert profile.counts["shared_head_tokens_reused"] == 4 * len(HEAD)


def test_head_scored_once_per_step_or_copied_into_every_row_gives_the_same(tiny_model, smol_tokenizer):
    # the batch cache holds only own tokens and decode steps score the head once for the batch; with head_once off
    # every row's cache holds the head (the older layout): both must give the full prefill's tokens, rows and
    # probabilities, rows that do not start with the head included
    prompts = [HEAD + [5, 6, 7, 8, 9, 10], [7, 8, 9], HEAD + [300]]
    late = [HEAD + list(range(100, 113)), [11, 12]]
    full = decode_schedule(tiny_model, smol_tokenizer, prompts, late, reduce="none")
    for once in (True, False):
        cached = decode_schedule(tiny_model, smol_tokenizer, prompts, late, head=HEAD, reduce="none", head_once=once)
        assert_same(cached, full)
    dec = BatchDecoder(tiny_model, smol_tokenizer, shared_prefix_ids=HEAD)
    dec.admit([Sequence(0, HEAD + [5, 6], max_new_tokens=3)])
    assert dec.cache.layers[0].length == 2  # the head is not in the batch cache
    with pytest.raises(ValueError, match="in flight"):
        dec.set_shared_prefix(None)


def test_a_batch_of_one_token_suffixes_takes_the_decode_path_and_still_matches(tiny_model, smol_tokenizer):
    # every admitted prompt adds one token to the head: the prefill is a one-query call (the decode-step path of
    # the attention capture), whose row must still become the prompt row
    prompts = [HEAD + [300], HEAD + [301]]
    full = decode_schedule(tiny_model, smol_tokenizer, prompts, [])
    cached = decode_schedule(tiny_model, smol_tokenizer, prompts, [], head=HEAD)
    assert_same(cached, full)


def test_no_capture_and_watched_tokens_with_a_shared_head(tiny_model, smol_tokenizer):
    watch = (11, 12)
    outs = []
    for head in (None, HEAD):
        dec = BatchDecoder(tiny_model, smol_tokenizer, capture=False, watch_token_ids=watch, shared_prefix_ids=head)
        seqs = [Sequence(i, HEAD + p, max_new_tokens=4) for i, p in enumerate([[5, 6], [7, 8, 9, 10]])]
        dec.admit(seqs)
        while dec.active:
            dec.step()
        outs.append(seqs)
    for a, b in zip(*outs):
        assert a.gen_ids == b.gen_ids and a.rows == b.rows == [] and a.prompt_row is None
        assert a.first_probs.keys() == b.first_probs.keys()
        assert all(abs(a.first_probs[t] - b.first_probs[t]) < 1e-6 for t in watch)


def test_set_shared_prefix_none_turns_it_off(tiny_model, smol_tokenizer):
    dec = BatchDecoder(tiny_model, smol_tokenizer, shared_prefix_ids=HEAD)
    assert dec.prefix_ids == HEAD and dec.forward_passes == 1  # the head's own prefill is counted once
    dec.set_shared_prefix(None)
    dec.profile = Profile()
    dec.admit([Sequence(0, HEAD + [1, 2], max_new_tokens=2)])
    assert dec.profile.counts["prefill_tokens"] == len(HEAD) + 2


def paper_prompts(tokenizer) -> tuple[PromptBuilder, list[str]]:
    builder = PromptBuilder(tokenizer, PromptConfig(prompt_style="paper", demos="hotpotqa"))
    docs = [Passage("d1", "Thames", "The Thames flows through London."), Passage("d2", "", "Oxford is a city.")]
    texts = [builder.build("Which river flows through Oxford?", []).text,
             builder.build("Who founded the city?", docs).text,
             builder.build("Which river flows through Oxford?", docs, " The Thames flows through Oxford.").text]
    return builder, texts


@pytest.mark.parametrize("bos", [False, True])
def test_shared_head_of_paper_prompts_is_the_demos_and_every_prompt_starts_with_it(smol_tokenizer, bos):
    tokenizer = bos_tokenizer() if bos else smol_tokenizer
    _, texts = paper_prompts(tokenizer)
    head = shared_head_ids(tokenizer, texts[:2])
    assert (head[0] == tokenizer.bos_token_id) == bos  # BOS once, inside the head
    text = tokenizer.decode(head[1:] if bos else head)
    demos = texts[0][:texts[0].index(load_demos("hotpotqa")["instruction"])]  # the demos, nothing after
    assert demos.startswith(text) and len(text) >= len(demos) - 2  # all but the last newline(s)
    for t in texts:  # also a prompt the head was not computed from (documents and an answer so far)
        assert prompt_ids(tokenizer, t)[:len(head)] == head
    whole = prompt_ids(tokenizer, texts[0])
    assert len(head) < len(whole) - 5


def test_the_last_common_token_is_left_out(smol_tokenizer):
    # " 12" and " 13" share the token "1" (digits split): another answer (" 7") would not, so the head stops before
    tok = smol_tokenizer
    a, b = "The answer is 12", "The answer is 13"
    ids_a, ids_b = tok(a)["input_ids"], tok(b)["input_ids"]
    common = next(i for i in range(len(ids_a)) if ids_a[i] != ids_b[i])
    head = shared_head_ids(tok, [a, b])
    assert head == ids_a[:common - 1]
    assert tok.decode(ids_a[common - 1:common]) == "1"


def test_a_cut_inside_one_character_backs_off_to_a_character_boundary(smol_tokenizer):
    # byte-level BPE spells "ト" with two byte tokens: a head ending between them tokenizes differently alone
    tok = smol_tokenizer
    texts = ["日本語テキストa", "日本語テキストb"]
    head = shared_head_ids(tok, texts)
    whole = tok(texts[0])["input_ids"]
    assert 0 < len(head) < len(whole) - 2  # not just the last common token: one more, to "日本語テキス"
    assert tok.decode(head) == "日本語テキス"
    assert tok(tok.decode(head))["input_ids"] == head


def test_shared_head_needs_two_texts(smol_tokenizer):
    with pytest.raises(ValueError, match="at least two prompt texts"):
        shared_head_ids(smol_tokenizer, ["only one"])


def test_bos_tokenizer_prompts_with_a_shared_head_match_the_full_prefill(smol_tokenizer):
    tokenizer = bos_tokenizer()
    model = tiny_llama(len(tokenizer))
    _, texts = paper_prompts(tokenizer)
    head = shared_head_ids(tokenizer, texts[:2])
    prompts = [prompt_ids(tokenizer, t) for t in texts]
    assert all(p[0] == tokenizer.bos_token_id and p[1] != tokenizer.bos_token_id for p in prompts)
    full = decode_schedule(model, tokenizer, prompts[:2], prompts[2:])
    cached = decode_schedule(model, tokenizer, prompts[:2], prompts[2:], head=head)
    assert_same(cached, full)


@pytest.mark.slow
def test_smollm2_paper_prompts_with_a_shared_head_match_the_full_prefill(smol_model):
    model, tokenizer = smol_model
    _, texts = paper_prompts(tokenizer)
    head = shared_head_ids(tokenizer, texts[:2])
    prompts = [prompt_ids(tokenizer, t) for t in texts]
    full = decode_schedule(model, tokenizer, prompts[:2], prompts[2:])
    cached = decode_schedule(model, tokenizer, prompts[:2], prompts[2:], head=head)
    assert_same(cached, full)
    model.set_attn_implementation("sdpa")


def test_engine_records_and_signals_are_the_same_with_the_shared_head(tiny_model, smol_tokenizer):
    # DRAGIN through the engine with the paper prompt: each round (after a retrieval, with documents) re-admits
    # its question; only the decoder's shared head differs between the two runs
    from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
    from inference.dynamic_rag.methods import MethodConfig

    builder, texts = paper_prompts(smol_tokenizer)
    head = shared_head_ids(smol_tokenizer, texts[:2])
    questions = [QAExample(id=str(i), question=q, answers=["x"])
                 for i, q in enumerate(["Who wrote Hamlet?", "Where is Oxford?", "When did it open?"])]
    runs = []
    for shared in (None, head):
        engine = DynamicRAGEngine(tiny_model, smol_tokenizer, FakeRetriever(), builder,
                                  MethodConfig(method="dragin", theta=0.0),
                                  EngineConfig(batch_size=2, max_new_tokens=10, keep_signals=True))
        engine.decoder.set_shared_prefix(shared)
        runs.append([r.to_dict() if hasattr(r, "to_dict") else r for r in engine.run(questions, show_progress=False)])
    for a, b in zip(*runs, strict=True):
        assert a["retrievals"], "the test should exercise a second round"
        for key in ("output", "llm_forward_passes", "generated_tokens", "rounds"):
            assert a[key] == b[key]
        for ra, rb in zip(a["retrievals"], b["retrievals"], strict=True):
            assert abs(ra.pop("trigger_score") - rb.pop("trigger_score")) < 1e-5
            assert ra == rb  # position, query, documents
        assert len(a["signals"]) == len(b["signals"])
        for ra, rb in zip(a["signals"], b["signals"]):
            assert [w["text"] for w in ra["words"]] == [w["text"] for w in rb["words"]]
            for wa, wb in zip(ra["words"], rb["words"]):
                for key in ("entropy", "attention", "score", "min_prob"):
                    assert abs(wa[key] - wb[key]) < 1e-5
