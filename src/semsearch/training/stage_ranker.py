"""The stage-2 ranker a bundle build trains (``index build --train-ranker``): LambdaMART learning
from what the bundle's stage 1 returns for a data set's train queries, its stage depths and trees
chosen on the dev queries; or (``--clicks DIR``) for an event log's queries, labelled by their
clicks with the position bias corrected (``clicks.labels``), depths and trees chosen on a
held-out share of the log's queries: no grades at all."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from ..data import EvalSet, open_dataset
from ..params import ParamError
from ..plugins import create_model
from ..progress import note
from ..ranking.lambdamart import TWO_STAGE, LambdaMARTRanker
from . import held_out, recipe
from .args import RankerArgs
from .lambdamart import fit_stage_ranker

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

    Returns:
        The ``train_ranker`` of ``build_bundle``: given the stage-1 search, the trained ranker and its log.

    Raises:
        ParamError: an unknown or invalid parameter.
        ValueError: ``data`` is a file or has no train or dev judgments, or ``train_fold`` is not the
            fold a stage-1 model was trained without; with ``clicks``, a malformed or empty log or
            one showing documents the collection lacks (``data.DataFormatError`` names the file
            and column)."""
    if clicks is not None:
        return _click_trainer(clicks, corpus, fields, params, where)
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


def _click_trainer(clicks: str | Path, corpus: Any, fields: str, params: Mapping[str, Any], where: str) -> StageTrainer:
    """``stage_ranker_trainer`` over an event log: the log is read and checked (schema, documents
    in the collection, clicks present) and its labels made here, before any indexing; the
    returned function trains on stage 1's hits for the log's queries."""
    from ..clicks.labels import click_judgments, corpus_codes
    from ..clicks.sessions import read_sessions

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
        }

    return train_ranker
