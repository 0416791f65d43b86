"""Seeded sampling as ``model.generate`` does it when a checkpoint's ``generation_config.json`` asks for it.

DRAGIN's reference code calls ``generate`` without ``do_sample=False``, so the checkpoint decides: Llama-2 chat ships
``do_sample: true``, temperature 0.6, top-p 0.9 (top-k then takes transformers' default, 50). Its entropies and token
probabilities come from ``outputs.scores``, the *processed* scores (after temperature, top-k and top-p; a token cut
away has probability 0). :class:`Sampler` reproduces that order of warpers (transformers' ``TemperatureLogitsWarper``,
``TopKLogitsWarper``, ``TopPLogitsWarper``) with a seeded generator, so a run is repeatable for the same batch layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Sampler:
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if self.temperature <= 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError("sampling needs temperature > 0, 0 < top_p <= 1 and top_k >= 0")
        self.generator = torch.Generator().manual_seed(self.seed)

    @classmethod
    def from_checkpoint(cls, model, seed: int) -> Sampler | None:
        """The sampler the model's generation config asks for, or None where it decodes greedily."""
        gen = getattr(model, "generation_config", None)
        if gen is None or not getattr(gen, "do_sample", False):
            return None
        top_k = getattr(gen, "top_k", None)
        return cls(temperature=float(gen.temperature or 1.0), top_k=50 if top_k is None else int(top_k),
                   top_p=float(gen.top_p or 1.0), seed=seed)

    def processed_logp(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-probabilities after temperature, top-k and top-p: (B, V) -> (B, V), -inf where a token is cut."""
        scores = logits.float() / self.temperature
        if self.top_k:
            kth = torch.topk(scores, min(self.top_k, scores.shape[-1]), dim=-1).values[..., -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if self.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, dim=-1)  # ascending, as transformers' TopPLogitsWarper
            cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
            drop = cumulative <= (1 - self.top_p)
            drop[..., -1] = False  # the most likely token always stays
            scores = scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
        return torch.log_softmax(scores, dim=-1)

    def choose(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled token, its processed probability and the processed distribution's entropy: three (B,) tensors."""
        logp = self.processed_logp(logits)
        probs = logp.exp()
        token = torch.multinomial(probs.cpu(), 1, generator=self.generator).squeeze(-1).to(logits.device)
        entropy = -(probs * logp.nan_to_num(neginf=0.0)).sum(dim=-1)
        return token, probs.gather(-1, token[:, None]).squeeze(-1), entropy
