"""Losses over cosine similarities of unit-length query and document vectors."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def softmax_cosine_loss(pos: torch.Tensor, neg: torch.Tensor, gamma: float) -> torch.Tensor:
    """−log P(D⁺|Q), P = softmax over γ·cos of [D⁺, D⁻₁..D⁻ⱼ] (DSSM/CLSM Eq. 5-6), mean over
    queries. ``pos``: (B,), ``neg``: (B, J) with −inf where a negative slot is empty."""
    logits = gamma * torch.cat([pos[:, None], neg], dim=1)
    return F.cross_entropy(logits, torch.zeros(len(pos), dtype=torch.long, device=pos.device))


def in_batch_loss(sims: torch.Tensor, same: torch.Tensor, gamma: float) -> torch.Tensor:
    """Each query's positive against the other queries' positives in the batch (B × B cosines);
    ``same`` marks off-diagonal entries that are positives of that query too (masked out)."""
    logits = (gamma * sims).masked_fill(same, float("-inf"))
    return F.cross_entropy(logits, torch.arange(len(sims), device=sims.device))


def pairwise_hinge_loss(pos: torch.Tensor, neg: torch.Tensor, margin: float) -> torch.Tensor:
    """max(0, margin − s⁺ + s⁻) averaged over valid (finite) negatives."""
    valid = torch.isfinite(neg)
    loss = torch.clamp(margin - pos[:, None] + torch.where(valid, neg, torch.zeros_like(neg)), min=0)
    return (loss * valid).sum() / valid.sum().clamp(min=1)


def graded_hinge_loss(scores: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, margin: float) -> torch.Tensor:
    """Pairwise max-margin hinge over graded labels (bert-semantic-retrieval-2020 Eq. 3): per
    query, the mean over pairs i, j with y_i > y_j of max(0, τ − (y_i − y_j)(s_i − s_j)); then the
    mean over queries that have such a pair. ``scores``/``labels``: (queries, slots); ``valid``
    masks the padded slots. (Pairs of equal grade only add the constant τ, so they are left out.)"""
    ds = scores[:, :, None] - scores[:, None, :]
    dy = (labels[:, :, None] - labels[:, None, :]).to(scores.dtype)
    pair = (dy > 0) & valid[:, :, None] & valid[:, None, :]
    loss = torch.clamp(margin - dy * ds, min=0) * pair
    n = pair.sum((1, 2))
    has = n > 0
    if not bool(has.any()):
        return scores.sum() * 0.0
    return (loss.sum((1, 2))[has] / n[has]).mean()
