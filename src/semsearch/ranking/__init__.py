"""Learning to rank: features from any set of models, LightGBM LambdaMART (BERT retrieval paper §4.5)."""

from .features import PAIR_FEATURES, Groups, groups, model_columns, pair_columns, run_columns
from .lambdamart import (LambdaMART, LambdaMARTRanker, cross_validated, importance_markdown,
                         mean_importance)

__all__ = [
    "Groups", "LambdaMART", "LambdaMARTRanker", "PAIR_FEATURES", "cross_validated", "groups",
    "importance_markdown", "mean_importance", "model_columns", "pair_columns", "run_columns",
]
