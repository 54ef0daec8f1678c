"""Which clients of a click log a learner may trust, and how much: the policy that keeps bought or
scripted clicks out of the labels (`clicks.labels.click_judgments`).

Two defences, both over the ``client_id`` the service logs with every impression (an opaque key
the client sends; `clicks.log`):

- **Each client counts once per (query, document), with a bounded weight.** A client's
  impressions of a pair are one vote, its click-through rate on them; a client that searched more
  than ``max_client_queries`` distinct queries has every vote scaled down so its votes weigh that
  many queries' worth in all. Repetition alone (one client searching a query 200 times) then moves
  a label no more than one search does: click spam is many clicks from few sources, so counting
  sources rather than clicks bounds what each source can do (Radlinski 2007, "Addressing
  malicious noise in clickthrough data", on attacks against learning from clicks).
- **Clients whose rate or pattern no person has are set aside** (every impression and click of
  theirs left out of the labels), by the rules of `TrustPolicy`: more searches in a minute than a
  person makes; clicking on every search of a long history (a person skips some answers); searches
  at machine-regular intervals; clicking the same document on most of many distinct queries
  (a person's clicks follow the query). Each rule is a plain threshold on one count, so a person
  reading the log can check why a client was set aside (`TrustReport.reasons`).

Impressions without a client id cannot be grouped: each counts as its own client (a log written
without client ids gives the labels it gave before), and the report says how many there were.
What no counting can see: an attacker who uses a fresh client id for every search and behaves
like a person on each is one vote per id (a Sybil attack); that bound is the number of ids, which
the service's own rate limits and id issuance must keep small.

The defaults were chosen on simulated honest traffic (docs/clicks.md, "Clicks that cannot be
trusted"), so that honest users are essentially never set aside.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..data.errors import DataFormatError
from .log import EVENT_SCHEMA, IMPRESSION_SCHEMA, PathLike, segments, validate_segment
from .sessions import Sessions

MINUTE_MS = 60_000


@dataclass(frozen=True)
class TrustPolicy:
    """The thresholds that set a client aside (each a rule of its own; a client breaking any one
    is set aside) and the bound on a trusted client's weight.

    Attributes:
        max_searches_per_minute: the most searches a client may make in any 60-second window
            (a person types, reads and clicks: a few a minute, bursts of a dozen).
        min_searches: the least searches before the skip and interval rules judge a client (a
            short history says nothing about a pattern).
        max_clicked_share: a client with ``min_searches`` searches or more that clicked on a larger
            share of them than this never skips an answer, as no person does.
        min_interval_spread: a client with ``min_searches`` searches or more whose gaps between
            consecutive searches have a coefficient of variation (std / mean) below this searches
            at machine-regular intervals (a person's gaps vary by about their mean).
        min_document_queries: the least distinct queries on which a client clicked one document
            before the one-document rule judges it.
        max_document_share: a client that clicked one document on ``min_document_queries`` distinct
            queries or more, and on more than this share of all the queries it clicked anything
            on, is pushing that document.
        max_client_queries: a trusted client's votes (one per shown pair) weigh in all at most
            this many distinct queries' worth: a client with more queries has each vote scaled by
            ``max_client_queries / its queries``.
    """

    max_searches_per_minute: int = 30
    min_searches: int = 50
    max_clicked_share: float = 0.98
    min_interval_spread: float = 0.1
    min_document_queries: int = 5
    max_document_share: float = 0.5
    max_client_queries: int = 100

    def __post_init__(self) -> None:
        for name in ("max_searches_per_minute", "min_searches", "min_document_queries", "max_client_queries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrustPolicy.{name} must be an integer >= 1, got {value!r}")
        for name in ("max_clicked_share", "max_document_share"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"TrustPolicy.{name} must be in (0, 1], got {value!r}")
        if self.min_interval_spread < 0:
            raise ValueError(f"TrustPolicy.min_interval_spread must be >= 0, got {self.min_interval_spread!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


REASONS = ("rate", "never_skips", "fixed_intervals", "one_document")
"""The rules of `TrustPolicy`, as named in `TrustReport.reasons`."""


@dataclass(frozen=True)
class ClientActivity:
    """Who made each impression of a `Sessions` and when: ``client[i]`` the code (into
    ``client_ids``) of impression i's client, -1 where it has no client id; ``time_ms[i]`` its
    timestamp in Unix milliseconds."""

    client: np.ndarray  # int32 (n,)
    client_ids: list[str]
    time_ms: np.ndarray  # int64 (n,)

    def __post_init__(self) -> None:
        if self.client.shape != self.time_ms.shape or self.client.ndim != 1:
            raise ValueError(f"client {self.client.shape} and time_ms {self.time_ms.shape} must be equal 1-d arrays")

    def __len__(self) -> int:
        return len(self.client)

    def take(self, index: np.ndarray) -> ClientActivity:
        """A subset of the impressions (the same client codes)."""
        return ClientActivity(self.client[index], self.client_ids, self.time_ms[index])


def activity_from_table(impressions: pa.Table, sessions: Sessions, *, where: str = "log") -> ClientActivity:
    """The `ClientActivity` of ``sessions`` from a table with the impressions' ``query_id``,
    ``client_id`` and ``timestamp`` columns (the log's impression schema, `clicks.log`): each
    session row is matched by its search id (``sessions.search_ids``).

    Raises:
        DataFormatError: ``sessions`` has no search ids, or one names no impression of the table
            (naming ``where``)."""
    if sessions.search_ids is None:
        raise DataFormatError(where, None, "the sessions have no search ids to match their clients by")
    row = pc.index_in(sessions.search_ids, value_set=impressions.column("query_id").combine_chunks())
    found = np.asarray(pc.fill_null(row, -1).to_numpy(zero_copy_only=False), np.int64)
    if len(found) and found.min() < 0:
        missing = sessions.search_ids[int(np.argmin(found))].as_py()
        raise DataFormatError(where, None, f"column query_id: the search {missing!r} has no impression row")
    clients = impressions.column("client_id").combine_chunks().take(pa.array(found))
    encoded = pc.dictionary_encode(clients)
    codes = np.asarray(pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False), np.int32)
    stamps = impressions.column("timestamp").combine_chunks().take(pa.array(found))
    time_ms = np.asarray(pc.cast(stamps.cast(pa.timestamp("ms", tz="UTC")), pa.int64()).to_numpy(zero_copy_only=False))
    return ClientActivity(codes, encoded.dictionary.to_pylist(), time_ms.astype(np.int64))


def read_activity(directory: PathLike, sessions: Sessions) -> ClientActivity:
    """The `ClientActivity` of ``sessions``, read from the log ``directory`` they were read from
    (`clicks.sessions.read_sessions`): only the impressions' ``query_id``, ``client_id`` and
    ``timestamp`` columns are read, each segment checked first.

    Raises:
        DataFormatError: a malformed segment, or a session the log has no impression for."""
    paths = segments(directory, "impressions")
    for p in paths:
        validate_segment(p, "impressions")
    columns = ["query_id", "client_id", "timestamp"]
    tables = [pq.read_table(p, columns=columns) for p in paths]
    table = pa.concat_tables(tables) if tables else pa.table({c: pa.array([], pa.string()) for c in columns})
    return activity_from_table(table, sessions, where=str(Path(directory) / "impressions"))


@dataclass(frozen=True)
class TrustReport:
    """What the policy did to one log: ``clients`` with a client id, how many were
    ``set_aside`` (their impressions and clicks with them), ``reasons`` (rule -> clients it set
    aside; a client may break several), ``bounded`` trusted clients whose votes were scaled down,
    ``anonymous_impressions`` counted one client each, and the ``policy`` applied."""

    clients: int
    set_aside_clients: int
    set_aside_impressions: int
    set_aside_clicks: int
    reasons: dict[str, int]
    bounded_clients: int
    anonymous_impressions: int
    policy: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Assessment:
    """The policy's verdict on each client of a log: ``set_aside[c]`` for client code c, the rules
    each broke (``broke[rule]``, bool per client), and each client's vote weight (``weight[c]``,
    1 unless bounded)."""

    set_aside: np.ndarray  # bool (n_clients,)
    broke: dict[str, np.ndarray]
    weight: np.ndarray  # float64 (n_clients,)


def _per_client_sorted(client: np.ndarray, time_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The impressions with a client, sorted by (client, time): their clients and times."""
    has = client >= 0
    c, t = client[has].astype(np.int64), time_ms[has].astype(np.int64)
    order = np.lexsort((t, c))
    return c[order], t[order]


def assess(sessions: Sessions, activity: ClientActivity, policy: TrustPolicy) -> Assessment:
    """Judge every client of ``sessions`` by ``policy`` (module docstring). Vectorised over the
    impressions: no loop over clients."""
    if len(activity) != len(sessions):
        raise ValueError(f"{len(activity):,} activity rows for {len(sessions):,} sessions")
    n_clients = len(activity.client_ids)
    client = activity.client
    has = client >= 0
    searches = np.bincount(client[has], minlength=n_clients)
    clicked_rows = np.asarray(sessions.clicks.any(axis=1), bool)
    clicked = np.bincount(client[has], clicked_rows[has].astype(np.int64), minlength=n_clients)
    broke: dict[str, np.ndarray] = {}

    # rate: the searches in the 60 s window ending at each search (client offsets keep windows apart)
    c, t = _per_client_sorted(client, activity.time_ms)
    t0 = t.min() if len(t) else 0
    key = c * (1 << 42) + (t - t0)
    in_window = np.arange(len(key)) - np.searchsorted(key, key - (MINUTE_MS - 1), side="left") + 1
    most = np.zeros(n_clients, np.int64)
    np.maximum.at(most, c, in_window)
    broke["rate"] = most > policy.max_searches_per_minute

    long = searches >= policy.min_searches
    broke["never_skips"] = long & (clicked > policy.max_clicked_share * searches)

    # fixed intervals: the coefficient of variation of the gaps between consecutive searches
    same = c[1:] == c[:-1]
    gap, gc = (t[1:] - t[:-1])[same].astype(np.float64), c[1:][same]
    n_gaps = np.bincount(gc, minlength=n_clients)
    mean = np.bincount(gc, gap, minlength=n_clients) / np.maximum(n_gaps, 1)
    var = np.bincount(gc, gap * gap, minlength=n_clients) / np.maximum(n_gaps, 1) - mean * mean
    spread = np.where(mean > 0, np.sqrt(np.maximum(var, 0.0)) / np.where(mean > 0, mean, 1.0), 0.0)
    broke["fixed_intervals"] = long & (spread < policy.min_interval_spread)

    # one document on most of many distinct queries: distinct (client, query, doc) clicks
    rows, cols = np.nonzero(sessions.clicks & has[:, None])
    n_q, n_d = max(len(sessions.queries), 1), max(len(sessions.doc_ids), 1)
    cq = np.unique(client[rows].astype(np.int64) * n_q + sessions.query[rows])
    clicked_queries = np.bincount(cq // n_q, minlength=n_clients)
    cqd = np.unique((client[rows].astype(np.int64) * n_q + sessions.query[rows]) * n_d + sessions.docs[rows, cols])
    cd, cd_queries = np.unique((cqd // (n_q * n_d)) * n_d + cqd % n_d, return_counts=True)
    top_doc = np.zeros(n_clients, np.int64)
    np.maximum.at(top_doc, cd // n_d, cd_queries)
    broke["one_document"] = (top_doc >= policy.min_document_queries) & (
        top_doc > policy.max_document_share * np.maximum(clicked_queries, 1)
    )

    set_aside = np.zeros(n_clients, bool)
    for rule in REASONS:
        set_aside |= broke[rule]
    searched = np.unique(client[has].astype(np.int64) * n_q + sessions.query[has])
    distinct_queries = np.bincount(searched // n_q, minlength=n_clients)
    weight = np.minimum(1.0, policy.max_client_queries / np.maximum(distinct_queries, 1))
    return Assessment(set_aside, broke, weight)


def report(sessions: Sessions, activity: ClientActivity, assessment: Assessment, policy: TrustPolicy) -> TrustReport:
    """The counts of `TrustReport` for an assessed log."""
    has = activity.client >= 0
    out = has.copy()
    out[has] = assessment.set_aside[activity.client[has]]
    trusted = ~assessment.set_aside
    return TrustReport(
        clients=len(activity.client_ids),
        set_aside_clients=int(assessment.set_aside.sum()),
        set_aside_impressions=int(out.sum()),
        set_aside_clicks=int(sessions.clicks[out].sum()),
        reasons={rule: int(assessment.broke[rule].sum()) for rule in REASONS},
        bounded_clients=int((trusted & (assessment.weight < 1)).sum()),
        anonymous_impressions=int((~has).sum()),
        policy=policy.as_dict(),
    )


def trusted_rows(activity: ClientActivity, assessment: Assessment) -> np.ndarray:
    """The impressions whose client is not set aside (anonymous ones included), as a bool mask."""
    keep = np.ones(len(activity), bool)
    has = activity.client >= 0
    keep[has] = ~assessment.set_aside[activity.client[has]]
    return keep


def attack_tables(
    shown: dict[str, list[str]],
    target: str,
    *,
    n_clients: int = 50,
    searches: int = 200,
    start_ms: int = 0,
    interval_ms: int = 5_000,
    seed: int = 0,
    bundle: str = "attacked",
) -> tuple[pa.Table, pa.Table]:
    """Bought clicks, to test a defence: ``n_clients`` client ids (``attacker<j>``) each making
    ``searches`` searches of the queries of ``shown`` (query text -> the list the service shows
    for it, which holds ``target``), drawn uniformly (seeded), one every ``interval_ms`` from
    ``start_ms``, each clicking ``target`` where it is shown. Returned as an impressions and an
    events table in the log's schemas, for `EventLogWriter.append_table`.

    Raises:
        ValueError: a list of ``shown`` lacks ``target``."""
    texts = sorted(shown)
    lacking = [q for q in texts if target not in shown[q]]
    if lacking:
        raise ValueError(f"the target {target!r} is not shown for {len(lacking)} queries, e.g. {lacking[0]!r}")
    rng = np.random.default_rng(seed)
    n = n_clients * searches
    pick = rng.integers(0, len(texts), n)
    client = np.repeat(np.arange(n_clients), searches)
    stamp = start_ms + np.tile(np.arange(searches, dtype=np.int64) * interval_ms, n_clients) + client
    ids = [f"attack{seed}-{i}" for i in range(n)]
    clients = [f"attacker{j}" for j in client.tolist()]
    queries = [texts[i] for i in pick.tolist()]
    ts = pa.array(stamp).cast(pa.timestamp("ms", tz="UTC"))
    impressions = pa.table(
        {
            "query_id": ids,
            "timestamp": ts,
            "user_query": queries,
            "client_id": clients,
            "bundle": [bundle] * n,
            "bundle_version": [""] * n,
            "arm": pa.nulls(n, pa.string()),
            "k": pa.array(np.full(n, 10, np.int32)),
            "offset": pa.array(np.zeros(n, np.int32)),
            "hit_ids": [shown[q] for q in queries],
            "hit_stages": pa.nulls(n, pa.list_(pa.string())),
        },
        schema=IMPRESSION_SCHEMA,
    )
    events = pa.table(
        {
            "query_id": ids,
            "timestamp": pa.array(stamp + 1_000).cast(pa.timestamp("ms", tz="UTC")),
            "client_id": clients,
            "action_name": ["click"] * n,
            "object_id": [target] * n,
            "position": pa.array([shown[q].index(target) + 1 for q in queries], pa.int32()),
        },
        schema=EVENT_SCHEMA,
    )
    return impressions, events
