"""The engine's signals equal those of one full eager forward pass over the final sequence."""

from __future__ import annotations

import copy

import pytest
import torch

from adaptive_rag.lm.decoder import BatchDecoder, Sequence


def reference_signals(model, seq: Sequence):
    """Entropy of each generated token's distribution and its last-layer attention row, from one full pass."""
    ref = type(model)(copy.deepcopy(model.config)).eval()
    ref.load_state_dict(model.state_dict())
    ref.set_attn_implementation("eager")
    ids = torch.tensor([seq.prompt_ids + seq.gen_ids])
    with torch.no_grad():
        out = ref(input_ids=ids, output_attentions=True)
    logp = torch.log_softmax(out.logits[0].float(), dim=-1)  # (T, V)
    att = out.attentions[-1][0].float().mean(dim=0)  # (T, T), heads averaged
    p = len(seq.prompt_ids)
    entropies = [float(-(logp[p + i - 1].exp() * logp[p + i - 1]).sum()) for i in range(len(seq.gen_ids))]
    rows = [att[p + i, : p + i + 1] for i in range(len(seq.rows))]
    greedy = [int(logp[p + i - 1].argmax()) for i in range(len(seq.gen_ids))]
    return entropies, rows, greedy


def run_mixed_batch(model, tokenizer, prompts: list[list[int]], late: list[int], steps_before_late: int = 3):
    dec = BatchDecoder(model, tokenizer)
    seqs = [Sequence(i, p, max_new_tokens=6 + i) for i, p in enumerate(prompts)]
    dec.admit(seqs)
    for _ in range(steps_before_late):
        dec.step()
    extra = Sequence("late", late, max_new_tokens=5)
    dec.admit([extra])  # joins mid-flight with a longer prompt: caches are left-padded and merged
    dec.step()
    dec.remove([seqs[0]])  # leaves mid-flight (as if to retrieve); the others go on
    while dec.active:
        dec.step()
    return seqs + [extra]


def check(model, seqs, atol):
    for seq in seqs:
        entropies, rows, greedy = reference_signals(model, seq)
        assert seq.gen_ids == greedy
        assert torch.allclose(torch.tensor(seq.entropies), torch.tensor(entropies), atol=atol)
        for got, want in zip(seq.rows, rows):
            assert got.shape == want.shape
            assert torch.allclose(got, want, atol=atol)
            assert abs(float(got.sum()) - 1.0) < 1e-4  # a softmax row over real positions only


def test_tiny_llama_signals_match_full_forward(tiny_model, smol_tokenizer):
    prompts = [[5, 6, 7, 8, 9, 10, 11], [300, 301], [40, 41, 42, 43]]
    seqs = run_mixed_batch(tiny_model, smol_tokenizer, prompts, late=list(range(100, 113)))
    assert all(len(s.rows) == len(s.gen_ids) for s in seqs[1:])  # finished sequences got every row
    assert len(seqs[0].rows) == len(seqs[0].gen_ids) - 1  # left early: newest token not fed yet
    check(tiny_model, seqs, atol=1e-5)


def test_head_max_reduction(tiny_model, smol_tokenizer):
    dec = BatchDecoder(tiny_model, smol_tokenizer, reduce="max")
    seq = Sequence(0, [5, 6, 7], max_new_tokens=3)
    dec.admit([seq])
    while dec.active:
        dec.step()
    ref = type(tiny_model)(copy.deepcopy(tiny_model.config)).eval()
    ref.load_state_dict(tiny_model.state_dict())
    ref.set_attn_implementation("eager")
    out = ref(input_ids=torch.tensor([seq.prompt_ids + seq.gen_ids]), output_attentions=True)
    att = out.attentions[-1][0].amax(dim=0)
    assert torch.allclose(seq.rows[0], att[3, :4], atol=1e-5)


def test_bad_head_reduction(tiny_model, smol_tokenizer):
    with pytest.raises(ValueError, match="mean', 'max' or 'none"):
        BatchDecoder(tiny_model, smol_tokenizer, reduce="median")


@pytest.mark.slow
def test_smollm2_signals_match_full_forward(smol_model):
    model, tokenizer = smol_model
    texts = ["The capital of France is", "Water is made of hydrogen and", "Once upon a time, in a small village,"]
    prompts = [tokenizer(t)["input_ids"] for t in texts]
    seqs = run_mixed_batch(model, tokenizer, prompts, late=tokenizer("Quarvik is a city in")["input_ids"])
    check(model, seqs, atol=2e-4)


def test_rows_per_head_and_the_prompt_row_match_full_forward(tiny_model, smol_tokenizer):
    # reduce="none" keeps every head (DRAGIN's reference takes a max per head); the prefill adds the row of the
    # last prompt position, the one that chose the first generated token (the reference QFS reads it)
    dec = BatchDecoder(tiny_model, smol_tokenizer, reduce="none")
    seqs = [Sequence(0, [5, 6, 7, 8, 9], max_new_tokens=3), Sequence(1, [40, 41], max_new_tokens=4)]
    dec.admit(seqs)  # different lengths: the short prompt is left-padded
    while dec.active:
        dec.step()
    ref = type(tiny_model)(copy.deepcopy(tiny_model.config)).eval()
    ref.load_state_dict(tiny_model.state_dict())
    ref.set_attn_implementation("eager")
    for seq in seqs:
        with torch.no_grad():
            att = ref(input_ids=torch.tensor([seq.prompt_ids + seq.gen_ids]), output_attentions=True).attentions[-1][0]
        p = len(seq.prompt_ids)
        assert seq.prompt_row.shape == (4, p)
        assert torch.allclose(seq.prompt_row, att[:, p - 1, :p], atol=1e-5)
        assert len(seq.rows) == len(seq.gen_ids)
        for i, row in enumerate(seq.rows):
            assert row.shape == (4, p + i + 1)
            assert torch.allclose(row, att[:, p + i, : p + i + 1], atol=1e-5)
    mean_dec = BatchDecoder(tiny_model, smol_tokenizer)
    one = Sequence(0, [5, 6, 7, 8, 9], max_new_tokens=1)
    mean_dec.admit([one])
    assert torch.allclose(one.prompt_row, seqs[0].prompt_row.mean(dim=0), atol=1e-6)


def test_banned_tokens_are_never_chosen_greedy_or_sampled(tiny_model, smol_tokenizer):
    from adaptive_rag.lm.sampling import Sampler

    dec = BatchDecoder(tiny_model, smol_tokenizer, capture=False, banned_token_ids=(1,))
    logits = torch.tensor([[0.0, 10.0, 0.0, 0.0]])
    token, prob, entropy = dec._choose(logits)
    # the three tokens left are equally likely: greedy takes the first; probability and entropy are theirs
    assert int(token[0]) == 0 and abs(float(prob[0]) - 1 / 3) < 1e-6
    assert abs(float(entropy[0]) - torch.log(torch.tensor(3.0)).item()) < 1e-5
    dec.sampler = Sampler(temperature=0.5, top_p=0.9, seed=0)
    drawn = {int(dec._choose(logits.repeat(64, 1))[0][i]) for i in range(64)}
    assert 1 not in drawn and drawn <= {0, 2, 3}
