"""KLDistillationLoss: hand-computed values, zero at agreement, masking, stats, bad shapes."""

from __future__ import annotations

import math

import pytest
import torch

from retrieval_adapt.losses import KLDistillationLoss


def test_kl_matches_hand_computed_value():
    # One question, K = 2 candidates, D = 1: query q = [1], passages p1 = [ln 3], p2 = [0]
    # -> retriever scores s = (ln 3, 0); at tau_s = 1: P_ret = softmax(s) = (3/4, 1/4).
    # Teacher scores t = (0, 0) at tau_t = 1: P_rr = (1/2, 1/2).
    # KL(P_rr || P_ret) = 1/2 ln((1/2)/(3/4)) + 1/2 ln((1/2)/(1/4)) = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3)
    #                   = 0.143841...; batchmean over B = 1 and tau_s^2 = 1 leave it unchanged.
    loss_fn = KLDistillationLoss(temperature=1.0, teacher_temperature=1.0)
    q = torch.tensor([[1.0]])
    p = torch.tensor([[[math.log(3.0)], [0.0]]])
    loss, stats = loss_fn.compute_loss_from_embeddings(q, p, torch.zeros(1, 2))
    assert loss.item() == pytest.approx(0.5 * math.log(4 / 3), abs=1e-6)
    assert stats["kl"] == pytest.approx(0.143841, abs=1e-6)
    assert stats["teacher_entropy"] == pytest.approx(math.log(2), abs=1e-6)


def test_temperatures_and_t_squared_scaling():
    # Same inputs at tau_s = 2: s / 2 = (ln 3 / 2, 0) -> P_ret = (sqrt3, 1) / (sqrt3 + 1) = (0.6340, 0.3660).
    # KL = 1/2 ln(0.5/0.633975) + 1/2 ln(0.5/0.366025) = 0.5 * (-0.237411 + 0.311916) = 0.037252; loss = 4 * KL.
    q = torch.tensor([[1.0]])
    p = torch.tensor([[[math.log(3.0)], [0.0]]])
    loss, stats = KLDistillationLoss(temperature=2.0).compute_loss_from_embeddings(q, p, torch.zeros(1, 2))
    assert stats["kl"] == pytest.approx(0.037252, abs=1e-5)
    assert loss.item() == pytest.approx(4 * 0.037252, abs=1e-4)
    unscaled, _ = KLDistillationLoss(temperature=2.0, scale_by_temperature_squared=False).compute_loss_from_embeddings(
        q, p, torch.zeros(1, 2))
    assert unscaled.item() == pytest.approx(0.037252, abs=1e-5)
    _, soft = KLDistillationLoss(temperature=1.0, teacher_temperature=2.0).compute_loss_from_embeddings(
        q, p, torch.tensor([[2.0, 0.0]]))
    # Teacher t = (2, 0) at tau_t = 2 -> P_rr = softmax(1, 0) = (e/(e+1), 1/(e+1)) = (0.7311, 0.2689);
    # its entropy = ln(1 + e) - e/(1+e) = 0.582203
    assert soft["teacher_entropy"] == pytest.approx(0.582203, abs=1e-5)


def test_zero_when_distributions_agree_and_agreement_stat():
    torch.manual_seed(0)
    q, p = torch.randn(3, 8), torch.randn(3, 5, 8)
    scores = torch.einsum("bd,bkd->bk", q, p)
    loss_fn = KLDistillationLoss(temperature=0.5, teacher_temperature=0.5)
    loss, stats = loss_fn.compute_loss_from_embeddings(q, p, scores)  # teacher = the retriever itself
    assert loss.item() == pytest.approx(0.0, abs=1e-6)
    assert stats["agreement@1"] == 1.0
    _, flipped = loss_fn.compute_loss_from_embeddings(q, p, -scores)
    assert flipped["agreement@1"] == 0.0 and flipped["kl"] > 0


def test_mask_equals_dropping_the_candidates():
    torch.manual_seed(1)
    q, p, t = torch.randn(2, 4), torch.randn(2, 3, 4), torch.randn(2, 3)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    loss_fn = KLDistillationLoss(temperature=1.0)
    masked, _ = loss_fn.compute_loss_from_embeddings(q, p, t, mask)
    first, _ = loss_fn.compute_loss_from_embeddings(q[:1], p[:1, :2], t[:1, :2])
    second, _ = loss_fn.compute_loss_from_embeddings(q[1:], p[1:], t[1:])
    assert masked.item() == pytest.approx((first.item() + second.item()) / 2, abs=1e-6)  # batchmean over B = 2


def test_gradient_reaches_queries_only():
    q = torch.randn(2, 4, requires_grad=True)
    p = torch.randn(2, 3, 4, requires_grad=True)
    t = torch.randn(2, 3, requires_grad=True)
    loss, _ = KLDistillationLoss(temperature=1.0).compute_loss_from_embeddings(q, p, t)
    loss.backward()
    assert q.grad is not None and q.grad.abs().sum() > 0
    assert t.grad is None  # the teacher is a fixed target


@pytest.mark.parametrize("q_shape,p_shape,t_shape,mask_shape,match", [
    ((2,), (2, 3, 4), (2, 3), None, r"query_embeddings must have shape \(B, D\)"),
    ((2, 4), (2, 3), (2, 3), None, r"passage_embeddings must have shape \(B, K, D\) = \(2, K, 4\), got \(2, 3\)"),
    ((2, 4), (3, 3, 4), (2, 3), None, r"= \(2, K, 4\), got \(3, 3, 4\)"),
    ((2, 4), (2, 3, 5), (2, 3), None, r"= \(2, K, 4\), got \(2, 3, 5\)"),
    ((2, 4), (2, 3, 4), (2, 4), None, r"teacher_scores must have shape \(B, K\) = \(2, 3\), got \(2, 4\)"),
    ((2, 4), (2, 3, 4), (2, 3), (2, 2), r"mask must have shape \(B, K\) = \(2, 3\), got \(2, 2\)"),
])
def test_bad_shapes_raise(q_shape, p_shape, t_shape, mask_shape, match):
    mask = None if mask_shape is None else torch.ones(mask_shape, dtype=torch.bool)
    with pytest.raises(ValueError, match=match):
        KLDistillationLoss().compute_loss_from_embeddings(torch.zeros(q_shape), torch.zeros(p_shape),
                                                          torch.zeros(t_shape), mask)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="temperatures must be positive"):
        KLDistillationLoss(temperature=0.0)
    with pytest.raises(ValueError, match="at least one candidate per question"):
        KLDistillationLoss().compute_loss_from_embeddings(torch.zeros(1, 2), torch.zeros(1, 2, 2), torch.zeros(1, 2),
                                                          torch.zeros(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="built without a query_encoder"):
        KLDistillationLoss()(["q"], torch.zeros(1, 2, 2), torch.zeros(1, 2))


def test_forward_encodes_queries():
    class Enc(torch.nn.Module):
        def forward(self, texts):
            return torch.tensor([[float(len(t)), 1.0] for t in texts])

    loss_fn = KLDistillationLoss(Enc(), temperature=1.0)
    p = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    loss, _ = loss_fn(["ab"], p, torch.tensor([[2.0, 1.0]]))  # s = (2, 1) = teacher -> KL = 0
    assert loss.item() == pytest.approx(0.0, abs=1e-6)
