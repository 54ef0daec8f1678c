"""Losses over cosine similarities of unit-length query and document vectors."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor, scale: float | None) -> torch.Tensor:
    """The mean over rows (``scale`` None), or their sum times ``scale`` (a rank's share of a
    distributed batch's mean: ``distributed.loss_scale``)."""
    if scale is None:
        return F.cross_entropy(logits, target)
    return F.cross_entropy(logits, target, reduction="sum") * scale


def softmax_cosine_loss(pos: torch.Tensor, neg: torch.Tensor, gamma: float, scale: float | None = None) -> torch.Tensor:
    """−log P(D⁺|Q), P = softmax over γ·cos of [D⁺, D⁻₁..D⁻ⱼ] (DSSM/CLSM Eq. 5-6), mean over
    queries. ``pos``: (B,), ``neg``: (B, J) with −inf where a negative slot is empty."""
    logits = gamma * torch.cat([pos[:, None], neg], dim=1)
    return _cross_entropy(logits, torch.zeros(len(pos), dtype=torch.long, device=pos.device), scale)


def in_batch_loss(sims: torch.Tensor, same: torch.Tensor, gamma: float, *, first: int = 0,
                  scale: float | None = None) -> torch.Tensor:
    """Each query's positive against the other queries' positives in the batch (B × B cosines, or
    a rank's B' × B: its queries' positives are columns ``first``..``first + B'``); ``same`` marks
    the other entries that are positives of that query too (masked out)."""
    logits = (gamma * sims).masked_fill(same, float("-inf"))
    return _cross_entropy(logits, torch.arange(first, first + len(sims), device=sims.device), scale)


def pairwise_hinge_loss(pos: torch.Tensor, neg: torch.Tensor, margin: float, scale: float | None = None) -> torch.Tensor:
    """max(0, margin − s⁺ + s⁻) averaged over valid (finite) negatives (``scale``: summed times it
    instead, a rank's share of a distributed batch's mean)."""
    valid = torch.isfinite(neg)
    loss = torch.clamp(margin - pos[:, None] + torch.where(valid, neg, torch.zeros_like(neg)), min=0)
    if scale is not None:
        return (loss * valid).sum() * scale
    return (loss * valid).sum() / valid.sum().clamp(min=1)


def graded_hinge_loss(scores: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, margin: float,
                      scale: float | None = None) -> torch.Tensor:
    """Pairwise max-margin hinge over graded labels (bert-semantic-retrieval-2020 Eq. 3): per
    query, the mean over pairs i, j with y_i > y_j of max(0, τ − (y_i − y_j)(s_i − s_j)); then the
    mean over queries that have such a pair (``scale``: their sum times it instead, a rank's share).
    ``scores``/``labels``: (queries, slots); ``valid`` masks the padded slots. (Pairs of equal
    grade only add the constant τ, so they are left out.)"""
    ds = scores[:, :, None] - scores[:, None, :]
    dy = (labels[:, :, None] - labels[:, None, :]).to(scores.dtype)
    pair = (dy > 0) & valid[:, :, None] & valid[:, None, :]
    loss = torch.clamp(margin - dy * ds, min=0) * pair
    n = pair.sum((1, 2))
    has = n > 0
    if not bool(has.any()):
        return scores.sum() * 0.0
    per_query = loss.sum((1, 2))[has] / n[has]
    return per_query.mean() if scale is None else per_query.sum() * scale


def has_graded_pair(labels: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per query (row), whether ``graded_hinge_loss`` has a pair for it: two valid slots of
    different grades (the count a distributed batch's mean divides by)."""
    hi = np.where(valid, labels, -np.inf).max(1)
    lo = np.where(valid, labels, np.inf).min(1)
    return hi > lo
