"""Plain generation runs on the engine's decoder: same greedy text as transformers' generate, continuous batching."""

from __future__ import annotations

import pytest
import torch

from adaptive_rag.lm.generation import generate_texts


def test_generate_texts_matches_generate_one_by_one(tiny_model, smol_tokenizer):
    tok = smol_tokenizer
    prompts = ["The capital of France", "One two three four five six", "Hello", "A much longer prompt that has "
               "quite a few more words in it than the others", "Why", "Numbers: 1, 2, 3"]
    watch = tok.convert_ids_to_tokens(5)  # any token: its first-step probability is reported
    # batch 2 < 6 prompts: finished prompts free their slots and later ones join mid-flight
    gens = generate_texts(tiny_model, tok, prompts, max_new_tokens=7, batch_size=2, watch_tokens=(watch,))
    for prompt, gen in zip(prompts, gens):
        ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = tiny_model.generate(**ids, max_new_tokens=7, do_sample=False, pad_token_id=0,
                                      eos_token_id=tok.eos_token_id, output_scores=True,
                                      return_dict_in_generate=True)
        new = out.sequences[0, ids["input_ids"].shape[1]:]
        assert gen.text == tok.decode(new, skip_special_tokens=False).strip()
        assert gen.num_tokens == len(new) == 7  # a random model does not stop early
        assert gen.forward_passes == 7  # prefill + 6 decode steps: no extra feed without signals
        p_first = torch.softmax(out.scores[0][0].float(), dim=-1)[5].item()
        assert abs(gen.first_token_probs[watch] - p_first) < 1e-5


def test_generate_texts_stop_at_newline_and_bad_sizes(tiny_model, smol_tokenizer):
    [gen] = generate_texts(tiny_model, smol_tokenizer, ["Hi"], max_new_tokens=5, stop_at_newline=True)
    assert "\n" not in gen.text
    with pytest.raises(ValueError, match="batch_size"):
        generate_texts(tiny_model, smol_tokenizer, ["Hi"], batch_size=0)


def bos_tokenizer(tokenizer):
    """SmolLM2's tokenizer made to add a BOS token by default, as Llama-2's does."""
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.add_bos_token = True
    assert tok("a")["input_ids"][0] == tok.bos_token_id
    return tok


def test_generate_texts_puts_bos_once_where_the_tokenizer_adds_one(tiny_model, smol_tokenizer, monkeypatch):
    from adaptive_rag.lm.decoder import BatchDecoder

    seen = []
    admit = BatchDecoder.admit
    monkeypatch.setattr(BatchDecoder, "admit", lambda self, seqs: (seen.extend(s.prompt_ids for s in seqs),
                                                                   admit(self, seqs))[1])
    tok = bos_tokenizer(smol_tokenizer)
    generate_texts(tiny_model, tok, ["Hello there", tok.bos_token + "Already has it"], max_new_tokens=2)
    assert len(seen) == 2
    assert all(ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1 for ids in seen)
    seen.clear()
    generate_texts(tiny_model, smol_tokenizer, ["Hello there"], max_new_tokens=2)  # SmolLM2 itself: no BOS
    assert seen == [smol_tokenizer("Hello there", add_special_tokens=False)["input_ids"]]


def test_banned_tokens_are_never_generated_and_watched_probability_stays_the_models(tiny_model, smol_tokenizer):
    from adaptive_rag.lm.generation import single_token_ids

    tok = smol_tokenizer
    prompt = "The capital of France"
    [free] = generate_texts(tiny_model, tok, [prompt], max_new_tokens=1)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        scores = tiny_model(**ids).logits[0, -1].float()
    first, second = scores.topk(2).indices.tolist()
    banned = tok.convert_ids_to_tokens(first)
    assert free.text == tok.decode([first], skip_special_tokens=False).strip()
    [gen] = generate_texts(tiny_model, tok, [prompt], max_new_tokens=1, watch_tokens=(banned,),
                           banned_tokens=(banned, "<not-a-token>"))
    # the greedy choice is the best token that is not banned; the banned token's reported probability is the model's
    assert gen.text == tok.decode([second], skip_special_tokens=False).strip()
    assert abs(gen.first_token_probs[banned] - torch.softmax(scores, -1)[first].item()) < 1e-5
    assert single_token_ids(tok, (banned, "<not-a-token>")) == (first,)
