"""Typed training arguments: how a model learns, apart from what it is (its ``Params``).

``TrainArgs`` holds what the one epoch loop reads; each trainer's own subclass adds its settings
and its defaults (the papers'). They are validated when built (``params.Params``), so a misspelt
or out-of-range setting fails at the edge — CLI ``--param``, a spec's row, a Python call — before
any data is read."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..params import ParamError, Params, param

if TYPE_CHECKING:
    from ..evaluation import QueryFold

_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?|mps)$")
_METRIC = re.compile(r"^(ndcg|recall|p|mrr|map)(@\d+)?$")

ListLoss = Literal["hinge", "listnet", "margin_mse"]
"""The losses over a query's graded list (``training.losses.graded_list_loss``)."""


@dataclass(frozen=True)
class TrainArgs(Params):
    """What every gradient trainer takes (``training.loop.epoch_loop``)."""

    kind = "training"

    epochs: int = param(20, ge=1)
    batch_size: int = param(1024, ge=1)
    lr: float = param(0.5, gt=0)
    optimizer: Literal["sgd", "adam"] = "sgd"
    patience: int = param(3, ge=1)  # epochs without a better dev score before stopping
    min_delta: float = param(0.0, ge=0)  # how much the dev score must rise to count as better
    dev_metric: str = "ndcg@10"
    seed: int = 0
    device: str = "auto"  # "auto" (CUDA when torch sees a GPU, else CPU), "cpu", "cuda", "cuda:N"
    # the learning rate over all the training's steps (epochs x batches): "constant", or "linear"
    # (BERT's fine-tuning schedule: up from 0 over the first ``warmup`` fraction of the steps, then
    # down to 0 at the last one); every parameter group's own rate is scaled alike (loop.lr_factor)
    lr_schedule: Literal["constant", "linear"] = "constant"
    warmup: float = param(0.0, ge=0, lt=1)

    def check(self) -> None:
        if not _DEVICE.match(self.device):
            raise ParamError(
                f"{self._label('device')} must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {self.device!r}"
            )
        if self.warmup and self.lr_schedule == "constant":
            raise ParamError(
                f"{self._label('warmup')} = {self.warmup} is the linear schedule's rise; set "
                f"{self._label('lr_schedule')} = 'linear' or leave warmup at 0"
            )
        self._check_dev_metric()

    def _check_dev_metric(self) -> None:
        if not _METRIC.match(self.dev_metric):
            raise ParamError(
                f"{self._label('dev_metric')} must be a metric like 'ndcg@10', 'recall@100', 'mrr', "
                f"got {self.dev_metric!r}"
            )


# ------------------------------------------------------------------------------------ trainer
@dataclass(frozen=True)
class EncoderArgs(TrainArgs):
    """How DSSM and CLSM learn (CLSM §4): softmax over γ·cosine of D⁺ and J negatives, SGD."""

    kind = "dssm/clsm training"
    negatives: int = param(4, ge=0)  # J random unclicked documents per query (CLSM §4, Eq. 5)
    sampling: Literal["random", "in-batch"] = "random"  # from the document pool, or the batch's other pairs
    hard_negatives: int = param(0, ge=0)  # judged documents below the positive grade, added per query
    gamma: float | list[float] = 10.0  # softmax smoothing γ; a list: each is trained, the best on dev kept
    neg_pool: int = param(8192, ge=1)  # distinct random documents encoded per batch; negatives drawn from them

    def check(self) -> None:
        super().check()
        gammas = self.gammas
        if not gammas or min(gammas) <= 0:
            raise ParamError(
                f"{self._label('gamma')} must be a positive number or a non-empty list of them, got {self.gamma!r}"
            )

    @property
    def gammas(self) -> list[float]:
        return self.gamma if isinstance(self.gamma, list) else [self.gamma]


# ------------------------------------------------------------------------------------ pairwise
@dataclass(frozen=True)
class PairwiseArgs(TrainArgs):
    """How K-NRM and MatchPyramid learn: pairwise hinge against random and judged negatives, Adam."""

    kind = "knrm/matchpyramid training"
    negatives: int = param(2, ge=0)  # random documents of the pool per positive pair
    hard_negatives: int = param(4, ge=0)  # judged documents graded below the positive threshold per pair
    margin: float = param(1.0, gt=0)  # hinge margin: max(0, margin − s⁺ + s⁻)
    optimizer: Literal["sgd", "adam"] = "adam"
    lr: float = param(1e-3, gt=0)
    batch_size: int = param(256, ge=1)
    epochs: int = param(6, ge=1)
    patience: int = param(2, ge=1)
    neg_pool: int = param(4096, ge=1)  # distinct random documents drawn per batch; negatives come from them


# ------------------------------------------------------------------------------------ transformer
@dataclass(frozen=True)
class TransformerArgs(TrainArgs):
    """How BERT(rep) and BERT(rel) are fine-tuned (Algorithm 1): Adam on the graded hinge (or ListNet)."""

    # the loss over each query's graded list: "hinge" (Eq. 3, pairwise), "listnet" (ListNet's
    # listwise cross-entropy between the softmax of the scores and of the grades; losses.listnet_loss)
    # or "margin_mse" (the margins of a cross-encoder ``teacher``'s scores; losses.margin_mse_loss)
    loss: ListLoss = "hinge"
    margin: float | list[float] = 1.0  # hinge margin τ of Eq. 3; a list: each is trained, the best on dev kept
    optimizer: Literal["adam"] = "adam"
    lr: float = param(1e-5, gt=0)
    epochs: int = param(1, ge=1)
    batch_size: int = param(8, ge=1)  # queries per step; each brings its judged documents and sampled negatives
    neg_global: int = param(10, ge=0)  # NEG_global: documents drawn uniformly from the corpus per query (§3.2.1)
    neg_cluster: int = param(10, ge=0)  # NEG_cluster: documents drawn from the query's k-means cluster
    # embeddings to cluster: "first" (a model fine-tuned on the judged data only, Algorithm 1) or
    # "pretrained" (the untrained bi-encoder of ``base``)
    cluster_model: Literal["first", "pretrained"] = "first"
    n_clusters: int = param(100, ge=1)
    cluster_docs: int = param(20000, ge=1)  # documents encoded and clustered (a uniform sample; all if fewer)
    max_queries: int | None = param(None, ge=1)  # train on this many random training queries (None: all)
    max_judged: int = param(30, ge=1)  # at most this many judged documents per query (random sample)
    dev_queries: int = param(300, ge=1)  # dev queries (random sample) used to pick the margin
    # hard negatives: ``neg_hard`` documents per query drawn from the top ``hard_depth`` of a first
    # model's retrieval for it (never one judged for it): "bm25", or a saved bi-encoder's directory
    neg_hard: int = param(0, ge=0)
    hard_model: str = "bm25"
    hard_depth: int = param(30, ge=1)
    # Margin-MSE distillation (``loss`` "margin_mse"): the saved cross-encoder whose scores of every
    # training pair (judged and sampled) the student's margins learn, or a list of them (an ensemble
    # teacher: the mean of their scores, each first divided by its own within-list sd); the scores
    # are rescaled so their within-list standard deviation over the training lists is ``teacher_spread``
    teacher: str | list[str] = ""
    teacher_spread: float = param(0.1, gt=0)

    def check(self) -> None:
        super().check()
        if isinstance(self.margin, list) and not self.margin:
            raise ParamError(f"{self._label('margin')} must be a number or a non-empty list of numbers")
        if self.loss != "hinge" and isinstance(self.margin, list):
            raise ParamError(
                f"{self._label('margin')} is a list of hinge margins to choose from, but "
                f"{self._label('loss')} = {self.loss!r} has no margin"
            )
        if (self.loss == "margin_mse") != bool(self.teacher):
            raise ParamError(
                f"{self._label('teacher')} (a saved cross-encoder's directory, or a list of them) is "
                f"needed by, and only by, {self._label('loss')} = 'margin_mse'; got loss = "
                f"{self.loss!r}, teacher = {self.teacher!r}"
            )
        if isinstance(self.teacher, list) and not all(self.teacher):
            raise ParamError(
                f"{self._label('teacher')} lists saved cross-encoders' directories; got an empty "
                f"name in {self.teacher!r}"
            )
        if self.neg_hard > self.hard_depth:
            raise ParamError(
                f"{self._label('neg_hard')} = {self.neg_hard} cannot exceed "
                f"{self._label('hard_depth')} = {self.hard_depth}"
            )

    @property
    def margins(self) -> list[float]:
        return self.margin if isinstance(self.margin, list) else [self.margin]

    @property
    def teachers(self) -> list[str]:
        """The teacher directories: one, several (an ensemble), or none."""
        return list(self.teacher) if isinstance(self.teacher, list) else [self.teacher] if self.teacher else []


@dataclass(frozen=True)
class BiEncoderArgs(TransformerArgs):
    kind = "bert-rep training"
    # every query of a batch also meets the other queries' documents as negatives (their vectors
    # are computed for the batch anyway; a cross-encoder would score each pair anew)
    share_negatives: bool = False

    def check(self) -> None:
        super().check()
        if self.share_negatives and self.loss == "margin_mse":
            raise ParamError(
                f"{self._label('share_negatives')}: the teacher scores each query's own documents "
                f"only, so {self._label('loss')} = 'margin_mse' cannot share them; set it false"
            )


@dataclass(frozen=True)
class CrossEncoderArgs(TransformerArgs):
    kind = "bert-rel training"
    cluster_model: Literal["first", "pretrained"] = "pretrained"
    head_lr: float | None = param(None, gt=0)  # the linear head's learning rate (None: lr)
    # a graded head's (model parameter ``grades``) cross-entropy against each pair's grade, added
    # to the list loss with this weight (None: 1); a one-logit head has no grade distribution
    grade_weight: float | None = param(None, ge=0)

    def check(self) -> None:
        super().check()
        if self.cluster_model == "first" and self.neg_cluster > 0:
            raise ParamError(f"{self._label('cluster_model')} = 'first' needs a bi-encoder; use 'pretrained'")

    def check_with(self, other: Params) -> None:
        if self.grade_weight is not None and not getattr(other, "grades", None):
            raise ParamError(
                f"{self._label('grade_weight')} weighs a graded head's cross-entropy, but this "
                f"bert-rel has one logit; set the model parameter grades (say [0, 1, 2, 3])"
            )


# ------------------------------------------------------------------------------------ mtdnn
@dataclass(frozen=True)
class MTDNNArgs(EncoderArgs):
    """How MT-DNN learns (Algorithm 1): the ranking task as DSSM's (one ``gamma``, no judged
    negatives), plus the choice of task per minibatch and the dev score that stops training."""

    kind = "mt-dnn training"
    task_sampling: Literal["uniform", "proportional"] = "uniform"  # Algorithm 1 picks a task at random
    cls_lr: float | None = param(None, gt=0)  # learning rate of the classification minibatches (None: lr)
    freeze_l2: bool = False  # keep the shared layer fixed (DNN2 of the domain-adaptation study)
    select: Literal["mean", "rank", "classification"] = "mean"  # dev score: mean over tasks, or one kind

    def check(self) -> None:
        super().check()
        if isinstance(self.gamma, list):
            raise ParamError(f"{self._label('gamma')} must be one number for mt-dnn, got {self.gamma!r}")
        if self.hard_negatives:
            raise ParamError(f"{self._label('hard_negatives')}: mt-dnn's ranking task takes random negatives only")


# ------------------------------------------------------------------------------------ projection
@dataclass(frozen=True)
class PCAArgs(Params):
    """LSA and CL-LSA: the seed of the PCA's random start."""

    kind = "pca"

    seed: int = 0


@dataclass(frozen=True)
class OPCAArgs(PCAArgs):
    """OPCA: the leading PCA directions it solves in (``reduce``) and the noise ridge ``reg``
    (ε = reg·tr(N)/m; both picked on homedepot's dev split, models/projection.py)."""

    kind = "opca"

    reduce: int = param(200, ge=1)
    reg: float = param(0.3, ge=0)


@dataclass(frozen=True)
class S2NetArgs(TrainArgs):
    """S2Net: loss log(1 + exp(−γΔ)) over ``negatives`` random pool titles per pair, minibatch Adam
    at lr 0.01 (picked on dev), early stopping on dev NDCG@10 (an epoch counts when it beats the
    best, the LSA start included, by more than 1e-5)."""

    kind = "s2net"

    lr: float = param(0.01, gt=0)
    optimizer: Literal["sgd", "adam"] = "adam"
    min_delta: float = param(1e-5, ge=0)
    gamma: float = param(10.0, gt=0)
    negatives: int = param(4, ge=1)


# ------------------------------------------------------------------------------------ topic
@dataclass(frozen=True)
class EMArgs(Params):
    """How PLSA learns by MAP-EM: iterations, the stopping tolerance, the φ prior β, the
    vocabulary's minimum count, the seed of the random start."""

    kind = "plsa"

    iterations: int = param(100, ge=1)
    min_iterations: int = param(20, ge=0)
    tol: float = param(1e-3, ge=0)
    beta: float = 1.01
    min_count: int = param(1, ge=1)
    seed: int = 0

    def check(self) -> None:
        if self.beta < 1.0:
            raise ParamError(
                f"{self._label('beta')}: MAP-EM needs beta >= 1 (a Dirichlet prior whose mode exists), got {self.beta}"
            )


@dataclass(frozen=True)
class BLTMArgs(EMArgs):
    """BLTM's MAP-EM; ``pr``: posterior regularisation (BLTM-PR) with ``pr_steps`` dual steps per
    pair and EM iteration, warm-started, stopping early at ``pr_tol`` (``bltm_step``)."""

    kind = "bltm"

    pr: bool = False
    pr_steps: int = param(10, ge=0)
    pr_tol: float = param(1e-3, ge=0)
    pr_method: Literal["diag", "gradient"] = "diag"


@dataclass(frozen=True)
class LDAArgs(Params):
    """gensim's online VB: ``passes`` over the titles, its per-document ``iterations`` and
    ``chunksize``, the topic prior η (0.01, Wei & Croft 2006), the vocabulary's minimum count."""

    kind = "lda"

    passes: int = param(10, ge=1)
    iterations: int = param(50, ge=1)
    eta: float = param(0.01, gt=0)
    chunksize: int = param(2000, ge=1)
    min_count: int = param(1, ge=1)
    seed: int = 0


# ------------------------------------------------------------------------------------ translation
@dataclass(frozen=True)
class IBM1Args(Params):
    """How the WTM and PTM learn: IBM-1 EM ``iterations`` and relative tolerance ``tol``, the NULL
    title word (``null``), and ``min_prob``: translations below it are pruned after training."""

    kind = "ibm-1"

    iterations: int = param(10, ge=1)
    tol: float = param(1e-4, ge=0)
    null: bool = True
    min_prob: float = param(1e-4, ge=0, lt=1)


# ------------------------------------------------------------------------------------ lambdamart
@dataclass(frozen=True)
class RankerArgs(Params):
    """How the ``lambdamart`` kind learns besides its booster settings (saved with the model)."""

    kind = "lambdamart training"

    cv_folds: int = param(0, ge=0)  # without a dev split: trees picked by this k-fold CV (0: num_boost_round)
    # a two-stage search's ranker: the (lexical, semantic) stage-1 depths tried; dev nDCG@10 picks one
    stage_depths: list[list[int]] = param([[50, 50], [100, 50], [100, 100], [200, 100]])
    # ... by the sum of these dev metrics (the served goals: ranking quality and what stage 1 keeps)
    stage_select: list[str] = param(["ndcg@10", "recall@100"])
    rel_threshold: int = param(1, ge=1)  # a judged grade this high is relevant for recall (Home Depot: 3)
    # the served HNSW efSearch values tried on dev with the chosen ranker and depths: the smallest
    # whose dev selection is within effort_tolerance of the best is kept (empty: the index's own)
    search_efforts: list[int] = param([])
    effort_tolerance: float = param(0.002, ge=0)
    # a two-stage search's ranker learns from fold I/N of the training queries only ("" = all):
    # the fold a stage-1 model was trained without (``semsearch train --hold-out I/N``, counted from 1), so the
    # ranker learns how far to trust that model's scores on queries it never saw
    train_fold: str = ""
    # a ranker learnt from a click log (``index build --train-ranker --clicks DIR``; clicks.labels):
    # the position-bias correction ("lightgbm": LightGBM's position-debiased lambdarank; "ipw":
    # inverse-propensity weighted click-through rates; "none": raw ones), the relative examination
    # propensities per rank for "ipw" (empty: fitted to the log by a PBM), the grades the
    # click-through rates are cut into, the largest inverse-propensity weight, the least
    # impressions of a labelled pair, and the share of the log's queries held out as dev
    debias: Literal["none", "lightgbm", "ipw"] = "lightgbm"
    propensities: list[float] = param([])
    click_levels: int = param(5, ge=2, le=31)
    max_weight: float = param(10.0, ge=1)
    min_impressions: int = param(1, ge=1)
    click_dev: float = param(0.2, gt=0, lt=1)
    # stage-1 candidates the log never showed: "negative" (grade 0, as unjudged ones are) or
    # "drop" (learn only from the shown ones, the counterfactual setting of Joachims et al. 2017)
    unshown: Literal["negative", "drop"] = "negative"

    CLICK_ONLY = (
        "debias",
        "propensities",
        "click_levels",
        "max_weight",
        "min_impressions",
        "click_dev",
        "unshown",
    )
    """The names that only mean something with a click log."""

    def check(self) -> None:
        if any(not isinstance(p, int | float) or isinstance(p, bool) or not 0 < p <= 1 for p in self.propensities):
            raise ParamError(
                "lambdamart training parameter 'propensities' must list one examination probability in (0, 1] "
                f"per rank, got {self.propensities!r}"
            )
        try:
            self.fold  # noqa: B018 (parsed here, at the edge)
        except ValueError as e:
            raise ParamError(str(e)) from None
        if not self.stage_depths or any(len(d) != 2 or min(d) < 0 or max(d) < 1 for d in self.stage_depths):
            raise ParamError(
                "lambdamart training parameter 'stage_depths' must be a non-empty list of "
                f"[n_lexical, n_semantic] pairs (>= 0, not both 0), got {self.stage_depths!r}"
            )
        if any(not isinstance(e, int) or isinstance(e, bool) or e < 1 for e in self.search_efforts):
            raise ParamError(
                "lambdamart training parameter 'search_efforts' must be a list of HNSW efSearch "
                f"values (integers >= 1), got {self.search_efforts!r}"
            )
        from ..evaluation.metrics import parse_metric

        for m in self.stage_select or [""]:
            try:
                parse_metric(m)
            except ValueError:
                raise ParamError(
                    f"lambdamart training parameter 'stage_select' must list metrics like 'ndcg@10', "
                    f"'recall@100', got {self.stage_select!r}"
                ) from None

    @property
    def fold(self) -> QueryFold | None:
        """``train_fold`` as a ``QueryFold`` (None: all the training queries)."""
        if not self.train_fold:
            return None
        from ..evaluation import QueryFold

        return QueryFold.parse(self.train_fold, "lambdamart training parameter 'train_fold'")


# ------------------------------------------------------------------------------------ distillation
@dataclass(frozen=True)
class DistillArgs(TrainArgs):
    """How the static query encoder learns: SparseAdam over its rows, cosine loss to the teacher."""

    kind = "static-query training"
    epochs: int = param(8, ge=1)
    batch_size: int = param(256, ge=1)
    lr: float = param(0.01, gt=0)
    optimizer: Literal["sparse-adam"] = "sparse-adam"  # type: ignore[assignment]  # its own: only the rows a batch touches are updated
    patience: int = param(2, ge=1)
    dev_metric: str = "cosine"  # mean cosine to the teacher over the dev queries
    spans: int = param(2, ge=0)  # random 1-4 word spans taken from each title as extra pseudo-queries
    cache: str = ""  # directory keeping the teacher's vectors of the training texts between runs

    def _check_dev_metric(self) -> None:
        if self.dev_metric != "cosine":
            raise ParamError(
                f"{self._label('dev_metric')} must be 'cosine' (mean cosine to the teacher on dev), "
                f"got {self.dev_metric!r}"
            )
