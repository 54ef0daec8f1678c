"""Learning to rank: features from any set of models, LightGBM LambdaMART (BERT retrieval paper §4.5)."""

from .features import (
    MATCH_FEATURES,
    PAIR_FEATURES,
    STAGE_FEATURES,
    TEXT_FEATURES,
    Groups,
    groups,
    model_columns,
    pair_columns,
    run_columns,
    stage_columns,
)
from .lambdamart import (
    GROUP_STATS,
    BoosterParams,
    LambdaMART,
    LambdaMARTParams,
    LambdaMARTRanker,
    importance_markdown,
    mean_importance,
)

__all__ = [
    "GROUP_STATS",
    "MATCH_FEATURES",
    "TEXT_FEATURES",
    "BoosterParams",
    "Groups",
    "LambdaMART",
    "LambdaMARTParams",
    "LambdaMARTRanker",
    "PAIR_FEATURES",
    "STAGE_FEATURES",
    "groups",
    "stage_columns",
    "importance_markdown",
    "mean_importance",
    "model_columns",
    "pair_columns",
    "run_columns",
]
