"""Training instances as token ids, built the way inference builds its prompts.

trl tokenizes a prompt/completion pair with the tokenizer's special tokens: a BOS for Llama-2 and Mistral, and a
second one when the text already starts with BOS (as a chat template writes it). Inference encodes every prompt
with :func:`adaptive_rag.lm.tokenization.prompt_ids` (BOS exactly once when the tokenizer adds one by default). So the
job hands trl already-tokenized instances: ``input_ids`` = ``prompt_ids(prompt)`` + completion ids + EOS, and a
``completion_mask`` over the completion and EOS (trl 1.x recognises a processed dataset by its ``input_ids``
column and turns ``completion_mask`` into labels when ``completion_only_loss`` is on). For a tokenizer without
BOS (SmolLM2) the ids are those trl computes itself.
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from adaptive_rag.lm.tokenization import batch_prompt_ids, continuation_ids


def completion_token_ids(tokenizer: Any, prompt: str, completion: str, prompt_tokens: list[int] | None = None,
                         joint_tokens: list[int] | None = None) -> list[int]:
    """The ids of ``completion`` as they follow ``prompt`` in the joint text, plus EOS (as trl appends it).

    Where the tokenizer merges characters across the boundary (then the prompt's ids are no prefix of the joint
    ids), the completion is tokenized alone: the prompt must stay exactly what inference feeds the model.
    """
    plain = prompt_tokens if prompt_tokens is not None else tokenizer(prompt, add_special_tokens=False)["input_ids"]
    joint = joint_tokens if joint_tokens is not None else tokenizer(
        prompt + completion, add_special_tokens=False)["input_ids"]
    if list(joint[:len(plain)]) == list(plain):
        ids = list(joint[len(plain):])
    else:  # as it follows text: alone, a SentencePiece tokenizer would open it with a dummy "▁"
        ids = continuation_ids(tokenizer, completion)
    eos = tokenizer.eos_token_id
    if eos is not None and ids[-1:] != [eos]:
        ids.append(eos)
    return ids


def tokenize_instances(tokenizer: Any, prompts: list[str], completions: list[str]) -> dict[str, list[list[int]]]:
    """``input_ids`` and ``completion_mask`` (1 on the completion and its EOS) for each pair."""
    inference_prompts = batch_prompt_ids(tokenizer, prompts)
    plain = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    joint = tokenizer([p + c for p, c in zip(prompts, completions)], add_special_tokens=False)["input_ids"]
    out: dict[str, list[list[int]]] = {"input_ids": [], "completion_mask": []}
    for prompt, completion, head, pl, jt in zip(prompts, completions, inference_prompts, plain, joint):
        tail = completion_token_ids(tokenizer, prompt, completion, pl, jt)
        out["input_ids"].append(list(head) + tail)
        out["completion_mask"].append([0] * len(head) + [1] * len(tail))
    return out


def tokenize_split(dataset: Dataset, tokenizer: Any, batch_size: int = 256, max_length: int | None = None) -> Dataset:
    """A prompt/completion split as trl's processed format (only the two tokenized columns remain; a split that already
    holds ``input_ids`` and ``completion_mask`` keeps them as they are), each instance cut
    to its first ``max_length`` tokens as trl's ``truncation_mode="keep_start"`` cuts it (trl takes no
    ``max_length`` with padding-free batching, so the cut is made here for every run)."""

    prebuilt = "input_ids" in dataset.column_names  # the search warm start's masked trajectories

    def encode(batch):
        out = ({name: batch[name] for name in ("input_ids", "completion_mask")} if prebuilt
               else tokenize_instances(tokenizer, batch["prompt"], batch["completion"]))
        if max_length is not None:
            out = {name: [row[:max_length] for row in rows] for name, rows in out.items()}
        return out

    return dataset.map(encode, batched=True, batch_size=batch_size, remove_columns=dataset.column_names,
                       keep_in_memory=True,  # no cache files written into the user's data_dir
                       desc="tokenizing with inference's prompt_ids")
