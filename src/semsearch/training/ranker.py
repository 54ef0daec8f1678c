"""The trainers of the LambdaMART ranker (Burges 2010; BERT retrieval paper §4.5) that
``ranking.lambdamart`` runs: LightGBM's lambdarank booster on query groups, early-stopped on a dev
split's NDCG@k, or with the number of trees picked by k-fold CV over the training queries;
cross-validated rankers for data sets without a training split; the registered ``lambdamart``
kind's trainer (``train_ranker``); and the stage-2 ranker a bundle build trains (``index build
--train-ranker``, ``stage_ranker_trainer``), learning from what the bundle's stage 1 returns for a
data set's train queries, its stage depths and trees chosen on the dev queries; or (``--clicks
DIR``) for an event log's queries, labelled by their clicks with the position bias corrected
(``clicks.labels``), depths and trees chosen on a held-out share of the log's queries: no grades
at all. Putting a retrained ranker into a built bundle is ``index.bundle.retrain``'s."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..data import EvalSet, TrainingData, open_dataset
from ..evaluation import kfold_queries
from ..params import ParamError
from ..plugins import create_model
from ..progress import Reporter, note
from ..ranking.features import Groups
from ..ranking.lambdamart import TWO_STAGE, LambdaMART, LambdaMARTRanker
from ..types import Run
from . import held_out, recipe
from .args import RankerArgs

if TYPE_CHECKING:  # the bundle build hands its stage-1 search in; importing index.bundle would load faiss
    from ..clicks.trust import TrustPolicy
    from ..index.bundle import StageSearch


def train_booster(
    booster: LambdaMART, train: Groups, dev: Groups | None = None, *, cv_folds: int = 0
) -> dict[str, Any]:
    """Train on ``train``'s query groups. With ``dev``: stop once dev NDCG@k has not improved for
    ``early_stopping`` rounds and keep the best round. Without ``dev`` but ``cv_folds`` ≥ 2: pick
    the number of rounds the same way by k-fold CV over ``train``'s queries, then train on all of
    it. Otherwise ``num_boost_round`` trees. Returns the training log."""
    import lightgbm as lgb

    if not len(train.qids):
        raise ValueError("lambdamart: no training queries")
    p, params = booster.p, booster.lgb_params()
    dtrain = booster.dataset(train)
    stop = lgb.early_stopping(p.early_stopping, first_metric_only=True, verbose=False)
    rounds, metric, how = p.num_boost_round, None, "fixed"
    key = f"ndcg@{p.metric_at}"
    if dev is None and cv_folds >= 2:
        cv = lgb.cv(params, dtrain, num_boost_round=rounds, nfold=cv_folds, callbacks=[stop])
        curve: list[float] = cv[f"valid {key}-mean"]  # type: ignore[assignment]  # a metric's means
        rounds, metric, how = int(np.argmax(curve)) + 1, float(np.max(curve)), f"{cv_folds}-fold CV"
    evals: dict[str, Any] = {}
    callbacks: list[Any] = [lgb.record_evaluation(evals)]
    valid = []
    if dev is not None and len(dev.qids):
        valid = [booster.dataset(dev, reference=dtrain)]
        callbacks.append(stop)
        how = "dev early stopping"
    trained = lgb.train(
        params, dtrain, num_boost_round=rounds, valid_sets=valid, valid_names=["dev"][: len(valid)], callbacks=callbacks
    )
    booster.set_booster(trained, trained.best_iteration or trained.current_iteration())
    if valid:
        metric = float(evals["dev"][key][booster.best_iteration - 1])
    return {
        "trees": booster.best_iteration,
        "rounds_by": how,
        f"held-out {key}": metric,
        "train_queries": len(train.qids),
        "train_pairs": len(train.y),
        "dev_queries": len(dev.qids) if dev is not None else 0,
        "importance": booster.importance(),
    }


def cross_validated(
    g: Groups, feature_names: Sequence[str], k: int = 5, seed: int = 0, inner_folds: int = 0, **params: Any
) -> tuple[Run, list[dict[str, Any]]]:
    """k-fold cross-validation over queries (data sets with no training split, e.g. TREC DL's 43
    queries, or comparing rankers on a selection split): each fold's queries are ranked by a
    LambdaMART (booster settings ``params``) trained on the other folds, with ``num_boost_round``
    trees, or, with ``inner_folds`` ≥ 2, as many as an inner k-fold CV over those folds' queries
    picks (nested CV: the scored fold never chooses anything). Returns the run and each fold's log.

    Args:
        g: the query groups (features and labels).
        feature_names: the features' names.
        k: outer folds.
        seed: seed of the split.
        inner_folds: inner CV folds choosing the trees (0: ``num_boost_round``).
        **params: booster settings.

    Returns:
        The run and each fold's log."""
    run: Run = {}
    logs = []
    for train_q, test_q in kfold_queries(g.qids, k=k, seed=seed):
        model = LambdaMART(feature_names, **params)
        log = train_booster(model, g.subset(train_q), cv_folds=inner_folds)
        test = g.subset(test_q)
        run.update(test.to_run(model.predict(test)))
        logs.append({**log, "test_queries": len(test_q)})
    return run, logs


def fit_ranker(
    model: LambdaMARTRanker, train: EvalSet, dev: EvalSet | None = None, *, cv_folds: int = 0
) -> dict[str, Any]:
    """Train an indexed ranker on ``train``'s candidates labelled by its qrels; ``dev`` early-stops."""
    g = model.groups(train.queries, train.candidates, train.qrels)
    dv = model.groups(dev.queries, dev.candidates, dev.qrels) if dev is not None else None
    return train_booster(model.ranker, g, dv, cv_folds=cv_folds)


def train_ranker(
    model: LambdaMARTRanker,
    data: TrainingData,
    dev: EvalSet | None = None,
    *,
    args: RankerArgs,
    progress: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """The ``lambdamart`` kind's trainer: its feature models index the training collection, then
    the booster learns from each training query's judged candidates, labelled by the qrels.

    Args:
        model: the ranker trained in place.
        data: the training split and collection.
        dev: the dev queries (early stopping).
        args: the training settings.
        progress: show progress.
        **options: the trainer interface's other options (unused).

    Returns:
        The training log."""
    if options.get("checkpoint_dir"):
        raise ValueError("lambdamart training does not write checkpoints; train without --checkpoint")
    model.index(data.doc_ids, data.doc_texts)
    train = EvalSet(
        {q: t for q, t in data.queries.items() if q in data.qrels},
        {q: list(docs) for q, docs in data.qrels.items() if q in data.queries},
        data.qrels,
    )
    return fit_ranker(model, train, dev, cv_folds=args.cv_folds)


# ----------------------------------------------------------------------------- two-stage search
def _stage_hits(
    search: StageSearch,
    queries: Sequence[str],
    n_lexical: int,
    n_semantic: int,
    what: str,
    progress: bool,
    batch: int = 512,
    ef_search: int | None = None,
) -> list[list[Any]]:
    rep = Reporter(
        f"stage 1 for the ranker's {what} queries", (len(queries) + batch - 1) // batch, unit="queries", show=progress
    )
    out: list[list[Any]] = []
    for s in range(0, len(queries), batch):
        part = list(queries[s : s + batch])
        out += search(part, n_lexical, n_semantic, ef_search=ef_search)
        rep.advance(1, len(part))
    rep.close()
    return out


def _keep_rows(g: Groups, keep: np.ndarray) -> Groups:
    """The rows of ``g`` where ``keep``; queries left without rows are dropped."""
    sizes = np.add.reduceat(keep.astype(np.int64), g.offsets[:-1]) if len(g.qids) else np.zeros(0, np.int64)
    present = sizes > 0
    return Groups(
        [q for q, p in zip(g.qids, present) if p],
        [d for d, k in zip(g.docs, keep) if k],
        g.X[keep],
        g.y[keep],
        np.concatenate([[0], np.cumsum(sizes[present])]).astype(np.int64),
        None if g.position is None else g.position[keep],
    )


def _labelled(g: Groups, qrels: Mapping[str, Mapping[str, int]]) -> np.ndarray:
    """Which rows of ``g`` have a label in ``qrels`` (a judged, or shown, pair)."""
    keep = np.zeros(len(g.docs), bool)
    for i, q in enumerate(g.qids):
        judged = qrels.get(q, {})
        for r in range(int(g.offsets[i]), int(g.offsets[i + 1])):
            keep[r] = g.docs[r] in judged
    return keep


def _cut(g: Groups, ranks: np.ndarray, cols: Sequence[int], n_lexical: int, n_semantic: int) -> Groups:
    """The rows of ``g`` that stage 1 at depths (n_lexical, n_semantic) returns; ``ranks``: each
    row's raw (lexical, semantic) rank, 0 where not found; rank columns ``cols`` re-capped."""
    lr, sr = ranks[:, 0], ranks[:, 1]
    keep = ((lr > 0) & (lr <= n_lexical)) | ((sr > 0) & (sr <= n_semantic))
    X = g.X[keep].copy()
    for c, (r, n) in zip(cols, ((lr, n_lexical), (sr, n_semantic))):
        if c >= 0:
            X[:, c] = np.where((r[keep] > 0) & (r[keep] <= n), r[keep], n + 1)
    sizes = np.add.reduceat(keep.astype(np.int64), g.offsets[:-1]) if len(g.qids) else np.zeros(0, np.int64)
    present = sizes > 0
    docs = [d for d, k in zip(g.docs, keep) if k]
    return Groups(
        [q for q, p in zip(g.qids, present) if p],
        docs,
        X,
        g.y[keep],
        np.concatenate([[0], np.cumsum(sizes[present])]).astype(np.int64),
        None if g.position is None else g.position[keep],
    )


def row_positions(g: Groups, positions: Mapping[str, Mapping[str, int]], unshown: int) -> np.ndarray:
    """Each row's shown rank (``positions[qid][doc]``), ``unshown`` where the log never showed it."""
    out = np.full(len(g.docs), unshown, np.int32)
    for i, q in enumerate(g.qids):
        shown = positions.get(q, {})
        for r in range(int(g.offsets[i]), int(g.offsets[i + 1])):
            out[r] = shown.get(g.docs[r], unshown)
    return out


def _dev_selection(run: dict[str, dict[str, float]], dev: EvalSet, args: RankerArgs) -> dict[str, float]:
    """``args.stage_select``'s dev means of ``run`` (recall-like metrics over grade >= ``rel_threshold``)."""
    from ..evaluation import evaluate
    from ..evaluation.metrics import parse_metric

    m: dict[str, float] = {}
    graded = [x for x in args.stage_select if parse_metric(x)[0] == "ndcg"]
    binary = [x for x in args.stage_select if x not in graded]  # relevant: grade >= rel_threshold
    if graded:
        m.update(evaluate(run, dev.qrels, graded).mean)
    if binary:
        m.update(evaluate(run, dev.qrels, binary, rel_threshold=args.rel_threshold).mean)
    return m


def choose_search_effort(
    model: LambdaMARTRanker, search: StageSearch, dev: EvalSet, *, args: RankerArgs, progress: bool = True
) -> dict[str, Any]:
    """The served HNSW ``efSearch``, chosen on dev: the trained two-stage search (stage 1 at the
    model's depths, then its ranker) is run over the dev queries at each of ``args.search_efforts``
    and scored by ``args.stage_select``; the smallest efSearch within ``args.effort_tolerance`` of
    the best is kept (the graph search is most of a served search's stage-1 time, and its last
    few percent of recall@k move the two-stage results by less than rebuilds do). Returns the
    choice and every value's dev figures; the caller sets the index (it owns it).

    Args:
        model: the trained stage-2 ranker.
        search: the two-stage search it serves in.
        dev: the dev queries.
        args: the efforts, the selection metric and the tolerance.
        progress: show progress.

    Returns:
        The chosen efSearch and each value's dev figures."""
    qids = [q for q in dev.queries if q in dev.qrels and dev.queries[q].strip()]
    texts = [dev.queries[q] for q in qids]
    tried = []
    for ef in sorted(set(args.search_efforts)):
        t = time.perf_counter()
        hits = _stage_hits(
            search, texts, model.n_lexical, model.n_semantic, f"dev (efSearch {ef})", progress, ef_search=ef
        )
        g = model.hit_groups(texts, hits, dev.qrels, qids)
        m = _dev_selection(g.to_run(model.ranker.predict(g)), dev, args)
        row = {
            "efSearch": ef,
            **{f"dev {k}": round(float(v), 4) for k, v in m.items()},
            "dev selection": round(float(sum(m.values())), 4),
            "seconds": round(time.perf_counter() - t, 1),
        }
        tried.append(row)
        if progress:
            note("served efSearch " + "  ".join(f"{k} {v}" for k, v in row.items()))
    best = max(r["dev selection"] for r in tried)
    chosen = min((r for r in tried if r["dev selection"] >= best - args.effort_tolerance), key=lambda r: r["efSearch"])
    if progress:
        note(
            f"served efSearch {chosen['efSearch']}: the smallest within {args.effort_tolerance} of the best dev "
            f"{' + '.join(args.stage_select)} ({best})"
        )
    return {
        "chosen": chosen["efSearch"],
        "tried": tried,
        "tolerance": args.effort_tolerance,
        "rule": f"smallest efSearch whose dev {' + '.join(args.stage_select)} is within the tolerance of the best",
    }


def fit_stage_ranker(
    model: LambdaMARTRanker,
    search: StageSearch,
    train: EvalSet,
    dev: EvalSet,
    *,
    args: RankerArgs,
    progress: bool = True,
    positions: Mapping[str, Mapping[str, int]] | None = None,
    unshown: int = 0,
    labelled_only: bool = False,
) -> dict[str, Any]:
    """Train the stage-2 ranker of a two-stage search (BERT paper §3.3, §4.5) on what stage 1
    really returns: each training query's merged lexical ∪ semantic hits over the whole
    collection, labelled by its judgments (unjudged = not relevant). For each stage-1 depth pair in
    ``args.stage_depths`` a booster is trained (early-stopped on dev) and scored on dev by the sum
    of ``args.stage_select`` (default nDCG@10 + Recall@100) over every judged dev query (a
    relevant product stage 1 misses counts against it); the best pair and its booster are kept.
    Features are computed once, at the deepest depths.
    With ``args.search_efforts``, the log's ``search_effort`` names the served efSearch chosen on
    dev (``choose_search_effort``). With ``positions`` (labels from clicks: query id -> document
    -> the rank it was shown at), each training row carries its rank, ``unshown`` for a candidate
    the log never showed, and LightGBM's position-debiased lambdarank learns from them
    (``clicks.labels``).

    Args:
        model: the ranker trained in place.
        search: the stage-1 search whose hits it learns from.
        train: the training queries.
        dev: the dev queries (early stopping and selection).
        args: the training settings.
        progress: show progress.
        positions: query id -> document -> the rank it was shown at (labels from clicks), or None.
        unshown: the position of a training candidate ``positions`` lacks.
        labelled_only: learn only from the training candidates ``train.qrels`` labels (from clicks:
            the shown ones), not from every candidate with the unlabelled as 0.

    Returns:
        The training log."""

    if not model.stage_features:
        raise ValueError("fit_stage_ranker: the ranker has no stage_features (a two-stage ranker needs them)")
    depths = [(int(a), int(b)) for a, b in args.stage_depths]
    n_lex, n_sem = max(d[0] for d in depths), max(d[1] for d in depths)
    model.set_depths(n_lex, n_sem)
    data: dict[str, tuple[Groups, np.ndarray]] = {}
    for what, es in (("training", train), ("dev", dev)):
        qids = [q for q in es.queries if q in es.qrels and es.queries[q].strip()]
        texts = [es.queries[q] for q in qids]
        hits = _stage_hits(search, texts, n_lex, n_sem, what, progress)
        t = time.perf_counter()
        g = model.hit_groups(texts, hits, es.qrels, qids)
        ranks = np.array([[h.lexical_rank or 0, h.semantic_rank or 0] for hs in hits for h in hs], np.int64).reshape(
            -1, 2
        )
        if positions is not None and what == "training":
            g.position = row_positions(g, positions, unshown)
        if labelled_only and what == "training":
            keep = _labelled(g, es.qrels)
            g, ranks = _keep_rows(g, keep), ranks[keep]
        data[what] = (g, ranks)
        if progress:
            note(
                f"ranker features for {len(g.qids):,} {what} queries: {len(g.y):,} candidates in "
                f"{time.perf_counter() - t:.0f} s"
            )
    cols = [model.feature_names.index(c) if c in model.feature_names else -1 for c in ("lexical_rank", "semantic_rank")]
    tried, best = [], None
    for nl, ns in depths:
        gtr, gdv = _cut(*data["training"], cols, nl, ns), _cut(*data["dev"], cols, nl, ns)
        booster = LambdaMART(model.ranker.feature_names, **model.ranker.params)
        t = time.perf_counter()
        log = train_booster(booster, gtr, gdv)
        m = _dev_selection(gdv.to_run(booster.predict(gdv)), dev, args)
        row = {
            "n_lexical": nl,
            "n_semantic": ns,
            **{f"dev {k}": round(float(v), 4) for k, v in m.items()},
            "dev selection": round(float(sum(m.values())), 4),
            "trees": log["trees"],
            "candidates per query": round(len(gtr.y) / max(len(gtr.qids), 1), 1),
            "seconds": round(time.perf_counter() - t, 1),
        }
        tried.append(row)
        if progress:
            note("stage-2 ranker at depths " + "  ".join(f"{k} {v}" for k, v in row.items()))
        if best is None or row["dev selection"] > best[0]["dev selection"]:
            best = (row, booster, log)
    assert best is not None
    row, booster, log = best
    model.ranker = booster
    model.set_depths(row["n_lexical"], row["n_semantic"])
    if progress:
        note(
            f"stage-2 ranker: depths lexical {row['n_lexical']}, semantic {row['n_semantic']} chosen on dev "
            f"by {' + '.join(args.stage_select)} = {row['dev selection']}"
        )
    out = {
        **log,
        "chosen": row,
        "tried": tried,
        "selected_by": f"dev {' + '.join(args.stage_select)}",
        "recall_threshold": args.rel_threshold,
        "labels": "judged grade; unjudged candidates = 0",
    }
    if args.search_efforts:
        out["search_effort"] = choose_search_effort(model, search, dev, args=args, progress=progress)
    return out


# ------------------------------------------------------------------------ a bundle build's stage 2
StageTrainer = Callable[[Any], tuple[Any, dict[str, Any]]]
"""Called with the bundle's stage-1 search (``index.bundle.StageSearch``); returns the trained
ranker and its training log."""


def stage_ranker_trainer(
    data: str,
    corpus: Any,
    fields: str,
    params: Mapping[str, Any],
    model_dirs: Sequence[str] = (),
    *,
    where: str = "--ranker-param",
    clicks: str | Path | None = None,
    trust: TrustPolicy | bool = True,
) -> StageTrainer:
    """The function that trains a two-stage ranker (``TWO_STAGE`` with the ``params`` changes) on
    the bundle's stage 1, over data set ``data``'s train split, choosing depths and trees on its
    dev split. Parameters are checked here, before any indexing, and against ``model_dirs``'
    held-out folds (``training.held_out``): a ranker meant to learn from a fold a model never saw
    (``train_fold``) must name that fold.

    Args:
        data: a data set folder (BEIR layout) with train and dev judgments.
        corpus: the bundle's documents (``Corpus``), which the ranker indexes.
        fields: the document fields indexed, as in the bundle ("title+text", "title" or "text").
        params: lambdamart parameters and training arguments (one vocabulary) changed from ``TWO_STAGE``.
        model_dirs: the saved stage-1 models whose held-out folds are checked (empty: none).
        where: the parameters' origin, named in errors.
        clicks: an event log directory (``clicks.log``) to learn from instead of ``data``'s judgments.
        trust: with ``clicks``, the policy that counts each client once per pair and sets aside the
            clients no person could be (``clicks.trust``; its counts go in the training log's
            ``trust``): True for ``TrustPolicy()``'s defaults, False to count every impression, unguarded.

    Returns:
        The ``train_ranker`` of ``build_bundle``: given the stage-1 search, the trained ranker and its log.

    Raises:
        ParamError: an unknown or invalid parameter.
        ValueError: ``data`` is a file or has no train or dev judgments, or ``train_fold`` is not the
            fold a stage-1 model was trained without; with ``clicks``, a malformed or empty log or
            one showing documents the collection lacks (``data.DataFormatError`` names the file
            and column)."""
    if clicks is not None:
        return _click_trainer(clicks, corpus, fields, params, where, trust)
    if Path(data).is_file():
        raise ValueError(
            "--train-ranker needs a data set with train and dev judgments (a BEIR-layout folder), not a TSV file"
        )
    try:
        kwargs, args_ = recipe("lambdamart", {**TWO_STAGE, **params}, where=where)
    except ParamError as e:
        raise ParamError(f"{where}: {e}") from None
    args: Any = args_  # lambdamart's RankerArgs
    given = [n for n in RankerArgs.CLICK_ONLY if n in params]
    if given:
        raise ParamError(f"{where} {given[0]}: learning from clicks needs --clicks (an event log directory)")
    ds = open_dataset(data)
    missing = [s for s in ("train", "dev") if s not in ds.splits]
    if missing:
        raise ValueError(
            f"--train-ranker: data set {data} has no {' or '.join(missing)} judgments "
            f"(splits: {', '.join(ds.splits) or 'none'})"
        )
    queries = ds.queries()
    train, dev = (EvalSet(queries, {}, ds.qrels(s)) for s in ("train", "dev"))
    fold = args.fold  # (checked by the recipe)
    for d in model_dirs:
        h = held_out(d)
        if h is None or h.get("split") != "train":
            continue
        if fold is None:
            note(
                f"{d} was trained without fold {h['fold']} of the train queries; the ranker learns from all of "
                f"them, the ones it saw too ({where} train_fold={h['fold']}: only the fold it never saw)"
            )
        elif str(fold) != h["fold"]:
            raise ValueError(
                f"{where} train_fold={fold}: {d} was trained without fold {h['fold']} "
                f"of the train queries, not {fold}, so the ranker would learn from queries "
                f"it saw; use train_fold={h['fold']}"
            )
    learn_from = f"all {len(train.qrels):,} train queries"
    if fold is not None:  # only the queries the stage-1 models were trained without
        keep = fold.queries(train.qrels)
        learn_from = f"fold {fold} of the train queries ({len(keep):,} of {len(train.qrels):,})"
        train = EvalSet(queries, {}, {q: train.qrels[q] for q in keep})

    def train_ranker(search: Any) -> tuple[Any, dict[str, Any]]:
        note(f"stage-2 ranker: learning from {learn_from}")
        ranker = cast(LambdaMARTRanker, create_model("lambdamart", **kwargs))
        ranker.index(corpus.ids, corpus.joined(fields))
        log = fit_stage_ranker(ranker, search, train, dev, args=args)
        return ranker, {**log, "learnt_from": learn_from}

    return train_ranker


def _click_trainer(
    clicks: str | Path, corpus: Any, fields: str, params: Mapping[str, Any], where: str, trust: TrustPolicy | bool
) -> StageTrainer:
    """``stage_ranker_trainer`` over an event log: the log is read and checked (schema, documents
    in the collection, clicks present) and its labels made here, before any indexing; the
    returned function trains on stage 1's hits for the log's queries."""
    from ..clicks.labels import click_judgments, corpus_codes
    from ..clicks.sessions import read_sessions
    from ..clicks.trust import TrustPolicy, read_activity

    try:
        kwargs, args_ = recipe("lambdamart", {**TWO_STAGE, **params}, where=where)
    except ParamError as e:
        raise ParamError(f"{where}: {e}") from None
    args: Any = args_
    if args.fold is not None:
        raise ParamError(f"{where} train_fold: a ranker learnt from clicks learns from the log's queries, not a fold")
    if not Path(clicks).is_dir():
        raise ValueError(
            f"--clicks {clicks}: the stage-2 ranker learns from an event log directory "
            "(impressions/ and events/ Parquet segments), which records the positions clicks were made at"
        )
    sessions = read_sessions(clicks)
    corpus_codes(sessions, corpus.ids, where=f"the click log {clicks}")
    judged = click_judgments(
        sessions,
        debias=args.debias,
        propensities=args.propensities or None,
        levels=args.click_levels,
        max_weight=args.max_weight,
        min_impressions=args.min_impressions,
        clients=read_activity(clicks, sessions) if trust is not False else None,
        policy=trust if isinstance(trust, TrustPolicy) else None,
    )
    train_j, dev_j = judged.split(args.click_dev, seed=int(kwargs.get("seed", 0)))
    train = EvalSet(train_j.queries, {}, train_j.qrels)
    dev = EvalSet(dev_j.queries, {}, dev_j.qrels)
    how = {
        "none": "raw click-through rates",
        "ipw": "inverse-propensity weighted click-through rates",
        "lightgbm": "raw click-through rates with their positions (LightGBM's position-debiased lambdarank)",
    }[args.debias]
    learn_from = (
        f"{len(train.qrels):,} queries of the click log {clicks} ({judged.impressions:,} impressions, "
        f"{judged.clicks:,} clicks), labelled by {how}; {len(dev.qrels):,} held out as dev"
    )

    def train_ranker(search: Any) -> tuple[Any, dict[str, Any]]:
        note(f"stage-2 ranker: learning from {learn_from}")
        ranker = cast(LambdaMARTRanker, create_model("lambdamart", **kwargs))
        ranker.index(corpus.ids, corpus.joined(fields))
        positions = train_j.positions if args.debias == "lightgbm" else None
        log = fit_stage_ranker(
            ranker,
            search,
            train,
            dev,
            args=args,
            positions=positions,
            unshown=judged.unshown,
            labelled_only=args.unshown == "drop",
        )
        return ranker, {
            **log,
            "learnt_from": learn_from,
            "labels": f"each shown pair's {how}, in {args.click_levels} grades; candidates never shown "
            + ("left out" if args.unshown == "drop" else "= 0"),
            "debias": args.debias,
            "propensities": judged.propensities,
            "trust": None if judged.trust is None else judged.trust.as_dict(),
        }

    return train_ranker
