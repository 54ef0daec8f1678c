"""Training LambdaMART (Burges 2010; BERT retrieval paper §4.5): LightGBM's lambdarank booster on
query groups, early-stopped on a dev split's NDCG@k, or with the number of trees picked by k-fold
CV over the training queries; cross-validated rankers for data sets without a training split; and
the registered ``lambdamart`` kind's trainer (``fit``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..data import EvalSet, TrainingData
from ..evaluation import kfold_queries
from ..ranking.features import Groups
from ..ranking.lambdamart import LambdaMART, LambdaMARTRanker
from ..types import Run
from .args import RankerArgs


def train_booster(booster: LambdaMART, train: Groups, dev: Groups | None = None, *, cv_folds: int = 0) -> dict[str, Any]:
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
        curve = cv[f"valid {key}-mean"]
        rounds, metric, how = int(np.argmax(curve)) + 1, float(np.max(curve)), f"{cv_folds}-fold CV"
    evals: dict[str, Any] = {}
    callbacks: list[Any] = [lgb.record_evaluation(evals)]
    valid = []
    if dev is not None and len(dev.qids):
        valid = [booster.dataset(dev, reference=dtrain)]
        callbacks.append(stop)
        how = "dev early stopping"
    trained = lgb.train(params, dtrain, num_boost_round=rounds, valid_sets=valid, valid_names=["dev"][: len(valid)],
                        callbacks=callbacks)
    booster.set_booster(trained, trained.best_iteration or trained.current_iteration())
    if valid:
        metric = float(evals["dev"][key][booster.best_iteration - 1])
    return {"trees": booster.best_iteration, "rounds_by": how, f"held-out {key}": metric,
            "train_queries": len(train.qids), "train_pairs": len(train.y),
            "dev_queries": len(dev.qids) if dev is not None else 0, "importance": booster.importance()}


def cross_validated(g: Groups, feature_names: Sequence[str], k: int = 5, seed: int = 0, inner_folds: int = 0,
                    **params: Any) -> tuple[Run, list[dict[str, Any]]]:
    """k-fold cross-validation over queries (data sets with no training split, e.g. TREC DL's 43
    queries, or comparing rankers on a selection split): each fold's queries are ranked by a
    LambdaMART (booster settings ``params``) trained on the other folds, with ``num_boost_round``
    trees, or, with ``inner_folds`` ≥ 2, as many as an inner k-fold CV over those folds' queries
    picks (nested CV: the scored fold never chooses anything). Returns the run and each fold's log."""
    run: Run = {}
    logs = []
    for train_q, test_q in kfold_queries(g.qids, k=k, seed=seed):
        model = LambdaMART(feature_names, **params)
        log = train_booster(model, g.subset(train_q), cv_folds=inner_folds)
        test = g.subset(test_q)
        run.update(test.to_run(model.predict(test)))
        logs.append({**log, "test_queries": len(test_q)})
    return run, logs


def fit_ranker(model: LambdaMARTRanker, train: EvalSet, dev: EvalSet | None = None, *, cv_folds: int = 0) -> dict[str, Any]:
    """Train an indexed ranker on ``train``'s candidates labelled by its qrels; ``dev`` early-stops."""
    g = model.groups(train.queries, train.candidates, train.qrels)
    dv = model.groups(dev.queries, dev.candidates, dev.qrels) if dev is not None else None
    return train_booster(model.ranker, g, dv, cv_folds=cv_folds)


def train_ranker(model: LambdaMARTRanker, data: TrainingData, dev: EvalSet | None = None, *, args: RankerArgs,
                 progress: bool = True, **options: Any) -> dict[str, Any]:
    """The ``lambdamart`` kind's trainer: its feature models index the training collection, then
    the booster learns from each training query's judged candidates, labelled by the qrels."""
    if options.get("checkpoint_dir"):
        raise ValueError("lambdamart training does not write checkpoints; train without --checkpoint")
    model.index(data.doc_ids, data.doc_texts)
    train = EvalSet({q: t for q, t in data.queries.items() if q in data.qrels},
                    {q: list(docs) for q, docs in data.qrels.items() if q in data.queries}, data.qrels)
    return fit_ranker(model, train, dev, cv_folds=args.cv_folds)
