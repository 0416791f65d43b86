"""Training instances tokenized with inference's prompt_ids: one BOS for a BOS-adding tokenizer (also when the text
already starts with it), the completion and EOS under the mask, and for SmolLM2 (no BOS) exactly the ids and
labels trl computes itself."""

from __future__ import annotations

from conftest import bos_tokenizer
from datasets import Dataset

from adaptive_rag.lm.models import load_tokenizer
from adaptive_rag.lm.tokenization import prompt_ids
from data_builders.adapt_llm_prompts import context_prompt, parametric_prompt
from training.adapt_llm_tokens import completion_token_ids, tokenize_instances, tokenize_split


def test_one_bos_whether_or_not_the_text_has_one():
    tokenizer = bos_tokenizer()
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    prompt = parametric_prompt("Who wrote Hamlet?")
    assert tokenizer(tokenizer.bos_token + prompt)["input_ids"][:2] == [bos, bos]  # what trl would train on
    out = tokenize_instances(tokenizer, [prompt, tokenizer.bos_token + prompt], ["Shakespeare", "Shakespeare"])
    answer = tokenizer("Shakespeare", add_special_tokens=False)["input_ids"]
    expected = prompt_ids(tokenizer, prompt) + answer + [eos]
    assert out["input_ids"] == [expected, expected]
    assert expected[0] == bos and expected[1] != bos
    n = len(prompt_ids(tokenizer, prompt))
    assert out["completion_mask"] == [[0] * n + [1] * (len(answer) + 1)] * 2


def test_completion_ids_follow_the_prompt_and_eos_is_not_doubled():
    tokenizer = load_tokenizer("smollm2-135m")
    eos = tokenizer.eos_token_id
    assert completion_token_ids(tokenizer, "Q:\n", "Paris") == tokenizer("Paris", add_special_tokens=False)[
        "input_ids"] + [eos]
    assert completion_token_ids(tokenizer, "Q:\n", "Paris" + tokenizer.eos_token)[-2:] != [eos, eos]
    # characters that merge across the boundary: the completion is tokenized alone, the prompt stays intact
    merged = completion_token_ids(tokenizer, "ab", "c")
    assert merged == tokenizer("c", add_special_tokens=False)["input_ids"] + [eos]


def test_without_bos_the_ids_and_labels_are_trls_own(tmp_path):
    """SmolLM2 adds no BOS: handing trl our ids changes nothing it would have computed from the text."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    tokenizer = load_tokenizer("smollm2-135m")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<RET>"]})
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    raw = Dataset.from_dict({
        "prompt": [parametric_prompt("Where is Town1?"), context_prompt("Where is Town1?", ["Town1 is in Land1."]),
                   parametric_prompt("Who wrote Hamlet?")],
        "completion": ["<RET>", "Land1", "It was Shakespeare."]})
    args = SFTConfig(output_dir=str(tmp_path), completion_only_loss=True, max_length=256, report_to="none",
                     bf16=False, use_cpu=True)
    theirs = SFTTrainer(model=model, args=args, train_dataset=raw, processing_class=tokenizer).train_dataset
    ours = SFTTrainer(model=model, args=args, train_dataset=tokenize_split(raw, tokenizer),
                      processing_class=tokenizer).train_dataset
    assert ours["input_ids"] == theirs["input_ids"] and ours["labels"] == theirs["labels"]


def test_instances_are_cut_at_max_length_as_trl_cuts_them(tmp_path):
    """Padding-free batching takes no max_length in trl: tokenize_split makes trl's keep_start cut itself, so an
    instance trains on the same tokens and labels with padding-free batching on or off."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    tokenizer = load_tokenizer("smollm2-135m")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    raw = Dataset.from_dict({"prompt": [parametric_prompt("Where is Town1?"), parametric_prompt("Who wrote it?")],
                             "completion": ["Land1 " * 40, "Shakespeare."]})
    full = tokenize_split(raw, tokenizer)
    cut = tokenize_split(raw, tokenizer, max_length=90)  # the prompts are ~70 tokens
    assert [len(x) for x in cut["input_ids"]] == [min(90, len(x)) for x in full["input_ids"]]
    assert cut["completion_mask"][0] == full["completion_mask"][0][:90] and len(full["input_ids"][0]) > 90
    args = SFTConfig(output_dir=str(tmp_path), completion_only_loss=True, max_length=90, report_to="none",
                     bf16=False, use_cpu=True)
    theirs = SFTTrainer(model=model, args=args, train_dataset=tokenize_split(raw, tokenizer),
                        processing_class=tokenizer).train_dataset
    args.max_length, args.padding_free = None, True
    ours = SFTTrainer(model=model, args=args, train_dataset=cut, processing_class=tokenizer).train_dataset
    assert ours["input_ids"] == theirs["input_ids"] and ours["labels"] == theirs["labels"]
