"""Clicks: simulated users that click like people do, and click models fitted from a click log.

`simulate` runs the unbiased-LTR literature's users (position-based, cascade, DBN) against a
ranker's precomputed rankings into the event log format of `semsearch.clicks.log`; `models`
fits position-based, cascade, DBN and UBM click models to a log's sessions and evaluates them by
held-out log-likelihood and perplexity by rank (Chuklin et al., "Click Models for Web Search").
"""

from .models import (
    DBN,
    PBM,
    UBM,
    CascadeModel,
    ClickModel,
    log_likelihood,
    perplexity,
    perplexity_by_rank,
    split_sessions,
)
from .simulate import (
    CASCADE_PROFILES,
    PBM_EXAMINATION,
    CascadeProfile,
    CascadeUser,
    DBNUser,
    PositionBasedUser,
    QueryStream,
    Rankings,
    User,
    graded_attraction,
    simulate,
    simulate_sessions,
)

__all__ = [
    "DBN",
    "PBM",
    "UBM",
    "CascadeModel",
    "ClickModel",
    "log_likelihood",
    "perplexity",
    "perplexity_by_rank",
    "split_sessions",
    "CASCADE_PROFILES",
    "PBM_EXAMINATION",
    "CascadeProfile",
    "CascadeUser",
    "DBNUser",
    "PositionBasedUser",
    "QueryStream",
    "Rankings",
    "User",
    "graded_attraction",
    "simulate",
    "simulate_sessions",
]
