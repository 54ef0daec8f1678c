"""Distilling a bi-encoder's query side into a static encoder (``models.static_query``): the
student's rows are fitted with the one epoch loop so that its vector of each training text points
where the teacher's does (loss 1 − cosine), early-stopped on the mean cosine over the dev queries.

The training texts: the training split's query texts (only those: dev and test queries are never
seen), every collection title (a pseudo-query, its target the teacher's document vector), and
``spans`` random runs of 1-4 consecutive words from each distinct title (queries are short, titles
long). The teacher encodes them once; with ``cache`` set its vectors are kept there, the
collection's in the file ``index build --vector-cache`` uses (so give both the same directory)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data import EvalSet, TrainingData
from ..data.files import cached_array
from ..models.static_query import StaticQueryEncoder
from ..progress import note
from ..text.normalize import tokenize
from .args import DistillArgs
from .loop import epoch_loop


def title_spans(titles: Sequence[str], per_title: int, seed: int = 0, max_len: int = 4) -> list[str]:
    """``per_title`` random runs of 1..``max_len`` consecutive words of each title (fewer for
    short titles: distinct runs only), in title order."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    for t in titles:
        ws = tokenize(t)
        if len(ws) < 2:
            continue
        seen: set[str] = set()
        for _ in range(per_title):
            n = int(rng.integers(1, min(max_len, len(ws)) + 1))
            s = int(rng.integers(0, len(ws) - n + 1))
            span = " ".join(ws[s : s + n])
            if span not in seen:
                seen.add(span)
                out.append(span)
    return out


def teacher_vectors(teacher: Any, texts: Sequence[str], cache: str | Path = "", chunk: int = 2048) -> np.ndarray:
    """The teacher's unit query vectors of ``texts`` (read from / written to ``cache`` if given)."""
    f = None
    if cache:
        h = hashlib.sha1(type(teacher).__name__.encode())
        h.update(np.asarray(teacher.encode_queries(["cordless drill"]), dtype=np.float32).tobytes())
        for t in texts:
            h.update(t.encode() + b"\n")
        f = Path(cache) / f"teacher-{h.hexdigest()[:16]}.npy"

    def encode() -> np.ndarray:
        parts = []
        for s in range(0, len(texts), chunk):
            parts.append(np.asarray(teacher.encode_queries(list(texts[s : s + chunk])), dtype=np.float32))
            note(f"teacher: {min(s + chunk, len(texts)):,}/{len(texts):,} texts encoded")
        v = np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
        v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        return v

    return cached_array(f, encode)


def fit_student(
    model: StaticQueryEncoder,
    texts: Sequence[str],
    targets: np.ndarray,
    args: DistillArgs,
    *,
    dev_texts: Sequence[str] = (),
    dev_targets: np.ndarray | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Build the vocabulary from ``texts`` and fit the rows to the unit ``targets`` (one per text);
    early stopping on the mean cosine of ``dev_texts`` to ``dev_targets``. Returns the log.

    Args:
        model: the static query encoder trained in place.
        texts: the training texts.
        targets: (texts, dim) unit teacher vectors.
        args: the training settings.
        dev_texts: texts early stopping is judged on.
        dev_targets: their teacher vectors.
        progress: show progress.

    Returns:
        The training log."""
    if len(texts) != len(targets):
        raise ValueError(f"{len(texts)} texts but {len(targets)} target vectors")
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model.build_vocabulary(texts)
    dim = int(targets.shape[1])
    net = torch.nn.EmbeddingBag(model.n_rows, dim, mode="sum", sparse=True)
    torch.nn.init.normal_(net.weight, std=0.1 / np.sqrt(dim))
    ids, offsets = model.bags(texts)
    ids_t = torch.from_numpy(ids)
    tgt = torch.from_numpy(np.ascontiguousarray(targets, dtype=np.float32))
    opt = torch.optim.SparseAdam(list(net.parameters()), lr=args.lr)
    b = args.batch_size

    def batches() -> Iterable[np.ndarray]:
        perm = rng.permutation(len(texts))
        return (perm[i : i + b] for i in range(0, len(texts), b))

    def loss(rows: np.ndarray) -> torch.Tensor:
        starts, ends = offsets[rows], offsets[rows + 1]
        sel = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)])
        off = np.zeros(len(rows), dtype=np.int64)
        np.cumsum((ends - starts)[:-1], out=off[1:])
        v = net(ids_t[torch.from_numpy(sel)], torch.from_numpy(off))
        return (1 - torch.nn.functional.cosine_similarity(v, tgt[torch.from_numpy(rows)], dim=1)).mean()

    def dev() -> dict[str, float]:
        model.rows = net.weight.detach().numpy().copy()
        return {"dev": float(np.mean(np.sum(model.encode_queries(dev_texts) * dev_targets, axis=1)))}

    has_dev = dev_targets is not None and len(dev_texts) > 0
    log = epoch_loop(
        net,
        opt,
        args,
        batches=batches,
        loss=loss,
        size=len,
        dev=dev if has_dev else None,
        title="static-query",
        rng=rng,
        progress=progress,
        n_batches=lambda: -(-len(texts) // b),
        dev_before=False,
    )
    model.rows = net.weight.detach().numpy().copy()
    return {
        **log,
        "rows": model.n_rows,
        "words": len(model.words),
        "bigrams": len(model.bigrams),
        "trigrams": len(model.hasher or ()),
        "training_texts": len(texts),
    }


def train_static_query(
    model: StaticQueryEncoder,
    data: TrainingData,
    dev: EvalSet | None = None,
    *,
    args: DistillArgs,
    progress: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """The ``static-query`` kind's trainer: the training split's queries, the collection's texts and
    their spans, encoded by the teacher, then ``fit_student``.

    Args:
        model: the static query encoder trained in place.
        data: the training split and collection.
        dev: the dev queries (early stopping).
        args: the training settings.
        progress: show progress.
        **options: the trainer interface's other options (unused).

    Returns:
        The training log."""
    if options.get("checkpoint_dir"):
        raise ValueError("static-query training does not write checkpoints; train without --checkpoint")
    from ..index.semantic import SemanticRetriever

    queries = sorted({data.queries[q] for q in data.qrels if q in data.queries and data.queries[q].strip()})
    keep = [i for i, t in enumerate(data.doc_texts) if t.strip()]
    titles = [data.doc_texts[i] for i in keep]
    others = list(dict.fromkeys([*queries, *title_spans(list(dict.fromkeys(titles)), args.spans, args.seed)]))
    teacher = model.teacher
    if getattr(teacher, "runner", False) is None:  # a transformer in torch: encode through ONNX Runtime fp32
        from ..models import (
            onnxrt,  # (torch's vectors, faster on a CPU; what index build does)
        )

        if onnxrt.available():
            teacher.use_onnx("fp32")
    # the titles' targets are the teacher's document vectors, in the file `index build --vector-cache`
    # reads and writes (the same key): the collection is encoded once for training and indexing
    docs = SemanticRetriever(teacher, cache=args.cache or None).embed(
        data.doc_ids, data.doc_texts, progress="teacher: encoding the collection"
    )
    docs = docs[keep] / np.maximum(np.linalg.norm(docs[keep], axis=1, keepdims=True), 1e-12)
    texts = titles + others
    targets = np.vstack([docs, teacher_vectors(teacher, others, args.cache)])
    dev_texts = sorted({t for t in (dev.queries.values() if dev is not None else ()) if t.strip()})
    dev_targets = teacher_vectors(teacher, dev_texts, args.cache) if dev_texts else None
    log = fit_student(model, texts, targets, args, dev_texts=dev_texts, dev_targets=dev_targets, progress=progress)
    out = {**log, "train_queries": len(queries), "titles": len(titles)}
    if model.p.teacher:  # the teacher's held-out fold travels with the student (index build checks it)
        from . import held_out

        teacher_fold = held_out(model.p.teacher)
        if teacher_fold is not None:
            out["teacher_held_out"] = teacher_fold
    return out
