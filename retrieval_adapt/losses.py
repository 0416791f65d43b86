"""Iter-RetGen's retrieval-adaptation loss: KL(P_reranker || P_retriever) over each question's candidates.

Reference (SPEC "Iter-RetGen"; sentence-transformers ``DistillKLDivLoss`` for the shape): for question i with
candidates p_1 … p_K, re-ranker scores t_ik and retriever scores s_ik = <E_q(q_i), E_p(p_k)>,

    P_rr(k)  = softmax_k(t_ik / tau_t)          (teacher, computed under no_grad)
    P_ret(k) = softmax_k(s_ik / tau_s)          (student: only the query encoder gets gradients)
    loss     = tau_s^2 * mean_i KL(P_rr || P_ret)

``KLDivLoss(reduction="batchmean")`` on ``log_softmax(s / tau_s)`` against ``softmax(t / tau_t)``; the tau_s^2
factor (Hinton et al.) keeps gradient magnitudes comparable across temperatures and can be switched off.
The paper does not publish tau; the defaults here are argued in :class:`KLDistillationLoss`.
"""

from __future__ import annotations

import torch
from torch import nn

# A masked candidate gets this logit instead of -inf: a softmax gives it probability 0 exactly, while
# ``kl_div`` never computes 0 * inf = nan on it.
_MASKED_LOGIT = -1e4


def _check_shapes(query_emb: torch.Tensor, passage_emb: torch.Tensor, teacher_scores: torch.Tensor,
                  mask: torch.Tensor | None) -> None:
    if query_emb.dim() != 2:
        raise ValueError(f"query_embeddings must have shape (B, D), got {tuple(query_emb.shape)}")
    b, d = query_emb.shape
    if passage_emb.dim() != 3 or passage_emb.shape[0] != b or passage_emb.shape[2] != d:
        raise ValueError(f"passage_embeddings must have shape (B, K, D) = ({b}, K, {d}), "
                         f"got {tuple(passage_emb.shape)}")
    k = passage_emb.shape[1]
    if k < 1:
        raise ValueError("passage_embeddings must hold at least one candidate per question (K >= 1)")
    if tuple(teacher_scores.shape) != (b, k):
        raise ValueError(f"teacher_scores must have shape (B, K) = ({b}, {k}), got {tuple(teacher_scores.shape)}")
    if mask is not None:
        if tuple(mask.shape) != (b, k):
            raise ValueError(f"mask must have shape (B, K) = ({b}, {k}), got {tuple(mask.shape)}")
        if not bool(mask.any(dim=1).all()):
            raise ValueError("mask must keep at least one candidate per question")


def _entropy(log_p: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of the rows of a log-distribution (B, K); 0 * log 0 counts as 0."""
    p = log_p.exp()
    return -(torch.where(p > 0, p * log_p, torch.zeros_like(p))).sum(dim=1).mean()


class KLDistillationLoss(nn.Module):
    """KL distillation of re-ranker scores into a dense retriever's query encoder.

    Args:
        query_encoder: a module mapping a list of query strings to (B, D) embeddings with gradients
            (:class:`~retrieval_adapt.encoders.MeanPoolingEncoder`, possibly wrapped by accelerate). May be None
            when only :meth:`compute_loss_from_embeddings` is used.
        temperature: tau_s for the retriever's scores. 0.05 suits L2-normalised encoders such as MiniLM, whose
            inner products are cosines in [-1, 1]: at tau 1 every candidate distribution would be nearly uniform
            and could not match a peaked teacher. Use ~1.0 for Contriever (unnormalised dot products).
        teacher_temperature: tau_t for the re-ranker's scores. 1.0 keeps log-probability scores (the LLM
            scorer's log P(answer | paragraph, ...)) a proper posterior over candidates; raise it to soften a
            teacher that is too peaked.
        scale_by_temperature_squared: multiply by tau_s^2 (Hinton's rule, as sentence-transformers does).
    """

    def __init__(self, query_encoder: nn.Module | None = None, *, temperature: float = 0.05,
                 teacher_temperature: float = 1.0, scale_by_temperature_squared: bool = True):
        super().__init__()
        if temperature <= 0 or teacher_temperature <= 0:
            raise ValueError(f"temperatures must be positive, got temperature={temperature}, "
                             f"teacher_temperature={teacher_temperature}")
        self.query_encoder = query_encoder
        self.temperature, self.teacher_temperature = temperature, teacher_temperature
        self.scale = temperature**2 if scale_by_temperature_squared else 1.0
        self.kl = nn.KLDivLoss(reduction="batchmean")

    def forward(self, queries: list[str], passage_embeddings: torch.Tensor, teacher_scores: torch.Tensor,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Encode ``queries`` (B strings) and compare with fixed ``passage_embeddings`` (B, K, D)."""
        if self.query_encoder is None:
            raise ValueError("this loss was built without a query_encoder; call compute_loss_from_embeddings")
        query_emb = self.query_encoder(list(queries))  # (B, D)
        return self.compute_loss_from_embeddings(query_emb, passage_embeddings.to(query_emb.device),
                                                 teacher_scores.to(query_emb.device),
                                                 None if mask is None else mask.to(query_emb.device))

    def compute_loss_from_embeddings(self, query_emb: torch.Tensor, passage_emb: torch.Tensor,
                                     teacher_scores: torch.Tensor, mask: torch.Tensor | None = None
                                     ) -> tuple[torch.Tensor, dict[str, float]]:
        """Loss and stats from query (B, D), passage (B, K, D) embeddings and teacher scores (B, K).

        ``mask`` (B, K), True = a real candidate, lets questions with fewer than K candidates share a batch.
        Returns ``(loss, stats)``; stats: ``loss``, ``kl`` (unscaled), ``teacher_entropy``, ``student_entropy``
        (nats), ``agreement@1`` (share of questions whose top candidate is the same for both), ``score_std``
        (spread of retriever scores: a cheap collapse detector).
        """
        _check_shapes(query_emb, passage_emb, teacher_scores, mask)
        scores = torch.einsum("bd,bkd->bk", query_emb, passage_emb.to(query_emb.dtype))  # (B, K)
        student_logits = scores / self.temperature
        with torch.no_grad():  # the teacher is a fixed target: no gradient ever flows into its scores
            teacher_logits = teacher_scores.to(scores.dtype) / self.teacher_temperature
        if mask is not None:
            mask = mask.bool()
            student_logits = student_logits.masked_fill(~mask, _MASKED_LOGIT)
            teacher_logits = teacher_logits.masked_fill(~mask, _MASKED_LOGIT)
        student_log_p = torch.log_softmax(student_logits, dim=1)  # (B, K)
        teacher_p = torch.softmax(teacher_logits, dim=1)  # (B, K)
        kl = self.kl(student_log_p, teacher_p)
        loss = kl * self.scale
        with torch.no_grad():
            agree = (student_logits.argmax(dim=1) == teacher_logits.argmax(dim=1)).float().mean()
            real = scores if mask is None else scores[mask]
            stats = {
                "loss": float(loss), "kl": float(kl),
                "teacher_entropy": float(_entropy(torch.log_softmax(teacher_logits, dim=1))),
                "student_entropy": float(_entropy(student_log_p)),
                "agreement@1": float(agree), "score_std": float(real.float().std()) if real.numel() > 1 else 0.0,
            }
        return loss, stats
