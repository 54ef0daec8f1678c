"""Pairwise training of the interaction scorers (K-NRM, MatchPyramid; BERT retrieval paper §3:
pairwise max-margin hinge).

Each positive (query, document) pair is scored against J random documents of the pool and h judged
documents graded below the positive threshold; the loss is max(0, margin − s⁺ + s⁻) averaged over
the negatives (``losses.pairwise_hinge_loss``). Negatives are drawn as for DSSM/CLSM
(``negatives``), and epochs, dev early stopping, checkpoints and resume are the shared
``trainer.run_epochs``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data import EvalSet, TrainingData
from ..device import model_device
from ..models.interaction import InteractionModel
from . import distributed
from .args import PairwiseArgs
from .losses import pairwise_hinge_loss
from .negatives import hard_negatives, random_negatives, sample_pool
from .trainer import Pairs, make_optimizer, run_epochs


def train_interaction(
    model: InteractionModel,
    data: TrainingData,
    dev: EvalSet | None = None,
    *,
    args: PairwiseArgs,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train ``model`` in place on ``data``'s positive pairs; returns a JSON-serialisable log.

    Args:
        model: the interaction model trained in place.
        data: the training split and collection.
        dev: the dev queries (early stopping).
        args: the training settings.
        progress: show progress.
        checkpoint_dir: where to checkpoint (None: nowhere).
        resume: resume from the checkpoint.

    Returns:
        The training log."""
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    pairs = Pairs.build(data)
    vocab = model.vocabulary([*pairs.q_texts, *data.doc_texts])
    model.build(vocab, args.seed)
    net = model.net
    assert net is not None
    q_ids, d_ids = model.encode(pairs.q_texts), model.encode(data.doc_texts)
    opt = make_optimizer(args, net.parameters())
    j, h, n_docs = args.negatives, args.hard_negatives, len(d_ids)
    pool_size = min(args.neg_pool, args.batch_size * max(j, 1), n_docs)

    def step(rows: np.ndarray) -> torch.Tensor:
        # under torchrun the negatives are drawn for the global batch (``rows``, the same on every
        # rank) and each rank scores its slice; its loss is its share of the mean over all valid pairs
        q_rows, d_rows = pairs.q_rows[rows], pairs.d_rows[rows]
        parts = []
        if j > 0:
            pool = sample_pool(rng, n_docs, pool_size)
            idx = random_negatives(rng, pool, pairs.positives(q_rows), j)
            parts.append(np.where(idx >= 0, pool[idx.clip(min=0)], -1))
        if h > 0:
            parts.append(hard_negatives(rng, [pairs.hard[q] for q in q_rows], h))
        neg = np.concatenate(parts, axis=1) if parts else np.zeros((len(rows), 0), dtype=np.int64)
        mine, scale = distributed.shard(len(rows)), distributed.loss_scale(int((neg >= 0).sum()))
        q_rows, d_rows, neg = q_rows[mine], d_rows[mine], neg[mine]
        valid = neg >= 0
        qs = np.concatenate([q_rows, np.repeat(q_rows, valid.sum(1))])
        ds = np.concatenate([d_rows, neg[valid]])
        s = model.pair_scores([q_ids[i] for i in qs], [d_ids[i] for i in ds])
        b = len(q_rows)
        negs = torch.full(neg.shape, float("-inf"), device=model_device(net))
        if valid.any():
            negs = negs.index_put((torch.as_tensor(valid, device=negs.device),), s[b:])
        return pairwise_hinge_loss(s[:b], negs, args.margin, scale)

    return run_epochs(
        model,
        net,
        opt,
        vocab,
        step,
        len(pairs.q_rows),
        rng,
        data,
        dev,
        args,
        progress=progress,
        checkpoint_dir=checkpoint_dir,
        resume=resume,
    )
