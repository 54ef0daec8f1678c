"""Fine-tuning BERT(rep) and BERT(rel) (bert-semantic-retrieval-2020 §3.2, Algorithm 1).

Each training query brings its judged documents with their grades; additive sampling appends
``neg_global`` documents drawn uniformly from the corpus and ``neg_cluster`` drawn from the query's
k-means cluster, both as grade 0 and never one of the query's judged documents. The clusters come
from a first model fine-tuned on the judged data only (Algorithm 1, lines 1-8; the second model
starts again from the pre-trained weights, line 13) or, cheaper, from the pre-trained bi-encoder.
The loss is the pairwise max-margin hinge over graded labels (Eq. 3), optimised with Adam; a
list-valued ``margin`` trains one model per τ and keeps the best on the dev queries.

``share_negatives`` (bi-encoder only): every query of a batch also takes the other queries'
documents as grade-0 negatives (never one judged for it). Their vectors are computed for the batch
anyway, so a query meets ``batch_size`` times more negatives at the cost of one (B, U) score matrix
instead of (B, M): the sampled ones are uniform draws from the corpus as NEG_global asks, and the
others' judged titles are harder negatives, like NEG_cluster. It lets fewer negatives be sampled and
encoded per query.

Hard negatives (``neg_hard``): documents drawn from the top ``hard_depth`` that a first model
("bm25", or a saved bi-encoder) retrieves for the query from the whole collection, none judged for
it. Distillation (``loss`` "margin_mse"): a saved cross-encoder ``teacher`` (or a list of them: an
ensemble teacher, as Hofstätter et al. 2020 also used) scores every pair of every list once before
training, judged and sampled alike (so an unjudged hard negative that is in fact relevant is taught
as such, not as grade 0), and the student learns its score margins (``losses.margin_mse_loss``;
Hofstätter et al. 2020).

CPU budget: ``max_queries`` trains on a random subset of the training queries and
``dev_queries`` scores a random subset of the dev queries."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data import EvalSet, TrainingData
from ..models.transformer import BiEncoder, CrossEncoder, TransformerModel
from ..progress import note
from . import distributed
from .args import TransformerArgs
from .loop import epoch_loop
from .losses import grade_cross_entropy, graded_list_loss, has_graded_pair
from .negatives import uniform_negatives
from .trainer import dev_score


@dataclass
class Example:
    """One training query: its text, document rows with grades (judged, then sampled negatives at
    grade 0), and the rows of every document judged for it (never sampled as a negative)."""

    query: str
    docs: np.ndarray
    grades: np.ndarray
    judged: set[int]
    teacher: np.ndarray | None = None  # a teacher's (rescaled) score of each document, for Margin-MSE

    def with_negatives(self, rows: np.ndarray) -> Example:
        return Example(
            self.query,
            np.concatenate([self.docs, rows]),
            np.concatenate([self.grades, np.zeros(len(rows))]),
            self.judged,
        )


def judged_examples(
    data: TrainingData, rng: np.random.Generator, max_queries: int | None, max_judged: int
) -> list[Example]:
    """The training queries (a random ``max_queries`` of them) with their judged documents (at most
    ``max_judged``, random); queries whose documents all share one grade are left out."""
    idx = data.doc_index
    qids = sorted(q for q in data.qrels if q in data.queries and data.queries[q].strip())
    out = []
    for q in (qids[i] for i in rng.permutation(len(qids))):
        judged = {idx[d]: float(g) for d, g in data.qrels[q].items() if d in idx}
        if len(set(judged.values())) < 2:
            continue
        rows = np.fromiter(judged, dtype=np.int64, count=len(judged))
        if len(rows) > max_judged:
            rows = rng.choice(rows, size=max_judged, replace=False)
        out.append(Example(data.queries[q], rows, np.array([judged[int(r)] for r in rows]), set(judged)))
        if max_queries is not None and len(out) >= max_queries:
            break
    if not out:
        raise ValueError("no training query has judged documents of different grades")
    return out


@dataclass
class Clusters:
    """k-means over document embeddings; each query's cluster is its nearest centroid (Alg. 1, 2-8)."""

    members: list[np.ndarray]  # per cluster, its document rows
    query_cluster: np.ndarray  # per example

    @classmethod
    def build(
        cls,
        encoder: BiEncoder,
        doc_texts: list[str],
        queries: list[str],
        n_clusters: int,
        max_docs: int,
        rng: np.random.Generator,
        seed: int,
    ) -> Clusters:
        """k-means clusters of the documents (a sample) and each query's nearest cluster.

        Args:
            encoder: embeds the documents and queries.
            doc_texts: the collection's texts.
            queries: the training queries.
            n_clusters: k-means clusters.
            max_docs: documents clustered (a random sample).
            rng: the random generator.
            seed: k-means' seed.

        Returns:
            The clusters."""
        import faiss

        rows = (
            np.arange(len(doc_texts))
            if len(doc_texts) <= max_docs
            else np.sort(rng.choice(len(doc_texts), size=max_docs, replace=False))
        )
        x = np.ascontiguousarray(encoder.encode_documents([doc_texts[i] for i in rows]))
        k = max(1, min(n_clusters, len(rows)))
        km = faiss.Kmeans(x.shape[1], k, niter=20, seed=seed, verbose=False)
        km.train(x)
        _, doc_c = km.index.search(x, 1)
        _, q_c = km.index.search(np.ascontiguousarray(encoder.encode_queries(queries)), 1)
        members = [rows[doc_c[:, 0] == c] for c in range(k)]
        return cls(members, q_c[:, 0].astype(np.int64))


def add_negatives(
    examples: list[Example],
    rng: np.random.Generator,
    n_docs: int,
    neg_global: int,
    neg_cluster: int,
    clusters: Clusters | None,
) -> list[Example]:
    """Append NEG_global and NEG_cluster documents to every example (distinct, none judged).

    Args:
        examples: the training lists.
        rng: the random generator.
        n_docs: documents in the collection.
        neg_global: NEG_global documents per list.
        neg_cluster: NEG_cluster documents per list.
        clusters: the query clusters (None: no NEG_cluster).

    Returns:
        The lists with their negatives."""
    everything = np.arange(n_docs, dtype=np.int64)
    out = []
    for i, ex in enumerate(examples):
        g = uniform_negatives(rng, everything, ex.judged, neg_global)
        c = np.zeros(0, dtype=np.int64)
        if neg_cluster > 0 and clusters is not None:
            c = uniform_negatives(
                rng, clusters.members[clusters.query_cluster[i]], ex.judged | set(g.tolist()), neg_cluster
            )
        out.append(ex.with_negatives(np.concatenate([g, c])))
    return out


def add_hard_negatives(
    examples: list[Example], data: TrainingData, rng: np.random.Generator, n: int, source: str, depth: int
) -> list[Example]:
    """Append ``n`` hard negatives to every example: documents drawn uniformly from the top
    ``depth`` that a first model retrieves for its query from the whole collection, none judged for
    it nor already in its list. ``source``: "bm25" (default parameters), or the directory of a saved
    bi-encoder (say, a first BERT(rep) fine-tuned on the same data, as Algorithm 1's first model).

    Args:
        examples: the training lists.
        data: the training split and collection.
        rng: the random generator.
        n: hard negatives per list.
        source: "bm25" or a saved bi-encoder's directory.
        depth: the top hits drawn from.

    Returns:
        The lists with their hard negatives."""
    from ..models.lexical import BM25

    first: Any = BM25() if source == "bm25" else BiEncoder.load(source)
    first.index(data.doc_ids, data.doc_texts)
    idx = data.doc_index
    top = first.retrieve([e.query for e in examples], depth)
    out = []
    for ex, hits in zip(examples, top):
        taken = set(ex.docs.tolist()) | ex.judged
        pool = np.array([idx[d] for d, _ in hits if idx[d] not in taken], dtype=np.int64)
        out.append(
            ex.with_negatives(
                rng.choice(pool, size=min(n, len(pool)), replace=False) if len(pool) else np.zeros(0, dtype=np.int64)
            )
        )
    return out


def pooled_spread(lists: Iterable[np.ndarray]) -> float:
    """The pooled within-list standard deviation of scores: each list about its own mean."""
    lists = list(lists)
    dof = sum(len(t) - 1 for t in lists if len(t) > 1)
    return float(np.sqrt(sum(float(((t - t.mean()) ** 2).sum()) for t in lists) / max(dof, 1)))


def with_teacher(
    examples: list[Example], teachers: CrossEncoder | list[CrossEncoder], doc_texts: list[str], spread: float
) -> tuple[list[Example], list[float]]:
    """Every example with its documents' teacher scores, rescaled so that their pooled within-list
    standard deviation is ``spread`` (Margin-MSE sees only differences within a list, so no offset
    is needed). Several teachers (an ensemble teacher; Hofstätter et al.'s released "T2" students
    learnt from three BERT-Cat teachers) give the mean of their scores, each first divided by its
    own pooled within-list sd, so that no teacher outweighs the others by its scale. Returns the
    examples and each teacher's factor: the taught score of a pair is the sum over teachers of
    factor × raw score."""
    teachers = teachers if isinstance(teachers, list) else [teachers]
    qs = [e.query for e in examples for _ in e.docs]
    pairs = [doc_texts[r] for e in examples for r in e.docs]
    bounds = list(pairwise(np.cumsum([0] + [len(e.docs) for e in examples])))  # each list's [a, b) in the flat scores

    def spread_of(flat: np.ndarray) -> float:
        return pooled_spread(flat[a:b] for a, b in bounds)

    raw = [t.score_pairs(qs, pairs) for t in teachers]
    weights = [1.0]  # one teacher: its own scale; several: each divided by its own sd, then averaged
    if len(raw) > 1:
        weights = [1.0 / (len(raw) * sd) if sd > 0 else 1.0 / len(raw) for sd in map(spread_of, raw)]
    mixed: np.ndarray = sum(w * flat for w, flat in zip(weights, raw))  # type: ignore[assignment]  # arrays
    sd = spread_of(mixed)
    factors = [w * (spread / sd if sd > 0 else 1.0) for w in weights]
    flat: np.ndarray = sum(f * t for f, t in zip(factors, raw))  # type: ignore[assignment]  # arrays
    return [
        Example(e.query, e.docs, e.grades, e.judged, flat[a:b].astype(np.float32))
        for e, (a, b) in zip(examples, bounds)
    ], factors


SPREAD_LISTS = 64  # the student's spread is measured on this many training lists (a few seconds)


def list_spread(model: TransformerModel, examples: list[Example], doc_texts: list[str], batch: int = 16) -> float:
    """The pooled within-list sd of ``model``'s scores of the examples' lists, in eval mode and
    without gradients: the scale of the scores it trains with."""
    net, lists = model.net, []
    assert net is not None
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad():
            for s in range(0, len(examples), batch):
                part = examples[s : s + batch]
                scores = _list_scores(model, part, doc_texts, _list_mask(part))[0].cpu().numpy()
                lists += [scores[i, : len(e.docs)] for i, e in enumerate(part)]
    finally:
        net.train(was_training)
    return pooled_spread(lists)


def _check_spread(model: TransformerModel, examples: list[Example], doc_texts: list[str], spread: float) -> float:
    """Margin-MSE matches the student's score margins to the teacher's, rescaled to a within-list sd
    of ``spread``. When the student's own scores spread far wider or narrower (a dot-product
    bi-encoder against the default 0.1, meant for cosine), its first steps go to shrinking or
    stretching every margin rather than to ordering the lists, and the student learns less (a
    dot-product MiniLM spreads its scores far wider than a cosine one). Measures the student's
    spread on ``SPREAD_LISTS`` lists, notes a mismatch of more than 4x and returns the spread (the log's
    ``student_spread``)."""
    sd = list_spread(model, examples[:SPREAD_LISTS], doc_texts)
    if sd > 0 and not 0.25 <= spread / sd <= 4.0:
        kind = ("cosine" if model.p.normalize else "dot products") if isinstance(model, BiEncoder) else "scores"
        note(
            f"{model.name}: teacher_spread = {spread:g} rescales the teacher's scores to a within-list sd of "
            f"{spread:g}, but the student's own scores ({kind}) spread {sd:.3g} within a list before training; "
            f"Margin-MSE will first {'shrink' if sd > spread else 'stretch'} every margin rather than order the "
            f"lists. A teacher_spread near {sd:.2g} matches the student."
        )
    return sd


def train_transformer(
    model: TransformerModel,
    data: TrainingData,
    dev: EvalSet | None = None,
    *,
    args: TransformerArgs,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Fine-tune ``model`` in place (Algorithm 1); returns a JSON-serialisable log.

    Args:
        model: the bi- or cross-encoder trained in place.
        data: the training split and collection.
        dev: the dev queries (early stopping).
        args: the training settings.
        progress: show progress.
        checkpoint_dir: where to checkpoint (None: nowhere).
        resume: resume from the checkpoint.

    Returns:
        The training log."""
    if checkpoint_dir is not None or resume:
        raise ValueError(f"{model.name}: training does not write checkpoints; train without --checkpoint")
    if len(args.margins) > 1 and dev is None:
        raise ValueError("tuning the margin needs a dev set")
    rng = np.random.default_rng(args.seed)
    examples = judged_examples(data, rng, args.max_queries, args.max_judged)
    dev = _dev_sample(dev, args.dev_queries, args.seed) if dev is not None else None
    log: dict[str, Any] = {"queries": len(examples), "judged_pairs": int(sum(len(e.docs) for e in examples))}
    clusters = None
    if args.neg_cluster > 0:
        t0 = time.perf_counter()
        if args.cluster_model == "first":
            encoder: BiEncoder = type(model)(**model.params())  # type: ignore[assignment]  # a bi-encoder
            log["first_model"] = _tune(encoder, data, examples, dev, _first_model_args(args), progress, "first model")
        else:
            p = model.p
            encoder = BiEncoder(
                base=p.base,
                max_query_length=p.max_query_length,
                max_doc_length=p.max_doc_length,
                batch_encode=p.batch_encode,
            )
        clusters = Clusters.build(
            encoder, data.doc_texts, [e.query for e in examples], args.n_clusters, args.cluster_docs, rng, args.seed
        )
        log["clustering_seconds"] = time.perf_counter() - t0
        del encoder
    examples = add_negatives(examples, rng, len(data.doc_texts), args.neg_global, args.neg_cluster, clusters)
    if args.neg_hard > 0:
        t0 = time.perf_counter()
        examples = add_hard_negatives(examples, data, rng, args.neg_hard, args.hard_model, args.hard_depth)
        log["hard_negatives_seconds"] = time.perf_counter() - t0
    log["pairs"] = int(sum(len(e.docs) for e in examples))
    _check_grades(model, args, examples)
    if args.loss == "margin_mse":
        t0 = time.perf_counter()
        teachers = [CrossEncoder.load(d) for d in args.teachers]
        assert all(isinstance(t, CrossEncoder) for t in teachers)
        examples, log["teacher_factors"] = with_teacher(examples, teachers, data.doc_texts, args.teacher_spread)  # type: ignore[arg-type]  # asserted
        log["teacher_seconds"] = time.perf_counter() - t0
        del teachers
        log["student_spread"] = _check_spread(model, examples, data.doc_texts, args.teacher_spread)
    log.update(_tune(model, data, examples, dev, args, progress, model.name))
    if isinstance(model, BiEncoder):
        model.mark_trained()
    return log


def _grade_weight(model: TransformerModel, args: TransformerArgs) -> float:
    """The weight of a graded head's cross-entropy (``CrossEncoderArgs.grade_weight``; None: 1)."""
    w = getattr(args, "grade_weight", None)
    return 0.0 if not (isinstance(model, CrossEncoder) and model.graded) else 1.0 if w is None else float(w)


def _check_grades(model: TransformerModel, args: TransformerArgs, examples: list[Example]) -> None:
    """A ``grade_weight`` needs a graded head, and a graded head's levels must span every training
    grade (sampled negatives are grade 0), or its cross-entropy would have no target."""
    args.check_with(model.p)  # as recipe() does at the edge: arguments built in Python meet the model here
    if not (isinstance(model, CrossEncoder) and model.graded):
        return
    levels = model.p.grades
    lo = min(float(e.grades.min()) for e in examples)
    hi = max(float(e.grades.max()) for e in examples)
    if lo < levels[0] or hi > levels[-1]:
        raise ValueError(
            f"{model.name}: the training grades span {lo:g}..{hi:g} (a sampled negative is grade 0), "
            f"beyond the model parameter grades = {levels}; its levels must cover them"
        )


def _first_model_args(args: TransformerArgs) -> TransformerArgs:
    """Algorithm 1's first model: the judged data only (no sampled negatives, no teacher)."""
    if args.loss == "margin_mse":
        args = args.replace(loss="hinge", teacher="")
    return args.replace(neg_global=0, neg_cluster=0, neg_hard=0)


def _dev_sample(dev: EvalSet, n: int, seed: int) -> EvalSet:
    qids = sorted(dev.queries)
    if len(qids) <= n:
        return dev
    pick = np.random.default_rng(seed).choice(len(qids), size=n, replace=False)
    return dev.subset([qids[i] for i in sorted(pick)])


def _tune(
    model: TransformerModel,
    data: TrainingData,
    examples: list[Example],
    dev: EvalSet | None,
    args: TransformerArgs,
    progress: bool,
    title: str,
) -> dict[str, Any]:
    """Train one model per margin (a fresh copy of the pre-trained weights each); keep the best."""
    if len(args.margins) == 1:
        return _train(model, data, examples, dev, args.replace(margin=args.margins[0]), progress, title)
    trials, best = {}, None
    for m in args.margins:
        trial = type(model)(**model.params())
        trials[str(m)] = _train(trial, data, examples, dev, args.replace(margin=m), progress, f"{title} τ={m}")
        if best is None or trials[str(m)]["best_dev"] > trials[str(best[0])]["best_dev"]:
            best = (m, trial)
    assert best is not None
    model.copy_from(best[1])
    return {**trials[str(best[0])], "trials": trials}


def _train(
    model: TransformerModel,
    data: TrainingData,
    examples: list[Example],
    dev: EvalSet | None,
    args: TransformerArgs,
    progress: bool,
    title: str,
) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed + 1)
    if isinstance(model, CrossEncoder):
        model.init_head(args.seed)
    net = model.net
    assert net is not None
    opt = torch.optim.Adam(_param_groups(net, getattr(args, "head_lr", None)), lr=args.lr)
    b, margin, share = args.batch_size, args.margins[0], getattr(args, "share_negatives", False)
    grade_weight = _grade_weight(model, args)

    def batches() -> Iterable[list[Example]]:
        perm = rng.permutation(len(examples))
        return ([examples[i] for i in perm[s : s + b]] for s in range(0, len(perm), b))

    evaluate = (lambda: {"dev": dev_score(model, data, dev, args.dev_metric)}) if dev is not None else None
    log = epoch_loop(
        net,
        opt,
        args,
        batches=batches,
        size=lambda batch: sum(len(e.docs) for e in batch),
        loss=lambda batch: _batch_loss(
            model, batch, data.doc_texts, margin, share=share, loss=args.loss, grade_weight=grade_weight
        ),
        dev=evaluate,
        title=title,
        rng=rng,
        progress=progress,
        n_batches=lambda: -(-len(examples) // b),
        sharded=True,
    )
    return {**log, "margin": margin}


def _shared_labels(batch: list[Example], rows: np.ndarray, inv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Labels (B, U) over every distinct document ``rows`` of the batch: a query's own documents
    keep their grades; another query's document is a grade-0 negative for it, unless judged for it
    (then it is masked out, its grade for this query being unknown to the batch)."""
    labels = np.zeros((len(batch), len(rows)), dtype=np.float32)
    valid = np.ones((len(batch), len(rows)), dtype=bool)
    bounds = np.cumsum([0] + [len(e.docs) for e in batch])
    for i, e in enumerate(batch):
        valid[i, np.isin(rows, np.fromiter(e.judged, dtype=np.int64, count=len(e.judged)))] = False
        own = inv[bounds[i] : bounds[i + 1]]
        labels[i, own] = e.grades
        valid[i, own] = True
    return labels, valid


def _param_groups(net: torch.nn.Module, head_lr: float | None) -> list[dict[str, Any]]:
    """Adam groups: the BERT (and pooling) at ``lr``; the cross-encoder's linear head, which starts
    random, at ``head_lr`` (None: ``lr``). With lr 5e-5 the head's weights move at most ~5e-5 a
    step, so for hundreds of steps the scores barely spread and the hinge stays near τ."""
    head = getattr(net, "head", None)
    if head is None or head_lr is None:
        return [{"params": list(net.parameters())}]
    ids = {id(p) for p in head.parameters()}
    return [
        {"params": [p for p in net.parameters() if id(p) not in ids]},
        {"params": list(head.parameters()), "lr": head_lr},
    ]


def _list_mask(batch: list[Example]) -> np.ndarray:
    """(B, M) mask of a batch of lists padded to the longest (M): True where list i has a document."""
    lengths = np.array([len(e.docs) for e in batch])
    return np.arange(lengths.max()) < lengths[:, None]


def _batch_loss(
    model: TransformerModel,
    batch: list[Example],
    doc_texts: list[str],
    margin: float,
    *,
    share: bool = False,
    loss: str = "hinge",
    grade_weight: float = 0.0,
) -> torch.Tensor:
    """Eq. 3 (``loss`` "hinge"; "listnet": ListNet) over a batch of queries: scores of each query's
    documents, padded to (B, M);
    a graded cross-encoder adds ``grade_weight`` times its grade cross-entropy (``grade_cross_entropy``);
    ``share``: a bi-encoder's queries also meet the batch's other documents (``share_negatives``).
    Under torchrun (``distributed``) ``batch`` is the global batch: the rank scores its slice of
    the queries (with ``share``, against every distinct document of the batch, each encoded by
    one rank and gathered) and its loss is its share of the mean over the batch's queries."""
    if share and isinstance(model, BiEncoder):
        rows, inv = np.unique(np.concatenate([e.docs for e in batch]), return_inverse=True)
        shared, ok = _shared_labels(batch, rows, inv)
        mine, scale = distributed.shard(len(batch)), distributed.loss_scale(int(has_graded_pair(shared, ok).sum()))
        qv = _encode(model, [e.query for e in batch[mine]], model.p.max_query_length)
        dv = distributed.gather(
            _encode(model, [doc_texts[r] for r in rows[distributed.shard(len(rows))]], model.p.max_doc_length),
            len(rows),
        )
        dev = qv.device
        return graded_list_loss(
            loss,
            qv @ dv.T,
            torch.as_tensor(shared[mine], device=dev),
            torch.as_tensor(ok[mine], device=dev),
            margin,
            scale,
        )
    valid = _list_mask(batch)
    labels = np.zeros(valid.shape, dtype=np.float32)
    grades = np.zeros_like(labels) if loss == "margin_mse" else labels  # labels are the teacher's scores there
    for i, e in enumerate(batch):
        if loss == "margin_mse":
            assert e.teacher is not None, "margin_mse needs the teacher's scores (with_teacher)"
            labels[i, : len(e.docs)] = e.teacher
        grades[i, : len(e.docs)] = e.grades
    mine, scale = distributed.shard(len(batch)), distributed.loss_scale(int(has_graded_pair(labels, valid).sum()))
    if distributed.active():  # this rank's queries: each query's scores depend on its own documents only
        batch, labels, grades, valid = batch[mine], labels[mine], grades[mine], valid[mine]
    extra: torch.Tensor | float = 0.0  # a graded cross-encoder's grade cross-entropy
    scores, head = _list_scores(model, batch, doc_texts, valid)
    dev = scores.device
    if grade_weight > 0:
        assert head is not None
        ok_t = torch.as_tensor(valid, device=dev)
        k = head.shape[1]
        logits = torch.zeros((*valid.shape, k), dtype=head.dtype, device=dev).masked_scatter(
            ok_t[..., None].expand(-1, -1, k), head
        )
        levels = torch.tensor(model.p.grades, dtype=head.dtype, device=dev)  # type: ignore[attr-defined]  # a cross-encoder
        extra = grade_weight * grade_cross_entropy(logits, torch.as_tensor(grades, device=dev), ok_t, levels, scale)
    return (
        graded_list_loss(
            loss, scores, torch.as_tensor(labels, device=dev), torch.as_tensor(valid, device=dev), margin, scale
        )
        + extra
    )


def _list_scores(
    model: TransformerModel, batch: list[Example], doc_texts: list[str], valid: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each query's scores of its own documents, padded to (B, M) with zeros where not ``valid``,
    with gradients; for a cross-encoder also its head's outputs of the valid pairs, in order."""
    m = valid.shape[1]
    if isinstance(model, BiEncoder):
        rows, inv = np.unique(np.concatenate([np.zeros(0, np.int64)] + [e.docs for e in batch]), return_inverse=True)
        qv = _encode(model, [e.query for e in batch], model.p.max_query_length)
        dv = _encode(model, [doc_texts[r] for r in rows], model.p.max_doc_length)
        dev = qv.device
        slot = np.zeros((len(batch), m), dtype=np.int64)
        bounds = np.cumsum([0] + [len(e.docs) for e in batch])
        for i in range(len(batch)):
            slot[i, : bounds[i + 1] - bounds[i]] = inv[bounds[i] : bounds[i + 1]]
        return torch.einsum("bh,bmh->bm", qv, dv[torch.as_tensor(slot, device=dev)]), None
    if isinstance(model, CrossEncoder):
        qs = [e.query for e in batch for _ in e.docs]
        ds = [doc_texts[r] for e in batch for r in e.docs]
        head = _encode(model, qs, model.p.max_length, ds, call=model.head_output)
        flat = model.score_from_head(head)
        ok = torch.as_tensor(valid, device=flat.device)
        return torch.zeros((len(batch), m), dtype=flat.dtype, device=flat.device).masked_scatter(ok, flat), head
    raise TypeError(f"cannot train {type(model).__name__}")


def _encode(
    model: TransformerModel,
    a: list[str],
    max_length: int,
    b: list[str] | None = None,
    call: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``forward_texts`` (of ``call``, default ``forward``) with gradients; no texts (a rank's empty
    slice of an epoch's last, short batch) give no rows, still attached to the weights so the rank's
    backward runs with the others."""
    if a:
        return model.forward_texts(a, b, max_length, call=call)
    return model.forward_texts([""], None if b is None else [""], max_length, call=call)[:0]
