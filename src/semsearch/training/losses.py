"""Losses over cosine similarities of unit-length query and document vectors."""

from __future__ import annotations

from typing import get_args

import numpy as np
import torch
import torch.nn.functional as F

from .args import ListLoss


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


def in_batch_loss(
    sims: torch.Tensor, same: torch.Tensor, gamma: float, *, first: int = 0, scale: float | None = None
) -> torch.Tensor:
    """Each query's positive against the other queries' positives in the batch (B × B cosines, or
    a rank's B' × B: its queries' positives are columns ``first``..``first + B'``); ``same`` marks
    the other entries that are positives of that query too (masked out).

    Args:
        sims: (B, B) or (B', B) cosines of queries to the batch's positives.
        same: marks other entries that are positives of the query too.
        gamma: the softmax's γ.
        first: the column of this rank's first query's positive.
        scale: a rank's share: the sum times ``scale`` instead of the mean.

    Returns:
        The loss."""
    logits = (gamma * sims).masked_fill(same, float("-inf"))
    return _cross_entropy(logits, torch.arange(first, first + len(sims), device=sims.device), scale)


def pairwise_hinge_loss(
    pos: torch.Tensor, neg: torch.Tensor, margin: float, scale: float | None = None
) -> torch.Tensor:
    """max(0, margin − s⁺ + s⁻) averaged over valid (finite) negatives (``scale``: summed times it
    instead, a rank's share of a distributed batch's mean)."""
    valid = torch.isfinite(neg)
    loss = torch.clamp(margin - pos[:, None] + torch.where(valid, neg, torch.zeros_like(neg)), min=0)
    if scale is not None:
        return (loss * valid).sum() * scale
    return (loss * valid).sum() / valid.sum().clamp(min=1)


def graded_hinge_loss(
    scores: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, margin: float, scale: float | None = None
) -> torch.Tensor:
    """Pairwise max-margin hinge over graded labels (bert-semantic-retrieval-2020 Eq. 3): per
    query, the mean over pairs i, j with y_i > y_j of max(0, τ − (y_i − y_j)(s_i − s_j)); then the
    mean over queries that have such a pair (``scale``: their sum times it instead, a rank's share).
    ``scores``/``labels``: (queries, slots); ``valid`` masks the padded slots. (Pairs of equal
    grade only add the constant τ, so they are left out.)

    Args:
        scores: (queries, slots) scores.
        labels: (queries, slots) grades.
        valid: masks the padded slots.
        margin: τ.
        scale: a rank's share: the sum times ``scale`` instead of the mean.

    Returns:
        The loss."""
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


def listnet_loss(
    scores: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """ListNet's listwise loss (Cao et al. 2007, top-one probabilities) over each query's list:
    the cross-entropy −Σᵢ P_y(i) log P_s(i), P_s the softmax of the scores and P_y the softmax of
    the grades over the query's valid slots; then the mean over queries with two different grades
    (the queries ``graded_hinge_loss`` counts, so a distributed batch divides by the same number;
    ``scale``: their sum times it instead). A query's whole judged list moves together, weighted
    by grade, where the hinge only sees pairs and stops once a pair clears the margin.
    Shapes as ``graded_hinge_loss``."""
    y = labels.to(scores.dtype)
    log_p = torch.log_softmax(scores.masked_fill(~valid, float("-inf")), dim=1)
    target = torch.softmax(y.masked_fill(~valid, float("-inf")), dim=1)
    per_query = -(target * log_p.masked_fill(~valid, 0.0)).sum(1)
    return _over_graded(per_query, y, valid, scores, scale)


def margin_mse_loss(
    scores: torch.Tensor, teacher: torch.Tensor, valid: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """Margin-MSE (Hofstätter et al. 2020, "Improving efficient neural ranking models with
    cross-architecture knowledge distillation"), over every pair of a query's list instead of one
    positive–negative pair: the mean over pairs i < j of ((s_i − s_j) − (t_i − t_j))², ``teacher``
    holding t. With e = s − t that mean is 2·Σ(e_i − ē)² / (n − 1), computed so in O(n). Then the
    mean over queries with two valid slots whose teacher scores differ (``scale``: their sum times
    it instead). The student learns the teacher's margins, not its scale or offset, so a
    bi-encoder's cosine can follow a cross-encoder's logits once those are rescaled. Shapes as
    ``graded_hinge_loss``."""
    t = teacher.to(scores.dtype)
    e = (scores - t).masked_fill(~valid, 0.0)
    n = valid.sum(1).to(scores.dtype)
    mean = e.sum(1) / n.clamp(min=1)
    per_query = 2 * (((e - mean[:, None]) ** 2) * valid).sum(1) / (n - 1).clamp(min=1)
    return _over_graded(per_query, t, valid, scores, scale)


def grade_targets(labels: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """Each grade as a distribution over the grade ``levels`` (K, increasing): a grade between two
    levels splits between them linearly, so the distribution's mean is the grade itself (a grade
    averaged over raters, 2.33 over levels 0-4, is 2/3 on level 2 and 1/3 on level 3).
    ``labels``: any shape, within [levels[0], levels[-1]]; returns that shape + (K,)."""
    y = labels.to(levels.dtype).clamp(levels[0], levels[-1])
    hi = torch.searchsorted(levels, y.contiguous(), right=False).clamp(1, len(levels) - 1)
    lo = hi - 1
    w_hi = (y - levels[lo]) / (levels[hi] - levels[lo])
    out = torch.zeros(*y.shape, len(levels), dtype=levels.dtype, device=labels.device)
    out.scatter_(-1, lo[..., None], (1 - w_hi)[..., None])
    out.scatter_add_(-1, hi[..., None], w_hi[..., None])
    return out


def grade_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, levels: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """A graded head's pointwise loss: per pair, the cross-entropy between its grade as a
    distribution over ``levels`` (``grade_targets``) and the softmax of its (K) grade logits; per
    query, the mean over its valid pairs; then the mean over the queries the list losses count
    (two different grades; ``scale``: their sum times it instead). ``logits``: (queries, slots, K);
    ``labels``/``valid`` as ``graded_hinge_loss``.

    Args:
        logits: (queries, slots, K) grade logits.
        labels: (queries, slots) grades.
        valid: masks the padded slots.
        levels: the K grade levels.
        scale: a rank's share: the sum times ``scale`` instead of the mean.

    Returns:
        The loss."""
    target = grade_targets(labels, levels.to(logits.dtype))
    ce = -(target * torch.log_softmax(logits, dim=-1)).sum(-1).masked_fill(~valid, 0.0)
    per_query = ce.sum(1) / valid.sum(1).clamp(min=1)
    return _over_graded(per_query, labels.to(logits.dtype), valid, logits, scale)


def _over_graded(
    per_query: torch.Tensor, y: torch.Tensor, valid: torch.Tensor, scores: torch.Tensor, scale: float | None
) -> torch.Tensor:
    """The mean of ``per_query`` over the queries whose valid slots hold two different values of
    ``y`` (grades, or a teacher's scores; ``has_graded_pair`` is the same test in numpy, for the
    distributed scale); ``scale``: their sum times it instead. No such query: a zero that is still
    attached to ``scores``."""
    hi = y.masked_fill(~valid, float("-inf")).amax(1)
    lo = y.masked_fill(~valid, float("inf")).amin(1)
    has = hi > lo
    if not bool(has.any()):
        return scores.sum() * 0.0
    return per_query[has].mean() if scale is None else per_query[has].sum() * scale


LIST_LOSSES: tuple[str, ...] = get_args(ListLoss)
"""The losses over a query's graded list (``TransformerArgs.loss``): Eq. 3's pairwise hinge,
ListNet, Margin-MSE against a teacher's scores."""


def graded_list_loss(
    loss: str,
    scores: torch.Tensor,
    labels: torch.Tensor,
    valid: torch.Tensor,
    margin: float,
    scale: float | None = None,
) -> torch.Tensor:
    """The named loss over graded lists (``LIST_LOSSES``); ``margin`` is the hinge's τ (the others
    have none). For "margin_mse" ``labels`` are the teacher's scores, not grades.

    Args:
        loss: a name in ``LIST_LOSSES``.
        scores: (queries, slots) scores.
        labels: (queries, slots) grades (teacher scores for "margin_mse").
        valid: masks the padded slots.
        margin: the hinge's τ.
        scale: a rank's share: the sum times ``scale`` instead of the mean.

    Returns:
        The loss."""
    if loss == "hinge":
        return graded_hinge_loss(scores, labels, valid, margin, scale)
    if loss == "listnet":
        return listnet_loss(scores, labels, valid, scale)
    if loss == "margin_mse":
        return margin_mse_loss(scores, labels, valid, scale)
    raise ValueError(f"unknown list loss {loss!r}; one of {', '.join(LIST_LOSSES)}")


def has_graded_pair(labels: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per query (row), whether ``graded_hinge_loss`` has a pair for it: two valid slots of
    different grades (the count a distributed batch's mean divides by)."""
    hi = np.where(valid, labels, -np.inf).max(1)
    lo = np.where(valid, labels, np.inf).min(1)
    return hi > lo
