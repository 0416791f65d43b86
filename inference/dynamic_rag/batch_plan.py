"""How many questions decode together: the largest batch whose memory fits what the machine has, unless the user
names a number; and what to do when a batch runs out of memory anyway (halve it and go on).

A row's memory (:func:`row_bytes`), per question in flight, from the model's shape and the tokens a row holds:

- the prefill's KV cache, the shared head included: the decoder expands the head's cache to every admitted row
  before their own tokens are prefilled (``BatchDecoder._prefill``), so each row briefly holds ``head + own`` tokens;
- the running batch cache: the row's own tokens and its answer (and the head's columns too where the decoder keeps
  a copy per row, ``head_scored_once``), in a buffer with up to half its length spare (``batch_cache``), counted
  twice since a reshuffle copies it into a new buffer while the old one is still alive;
- the prefill's activations of one layer at a time (attention projections, residual, the MLP's gate and up
  products), and on CPU the attention scores SDPA's math path materialises for a masked batch;
- the decode step's logits in float32 and, on CPU, the captured attention rows the question keeps.

KV bytes per token = 2 (keys and values) × layers × KV heads × head dim × dtype bytes.
The budget: on CUDA the free memory (``torch.cuda.mem_get_info`` plus what PyTorch holds cached but unused) less a
tenth for fragmentation; on CPU half the available RAM; a user-set ``memory_budget_gb`` replaces either.
The estimate can be wrong (a tokenizer that spends many tokens on a passage, another process taking memory), so an
out-of-memory error during a batch halves the batch and the unfinished questions run again (``is_out_of_memory``).
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from adaptive_rag.lm.decoder import head_scored_once
from adaptive_rag.lm.tokenization import prompt_ids

AUTO = "auto"
# the auto batch's ceiling: on a CPU the fixed default before the plan existed; on a GPU the largest batch
# bench/gpu_scale.py measures by default
AUTO_CAP = {"cuda": 64, "cpu": 16}
DEFAULT_CAP = 16
CUDA_USABLE = 0.9  # of the free memory: the allocator's fragmentation and kernels' workspaces take the rest
CPU_RAM_FRACTION = 0.5  # of the available RAM: the retriever, the tokenizer and the OS page cache share it
QUESTION_TOKENS = 64  # a long multi-hop question, its template words included
PASSAGE_TOKENS = 192  # a DPR-style 100-word passage with its title, on a Llama-2 tokenizer (about 140), with room
GIB = 2 ** 30

logger = logging.getLogger(__name__)


def parse_batch_size(value: Any) -> int | str:
    """``auto`` or a positive whole number (from YAML, a flag or code); anything else is a ValueError in one line."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        size = int(value) if not isinstance(value, (bool, float)) else None
    except (TypeError, ValueError):
        size = None
    if size is None or size <= 0:
        raise ValueError(f"batch_size must be auto or a positive whole number, got {value!r}")
    return size


class BatchSize:
    """A config field's type that takes ``auto`` or a positive whole number: argparse calls it on a flag's text
    (``--batch_size 8`` gives 8), and the sweep's and the YAML checks leave its values to it."""

    def __new__(cls, value: Any) -> int | str:  # type: ignore[misc]
        try:
            return parse_batch_size(value)
        except ValueError as err:  # argparse prints an ArgumentTypeError's own message, in one line
            import argparse

            raise argparse.ArgumentTypeError(str(err)) from None


@dataclass(frozen=True)
class ModelShape:
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    dtype_bytes: int

    @classmethod
    def of(cls, model) -> ModelShape | None:
        """The shape of a transformers model; None when its config does not say it (a custom model, a test
        double)."""
        try:
            return cls._of(model)
        except (AttributeError, StopIteration, TypeError):
            return None

    @classmethod
    def _of(cls, model) -> ModelShape:
        cfg = model.config
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        hidden, heads = cfg.hidden_size, cfg.num_attention_heads
        return cls(layers=cfg.num_hidden_layers, heads=heads,
                   kv_heads=getattr(cfg, "num_key_value_heads", None) or heads,
                   head_dim=getattr(cfg, "head_dim", None) or hidden // heads, hidden=hidden,
                   intermediate=getattr(cfg, "intermediate_size", None) or 4 * hidden, vocab=cfg.vocab_size,
                   dtype_bytes=next(model.parameters()).element_size())

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True)
class RowTokens:
    """The tokens one row holds at most: the shared head (prefilled once), its own prompt, its answer."""

    head: int
    own: int
    new: int


def row_bytes(shape: ModelShape, tokens: RowTokens, *, device_type: str, head_in_cache: bool,
              captured_heads: int = 1) -> int:
    """Bytes one row needs at its peak (the module docstring lists the terms). ``head_in_cache``: the running cache
    keeps a copy of the head per row; ``captured_heads``: attention rows kept per generated token (0: none, 1: heads
    reduced, the head count: per head)."""
    kv = shape.kv_bytes_per_token
    prefill_kv = kv * (tokens.head + tokens.own)
    running_kv = kv * (tokens.own + tokens.new + (tokens.head if head_in_cache else 0)) * 3 // 2
    activations = tokens.own * (4 * shape.hidden + 3 * shape.intermediate) * shape.dtype_bytes
    logits = 3 * shape.vocab * 4
    total = prefill_kv + 2 * running_kv + activations + logits
    if device_type == "cpu":
        total += shape.heads * tokens.own * (tokens.head + tokens.own) * 4
        total += captured_heads * tokens.new * (tokens.head + tokens.own + tokens.new) * 4
    return total


def available_ram() -> int:
    """Bytes of RAM a new allocation can take now (psutil's ``available``; else /proc/meminfo's MemAvailable)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def memory_budget(device: torch.device, budget_gb: float | None = None) -> tuple[int, str]:
    """Bytes the batch may use on ``device`` and where the figure came from."""
    if budget_gb is not None:
        return int(budget_gb * GIB), f"memory_budget_gb {budget_gb:g}"
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int((free + cached) * CUDA_USABLE), "free CUDA memory"
    return int(available_ram() * CPU_RAM_FRACTION), "half the available RAM"


@dataclass
class BatchPlan:
    """The batch size in force, how it was chosen, and every halving after an out-of-memory error."""

    size: int
    chosen_by: str  # "batch_size" (the user's number) or the budget's source
    budget_bytes: int | None = None
    row_bytes: int | None = None
    halvings: list[dict[str, int]] = field(default_factory=list)

    def describe(self) -> str:
        if self.row_bytes is None:
            return f"batch {self.size} (batch_size)"
        return (f"batch {self.size} (auto: {self.chosen_by} {self.budget_bytes / GIB:.2f} GiB, "
                f"{self.row_bytes / GIB:.3f} GiB per question)")

    def halve(self, answered: int, total: int) -> bool:
        """Halve the batch after an out-of-memory error with ``answered`` of ``total`` questions answered; False
        when it is already 1 (nothing smaller to try)."""
        if self.size <= 1:
            return False
        smaller = self.size // 2
        self.halvings.append({"from": self.size, "to": smaller, "questions_answered": answered})
        logger.warning("out of memory at batch %d: halved to %d; %d answered questions kept, the other %d run again",
                       self.size, smaller, answered, total - answered)
        self.size = smaller
        return True

    def record(self) -> dict[str, Any]:
        """The plan as metrics.json records it."""
        out: dict[str, Any] = {"batch_size": self.size, "chosen_by": self.chosen_by}
        if self.row_bytes is not None:
            out["budget_gib"] = round(self.budget_bytes / GIB, 3)
            out["row_gib"] = round(self.row_bytes / GIB, 4)
        if self.halvings:
            out["halvings"] = list(self.halvings)
        return out


def fixed_plan(requested: int | str) -> BatchPlan:
    """The user's own batch size, halved like any other after an out-of-memory error."""
    return BatchPlan(size=parse_batch_size(requested), chosen_by="batch_size")


UNKNOWN_SHAPE = BatchPlan(size=DEFAULT_CAP, chosen_by="default (the model's config gives no shape to plan from)")


def plan_batch(requested: int | str, shape: ModelShape, tokens: RowTokens, device: torch.device, *,
               budget_gb: float | None = None, head_scored_once: Callable[[int], bool] = lambda rows: True,
               captured_heads: int = 1, cap: int | None = None) -> BatchPlan:
    """The user's ``requested`` number as it is, or (``auto``) the most rows whose :func:`row_bytes` fit the budget,
    at least 1 and at most ``cap`` (default: :data:`AUTO_CAP` for the device). ``head_scored_once(rows)``: whether the
    decoder keeps the shared head out of the batch cache at that batch (else each row holds a copy)."""
    if requested != AUTO:
        return fixed_plan(requested)
    budget, source = memory_budget(device, budget_gb)
    cap = cap or AUTO_CAP.get(device.type, DEFAULT_CAP)

    def rows_for(head_in_cache: bool) -> tuple[int, int]:
        per_row = row_bytes(shape, tokens, device_type=device.type, head_in_cache=head_in_cache,
                            captured_heads=captured_heads)
        return max(1, min(cap, budget // per_row)), per_row

    rows, per_row = rows_for(head_in_cache=False)
    if tokens.head and not head_scored_once(rows):  # a copy of the head per row: fewer rows fit
        rows, per_row = rows_for(head_in_cache=True)
    return BatchPlan(size=rows, chosen_by=source, budget_bytes=budget, row_bytes=per_row)


def prompt_row_tokens(own_prompt: int, new_tokens: int, *, head: int = 0, top_k: int = 0) -> RowTokens:
    """A row's tokens from a prompt measured without question or documents (``own_prompt`` tokens after the shared
    ``head``): a long question, ``top_k`` passages and the answer written in earlier rounds are added."""
    return RowTokens(head=head, own=own_prompt + QUESTION_TOKENS + top_k * PASSAGE_TOKENS + new_tokens,
                     new=new_tokens)


def plan_engine_batch(requested: int | str, model, tokenizer, prompts, *, head_ids: list[int], top_k: int,
                      max_new_tokens: int, capture: bool, per_head: bool, budget_gb: float | None = None) -> BatchPlan:
    """The dynamic-RAG engine's batch: rows hold the prompt builder's prompt after the shared ``head_ids`` (empty:
    no shared head, the whole prompt is the row's own), a long question, ``top_k`` passages (0: the method never
    retrieves) and up to ``max_new_tokens`` of answer, written and carried into later rounds. ``capture``: the
    decoder keeps each token's attention row (``per_head``: one per head)."""
    if requested != AUTO:
        return fixed_plan(requested)
    bare = min(len(prompt_ids(tokenizer, text)) for text in prompts.head_probes())  # a probe question, no documents
    shape = ModelShape.of(model)
    if shape is None:
        return replace(UNKNOWN_SHAPE)
    param = next(model.parameters())
    tokens = prompt_row_tokens(max(0, bare - len(head_ids)), max_new_tokens, head=len(head_ids), top_k=top_k)
    return plan_batch(AUTO, shape, tokens, param.device, budget_gb=budget_gb,
                      head_scored_once=lambda rows: head_scored_once(param.dtype, rows),
                      captured_heads=0 if not capture else shape.heads if per_head else 1)


def plan_generator_batch(requested: int | str, model, *, prompt_tokens: int | Callable[[], int], top_k: int,
                         new_tokens: int, budget_gb: float | None = None) -> BatchPlan:
    """A plain generator's batch (Iter-RetGen's, the ADAPT-LLM gate's: no shared head): rows hold a prompt of
    ``prompt_tokens`` template tokens (or a function that counts them, called only when a plan is made), a long
    question, ``top_k`` passages and ``new_tokens`` of answer."""
    if requested != AUTO:
        return fixed_plan(requested)
    shape = ModelShape.of(model)
    if shape is None:
        return replace(UNKNOWN_SHAPE)
    template = prompt_tokens() if callable(prompt_tokens) else prompt_tokens
    tokens = RowTokens(head=0, own=template + QUESTION_TOKENS + top_k * PASSAGE_TOKENS, new=new_tokens)
    return plan_batch(AUTO, shape, tokens, next(model.parameters()).device, budget_gb=budget_gb)


def is_out_of_memory(err: BaseException) -> bool:
    """CUDA's (and MPS's) out-of-memory error, or the CPU allocator's failure (a RuntimeError that says it could
    not allocate)."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(s in text for s in (
        "can't allocate memory", "could not allocate", "cannot allocate memory", "out of memory"))


def release_memory(device: torch.device) -> None:
    """Return what a failed batch held: Python's cycles first (tensors the traceback's frames kept), then CUDA's
    cache, so the next, smaller batch can have it."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
