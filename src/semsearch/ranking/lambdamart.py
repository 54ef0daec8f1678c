"""LambdaMART (Burges 2010) with LightGBM's ``lambdarank`` objective: the GBDT ranker of the BERT
retrieval paper (§4.5, Tables 4-5), over the scores of any trained models as features.

``LambdaMART`` is the booster over a feature matrix of query groups (``features.Groups``): graded
labels with exponential gain 2^label − 1 (the papers' NDCG) or linear gain (trec_eval), early
stopping on a dev split's NDCG@k, feature importance by gain and by split count, saved as
LightGBM's text model format plus a JSON config (never pickle). ``LambdaMARTRanker`` (registered
``lambdamart``) is a ``Model``: it owns its feature models, indexes them, and scores candidates,
so it composes with ``rank`` like any model; its saved directory holds the booster and each
feature model in a sub-directory."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..data.files import write_json
from ..models.base import Model, ModelDirError, positions, read_config, same_length, seal, write_config
from ..params import ParamError, Params, param
from ..types import Qrels
from .features import (
    PAIR_FEATURES,
    STAGE_FEATURES,
    TEXT_FEATURES,
    DocWords,
    Groups,
    groups,
    model_columns,
    pair_columns,
    stage_columns,
    stage_matrix,
)
from .trees import CompiledTrees, compile_booster

BOOSTER = "lambdamart.txt"
RANKER_JSON = "ranker.json"


@dataclass(frozen=True)
class BoosterParams(Params):
    """LambdaMART's settings (saved in ``ranker.json``); training is ``training.ranker``."""

    kind = "lambdamart"

    learning_rate: float = param(0.05, gt=0)
    num_leaves: int = param(15, ge=2)
    min_data_in_leaf: int = param(50, ge=1)
    feature_fraction: float = param(1.0, gt=0, le=1)
    bagging_fraction: float = param(1.0, gt=0, le=1)
    bagging_freq: int = param(0, ge=0)
    lambda_l2: float = param(0.0, ge=0)
    num_boost_round: int = param(1000, ge=1)  # the most trees; early stopping on dev picks fewer
    early_stopping: int = param(50, ge=1)  # rounds without dev improvement before stopping
    metric_at: int = param(10, ge=1)  # early stopping on dev NDCG@metric_at
    gain: Literal["exp", "linear"] = "exp"  # 2^label − 1 (the papers) or the label (trec_eval)
    seed: int = 0
    num_threads: int = param(1, ge=0)
    # "zscore": add each feature standardised within its query; "zscore+max": also each feature
    # minus its query's maximum (how far a candidate is from the query's best, Home Depot dev)
    query_norm: Literal["none", "zscore", "zscore+max"] = "none"
    # per-query group statistics of each feature (GROUP_STATS), as the Amazon Shopping Queries
    # winners used: the candidate's rank within its query's list and the list's min / median / max
    group_stats: list[str] = param([])
    prior_features: list[str] = param([])  # boost from the sum of these features' per-query z-scores
    # features whose scale depends on the collection (BM25 grows with its idf and document lengths):
    # the booster sees them only per query and scale-free, as a z-score and a ratio to the query's
    # maximum, never raw, minus the maximum or in group statistics (a ranker other collections can use)
    scale_free: list[str] = param([])
    # labels from clicks with the rank each row was shown at (``Groups.position``): LightGBM's
    # position-debiased lambdarank learns score = f(x) + g(position) and keeps f; this shrinks g
    position_bias_regularization: float = param(0.0, ge=0)

    def check(self) -> None:
        bad = [s for s in self.group_stats if s not in GROUP_STATS]
        if bad:
            raise ParamError(f"lambdamart parameter 'group_stats': unknown {bad}; known: {', '.join(GROUP_STATS)}")


GROUP_STATS = ("rank", "min", "median", "max")
"""Per-query group statistics ``group_stats`` may add for each feature: the candidate's rank by it
within its query's list (1 = highest; ties share the best rank), and the list's minimum, median and
maximum of it."""


class LambdaMART:
    """A LightGBM lambdarank booster over named feature columns (trained by
    ``training.ranker.train_booster``)."""

    def __init__(self, feature_names: Sequence[str], **params: Any):
        if len(set(feature_names)) != len(feature_names) or not feature_names:
            raise ValueError(f"lambdamart: feature names must be unique and non-empty, got {list(feature_names)}")
        self.feature_names = list(feature_names)
        self.p = BoosterParams.from_mapping(params)
        for name in ("prior_features", "scale_free"):
            if set(getattr(self.p, name)) - set(self.feature_names):
                raise ParamError(
                    f"lambdamart parameter '{name}' must name features of {self.feature_names}, "
                    f"got {getattr(self.p, name)!r}"
                )
        self.booster: Any = None
        self.best_iteration = 0
        self._trees: CompiledTrees | None | Literal[False] = (
            False  # the booster compiled on the first predict (False: not yet)
        )

    @property
    def params(self) -> dict[str, Any]:
        return self.p.as_dict()

    def _blocks(self) -> list[tuple[str, list[int]]]:
        """The booster's input as blocks of (derivation, feature positions), in column order: the
        raw features, their per-query z-scores, distances from the query's maximum, group
        statistics, then the ``scale_free`` features' ratios to the query's maximum."""
        free = set(self.p.scale_free)
        every = list(range(len(self.feature_names)))
        kept = [i for i in every if self.feature_names[i] not in free]
        zscored = every if self.p.query_norm != "none" else [i for i in every if self.feature_names[i] in free]
        blocks = [("", kept), (" (query z-score)", zscored)]
        if self.p.query_norm == "zscore+max":
            blocks.append((" (minus query max)", kept))
        blocks += [(f" (query {s})", kept) for s in self.p.group_stats]
        blocks.append((" (ratio to query max)", [i for i in every if self.feature_names[i] in free]))
        return [(suffix, cols) for suffix, cols in blocks if cols]

    @property
    def columns(self) -> list[str]:
        """The booster's columns: the features (less the ``scale_free`` ones), then (``query_norm``)
        their per-query z-scores and distances from the query's maximum, group statistics, and the
        scale-free features' per-query z-scores and ratios to the query's maximum."""
        return [self.feature_names[i] + suffix for suffix, cols in self._blocks() for i in cols]

    def base_feature(self, column: str) -> str:
        """The feature a booster column derives from (itself for a plain feature)."""
        suffixes = (" (query z-score)", " (minus query max)", " (ratio to query max)")
        for suffix in (*suffixes, *(f" (query {s})" for s in GROUP_STATS)):
            if column.endswith(suffix) and column[: -len(suffix)] in self.feature_names:
                return column[: -len(suffix)]
        return column

    def matrix(self, g: Groups) -> np.ndarray:
        """The booster's input for ``g``: its features, plus per-query standardised copies."""
        if g.X.shape[1] != len(self.feature_names):
            raise ValueError(
                f"lambdamart: {g.X.shape[1]} feature columns but the ranker has {len(self.feature_names)} features"
            )
        if self.p.query_norm == "none" and not self.p.group_stats and not self.p.scale_free:
            return g.X
        return np.hstack([_derived(suffix, g.X[:, cols], g.offsets) for suffix, cols in self._blocks()])

    def prior(self, g: Groups) -> np.ndarray:
        """The score boosting starts from: the sum of the ``prior_features``' per-query z-scores,
        an untrained fusion of the models (zero without ``prior_features``). The trees learn
        corrections to it, so with few training queries the ranker stays near the fusion instead
        of below its best feature (Home Depot dev, bert-homedepot-full: README)."""
        cols = [self.feature_names.index(f) for f in self.p.prior_features]
        if not cols:
            return np.zeros(len(g.X))
        return _query_zscores(g.X[:, cols], g.offsets).sum(1)

    def lgb_params(self) -> dict[str, Any]:
        """LightGBM's parameters for these settings."""
        p = self.p
        gain = [float(2**i - 1) for i in range(31)] if p.gain == "exp" else [float(i) for i in range(31)]
        return {
            "objective": "lambdarank",
            "metric": "ndcg",
            "eval_at": [p.metric_at],
            "label_gain": gain,
            "learning_rate": p.learning_rate,
            "num_leaves": p.num_leaves,
            "min_data_in_leaf": p.min_data_in_leaf,
            "feature_fraction": p.feature_fraction,
            "bagging_fraction": p.bagging_fraction,
            "bagging_freq": p.bagging_freq,
            "lambda_l2": p.lambda_l2,
            "lambdarank_position_bias_regularization": p.position_bias_regularization,
            "seed": p.seed,
            "deterministic": True,
            "force_row_wise": True,
            "num_threads": p.num_threads,
            "verbosity": -1,
        }

    def dataset(self, g: Groups, reference: Any = None) -> Any:
        """``g`` as a LightGBM data set (labels 0..30, the prior as init score)."""
        import lightgbm as lgb

        if len(g.y) and g.y.max() > 30:
            raise ValueError(f"lambdamart: labels must lie in 0..30, got {g.y.max()}")
        return lgb.Dataset(
            self.matrix(g),
            label=g.y,
            group=g.sizes,
            feature_name=[_safe(n) for n in self.columns],
            init_score=self.prior(g),
            reference=reference,
            free_raw_data=False,
            position=None if g.position is None else np.asarray(g.position, dtype=np.int32),
        )

    def set_booster(self, booster: Any, best_iteration: int) -> None:
        """The trained booster and the round to predict with."""
        self.booster, self.best_iteration, self._trees = booster, int(best_iteration), False

    def predict(self, g: Groups) -> np.ndarray:
        """One score per row of ``g``."""
        if self.booster is None:
            raise RuntimeError("lambdamart: not trained")
        X = self.matrix(g)
        if not len(X):
            return np.zeros(0)
        trees = self._trees
        if trees is False:
            trees = self._trees = compile_booster(self.booster, self.best_iteration)  # (<= 0: every tree, as predict)
        raw = (
            trees.predict(X)
            if trees is not None  # the same sums as LightGBM's, faster (ranking/trees.py)
            else np.asarray(self.booster.predict(X, num_iteration=self.best_iteration), dtype=np.float64)
        )
        return raw + self.prior(g)

    def contributions(self, g: Groups) -> tuple[np.ndarray, np.ndarray]:
        """Per row of ``g``: each feature's contribution to the score (LightGBM's SHAP values,
        derived columns summed into their feature), and the row's base value (the booster's
        expected value plus the prior); contributions + base = ``predict``."""
        if self.booster is None:
            raise RuntimeError("lambdamart: not trained")
        X = self.matrix(g)
        c = np.asarray(self.booster.predict(X, num_iteration=self.best_iteration, pred_contrib=True), dtype=np.float64)
        out = np.zeros((len(X), len(self.feature_names)))
        for j, col in enumerate(self.columns):
            out[:, self.feature_names.index(self.base_feature(col))] += c[:, j]
        return out, c[:, -1] + self.prior(g)

    def importance(self) -> dict[str, dict[str, float]]:
        """Per booster column, its share of the total gain and of the splits (each sums to 1)."""
        if self.booster is None:
            raise RuntimeError("lambdamart: not trained")
        out: dict[str, dict[str, float]] = {n: {} for n in self.columns}
        for kind in ("gain", "split"):
            v = np.asarray(self.booster.feature_importance(kind, iteration=self.best_iteration), dtype=np.float64)
            v = v / v.sum() if v.sum() > 0 else v
            for n, x in zip(self.columns, v):
                out[n][kind] = float(x)
        return out

    def save(self, path: str | Path) -> None:
        """``lambdamart.txt`` (LightGBM's text format) and ``ranker.json`` (features, parameters)."""
        if self.booster is None:
            raise RuntimeError("lambdamart: not trained")
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(d / BOOSTER), num_iteration=self.best_iteration)
        meta = {"features": self.feature_names, "params": self.params, "best_iteration": self.best_iteration}
        write_json(d / RANKER_JSON, meta)

    @classmethod
    def load(cls, path: str | Path) -> LambdaMART:
        import lightgbm as lgb

        d = Path(path)
        try:
            meta = json.loads((d / RANKER_JSON).read_text(encoding="utf-8"))
            known = BoosterParams.names()  # only names the settings still have
            ranker = cls(meta["features"], **{k: v for k, v in meta["params"].items() if k in known})
            ranker.set_booster(lgb.Booster(model_file=str(d / BOOSTER)), int(meta["best_iteration"]))
        except (OSError, ValueError, KeyError, TypeError, lgb.basic.LightGBMError) as e:
            raise ModelDirError(f"{d}: corrupt or missing LambdaMART ranker ({e})") from None
        if ranker.booster.num_feature() != len(ranker.columns):
            raise ModelDirError(
                f"{d}: booster has {ranker.booster.num_feature()} features, config names {len(ranker.columns)}"
            )
        return ranker


def _per_group(scores: np.ndarray, offsets: np.ndarray, keep: Sequence[int], n: int) -> list[np.ndarray]:
    """One array per query of ``n``: the scores of group j (``offsets[j]:offsets[j+1]``) for query
    ``keep[j]``, none for a query without candidates (it has no group)."""
    out = [np.zeros(0)] * n
    for j, i in enumerate(keep):
        out[i] = scores[offsets[j] : offsets[j + 1]]
    return out


def _per_query(X: np.ndarray, offsets: np.ndarray, f: Any) -> np.ndarray:
    """``f`` applied to each query's rows ``X[offsets[i]:offsets[i+1]]`` (a matrix of X's shape)."""
    out = np.zeros_like(X, dtype=np.float64)
    for a, b in zip(offsets[:-1], offsets[1:]):
        if b > a:
            out[a:b] = f(X[a:b])
    return out


def _zscore(x: np.ndarray) -> np.ndarray:
    sd = x.std(0)
    return np.where(sd > 0, (x - x.mean(0)) / np.where(sd > 0, sd, 1.0), 0.0)


def _query_zscores(X: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each column of ``X`` standardised within each query's rows ``offsets[i]:offsets[i+1]``
    (0 where a query's column is constant)."""
    return _per_query(X, offsets, _zscore)


def _minus_query_max(X: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each column of ``X`` minus its maximum within each query's rows (0 for the query's best)."""
    return _per_query(X, offsets, lambda x: x - x.max(0))


def _derived(suffix: str, X: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The booster columns a ``LambdaMART._blocks`` block derives from its features ``X``."""
    if not suffix:
        return X
    if suffix == " (query z-score)":
        return _query_zscores(X, offsets)
    if suffix == " (minus query max)":
        return _minus_query_max(X, offsets)
    if suffix == " (ratio to query max)":
        return _ratio_to_query_max(X, offsets)
    return _per_query(X, offsets, _GROUP_STAT[suffix[len(" (query ") : -1]])


def _ratio_to_query_max(X: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each column of ``X`` divided by its maximum within each query's rows (1 for the query's best;
    0 where that maximum is not positive): unchanged when the column is scaled by any positive factor."""
    return _per_query(X, offsets, lambda x: np.where(x.max(0) > 0, x / np.where(x.max(0) > 0, x.max(0), 1.0), 0.0))


def _rank_desc(x: np.ndarray) -> np.ndarray:
    """Each column's 1-based rank from the highest value down; ties share the best rank."""
    from scipy.stats import rankdata

    return rankdata(-x, method="min", axis=0).astype(np.float64)


_GROUP_STAT = {
    "rank": _rank_desc,
    "min": lambda x: np.broadcast_to(x.min(0), x.shape),
    "median": lambda x: np.broadcast_to(np.median(x, 0), x.shape),
    "max": lambda x: np.broadcast_to(x.max(0), x.shape),
}


def _safe(name: str) -> str:
    """LightGBM refuses some characters in feature names; the config keeps the real names."""
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in name)


def mean_importance(logs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Feature importance averaged over several trained rankers' logs (e.g. CV folds)."""
    names = list(logs[0]["importance"])
    return {
        n: {kind: float(np.mean([log["importance"][n][kind] for log in logs])) for kind in ("gain", "split")}
        for n in names
    }


def importance_markdown(importance: Mapping[str, Mapping[str, float]]) -> str:
    """Table 5 layout: features by share of total gain, with the share of splits beside."""
    lines = ["| feature | gain share | split share |", "|---|---:|---:|"]
    for n, v in sorted(importance.items(), key=lambda kv: -kv[1]["gain"]):
        lines.append(f"| {n} | {100 * v['gain']:.2f}% | {100 * v['split']:.2f}% |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ as a Model
@dataclass(frozen=True)
class LambdaMARTParams(BoosterParams):
    """The registered kind's parameters: its feature models (names of kinds, saved model
    directories, or ``{name, model, params}``; resolved by ``plugins.create_model``), the per-pair
    text features, the stage-1 features of a two-stage search (``STAGE_FEATURES``, with the stage
    depths they were learnt at: a search bundle retrieves that deep), and the booster's settings."""

    features: list[str | dict] = param([])
    pair_features: list[str] = param([])
    stage_features: list[str] = param([])
    n_lexical: int = param(100, ge=0)  # stage-1 depths (two-stage search; training may choose them on dev)
    n_semantic: int = param(100, ge=0)

    def check(self) -> None:
        super().check()
        for name, known in (("pair_features", TEXT_FEATURES), ("stage_features", STAGE_FEATURES)):
            bad = [p for p in getattr(self, name) if p not in known]
            if bad:
                raise ParamError(f"lambdamart parameter '{name}': unknown {bad}; known: {', '.join(known)}")


TWO_STAGE: dict[str, Any] = {
    "features": ["bm25", "ulm"],
    "pair_features": list(PAIR_FEATURES),
    "stage_features": list(STAGE_FEATURES),
    "query_norm": "zscore+max",
    "learning_rate": 0.1,
    "num_leaves": 15,
    "min_data_in_leaf": 50,
}
"""The stage-2 ranker ``semsearch index build --train-ranker`` trains unless ``--ranker-param``
says otherwise: stage-1 scores and ranks, BM25 (paper analyzer) and ULM scores, the pair
features, each also as a per-query z-score and distance from the query's best; settings chosen on
Home Depot dev (README, "The served search")."""

PORTABLE: dict[str, Any] = {
    "features": [],
    "pair_features": ["query_coverage"],
    "stage_features": list(STAGE_FEATURES),
    "scale_free": ["lexical_score", "semantic_score"],
    "prior_features": ["lexical_score", "semantic_score"],
    "query_norm": "zscore+max",
    "learning_rate": 0.1,
    "num_leaves": 15,
    "min_data_in_leaf": 50,
    "stage_depths": [[100, 100]],
}
"""A stage-2 ranker whose features mean the same on any collection, so one trained on Home Depot
re-ranks a collection without judgments (``index build --ranker portable``): no feature model bound
to the training documents; both stages' scores only per query and scale-free (BM25's scale follows
the collection's idf and lengths; a cosine's typical level, its queries' and documents' kind); both
stages' ranks at fixed depths (a rank cap that does not move with depths chosen on one collection);
the share of the query's words a document has (not the query's or the document's length, which
differ between collections). Boosting starts from the sum of the two stages' per-query z-scores (an
untrained fusion, ``prior_features``), so the trees learn corrections to a ranking that holds on any
collection rather than a ranking of their own."""

PORTABLE_DIR = Path(__file__).resolve().parent / "portable"
"""The packaged portable ranker (``PORTABLE`` trained on Home Depot's judgments with BM25, English
analyzer, and all-MiniLM-L6-v2 by cosine as its stages; ``experiments/portable.py`` trains it)."""

RANKER_ONLY = ("features", "pair_features", "stage_features", "n_lexical", "n_semantic")
"""``LambdaMARTParams`` that belong to the ranker, not to its booster."""


class LambdaMARTRanker(Model):
    """LambdaMART over named, built feature models and optional per-pair text features; a ``Model``
    itself (``score``, ``rank``). Build one with ``from_models`` (or by name through the registry,
    ``plugins.create_model("lambdamart", features=[...])``, which resolves the feature models);
    ``pair_features``: names from ``features.PAIR_FEATURES``; other keywords: booster parameters.
    Trained by ``training.ranker`` (``training.fit``)."""

    name = "lambdamart"
    Params = LambdaMARTParams

    def _init(
        self,
        names: Sequence[str],
        models: Sequence[Model],
        pair_features: Sequence[str],
        params: dict[str, Any],
        stage_features: Sequence[str] = (),
        n_lexical: int = 100,
        n_semantic: int = 100,
    ) -> None:
        p = LambdaMARTParams.from_mapping(
            {
                "pair_features": list(pair_features),
                "stage_features": list(stage_features),
                "n_lexical": n_lexical,
                "n_semantic": n_semantic,
            }
        )
        self.model_names = list(names)
        self.models = list(models)
        self.pair_features, self.stage_features = p.pair_features, p.stage_features
        self.n_lexical, self.n_semantic = p.n_lexical, p.n_semantic
        self.ranker = LambdaMART(self.stage_features + self.model_names + self.pair_features, **params)
        self._texts: dict[str, str] = {}
        self._words: DocWords | None = None
        self._by_position: dict[str, int] | None = None  # doc id -> position, when the feature models score positions
        self._ids: list[str] = []

    @classmethod
    def from_models(
        cls,
        models: Mapping[str, Model],
        pair_features: Sequence[str] = (),
        stage_features: Sequence[str] = (),
        n_lexical: int = 100,
        n_semantic: int = 100,
        **params: Any,
    ) -> LambdaMARTRanker:
        """A ranker over already built (trained, indexed) models, keyed by feature name;
        ``stage_features`` make it a stage-2 ranker of a two-stage search (``score_hits``).

        Args:
            models: feature name -> a built model.
            pair_features: query-title features added (``PAIR_FEATURES``).
            stage_features: stage-1 scores and ranks added (a stage-2 ranker).
            n_lexical: the lexical stage-1 depth it re-ranks.
            n_semantic: the semantic stage-1 depth it re-ranks.
            **params: ``LambdaMARTParams``.

        Returns:
            The untrained ranker."""
        self = cls.__new__(cls)
        self._init(list(models), list(models.values()), pair_features, params, stage_features, n_lexical, n_semantic)
        return self

    @property
    def feature_names(self) -> list[str]:
        return self.ranker.feature_names

    def params(self) -> dict[str, Any]:
        return {
            **self.ranker.params,
            "stage_features": self.stage_features,
            "n_lexical": self.n_lexical,
            "n_semantic": self.n_semantic,
        }

    def set_depths(self, n_lexical: int, n_semantic: int) -> None:
        """The stage-1 depths this ranker serves with (chosen on dev by its trainer)."""
        self.n_lexical, self.n_semantic = int(n_lexical), int(n_semantic)

    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        for m in self.models:
            m.index(doc_ids, texts)
        self.use_texts(doc_ids, texts)

    def use_texts(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        """The collection's texts for the pair features, without indexing the feature models
        again (a loaded ranker whose models hold their indexes, e.g. in a bundle)."""
        self._ids = list(doc_ids)
        self._texts = dict(zip(doc_ids, texts)) if self.pair_features else {}
        # only the word-count features: compiled from the titles' word ids (features.DocWords)
        self._words = (
            DocWords(doc_ids, texts) if self.pair_features and set(self.pair_features) <= set(PAIR_FEATURES) else None
        )
        # feature models over these documents in this order score candidate positions, looked up once
        self._by_position = (
            (self._words.position if self._words is not None else {d: i for i, d in enumerate(self._ids)})
            if all(hasattr(m, "score_positions") and list(m.doc_ids) == self._ids for m in self.models)
            else None
        )

    @property
    def pair_words(self) -> DocWords | None:
        """The collection's words the pair features count (``use_texts``; None: no word-count
        pair features, or no texts yet); its ``vocab`` is every word the documents hold, as
        ``tokenize`` splits them."""
        return self._words

    @property
    def doc_ids(self) -> Sequence[str]:
        return self._ids or (self.models[0].doc_ids if self.models else [])

    @property
    def portable(self) -> bool:
        """Whether the ranker can re-rank another collection than the one it learnt on: it has no
        feature model (those index the training documents), only stage-1 and per-pair text
        features, so ``use_texts`` over the new documents is all it needs."""
        return not self.models

    def features(
        self, queries: Sequence[str], candidates: Sequence[Sequence[str]], hits: Sequence[Sequence[Any]] | None = None
    ) -> np.ndarray:
        """(pairs, features): the stage features of ``hits`` (the merged stage-1 hits the
        candidates come from; required when the ranker has stage features), the feature models'
        scores, then the pair features."""
        if self._by_position is not None:
            pos = [positions(self._by_position, c) for c in candidates]
            X = self._position_columns(queries, pos)
        else:
            pos = None
            X = model_columns(self.models, queries, candidates)
        if self.stage_features:
            if hits is None:
                raise ValueError(
                    "this ranker re-ranks two-stage search results: it needs the stage-1 hits (score_hits)"
                )
            X = np.hstack([stage_columns(self.stage_features, hits, self.n_lexical, self.n_semantic), X])
        if self._words is not None:
            X = np.hstack([X, self._words.columns(self.pair_features, queries, candidates, pos)])
        elif self.pair_features:
            try:
                texts = [[self._texts[d] for d in c] for c in candidates]
            except KeyError as e:
                raise ValueError(f"candidate document {e.args[0]!r} is not in the indexed collection") from None
            X = np.hstack([X, pair_columns(self.pair_features, queries, texts)])
        return X

    def _position_columns(self, queries: Sequence[str], pos: Sequence[np.ndarray]) -> np.ndarray:
        """(pairs, models): each feature model's score of the candidates at ``pos`` (positions in
        the collection) of each query."""
        X = np.zeros((sum(map(len, pos)), len(self.models)))
        for j, m in enumerate(self.models):
            X[:, j] = np.concatenate(m.score_positions(queries, pos)) if pos else np.zeros(0)  # type: ignore[attr-defined]  # positional models
        return X

    def groups(
        self, queries: Mapping[str, str], candidates: Mapping[str, Sequence[str]], qrels: Qrels | None = None
    ) -> Groups:
        qids = [q for q in queries if len(candidates.get(q, ()))]
        cands = {q: list(candidates[q]) for q in qids}
        return groups(cands, self.features([queries[q] for q in qids], [cands[q] for q in qids]), qrels)

    def hit_groups(
        self,
        queries: Sequence[str],
        hits: Sequence[Sequence[Any]],
        qrels: Qrels | None = None,
        qids: Sequence[str] | None = None,
    ) -> Groups:
        """Query groups over merged stage-1 hits (objects with ``doc_id`` and the stage scores and
        ranks, like ``index.HybridHit``), labelled by ``qrels`` (unjudged: 0) under ``qids``."""
        same_length(queries, hits, "queries", "hit lists")
        qids = [str(i) for i in range(len(queries))] if qids is None else list(qids)
        cands = {q: [h.doc_id for h in hs] for q, hs in zip(qids, hits)}
        keep = [i for i, q in enumerate(qids) if cands[q]]
        X = self.features([queries[i] for i in keep], [cands[qids[i]] for i in keep], [hits[i] for i in keep])
        return groups({qids[i]: cands[qids[i]] for i in keep}, X, qrels)

    def score_hits(self, queries: Sequence[str], hits: Sequence[Sequence[Any]]) -> list[np.ndarray]:
        """The ranker's score of each merged stage-1 hit of each query (a two-stage search)."""
        g = self.hit_groups(queries, hits)
        return _per_group(self.ranker.predict(g), g.offsets, [i for i, hs in enumerate(hits) if len(hs)], len(hits))

    def score_candidates(self, queries: Sequence[str], candidates: Sequence[Any]) -> list[np.ndarray]:
        """``score_hits`` of stage 1's candidates as arrays (``index.Candidates``: positions in the
        collection this ranker's ``use_texts`` was given, stage scores and ranks): the same
        features and scores without a hit object or an id lookup (the served search's hot path).
        Falls back to ``score_hits`` when a feature needs the ids (text match features, feature
        models that do not score positions)."""
        same_length(queries, candidates, "queries", "candidate lists")
        if not self.positional:
            ids = self.doc_ids
            return self.score_hits(queries, [c.hits(ids) for c in candidates])
        keep = [i for i, c in enumerate(candidates) if len(c)]
        cs = [candidates[i] for i in keep]
        X = self.candidate_features([queries[i] for i in keep], cs)
        offsets = np.concatenate([[0], np.cumsum([len(c) for c in cs])]).astype(np.int64)
        return _per_group(self.predict_rows(X, offsets), offsets, keep, len(candidates))

    @property
    def positional(self) -> bool:
        """Whether ``candidate_features`` works: every feature is computed from positions."""
        return self._by_position is not None and not (self.pair_features and self._words is None)

    def candidate_features(self, queries: Sequence[str], candidates: Sequence[Any]) -> np.ndarray:
        """(candidates, features): the feature rows of each query's candidates (``index.Candidates``,
        none empty), one query after the other; what ``score_candidates`` predicts from. A caller
        may join rows of candidates from several collections (a served bundle's change segment)
        into one query group before ``predict_rows``. Needs ``positional``."""
        pos = [c.positions for c in candidates]
        parts = []
        if self.stage_features:
            raw = np.column_stack(
                [
                    np.concatenate([getattr(c, a) for c in candidates]) if candidates else np.zeros(0)
                    for a in ("lexical", "semantic", "lexical_rank", "semantic_rank")
                ]
            )
            parts.append(stage_matrix(self.stage_features, raw, self.n_lexical, self.n_semantic))
        parts.append(self.document_columns(queries, pos))
        return np.hstack(parts)

    def document_columns(self, queries: Sequence[str], positions: Sequence[np.ndarray]) -> np.ndarray:
        """(candidates, features after the stage features): the feature models' scores and the
        pair features of each query's candidates at ``positions`` in the collection — the columns
        that depend on the document alone, which a shard holding it computes (``index.bundle.shard``).
        Needs ``positional``."""
        parts = [self._position_columns(queries, positions)]
        if self._words is not None:
            parts.append(self._words.columns(self.pair_features, queries, [()] * len(queries), positions))
        return np.hstack(parts)

    def predict_rows(self, X: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """The ranker's score of each row of ``X``, whose query groups start at ``offsets``
        (the per-query features are computed within each group)."""
        n = len(offsets) - 1
        return self.ranker.predict(Groups([str(i) for i in range(n)], [], X, np.zeros(len(X), dtype=np.int64), offsets))

    def explain_hits(self, query: str, hits: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For one query's merged hits: scores, feature values, each feature's contribution
        (rows × features) and each row's base value (contributions + base = score)."""
        g = self.hit_groups([query], [hits])
        contrib, base = self.ranker.contributions(g)
        return self.ranker.predict(g), g.X, contrib, base

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        same_length(queries, candidates, "queries", "candidate lists")
        bounds = np.cumsum([0] + [len(c) for c in candidates]).astype(np.int64)
        X = self.features(queries, candidates)
        s = self.ranker.predict(
            Groups(
                [str(i) for i in range(len(queries))],
                [d for c in candidates for d in c],
                X,
                np.zeros(len(X), dtype=np.int64),
                bounds,
            )
        )
        return [s[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def save(self, path: str | Path) -> None:
        """The booster, ``config.json``, and each feature model under ``features/NN/``."""
        d = Path(path)
        self.ranker.save(d)
        dirs = []
        for i, m in enumerate(self.models):
            sub = f"features/{i:02d}"
            m.save(d / sub)
            dirs.append(sub)
        write_config(
            d,
            {
                "model": self.name,
                "features": self.model_names,
                "feature_dirs": dirs,
                "pair_features": self.pair_features,
                "stage_features": self.stage_features,
                "n_lexical": self.n_lexical,
                "n_semantic": self.n_semantic,
            },
        )
        seal(d)

    @classmethod
    def child_dirs(cls, config: Mapping[str, Any]) -> dict[str, str]:
        """Feature name -> its saved sub-directory, from a saved ranker's config (the registry loads them)."""
        try:
            return dict(zip(config["features"], config["feature_dirs"], strict=True))
        except (KeyError, TypeError, ValueError) as e:
            raise ModelDirError(f"corrupt lambdamart config ({e})") from None

    @classmethod
    def load(cls, path: str | Path, models: Mapping[str, Model] | None = None) -> LambdaMARTRanker:
        """Read a saved ranker over ``models`` given by feature name (refused unless they are
        exactly the features the ranker was trained on; ``plugins.load_model`` gives its own)."""
        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        ranker = LambdaMART.load(d)
        try:
            names, pair = list(cfg["features"]), list(cfg["pair_features"])
            stage = list(cfg.get("stage_features", []))
            depths = int(cfg.get("n_lexical", 100)), int(cfg.get("n_semantic", 100))
        except (KeyError, TypeError, ValueError) as e:
            raise ModelDirError(f"{d}: corrupt lambdamart config ({e})") from None
        if ranker.feature_names != stage + names + pair:
            raise ModelDirError(
                f"{d}: booster features {ranker.feature_names} differ from the config's {stage + names + pair}"
            )
        if models is None or list(models) != names:
            raise ModelDirError(f"{d}: ranker was trained on features {names}, given {list(models or {})}")
        self = cls.__new__(cls)
        try:
            self._init(names, list(models.values()), pair, dict(ranker.params), stage, *depths)
        except ParamError as e:
            raise ModelDirError(f"{d}: corrupt lambdamart config ({e})") from None
        self.ranker = ranker
        return self
