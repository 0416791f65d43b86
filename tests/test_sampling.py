"""Seeded sampling as generate() does it under a checkpoint's generation config (the authors' DRAGIN runs)."""

from __future__ import annotations

import math

import pytest
import torch
from scripted_lm import scripted_llama

from adaptive_rag.lm.sampling import Sampler
from adaptive_rag.plumbing.records import QAExample
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig

SCRIPT = " Osk founded Kelmora. Then he left:"


def test_warpers_hand_computed():
    # softmax(2, 1, 0, -1) = .644 .237 .087 .032; top-p .7 drops the tokens whose ascending cumulative mass is <= .3
    # (.032, .119): two stay, renormalised e/(e+1) = .731 and 1/(e+1) = .269
    logp = Sampler(top_p=0.7).processed_logp(torch.tensor([[2.0, 1.0, 0.0, -1.0]]))
    p = [math.e / (math.e + 1), 1 / (math.e + 1)]
    assert logp.exp()[0].tolist() == pytest.approx(p + [0.0, 0.0], abs=1e-6)
    token, prob, entropy = Sampler(top_p=0.7).choose(torch.tensor([[2.0, 1.0, 0.0, -1.0]]))
    assert int(token) in (0, 1) and float(entropy) == pytest.approx(-sum(q * math.log(q) for q in p), abs=1e-6)
    # temperature 0.5 doubles the logits; top-k 1 leaves one token with probability 1 and entropy 0
    t = Sampler(temperature=0.5).processed_logp(torch.tensor([[1.0, 0.0]])).exp()[0]
    assert t.tolist() == pytest.approx([math.e ** 2 / (math.e ** 2 + 1), 1 / (math.e ** 2 + 1)], abs=1e-6)
    token, prob, entropy = Sampler(top_k=1).choose(torch.tensor([[0.0, 3.0, 1.0]]))
    assert (int(token), float(prob), float(entropy)) == (1, 1.0, 0.0)
    with pytest.raises(ValueError, match="temperature > 0"):
        Sampler(temperature=0.0)


def _output(tokenizer, model, **method):
    prompts = PromptBuilder(tokenizer, PromptConfig(prompt_style="paper", num_demos=1))
    engine = DynamicRAGEngine(model, tokenizer, None, prompts, MethodConfig(method="wo-rag", **method),
                              EngineConfig(batch_size=1, max_new_tokens=12))
    [record] = engine.run([QAExample("q", "Who founded Kelmora?", ["Osk"])], show_progress=False)
    return record.output


def test_checkpoint_sampling_follows_the_generation_config_and_its_seed(smol_tokenizer):
    model = scripted_llama(smol_tokenizer, SCRIPT, strength=1.0)  # a flat distribution: sampling strays
    greedy = _output(smol_tokenizer, model)
    assert greedy.startswith("Osk founded Kelmora.")
    assert _output(smol_tokenizer, model, sampling="checkpoint") == greedy  # the config says do_sample False
    model.generation_config.do_sample, model.generation_config.temperature = True, 3.0
    model.generation_config.top_p, model.generation_config.top_k = 1.0, None  # top-k: generate()'s default 50
    first = _output(smol_tokenizer, model, sampling="checkpoint", sampling_seed=1)
    assert first != greedy and first == _output(smol_tokenizer, model, sampling="checkpoint", sampling_seed=1)
    assert _output(smol_tokenizer, model, sampling="checkpoint", sampling_seed=2) != first
    assert _output(smol_tokenizer, model) == greedy  # greedy stays the default
