"""Training the trigram encoders (DSSM, CLSM, and later MT-DNN's ranking task) on positive pairs.

Minibatches of (query, clicked title) pairs; negatives random from the document pool (or the
other pairs of the batch, or judged low-grade documents); loss −log softmax over γ·cosine (CLSM
§4); SGD as the papers, or Adam. After every epoch the model re-ranks the dev queries' candidates
and training stops when the dev metric has not improved for ``patience`` epochs; the best epoch's
weights are kept. Runs are seeded (same seed, same data → same weights) and can checkpoint every
epoch and resume from the last checkpoint."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..data import EvalSet, TrainingData
from ..data.training import PairList
from ..device import model_device
from ..evaluation import evaluate
from ..models.base import Model, rank
from ..models.neural import NeuralEncoder
from . import distributed
from .args import EncoderArgs, TrainArgs
from .loop import Checkpoint, epoch_loop
from .losses import in_batch_loss, softmax_cosine_loss
from .negatives import PositiveKeys, drawn_documents, hard_negatives, random_negatives, sample_pool


@dataclass
class Pairs:
    """The training pairs as row indices into featurised query and document lists."""

    q_rows: np.ndarray
    d_rows: np.ndarray
    hard: list[list[int]]  # per query row: judged documents below the positive grade
    q_texts: list[str]
    pos_keys: PositiveKeys = field(init=False, repr=False)  # the pairs, for batch lookups of positives

    def __post_init__(self) -> None:
        self.pos_keys = PositiveKeys(self.q_rows, self.d_rows)

    def positives(self, q_rows: np.ndarray) -> tuple[PositiveKeys, np.ndarray]:
        """``random_negatives``' ``positives`` for a batch of query rows."""
        return self.pos_keys, q_rows

    @classmethod
    def build(cls, data: TrainingData) -> Pairs:
        if isinstance(data.positives, PairList):  # a click log's pairs: the same rows, by numpy
            return cls._from_pair_list(data, data.positives)
        qids = list(dict.fromkeys(q for q, _ in data.positives))
        qrow = {q: i for i, q in enumerate(qids)}
        di = data.doc_index
        q_rows = np.fromiter((qrow[q] for q, _ in data.positives), dtype=np.int64, count=len(data.positives))
        d_rows = np.fromiter((di[d] for _, d in data.positives), dtype=np.int64, count=len(data.positives))
        hn = data.hard_negatives()
        hard = [[di[d] for d in hn.get(q, [])] for q in qids]
        return cls(q_rows, d_rows, hard, [data.queries[q] for q in qids])

    @classmethod
    def _from_pair_list(cls, data: TrainingData, pl: PairList) -> Pairs:
        """``build`` over a `PairList` without a Python object per pair (tens of millions of
        clicks): query rows in order of first appearance, as ``build`` numbers them."""
        used, first, inv = np.unique(pl.q, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # the distinct queries by first appearance
        row_of = np.empty(len(used), np.int64)
        row_of[order] = np.arange(len(used))
        qids = [pl.query_ids[int(i)] for i in used[order]]
        di = data.doc_index
        doc_row = np.array([di[d] for d in pl.doc_ids], dtype=np.int64)
        hn = data.hard_negatives()
        hard = [[di[d] for d in hn.get(q, [])] for q in qids]
        return cls(row_of[inv.reshape(-1)], doc_row[pl.d], hard, [data.queries[q] for q in qids])

    def train_texts(self, data: TrainingData) -> list[str]:
        """The texts a vocabulary is fitted on: the queries and their positive documents."""
        return self.q_texts + [data.doc_texts[i] for i in np.unique(self.d_rows)]


def train_encoder(
    model: NeuralEncoder,
    data: TrainingData,
    dev: EvalSet | None = None,
    *,
    args: EncoderArgs,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train ``model`` in place; returns a JSON-serialisable log. A list-valued ``gamma`` trains
    one model per value and keeps the best on the dev set (γ "set on a held-out set", CLSM §4).

    Args:
        model: the DSSM or CLSM trained in place.
        data: the training split and collection.
        dev: the dev queries (early stopping).
        args: the training settings.
        progress: show progress.
        checkpoint_dir: where to checkpoint (None: nowhere).
        resume: resume from the checkpoint.

    Returns:
        The training log."""
    if len(args.gammas) == 1:
        return _train(model, data, dev, args.replace(gamma=args.gammas[0]), progress, checkpoint_dir, resume)
    if dev is None:
        raise ValueError("tuning gamma needs a dev set")
    trials, best = {}, None
    for g in args.gammas:
        trial = type(model)(**model.params())
        sub = Path(checkpoint_dir) / f"gamma-{g}" if checkpoint_dir else None
        log = _train(trial, data, dev, args.replace(gamma=g), progress, sub, resume)
        trials[str(g)] = log
        if best is None or log["best_dev"] > trials[str(best[0])]["best_dev"]:
            best = (g, trial)
    assert best is not None
    model.copy_from(best[1])
    return {"gamma": best[0], "trials": trials, **trials[str(best[0])]}


def _train(
    model: NeuralEncoder,
    data: TrainingData,
    dev: EvalSet | None,
    args: EncoderArgs,
    progress: bool,
    checkpoint_dir: str | Path | None,
    resume: bool,
) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    pairs = Pairs.build(data)
    hasher = model.vocabulary(pairs.train_texts(data))
    model.build(hasher, args.seed)
    net = model.net
    assert net is not None
    qf, df = model.features(pairs.q_texts), model.features(data.doc_texts)
    opt = make_optimizer(args, net.parameters())

    def step(rows: np.ndarray) -> torch.Tensor:
        return batch_loss(net, qf, df, pairs, rows, rng, args)

    out = run_epochs(
        model,
        net,
        opt,
        hasher,
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
    out["gamma"] = args.gamma
    return out


def run_epochs(
    model: Model,
    net: torch.nn.Module,
    opt: torch.optim.Optimizer,
    vocab: Any,
    step: Callable[[np.ndarray], torch.Tensor],
    n_items: int,
    rng: np.random.Generator,
    data: TrainingData,
    dev: EvalSet | None,
    args: TrainArgs,
    *,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """``loop.epoch_loop`` over ``n_items`` training items shuffled each epoch into minibatches of
    row indices; ``step(rows)`` gives a minibatch's loss (under torchrun: this rank's share of it,
    ``distributed``); dev ``dev_metric`` after each epoch.

    Args:
        model: the model whose net is trained (dev scoring).
        net: the network trained.
        opt: its optimizer.
        vocab: the vocabulary a checkpoint is tied to.
        step: a minibatch's loss from its rows.
        n_items: training items.
        rng: the random generator (checkpointed).
        data: the training split and collection.
        dev: the dev queries.
        args: the training settings.
        progress: show progress.
        checkpoint_dir: where to checkpoint (None: nowhere).
        resume: resume from the checkpoint.

    Returns:
        The training log."""
    b = args.batch_size

    def batches() -> Iterable[np.ndarray]:
        perm = rng.permutation(n_items)
        return (perm[i : i + b] for i in range(0, n_items, b))

    evaluate = (lambda: {"dev": dev_score(model, data, dev, args.dev_metric)}) if dev is not None else None
    ck = Checkpoint(Path(checkpoint_dir), vocab, resume) if checkpoint_dir else None
    return epoch_loop(
        net,
        opt,
        args,
        batches=batches,
        loss=step,
        size=len,
        dev=evaluate,
        title=model.name,
        rng=rng,
        checkpoint=ck,
        progress=progress,
        n_batches=lambda: -(-n_items // b),
        sharded=True,
    )


def batch_loss(
    net,
    qf,
    df,
    pairs: Pairs,
    rows: np.ndarray,
    rng: np.random.Generator,
    args: EncoderArgs,
) -> torch.Tensor:
    """A minibatch's −log softmax over γ·cosine (``args.gamma`` one number): each query's positive
    against its J pool negatives and h judged ones, or (``in-batch``) the batch's other positives.
    Under torchrun (``distributed``) ``rows`` is the global batch: the negatives are drawn for all
    of it (the same on every rank), the rank's slice of queries is scored against them (the
    shared pool's documents, like in-batch positives, each encoded by one rank and gathered) and
    its loss is its share of the global batch's mean.

    Args:
        net: the two towers.
        qf: the training queries' features.
        df: the collection's features.
        pairs: the training pairs.
        rows: the minibatch's pair rows.
        rng: the random generator.
        args: the training settings.

    Returns:
        The loss."""
    mine, scale = distributed.shard(len(rows)), distributed.loss_scale(len(rows))
    q_rows, d_rows = pairs.q_rows[rows], pairs.d_rows[rows]
    gamma, j, h, n_docs = args.gammas[0], args.negatives, args.hard_negatives, len(df)
    dev = model_device(net)
    qv = F.normalize(net.query(qf.batch(q_rows[mine])), dim=1)
    if args.sampling == "in-batch":
        dv, d_all, first = distributed.batch_documents(F.normalize(net.doc(df.batch(d_rows[mine])), dim=1), d_rows)
        own = q_rows[mine]  # (B', B): which of the batch's documents are positives of each own query
        same = pairs.pos_keys.among(own, d_all)
        same[np.arange(len(own)), first + np.arange(len(own))] = False
        return in_batch_loss(qv @ dv.T, torch.as_tensor(same, device=dev), gamma, first=first, scale=scale)
    pool_size = min(args.neg_pool, args.batch_size * max(j, 1), n_docs)
    pool = sample_pool(rng, n_docs, pool_size) if j > 0 else np.zeros(0, dtype=np.int64)
    neg = random_negatives(rng, pool, pairs.positives(q_rows), j) if j > 0 else np.zeros((len(rows), 0), np.int64)
    hard = hard_negatives(rng, [pairs.hard[q] for q in q_rows], h) if h > 0 else np.zeros((len(rows), 0), np.int64)
    # only the pool documents some query drew are encoded (at J = 4 about 1 − 1/e of the pool):
    # the others take no part in the loss, so leaving them out changes neither it nor the gradients
    used, neg = drawn_documents(pool, neg)
    d_rows, neg, hard = d_rows[mine], neg[mine], hard[mine]  # this rank's queries (all on one process)
    hard_rows = hard[hard >= 0]
    if distributed.active() and len(used):  # the shared negatives: each encoded by one rank, gathered
        own = F.normalize(net.doc(df.batch(np.concatenate([d_rows, hard_rows]))), dim=1)
        shared = distributed.gather(
            F.normalize(net.doc(df.batch(used[distributed.shard(len(used))])), dim=1), len(used)
        )
        dv = torch.cat([own[: len(d_rows)], shared, own[len(d_rows) :]])
    else:
        dv = F.normalize(net.doc(df.batch(np.concatenate([d_rows, used, hard_rows]))), dim=1)
    b = len(d_rows)
    pos = (qv * dv[:b]).sum(1)
    sims = [torch.zeros((b, 0), device=dev)]
    if j > 0:  # each query's J pool documents: gathered, not a full (batch x pool) similarity matrix
        idx = torch.as_tensor(neg, device=dev)
        sims.append(gathered_dots(qv, dv[b : b + len(used)], idx.clamp(min=0)).masked_fill(idx < 0, float("-inf")))
    if h > 0:
        slot = np.full(hard.shape, -1, dtype=np.int64)
        slot[hard >= 0] = b + len(used) + np.arange(len(hard_rows))
        hs = torch.as_tensor(slot, device=dev)
        hv = dv[hs.clamp(min=0)]  # (b, h, dim)
        sims.append((qv[:, None, :] * hv).sum(-1).masked_fill(hs < 0, float("-inf")))
    return softmax_cosine_loss(pos, torch.cat(sims, dim=1), gamma, scale)


class _GatheredDots(torch.autograd.Function):
    """out[i, j] = q[i] · d[idx[i, j]], as batched matrix-vector products over the gathered rows.
    Its backward gives each row of ``d`` the q-rows that picked it, weighted by their gradients,
    as one bag-sum over the picks grouped by row (``F.embedding_bag`` with per-pick weights; the
    picks sorted once, in the forward): no (B, J, dim) product and accumulating ``index_add_``,
    which cost more at large J (``benchmarks/train_speed.py`` measures training steps)."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, d: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        flat = idx.reshape(-1)
        g = d.index_select(0, flat).view(*idx.shape, d.shape[1])
        order = torch.argsort(flat, stable=True)  # the picks grouped by the row of d they picked
        offsets = torch.zeros(d.shape[0], dtype=torch.long, device=d.device)
        torch.cumsum(torch.bincount(flat, minlength=d.shape[0])[:-1], 0, out=offsets[1:])
        ctx.save_for_backward(q, g, order, offsets)
        ctx.picks = idx.shape[1]
        return torch.bmm(g, q[:, :, None])[:, :, 0]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        q, g, order, offsets = ctx.saved_tensors
        gq = torch.bmm(grad[:, None, :], g)[:, 0, :]
        gd = F.embedding_bag(
            torch.div(order, ctx.picks, rounding_mode="floor"),
            q,
            offsets,
            mode="sum",
            per_sample_weights=grad.reshape(-1)[order].contiguous(),
        )
        return gq, gd, None


def gathered_dots(q: torch.Tensor, d: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """(B, J) dot products of each query row with the J rows of ``d`` that ``idx`` picks for it."""
    return _GatheredDots.apply(q, d, idx)


def dev_score(model: Model, data: TrainingData, dev: EvalSet, metric: str) -> float:
    """Mean ``metric`` of the model re-ranking the dev queries' candidates."""
    ids = sorted({d for c in dev.candidates.values() for d in c if d in data.doc_index})
    model.index(ids, [data.doc_texts[data.doc_index[d]] for d in ids])
    cands = {q: [d for d in c if d in data.doc_index] for q, c in dev.candidates.items()}
    run = rank(model, dev.queries, cands)
    return float(evaluate(run, dev.qrels, [metric]).mean[metric])


def make_optimizer(args: TrainArgs, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """SGD (the papers) or Adam over ``params`` at ``args.lr``. Under plain SGD on one process the
    first layers' weights take sparse gradients (``models.neural.bag_product``): SGD applies those
    row by row to the same result. Adam's moments need dense ones, and so does the all-reduce of
    distributed training."""
    params = list(params)
    sparse = args.optimizer == "sgd" and not distributed.active()
    for p in params:
        p.sparse_grad = sparse  # type: ignore[attr-defined]  # torch's own flag
    return (torch.optim.SGD if args.optimizer == "sgd" else torch.optim.Adam)(params, lr=args.lr)
