"""Plain batched greedy generation (no signals) for prompt-level methods and data builders, behind one protocol.

:class:`Generator` is the one shape every prompt-level caller speaks (Iter-RetGen, ADAPT-LLM's gate, Algorithm 1's
closed-book answers): ``generate(prompts) -> list[Generation]``, one per prompt, in order. A prompt is either text
as the model reads it, or a :class:`Prompt` that says whether the model's chat template wraps it
(:func:`render_prompt`, the one place a prompt becomes text). :class:`LMGenerator` is the model-backed generator;
tests pass stubs with the same method.

It runs on the engine's decoder (:mod:`adaptive_rag.lm.decoder`) with attention capture off, so every method shares one
generation path and one forward-pass accounting; methods that need per-token signals drive the decoder themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tqdm.auto import tqdm

from adaptive_rag.lm.tokenization import batch_prompt_ids


@dataclass
class Generation:
    text: str
    num_tokens: int
    first_token_probs: dict[str, float]  # probability of selected tokens at the first step (e.g. "<RET>")
    forward_passes: int = 0  # model calls this prompt took part in: its batch's prefill and decode steps


@dataclass(frozen=True)
class Prompt:
    """Prompt text; ``chat=True`` asks the generator to wrap ``user`` (and ``system``) in the chat template."""

    user: str
    system: str | None = None
    chat: bool = False


class Generator(Protocol):
    """Greedy continuations: one :class:`Generation` per prompt, in order."""

    def generate(self, prompts: Sequence[str | Prompt]) -> list[Generation]: ...


def single_token_ids(tokenizer, tokens: tuple[str, ...]) -> tuple[int, ...]:
    """The ids of those ``tokens`` that are one token of the vocabulary (added tokens included); the others have
    no id to ban or watch and are left out."""
    vocab = tokenizer.get_vocab()
    return tuple(vocab[t] for t in tokens if t in vocab)


def chat_prompt(tokenizer, user: str, system: str | None = None) -> str:
    """The text a chat model expects before its answer; plain ``user`` text for models without a template."""
    if not getattr(tokenizer, "chat_template", None):
        return user if system is None else f"{system}\n\n{user}"
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def render_prompt(tokenizer, prompt: str | Prompt) -> str:
    """The text the model reads: plain text as it is; a :class:`Prompt` in the chat template when it asks for one."""
    if isinstance(prompt, str):
        return prompt
    return chat_prompt(tokenizer, prompt.user, prompt.system) if prompt.chat else prompt.user


def generate_texts(model, tokenizer, prompts: list[str], *, max_new_tokens: int = 32, batch_size: int = 16,
                   watch_tokens: tuple[str, ...] = (), show_progress: bool = False,
                   stop_at_newline: bool = False, shared_head: bool = True,
                   banned_tokens: tuple[str, ...] = ()) -> list[Generation]:
    """Greedy continuations of ``prompts`` (already formatted text) on the engine's decoder, without signals.

    Continuous batching: at most ``batch_size`` prompts decode together, and a prompt that finishes frees its slot
    for the next one at once (longest prompts first, so a batch holds similar lengths). ``watch_tokens`` names
    tokens (e.g. ``"<RET>"``) whose first-step probability is reported, so a gate's threshold can be swept without
    generating again. ``banned_tokens``: tokens never generated (those that are one token of the vocabulary; their
    first-step probability, when watched, is still the model's). ``shared_head``: the prompts' common start (few-shot
    demos, an instruction preamble) is prefilled once and its KV cache reused by every prompt
    (:func:`adaptive_rag.lm.decoder.shared_head_ids`).
    """
    from adaptive_rag.lm.decoder import BatchDecoder, Sequence, shared_head_ids, stop_token_ids

    if batch_size < 1 or max_new_tokens < 1:
        raise ValueError(f"batch_size and max_new_tokens must be >= 1, got {batch_size} and {max_new_tokens}")
    watch_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in watch_tokens}
    decoder = BatchDecoder(model, tokenizer, capture=False, stop_token_ids=stop_token_ids(tokenizer),
                           watch_token_ids=tuple(watch_ids.values()), max_batch=batch_size,
                           banned_token_ids=single_token_ids(tokenizer, banned_tokens))
    encoded = batch_prompt_ids(tokenizer, prompts)  # BOS once where the tokenizer adds one (Llama-2), none on SmolLM2
    queue = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))  # pop() takes the longest
    if shared_head and len(prompts) > 1:
        # the head all prompts share is the first prompt's common start with the one it shares least with
        def common(ids: list[int]) -> int:
            return next((k for k, (a, b) in enumerate(zip(encoded[0], ids)) if a != b), min(len(ids), len(encoded[0])))

        other = min(range(1, len(prompts)), key=lambda i: common(encoded[i]))
        decoder.set_shared_prefix(shared_head_ids(tokenizer, [prompts[0], prompts[other]]))
    finished: dict[int, Sequence] = {}
    with tqdm(total=len(prompts), desc="generating", unit="prompt", disable=not show_progress) as bar:
        while queue or decoder.seqs:
            free = batch_size - len(decoder.active)
            # Refill when a quarter of the slots are free (or nothing runs): one prefill serves several prompts.
            if queue and (free >= max(1, batch_size // 4) or not decoder.active):
                decoder.admit([Sequence(i, encoded[i], max_new_tokens) for i in
                               (queue.pop() for _ in range(min(free, len(queue))))])
            for seq in [s for s in decoder.seqs if s.done]:
                finished[seq.key] = seq
                bar.update(1)
            decoder.step()  # also drops the finished ones from the batch
    out = []
    for i in range(len(prompts)):
        seq = finished[i]
        text = tokenizer.decode(seq.gen_ids, skip_special_tokens=False)
        if stop_at_newline:
            text = text.strip().split("\n")[0]
        probs = {t: seq.first_probs.get(tid, 0.0) for t, tid in watch_ids.items()}
        out.append(Generation(text=text.strip(), num_tokens=len(seq.gen_ids), first_token_probs=probs,
                              forward_passes=seq.forward_passes))
    return out


class LMGenerator:
    """:class:`Generator` over a loaded model (:func:`generate_texts`): greedy, ``max_new_tokens`` each, at most
    ``batch_size`` prompts decoding together; ``watch_tokens`` reports those tokens' first-step probabilities;
    ``stop_at_newline`` keeps the first line. ``generated_tokens`` / ``forward_passes`` add up every call's."""

    def __init__(self, model, tokenizer, *, max_new_tokens: int = 64, batch_size: int = 16,
                 stop_at_newline: bool = False, watch_tokens: tuple[str, ...] = (), show_progress: bool = False):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.stop_at_newline, self.watch_tokens, self.show_progress = stop_at_newline, watch_tokens, show_progress
        self.generated_tokens = 0  # efficiency figures: total new tokens over all calls, and the forward
        self.forward_passes = 0  # passes each prompt took part in, summed over prompts

    @classmethod
    def from_name(cls, name: str, *, dtype: str = "auto", device: str = "auto", **kwargs) -> LMGenerator:
        from adaptive_rag.lm.models import ModelOptions, load_causal_lm

        model, tokenizer = load_causal_lm(name, ModelOptions(dtype=dtype, device=device))  # type: ignore[arg-type]
        return cls(model, tokenizer, **kwargs)

    def render(self, prompt: str | Prompt) -> str:
        return render_prompt(self.tokenizer, prompt)

    def generate(self, prompts: Sequence[str | Prompt], banned_tokens: tuple[str, ...] = ()) -> list[Generation]:
        gens = generate_texts(self.model, self.tokenizer, [self.render(p) for p in prompts],
                              max_new_tokens=self.max_new_tokens, batch_size=self.batch_size,
                              watch_tokens=self.watch_tokens, show_progress=self.show_progress,
                              stop_at_newline=self.stop_at_newline, banned_tokens=banned_tokens)
        self.generated_tokens += sum(g.num_tokens for g in gens)
        self.forward_passes += sum(g.forward_passes for g in gens)
        return gens
