"""Evaluation: ranking metrics and AUC, paired t-tests, cross-validated tuning, result tables.

Conventions are in DESIGN.md ("Evaluation conventions") and the docstring of `metrics`.
Depends only on numpy and scipy.
"""

from semsearch.evaluation.cv import (
    CVResult,
    QueryFold,
    cross_validate,
    kfold_queries,
    tune,
)
from semsearch.evaluation.metrics import (
    VALID_METRICS,
    EvalResult,
    auc,
    canonical_metric,
    evaluate,
    parse_metric,
)
from semsearch.evaluation.significance import TTestResult, paired_ttest
from semsearch.evaluation.tables import MARKERS, ResultTable, metric_header

__all__ = [
    "CVResult",
    "EvalResult",
    "MARKERS",
    "QueryFold",
    "ResultTable",
    "TTestResult",
    "VALID_METRICS",
    "auc",
    "canonical_metric",
    "cross_validate",
    "evaluate",
    "kfold_queries",
    "metric_header",
    "paired_ttest",
    "parse_metric",
    "tune",
]

from .compare import PAPER_BINS, crosstab_markdown, top1_crosstab  # noqa: E402

__all__ += ["PAPER_BINS", "crosstab_markdown", "top1_crosstab"]
