"""Clicks: the event log a search service writes, the sessions read back from it, simulated users,
click models, labels for learners and the statistics that compare two rankers online.

- `log`: the event log's schema (OpenSearch's User Behavior Insights fields), its records and the
  buffered writer of atomic Parquet segments; `sessions`: a log read back, as a table, per
  impression with its clicks, or as the `Sessions` arrays click models and learners take;
  `formats`: logs in other tools' formats (the Yandex search log PyClick reads, OpenSearch UBI
  JSON) read into the same tables and sessions, and written out.
- `simulate`: the unbiased-LTR literature's users (position-based, cascade, DBN) against a
  ranker's precomputed rankings, into the event log's format.
- `models`: position-based, cascade, DBN and UBM click models (a Beta prior on every parameter,
  keyed by (query, document) strings) fitted to a log's sessions and evaluated by held-out
  log-likelihood and perplexity by rank (Chuklin et al., "Click Models for Web Search");
  `distributed`: PBM and UBM fitted over a partitioned log, on Ray Data.
- `labels`: a log's clicks as training data: clicked pairs for the pair models, graded labels for
  the stage-2 ranker, with the position bias corrected or not; `trust`: the clients no person
  could be (rate, never skipping, fixed intervals, one document on many queries) set aside and
  each client counted once per pair, with a bounded weight (`TrustPolicy`).
- Online comparison of two rankers, one module a concern: `interleaving` (team draft),
  `abtest` (A/B buckets), `counterfactual` (off-policy estimates: IPS, SNIPS, DM, DR, with
  bootstrap intervals), `power` (impressions to significance); `comparison` runs them on
  simulated users.

The package sits above ``index`` and below ``training`` and ``serving``: the service logs and
compares with it, the trainers learn from its labels. Re-exported here: what a caller needs to
write, read, simulate, fit and label a log; the online statistics are imported from their modules
(they load scipy).
"""

from .formats import LogTables, load_sessions, read_ubi, read_yandex, write_ubi, write_yandex
from .labels import ClickJudgments, click_judgments, click_pairs, examination_propensities
from .log import Event, EventLogWriter, Impression
from .models import (
    DBN,
    PBM,
    UBM,
    CascadeModel,
    ClickModel,
    fit_click_models,
    fit_models,
    log_likelihood,
    perplexity,
    perplexity_by_rank,
    split_sessions,
)
from .sessions import Sessions, read_clicked, read_log, read_sessions
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
    simulate_log,
    simulate_sessions,
)
from .trust import TrustPolicy, TrustReport

__all__ = [
    "TrustPolicy",
    "TrustReport",
    "DBN",
    "PBM",
    "UBM",
    "CascadeModel",
    "ClickJudgments",
    "ClickModel",
    "Event",
    "EventLogWriter",
    "Impression",
    "LogTables",
    "Sessions",
    "click_judgments",
    "click_pairs",
    "examination_propensities",
    "fit_click_models",
    "fit_models",
    "load_sessions",
    "log_likelihood",
    "perplexity",
    "perplexity_by_rank",
    "read_clicked",
    "read_log",
    "read_sessions",
    "read_ubi",
    "read_yandex",
    "split_sessions",
    "write_ubi",
    "write_yandex",
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
    "simulate_log",
    "simulate_sessions",
]
