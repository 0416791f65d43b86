"""Plain batched greedy generation (no signals): the building block for data builders and simple methods.

Methods that need per-token signals (entropy, attention) use :mod:`inference.decoder` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm.auto import tqdm


@dataclass
class Generation:
    text: str
    num_tokens: int
    first_token_probs: dict[str, float]  # probability of selected tokens at the first step (e.g. "<RET>")
    forward_passes: int = 0  # model calls this prompt took part in: its batch's prefill and decode steps


def chat_prompt(tokenizer, user: str, system: str | None = None) -> str:
    """The text a chat model expects before its answer; plain ``user`` text for models without a template."""
    if not getattr(tokenizer, "chat_template", None):
        return user if system is None else f"{system}\n\n{user}"
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


@torch.no_grad()
def generate_texts(model, tokenizer, prompts: list[str], *, max_new_tokens: int = 32, batch_size: int = 16,
                   watch_tokens: tuple[str, ...] = (), show_progress: bool = False,
                   stop_at_newline: bool = False) -> list[Generation]:
    """Greedy continuations of ``prompts`` (already formatted text), batched with left padding.

    ``watch_tokens`` names tokens (e.g. ``"<RET>"``) whose first-step probability is reported, so a gate's
    threshold can be swept without generating again.
    """
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    watch_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in watch_tokens}
    out: list[Generation] = []
    device = next(model.parameters()).device
    # Longest first: batches hold prompts of similar length, so less padding is computed.
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    results: dict[int, Generation] = {}
    for s in tqdm(range(0, len(order), batch_size), desc="generating", disable=not show_progress, unit="batch"):
        idx = order[s:s + batch_size]
        batch = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True,
                          add_special_tokens=False).to(device)
        gen = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, output_scores=bool(watch_ids),
                             return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id)
        new = gen.sequences[:, batch["input_ids"].shape[1]:]
        first = torch.softmax(gen.scores[0].float(), dim=-1) if watch_ids else None
        for row, i in enumerate(idx):
            ids = new[row]
            n = int((ids != tokenizer.pad_token_id).sum()) if tokenizer.pad_token_id is not None else len(ids)
            text = tokenizer.decode(ids, skip_special_tokens=False)
            for special in (tokenizer.eos_token, tokenizer.pad_token):
                if special:
                    text = text.split(special)[0]
            if stop_at_newline:
                text = text.strip().split("\n")[0]
            probs = {t: float(first[row, tid]) for t, tid in watch_ids.items()} if first is not None else {}
            results[i] = Generation(text=text.strip(), num_tokens=n, first_token_probs=probs,
                                    forward_passes=int(new.shape[1]))
    out = [results[i] for i in range(len(prompts))]
    return out
