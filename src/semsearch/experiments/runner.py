"""Run an experiment spec: rank, tune, evaluate, tabulate beside the paper, check expectations."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..data import BeirDataset, EvalSet, TrainingData, open_dataset, query_pools, ranked, read_run
from ..evaluation import (
    EvalResult,
    QueryFold,
    ResultTable,
    canonical_metric,
    cross_validate,
    evaluate,
    kfold_queries,
    top1_crosstab,
    tune,
)
from ..evaluation.compare import PAPER_BINS
from ..index import SemanticRetriever, interpolate, merge_runs
from ..models import LexicalModel, Model, rank
from ..models.lexical import LexicalIndex
from ..plugins import create_model, resolve_model
from ..progress import track
from ..text import Analyzer, SpellCorrector, detect_analyzer
from ..training import fit, recipe
from ..types import Qrels, Run
from .cache import cache_key, cached_training, keyed_recipe, saved_dir
from .result import Check, ExperimentResult
from .spec import ABSpec, ClassificationSpec, ExperimentSpec, ModelSpec, seed_rows


class _Context:
    """What every row of one experiment shares: the data set, texts, candidates, indexes."""

    def __init__(self, spec: ExperimentSpec, progress: bool, model_dir: Path | None, retrain: bool = False):
        self.spec = spec
        self.retrain = retrain
        self.progress = progress
        self.model_dir = model_dir
        self.training: dict[str, Any] = {}
        self.ds: BeirDataset = open_dataset(spec.dataset)
        self.corpus = self.ds.corpus()
        self._texts: dict[str, list[str]] = {}
        self.queries = self.ds.queries()
        self.mode, self.run_name, self.k = spec.candidate_mode
        self._indexes: dict[tuple[Analyzer, str], LexicalIndex] = {}
        self._pools: dict[str, set[str]] | None = None
        self._run_cache: dict[str, Run] = {}
        self.out_of_fold: dict[tuple[str, str, int], Run] = {}  # (row, split, K) -> cross-fitted run
        self._teachers: dict[tuple[str, Any], tuple[str, dict[str, Any]]] = {}  # (row, fold) -> ``_teacher``
        self._scratch: Any = None  # TemporaryDirectory of teachers handed over without a model directory
        self._correctors: dict[str, SpellCorrector] = {}

    def qrels(self, split: str) -> Qrels:
        return self.ds.qrels(split, check=True)

    def dataset_run(self, name: str) -> Run:
        if name not in self._run_cache:
            if name not in self.ds.runs:
                raise ValueError(f"{self.ds.root}: no run {name!r}; runs: {', '.join(self.ds.runs) or 'none'}")
            self._run_cache[name] = read_run(self.ds.runs[name])
        return self._run_cache[name]

    def candidates(self, qrels: Qrels) -> dict[str, list[str]] | None:
        """Candidate doc ids per query of ``qrels`` (None: retrieve from the full collection)."""
        if self.mode == "judged":
            return {q: list(docs) for q, docs in qrels.items()}
        if self.mode == "run":
            run = self.dataset_run(self.run_name)  # type: ignore[arg-type]  # run mode
            return {q: [d for d, _ in ranked(run.get(q, {}))[: self.k]] for q in qrels}
        return None

    def texts(self, fields: str) -> list[str]:
        if fields not in self._texts:
            self._texts[fields] = self.corpus.joined(fields)  # type: ignore[arg-type]  # a corpus
        return self._texts[fields]

    def lexical_index(self, analyzer: Analyzer, fields: str) -> LexicalIndex:
        key = (analyzer, fields)
        if key not in self._indexes:
            self._indexes[key] = LexicalIndex.build(self.corpus.ids, self.texts(fields), analyzer)
        return self._indexes[key]

    def pools(self) -> dict[str, set[str]]:
        """Per query text, the documents pooled for it (``data.query_pools``), for lexical rows
        with ``stats = "exclude-query-pool"``."""
        if self._pools is None:
            self._pools = query_pools(self.ds, self.queries, runs={n: self.dataset_run(n) for n in self.ds.runs})
        return self._pools

    def build(self, ms: ModelSpec, fold: _Fold | None = None) -> Model:
        """The row's model with its constructor params: trained (or reloaded) if the row has a
        ``train`` block — without ``fold``'s held-out queries when given — then indexed over the
        experiment's corpus."""
        kwargs = dict(ms.params, **({"analyzer": ms.analyzer} if ms.analyzer else {}))
        model = self._trained(ms, kwargs, fold) if ms.train else resolve_model(ms.model, **kwargs)
        fields = ms.fields or self.spec.fields
        if ms.index:  # the model's encoder behind a vector index (document embeddings cached)
            if not hasattr(model, "encode_documents"):
                raise ValueError(f"{ms.label}: index = {{...}} needs an encoder model, {ms.model!r} is not one")
            cache = self.model_dir / "embeddings" if self.model_dir else None
            model = SemanticRetriever(model, cache=cache, **ms.index)  # type: ignore[arg-type]  # an encoder
            model.index(
                self.corpus.ids, self.texts(fields), progress=f"{ms.label}: encoding" if self.progress else None
            )
        elif isinstance(model, LexicalModel):
            analyzer = model.analyzer
            if model.p.analyzer == "auto":  # picked for the collection, as ``index`` does
                analyzer = Analyzer.named(detect_analyzer(self.texts(fields)))
            model.use_index(self.lexical_index(analyzer, fields))
            if "exclude-query-pool" in (ms.params.get("stats"), *ms.grid.get("stats", ())):
                model.use_pools(self.pools())
        else:
            model.index(self.corpus.ids, self.texts(fields))
        return model

    def _teacher(self, ms: ModelSpec, fold: _Fold | None) -> tuple[str | list[str], Any] | None:
        """For a row whose ``teacher`` parameter names earlier trained rows (Margin-MSE; one, or a
        list: an ensemble teacher): each row's model trained (or reloaded) on the same queries —
        ``fold``'s copy under cross-fitting, so no fold query reaches the student through its
        teacher — as (its saved directory, its keyed recipe, which stands for it in the student's
        recipe), a list of each for a list. A list entry that names no row is a path and stands for
        itself. None when ``teacher`` names no row."""
        name = ms.params.get("teacher")
        names = name if isinstance(name, list) else [name]
        rows = {r.label: r for m in self.spec.models for r in seed_rows(m)}  # a seed row may teach
        if not any(isinstance(n, str) and n in rows for n in names):
            return None
        got: list[tuple[Any, Any]] = [self._teacher_row(rows[n], fold) if n in rows else (n, n) for n in names]
        return ([g[0] for g in got], [g[1] for g in got]) if isinstance(name, list) else got[0]

    def _teacher_row(self, tms: ModelSpec, fold: _Fold | None) -> tuple[str, dict[str, Any]]:
        """Row ``tms``'s model, trained once per fold however many seed rows it teaches, as (its
        saved directory, its keyed recipe)."""
        key = (tms.label, None if fold is None else fold.part)
        if key not in self._teachers:
            tkw = dict(tms.params, **({"analyzer": tms.analyzer} if tms.analyzer else {}))
            model = self._trained(tms, tkw, fold)
            trecipe = self._cache_recipe(tms, tkw, fold)
            if self.model_dir is not None:  # where cached_training saved it
                where = saved_dir(self.model_dir, tms.model, trecipe)
            else:  # no cache: a temporary directory, removed with this context
                import tempfile

                if self._scratch is None:
                    self._scratch = tempfile.TemporaryDirectory(prefix="semsearch-teachers-")
                where = Path(self._scratch.name) / f"{tms.model}-{cache_key(tms.model, trecipe)}"
                model.save(where)
            self._teachers[key] = (str(where), keyed_recipe(tms.model, trecipe))
        return self._teachers[key]

    def _cache_recipe(self, ms: ModelSpec, kwargs: dict[str, Any], fold: _Fold | None) -> dict[str, Any]:
        """What names the row's trained model in the cache: data, parameters, training block (with
        the dev split that early-stops, even where the spec implies it) and the cross-fit fold."""
        other = "dataset" in ms.train
        dev_split = ms.train.get("dev") or (
            self.spec.tune[6:] if self.spec.tune.startswith("split:") and not other else None
        )
        train_recipe = {**ms.train, "dev": dev_split} if dev_split else ms.train
        out = {
            "dataset": ms.train.get("dataset", self.spec.dataset),
            "model": ms.model,
            "params": kwargs,
            "train": train_recipe,
        }
        if fold is not None:
            out["cross_fit"] = {"folds": fold.part.n, "fold": fold.part.index, "seed": 0}  # kfold_queries' seed
        return out

    def _trained(self, ms: ModelSpec, kwargs: dict[str, Any], fold: _Fold | None = None) -> Model:
        """Fit on the row's training split (less ``fold``'s held-out queries: cross-fitting),
        early-stopping on the spec's dev split where it has one. With a model directory, a model
        trained earlier with the same recipe is reused. A ``teacher`` naming an earlier row is
        that row's model (``_teacher``)."""
        teacher = self._teacher(ms, fold)
        if teacher is not None:
            cache_recipe = self._cache_recipe(ms, {**kwargs, "teacher": teacher[1]}, fold)
            kwargs = {**kwargs, "teacher": teacher[0]}
        else:
            cache_recipe = self._cache_recipe(ms, kwargs, fold)
        # train = {dataset, dev}: train on another data set (early stopping on its ``dev`` split);
        # without ``dev``, the spec's tuning split of the same data set early-stops, if it has one
        dev_split = cache_recipe["train"].get("dev")

        def train() -> tuple[Model, dict[str, Any]]:
            ds = open_dataset(ms.train["dataset"]) if "dataset" in ms.train else self.ds
            clicks_log = None
            if "clicks" in ms.train:  # simulated users on a logging ranker over the split's queries
                from .simclicks import simulated_training

                data, clicks_log = simulated_training(
                    ds,
                    ms.train.get("split", "train"),
                    ms.train.get("fields", ms.fields or self.spec.fields),
                    ms.train["clicks"],
                    self.corpus if ds is self.ds else None,
                )
            else:
                data = TrainingData.from_dataset(
                    ds,
                    ms.train.get("split", "train"),
                    threshold=int(ms.train.get("threshold", 3)),
                    fields=ms.train.get("fields", ms.fields or self.spec.fields),
                )
            if fold is not None:
                data = data.without_queries(fold.held_out)
            dev = EvalSet.judged(ds, dev_split) if dev_split else None
            model_kw, args = recipe(ms.model, kwargs, where=f"row {ms.label!r}")
            model = create_model(ms.model, **model_kw)
            start = time.perf_counter()
            log = fit(model, data, dev, progress=self.progress, args=args)
            if clicks_log is not None:
                seconds = time.perf_counter() - start
                epochs = len(log.get("epochs", [])) or getattr(args, "epochs", 1)
                log = {
                    **log,
                    "clicks": clicks_log,
                    "train_seconds": round(seconds, 1),
                    "pairs_per_second": round(len(data.positives) * epochs / seconds),
                }
            return model, log

        model, log = cached_training(self.model_dir, ms.model, cache_recipe, train, self.retrain)
        self.training[ms.label if fold is None else f"{ms.label} (cross-fit fold {fold.part})"] = log
        return model

    def corrector(self, fields: str) -> SpellCorrector:
        """The spelling corrector of the collection's ``fields`` (fitted once)."""
        if fields not in self._correctors:
            self._correctors[fields] = SpellCorrector.fit(self.texts(fields))
        return self._correctors[fields]

    def query_texts(self, ms: ModelSpec, qids: Iterable[str]) -> dict[str, str]:
        """The texts of ``qids`` as row ``ms`` ranks them: spell-corrected with ``correct_queries``."""
        queries = {q: self.queries[q] for q in qids if q in self.queries}
        if ms.correct_queries:
            return self.corrector(ms.fields or self.spec.fields).correct_all(queries)
        return queries

    def rank(self, model: Model, ms: ModelSpec, qrels: Qrels) -> Run:
        queries = self.query_texts(ms, qrels)
        cands = self.candidates(qrels)
        return rank(model, queries, cands, k=ms.depth or self.k)


def run_experiment(
    spec: ExperimentSpec | ClassificationSpec,
    *,
    progress: bool = True,
    model_dir: str | Path | None = None,
    retrain: bool = False,
) -> Any:
    """Run every row of ``spec``; tuning never looks at the evaluation split except by k-fold CV.
    Trained models are saved under ``model_dir`` and reused from there when the recipe — data,
    parameters, and the model kind's trainer version (``training/versions.py``) — matches, unless
    ``retrain``.
    Classification specs (MT-DNN Table 2, Figures 4-5) run in ``experiments/classification.py``."""
    if isinstance(spec, ABSpec):
        from .abtest import run_ab

        return run_ab(
            spec, run_experiment, progress=progress, model_dir=Path(model_dir) if model_dir else None, retrain=retrain
        )
    if isinstance(spec, ClassificationSpec):
        from .classification import run_classification

        return run_classification(
            spec, progress=progress, model_dir=Path(model_dir) if model_dir else None, retrain=retrain
        )
    start = time.perf_counter()
    ctx = _Context(spec, progress, Path(model_dir) if model_dir else None, retrain)
    test = ctx.qrels(spec.split)
    table = ResultTable(baselines=spec.baselines)
    chosen: dict[str, list[dict[str, Any]]] = {}
    tuning: dict[str, dict[str, float]] = {}
    runs: dict[str, Run] = {}
    checks: list[Check] = []
    rows: Sequence[ModelSpec] = [r for ms in spec.models for r in seed_rows(ms)]  # seeds = N: N rows
    rowsets: dict[str, _RowRuns] = {}
    for ms in track(rows, f"{spec.name}", total=len(rows)) if progress else rows:
        if ms.is_run:
            run = ctx.dataset_run(ms.model[4:])
            run = {q: dict(ranked(run[q])[: ctx.k] if ctx.k else run[q].items()) for q in test if q in run}
            chosen[ms.label] = []
            rowsets[ms.label] = _RowRuns(run, None, ms)
        elif ms.is_ltr:
            run, chosen[ms.label] = _ltr_run(ctx, ms, test, rowsets)
        elif ms.is_interpolation:
            run, chosen[ms.label], tuning[ms.label], rowsets[ms.label] = _interpolated_run(ctx, ms, test, rowsets)
        elif ms.is_hybrid:
            run, chosen[ms.label] = _hybrid_run(ctx, ms, rowsets), [dict(ms.hybrid)]
        else:
            run, chosen[ms.label], tuning[ms.label], rowsets[ms.label] = _tuned_run(ctx, ms, test)
        runs[ms.label] = run
        result: EvalResult = evaluate(
            run, test, spec.metrics, gain=spec.gain, queries=spec.queries, rel_threshold=spec.rel_threshold
        )
        table.add(ms.label, result, paper=ms.paper)
        for metric, (lo, hi) in ms.expect.items():
            checks.append(Check(ms.label, metric, result.mean[canonical_metric(metric)], lo, hi))
    seed_spread = {
        ms.label: table.spread([r.label for r in seed_rows(ms)], spec.metrics) for ms in spec.models if ms.seeds > 1
    }
    crosstab = {}
    if spec.crosstab:
        bins = {k: (int(v[0]), int(v[1])) for k, v in spec.crosstab.get("bins", {}).items()} or PAPER_BINS
        crosstab = top1_crosstab(runs[spec.crosstab["rows"]], runs[spec.crosstab["columns"]], test, bins)
    return ExperimentResult(
        spec, table, chosen, tuning, checks, time.perf_counter() - start, runs, ctx.training, crosstab, seed_spread
    )


@dataclass
class _RowRuns:
    """What an interpolation or LTR row needs of a component row: its test run and, under
    dev-split tuning, its final model to rank the dev queries with and the grid setting that model
    applies (cross-fitted fold models apply it too). An interpolated row has no model but its
    components (``parts``) and their ``weights``: it ranks another split by fusing theirs."""

    test: Run
    model: Model | None
    spec: ModelSpec
    setting: dict[str, Any] = field(default_factory=dict)
    parts: tuple[_RowRuns, ...] = ()
    weights: tuple[float, ...] = ()
    _ranked: dict[frozenset[tuple[str, frozenset[str]]], Run] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ranks(self) -> bool:
        """Whether the row can rank another split's queries (``rank``)."""
        return self.model is not None or bool(self.parts) and all(p.ranks for p in self.parts)

    def rank(self, ctx: _Context, qrels: Qrels) -> Run:
        """The row's run over ``qrels``' queries: its final model's, or its components' fused.
        Kept per set of queries and judged documents (what the ranking reads of ``qrels``), so
        every later row that tunes on the same split reuses it instead of ranking it again."""
        key = frozenset((q, frozenset(docs)) for q, docs in qrels.items())
        if key not in self._ranked:
            if self.model is not None:
                self._ranked[key] = ctx.rank(self.model, self.spec, qrels)
            elif not self.ranks:
                raise ValueError(f"{self.spec.label}: has no single final model to rank other queries with")
            else:
                self._ranked[key] = interpolate(
                    [p.rank(ctx, qrels) for p in self.parts], list(self.weights), norm=self.spec.norm
                )
        return self._ranked[key]


@dataclass(frozen=True)
class _Fold:
    """A cross-fitting fold (``part``, as ``kfold_queries`` with seed 0 splits the queries the
    experiment has texts for): its queries, ``held_out``, are kept out of the training split."""

    part: QueryFold
    held_out: tuple[str, ...]


def _tuned_run(
    ctx: _Context, ms: ModelSpec, test: Qrels
) -> tuple[Run, list[dict[str, Any]], dict[str, float], _RowRuns]:
    spec = ctx.spec
    base = ctx.build(ms)
    settings = ms.settings()
    keys = [json.dumps(s, sort_keys=True) for s in settings]
    fixed = dict(ms.params)
    if len(settings) == 1:
        model = base.with_params(**settings[0])
        run = ctx.rank(model, ms, test)
        return run, [{**fixed, **settings[0]}], {}, _RowRuns(run, model, ms, settings[0])
    if spec.tune.startswith("split:"):
        dev = ctx.qrels(spec.tune[6:])
        dev_runs = {k: ctx.rank(base.with_params(**s), ms, dev) for k, s in zip(keys, settings)}
        best, scores = tune(dev_runs, dev, spec.tune_metric, gain=spec.gain)
        model = base.with_params(**settings[keys.index(best)])
        run = ctx.rank(model, ms, test)
        return (
            run,
            [{**fixed, **settings[keys.index(best)]}],
            scores,
            _RowRuns(run, model, ms, settings[keys.index(best)]),
        )
    folds = int(spec.tune[2:])
    test_runs = {k: ctx.rank(base.with_params(**s), ms, test) for k, s in zip(keys, settings)}
    cv = cross_validate(test_runs, test, spec.tune_metric, k=folds, gain=spec.gain)
    scores = {f"fold{i + 1}:{k}": v for i, fs in enumerate(cv.fold_scores) for k, v in fs.items()}
    return cv.run, [{**fixed, **settings[keys.index(c)]} for c in cv.chosen], scores, _RowRuns(cv.run, None, ms)


def _interpolated_run(
    ctx: _Context, ms: ModelSpec, test: Qrels, rowsets: dict[str, _RowRuns]
) -> tuple[Run, list[dict[str, Any]], dict[str, float], _RowRuns]:
    """weight·row₁ + (1 − weight)·row₂ (scores normalised per query by ``ms.norm``); the weight is
    tuned on the dev split (components re-ranked there by their final models, or an interpolated
    component by its own components) or by k-fold CV. With no grid, the mean of the rows'
    normalised scores (two or more rows: a seed ensemble), nothing tuned. The row's own runs go on
    to later rows, which may interpolate it in turn."""
    spec = ctx.spec
    try:
        parts = [rowsets[c] for c in ms.combine]
    except KeyError as e:
        raise ValueError(f"{ms.label}: cannot interpolate {e.args[0]!r} (not a model or interpolated row)") from None
    if not ms.grid:
        n = len(parts)
        equal = (1.0 / n,) * n
        run = interpolate([r.test for r in parts], list(equal), norm=ms.norm)
        return run, [{"weights": "equal"}], {}, _RowRuns(run, None, ms, parts=tuple(parts), weights=equal)
    a, b = parts
    weights = [float(w) for w in ms.grid["weight"]]
    keys = [json.dumps({"weight": w}) for w in weights]

    def fused(ra: Run, rb: Run) -> dict[str, Run]:
        return {k: interpolate([ra, rb], [w, 1.0 - w], norm=ms.norm) for k, w in zip(keys, weights)}

    if spec.tune.startswith("split:"):
        if not (a.ranks and b.ranks):
            raise ValueError(f"{ms.label}: components need a single final model under dev tuning")
        dev = ctx.qrels(spec.tune[6:])
        best, scores = tune(fused(a.rank(ctx, dev), b.rank(ctx, dev)), dev, spec.tune_metric, gain=spec.gain)
        w = weights[keys.index(best)]
        run = interpolate([a.test, b.test], [w, 1.0 - w], norm=ms.norm)
        return run, [{"weight": w}], scores, _RowRuns(run, None, ms, parts=(a, b), weights=(w, 1.0 - w))
    cv = cross_validate(fused(a.test, b.test), test, spec.tune_metric, k=int(spec.tune[2:]), gain=spec.gain)
    scores = {f"fold{i + 1}:{k}": v for i, fs in enumerate(cv.fold_scores) for k, v in fs.items()}
    return cv.run, [json.loads(c) for c in cv.chosen], scores, _RowRuns(cv.run, None, ms)


def _hybrid_run(ctx: _Context, ms: ModelSpec, rowsets: dict[str, _RowRuns]) -> Run:
    """The union of a lexical row's and a semantic row's test runs (each already cut to its own
    depth), ordered by ``ms.hybrid``'s scorer (RRF by default): the BERT paper's Table 3 rows."""
    try:
        lex, sem = (rowsets[c] for c in ms.combine)
    except KeyError as e:
        raise ValueError(f"{ms.label}: cannot merge {e.args[0]!r} (not a model row)") from None
    return merge_runs(
        lex.test, sem.test, n_lexical=lex.spec.depth or ctx.k or 0, n_semantic=sem.spec.depth or ctx.k or 0, **ms.hybrid
    )


def _ltr_run(
    ctx: _Context, ms: ModelSpec, test: Qrels, rowsets: dict[str, _RowRuns]
) -> tuple[Run, list[dict[str, Any]]]:
    """LambdaMART over the scores of the rows in ``ms.combine`` (plus ``pair_features``), each
    row's score one feature column. Under dev-split tuning the ranker learns from the queries of
    ``train.split`` (components re-rank them with their final models): with early stopping on the
    dev split, or — when it learns from the dev split itself — with the number of trees set by
    5-fold CV over those queries. With ``train.cross_fit = K`` a component trained on that same
    split scores each of its K query folds with a copy trained without that fold (out-of-fold
    scores: a model scores its own training queries too well, and the ranker would over-trust it);
    the test and dev queries are scored by the final models. Under ``cvK`` (no training split) it
    is cross-validated over the test queries. The log, with the feature importance (Table 5), goes into ``training``."""
    from ..ranking import LambdaMART, groups, mean_importance, pair_columns, run_columns
    from ..training.ranker import cross_validated, train_booster

    spec = ctx.spec
    try:
        parts = [rowsets[c] for c in ms.combine]
    except KeyError as e:
        raise ValueError(f"{ms.label}: cannot use {e.args[0]!r} as a feature (not a model or run row)") from None
    params = dict(ms.params)
    pair = list(params.pop("pair_features", []))
    names = list(ms.combine) + pair
    texts = ctx.texts(ms.fields or spec.fields)

    def grouped(qrels: Qrels, runs: list[Run]) -> Any:
        cands = {q: c for q, c in (ctx.candidates(qrels) or {}).items() if q in ctx.queries and c}
        X = run_columns(runs, cands)
        if pair:
            ix = ctx.corpus.index
            qtexts = ctx.query_texts(ms, cands)
            X = np.hstack(
                [X, pair_columns(pair, [qtexts[q] for q in cands], [[texts[ix[d]] for d in c] for c in cands.values()])]
            )
        return groups(cands, X, qrels)

    if ctx.mode == "full":
        raise ValueError(f"{ms.label}: lambdamart re-ranks candidates; use judged or run candidates")
    test_g = grouped(test, [p.test for p in parts])
    if spec.tune.startswith("cv"):
        run, logs = cross_validated(
            test_g, names, k=int(spec.tune[2:]), inner_folds=int(ms.train.get("cv_folds", 0)), gain=spec.gain, **params
        )
        inner = f", trees by inner {logs[0]['rounds_by']}" if logs[0]["rounds_by"] != "fixed" else ""
        ctx.training[ms.label] = {
            "folds": logs,
            "importance": mean_importance(logs),
            "rounds_by": f"mean of {len(logs)} CV folds{inner}",
        }
        return run, [dict(ms.params)]
    missing = [p.spec.label for p in parts if p.model is None]
    if missing:
        raise ValueError(f"{ms.label}: rows {missing} have no single final model to rank the training queries with")
    split = ms.train.get("split", "train")
    tune_split = spec.tune[6:] if spec.tune.startswith("split:") else None

    def split_groups(name: str) -> Any:
        qrels = ctx.qrels(name)
        return grouped(qrels, [p.rank(ctx, qrels) for p in parts])

    k = ms.train.get("cross_fit")
    # the components that learnt from the ranker's own training queries: these are cross-fitted
    refit = [
        p.spec.label
        for p in parts
        if p.spec.train
        and p.spec.train.get("split", "train") == split
        and p.spec.train.get("dataset", spec.dataset) == spec.dataset
    ]
    if k:
        qrels = ctx.qrels(split)
        folds = [tuple(held) for _, held in kfold_queries([q for q in qrels if q in ctx.queries], int(k), seed=0)]
        runs = []
        for p in parts:
            key = (p.spec.label, split, int(k))
            if key in ctx.out_of_fold:  # another LTR row (an ablation) already scored these queries
                runs.append(ctx.out_of_fold[key])
                continue
            if p.spec.label not in refit:
                ctx.out_of_fold[key] = p.rank(ctx, qrels)  # never saw them
            else:
                run = {}
                for i, held in enumerate(folds):
                    model = ctx.build(p.spec, _Fold(QueryFold(i + 1, int(k)), held)).with_params(**p.setting)
                    run.update(ctx.rank(model, p.spec, {q: qrels[q] for q in held}))
                ctx.out_of_fold[key] = run
            runs.append(ctx.out_of_fold[key])
        train_g = grouped(qrels, runs)
    else:
        train_g = split_groups(split)
    dev_g = split_groups(tune_split) if tune_split and tune_split != split else None
    ranker = LambdaMART(names, gain=spec.gain, **params)
    log = train_booster(ranker, train_g, dev_g, cv_folds=5 if dev_g is None else 0)
    ctx.training[ms.label] = {
        **log,
        "train_split": split,
        **({"cross_fit": int(k), "cross_fitted": refit} if k else {}),
    }
    return test_g.to_run(ranker.predict(test_g)), [dict(ms.params, train_split=split)]
