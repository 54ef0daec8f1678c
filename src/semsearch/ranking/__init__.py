"""Learning to rank: features from any set of models, LightGBM LambdaMART (BERT retrieval paper §4.5)."""

from .features import PAIR_FEATURES, STAGE_FEATURES, Groups, groups, model_columns, pair_columns, run_columns, stage_columns
from .lambdamart import (BoosterParams, LambdaMART, LambdaMARTParams, LambdaMARTRanker, importance_markdown,
                         mean_importance)

__all__ = [
    "BoosterParams", "Groups", "LambdaMART", "LambdaMARTParams", "LambdaMARTRanker", "PAIR_FEATURES", "STAGE_FEATURES", "groups", "stage_columns",
    "importance_markdown", "mean_importance", "model_columns", "pair_columns", "run_columns",
]
