"""Training MT-DNN by Algorithm 1 (Liu et al. 2015 §2.3): every minibatch picks one task at
random — a query-classification domain (cross-entropy, Eq. 5) or ranking (−log softmax over
γ·cosine with J random negatives, Eqs. 6-7, the DSSM loss) — and updates the shared layer and that
task's layers. An epoch has as many minibatches as one pass over the ranking pairs takes, times
the number of tasks (with uniform task sampling, ranking then sees each pair about once per
epoch); with classification only, one pass over the classification texts per domain.

After each epoch the dev score is the mean over tasks of the ranking dev metric and each domain's
dev AUC (``select = "rank"`` or ``"classification"`` uses only those); training stops after
``patience`` epochs without improvement and keeps the best weights."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..data import DomainTasks, EvalSet, TrainingData, open_domain_set
from ..device import model_device
from ..evaluation import auc
from ..models.mtdnn import MTDNN
from ..text import TrigramHasher
from . import distributed
from .args import MTDNNArgs
from .loop import epoch_loop
from .trainer import Pairs, batch_loss, dev_score, make_optimizer


def domain_tasks(model: MTDNN, split: str) -> DomainTasks:
    """The model's classification tasks on ``split`` of its ``domain_set``."""
    return DomainTasks.from_records(open_domain_set(model.p.domain_set), model.domains, split)


def classification_auc(model: MTDNN, tasks: DomainTasks) -> dict[str, float]:
    """Per-domain AUC of the model's P(C|Q) on labelled texts."""
    probs = model.classify(tasks.texts)
    return {d: auc(tasks.column(d), probs[:, model.domains.index(d)]) for d in tasks.domains}


def train_mtdnn(
    model: MTDNN,
    data: TrainingData | None = None,
    dev: EvalSet | None = None,
    *,
    args: MTDNNArgs,
    tasks: DomainTasks | None = None,
    dev_tasks: DomainTasks | None = None,
    hasher: TrigramHasher | None = None,
    init_l2: MTDNN | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train ``model`` in place; returns a JSON-serialisable log.

    ``data``/``dev``: the ranking task (required when the model ranks). ``tasks``/``dev_tasks``:
    the classification tasks (default: the train/dev splits of the model's ``domain_set``).
    ``hasher``: a trigram vocabulary to reuse (default: fitted on every training text).
    ``init_l2``: copy the shared layer from another MT-DNN (with ``freeze_l2`` it stays fixed:
    the DNN2 of the domain-adaptation study).

    Args:
        model: the MT-DNN trained in place.
        data: the ranking task's training data.
        dev: the ranking task's dev queries.
        args: the training settings.
        tasks: the classification tasks' training examples.
        dev_tasks: their dev examples.
        hasher: a trigram vocabulary to reuse.
        init_l2: an MT-DNN whose shared layer is copied.
        progress: show progress.

    Returns:
        The training log."""
    domains, ranking = model.domains, model.p.ranking
    if ranking and data is None:
        raise ValueError("this MT-DNN has a ranking task: give ranking training data")
    if domains and tasks is None:  # the domain set's own splits; explicit tasks bring their own dev
        tasks = domain_tasks(model, "train")
        if dev_tasks is None:
            dev_tasks = domain_tasks(model, "dev")
    for t in (tasks, dev_tasks):
        if domains and t is not None and t.domains != domains:
            raise ValueError(f"tasks are for domains {t.domains}, the model has {domains}")
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    pairs = Pairs.build(data) if ranking else None  # type: ignore[arg-type]  # data with ranking
    if hasher is None:
        texts: list[str] = list(tasks.texts) if domains else []  # type: ignore[union-attr]  # tasks with domains
        if pairs is not None:
            texts += pairs.train_texts(data)  # type: ignore[arg-type]  # data with pairs
        hasher = model.vocabulary(texts)
    model.build(hasher, args.seed)
    net: Any = model.net
    if init_l2 is not None:
        if init_l2.hasher is None or init_l2.hasher.trigrams != hasher.trigrams:
            raise ValueError("init_l2 must come from a model over the same trigram vocabulary")
        net.shared.load_state_dict(init_l2.net.shared.state_dict())  # type: ignore[union-attr]  # trained net
    if args.freeze_l2:
        if init_l2 is None:
            raise ValueError("freeze_l2 needs init_l2 (a trained shared layer to keep fixed)")
        for p in net.shared.parameters():
            p.requires_grad_(False)

    b = args.batch_size
    names = (["rank"] if pairs is not None else []) + domains
    n_rank = -(-len(pairs.q_rows) // b) if pairs is not None else 0
    n_cls = -(-len(tasks) // b) if domains else 0  # type: ignore[arg-type]  # tasks with domains
    steps = n_rank * len(names) if pairs is not None else n_cls * len(domains)
    if args.task_sampling == "uniform":
        weights = np.full(len(names), 1.0 / len(names))
    else:
        sizes = np.array(
            ([len(pairs.q_rows)] if pairs is not None else []) + [len(tasks)] * len(domains),  # type: ignore[arg-type]  # tasks with domains
            np.float64,
        )
        weights = sizes / sizes.sum()

    opt = make_optimizer(args, [p for p in net.parameters() if p.requires_grad])
    cls_lr = args.cls_lr if args.cls_lr is not None else args.lr
    qf = df = cf = None
    if pairs is not None:
        qf, df = model.features(pairs.q_texts), model.features(data.doc_texts)  # type: ignore[union-attr]  # data with pairs
    if domains:
        cf = model.features(tasks.texts)  # type: ignore[union-attr]  # tasks with domains
        y_all = tasks.labels.astype(np.float32)  # type: ignore[union-attr]  # tasks with domains
    cursors = {
        name: (rng.permutation(n), 0)
        for name, n in ((nm, len(pairs.q_rows) if nm == "rank" else len(tasks)) for nm in names)  # type: ignore[union-attr, arg-type]  # per task name
    }

    def next_rows(name: str) -> np.ndarray:
        perm, at = cursors[name]
        if at >= len(perm):
            perm, at = rng.permutation(len(perm)), 0
        cursors[name] = (perm, at + b)
        return perm[at : at + b]

    def batches() -> Iterable[tuple[str, np.ndarray]]:
        return ((names[t], next_rows(names[t])) for t in rng.choice(len(names), size=steps, p=weights))

    def loss(batch: tuple[str, np.ndarray]) -> tuple[torch.Tensor, str]:
        name, rows = batch
        if name == "rank":
            value = batch_loss(net, qf, df, pairs, rows, rng, args)  # type: ignore[arg-type]  # set with pairs
        else:  # under torchrun: this rank's slice of the global batch, its share of the mean
            di = domains.index(name)
            mine, scale = distributed.shard(len(rows)), distributed.loss_scale(len(rows))
            y = torch.as_tensor(y_all[rows[mine], di], device=model_device(net))
            logits = net.logits(cf.batch(rows[mine]), di)  # type: ignore[union-attr]  # set with domains
            value = (
                F.binary_cross_entropy_with_logits(logits, y)
                if scale is None
                else F.binary_cross_entropy_with_logits(logits, y, reduction="sum") * scale
            )
        for group in opt.param_groups:
            group["lr"] = args.lr if name == "rank" else cls_lr
        return value, name

    def evaluate() -> dict[str, float]:
        entry: dict[str, float] = {}
        scores, select = [], args.select
        if dev is not None and pairs is not None:
            entry["dev_rank"] = dev_score(model, data, dev, args.dev_metric)  # type: ignore[arg-type]  # data with pairs
            if select != "classification":
                scores.append(entry["dev_rank"])
        if dev_tasks is not None:
            aucs = classification_auc(model, dev_tasks)
            entry.update({f"dev_auc_{d}": v for d, v in aucs.items()})
            if select != "rank":
                scores += list(aucs.values())
        if scores:
            entry["dev"] = float(np.mean(scores))
        return entry

    log = epoch_loop(
        net,
        opt,
        args,
        batches=batches,
        loss=loss,
        size=lambda batch: len(batch[1]),
        dev=evaluate,
        title=model.name,
        rng=rng,
        progress=progress,
        n_batches=lambda: steps,
        sharded=True,
    )
    return {**log, "tasks": names, "steps_per_epoch": steps}


def train_mtdnn_kind(
    model: MTDNN,
    data: TrainingData,
    dev: EvalSet | None = None,
    *,
    args: MTDNNArgs,
    progress: bool = True,
    checkpoint_dir: Any = None,
    resume: bool = False,
) -> dict[str, Any]:
    """``fit``'s entry for the mt-dnn kind: its ranking task only when the model ranks.

    Args:
        model: the MT-DNN trained in place.
        data: the ranking task's training data.
        dev: the ranking task's dev queries.
        args: the training settings.
        progress: show progress.
        checkpoint_dir: must be None: no checkpoints are written.
        resume: unused.

    Returns:
        The training log."""
    if checkpoint_dir:
        raise ValueError("mt-dnn training does not write checkpoints; train without --checkpoint")
    return train_mtdnn(model, data if model.p.ranking else None, dev, args=args, progress=progress)
