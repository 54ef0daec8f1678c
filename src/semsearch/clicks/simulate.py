"""Simulated users: a Zipf-like query stream and the click models of the unbiased-LTR literature,
run against a ranker's precomputed rankings, vectorised and seeded, streamed in chunks.

The users (each maps the grades of a shown list, ``(n, k)``, to clicks, ``(n, k)`` bool):

- `PositionBasedUser` (PBM; Joachims et al. 2017, "Unbiased Learning-to-Rank with Biased
  Feedback"; Chuklin et al., "Click Models for Web Search", ch. 3): rank r is examined with
  probability ρ_r^η, ρ = 0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06 for ranks
  1-10 (`PBM_EXAMINATION`), and an examined document of grade g is clicked with probability
  ε + (1 − ε)(2^g − 1)/(2^gmax − 1), ε = 0.1; examination and attraction are independent.
- `CascadeUser` (Craswell et al. 2008, with the click and stop probabilities per grade of
  Hofmann, Whiteson & de Rijke 2013, "Fidelity, soundness, and efficiency of interleaved
  comparison methods", as used by Schuth et al. and Oosterhuis & de Rijke): the user reads from
  rank 1 down, clicks a document of grade g with P(click | g) and, after a click, stops with
  P(stop | g); the profiles (`CASCADE_PROFILES`, for grades 0-4):

  ============  ==============================  ==============================
  profile       P(click | g = 0, 1, 2, 3, 4)    P(stop | g = 0, 1, 2, 3, 4)
  ============  ==============================  ==============================
  perfect       0.0, 0.2, 0.4, 0.8, 1.0         0.0, 0.0, 0.0, 0.0, 0.0
  navigational  0.05, 0.3, 0.5, 0.7, 0.95       0.2, 0.3, 0.5, 0.7, 0.9
  informational 0.4, 0.6, 0.7, 0.8, 0.9         0.1, 0.2, 0.3, 0.4, 0.5
  ============  ==============================  ==============================

  With another top grade gmax, grade g reads row entry round(4 g / gmax) (binary grades: the
  first and last entries, the published binary table).
- `DBNUser` (Chapelle & Zhang 2009, "A Dynamic Bayesian Network Click Model for Web Search
  Ranking"): from rank 1 down, an examined document is clicked with its attractiveness a(g)
  (default the PBM's ε + (1 − ε)(2^g − 1)/(2^gmax − 1)), a click satisfies with s(g) (default
  ERR's (2^g − 1)/2^gmax), a satisfied user stops, an unsatisfied one goes on with probability γ.

Unjudged documents count as grade 0 (not relevant), as in the literature's simulations. Every
draw comes from one `numpy.random.Generator` seeded by the caller, so a simulation is
reproducible; work is done a chunk of impressions at a time (numpy over the chunk, a loop over
the k ranks at most), so memory is bounded by the chunk size whatever the number of impressions.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..params import ParamError
from ..progress import note
from .log import EVENT_SCHEMA, IMPRESSION_SCHEMA, EventLogWriter
from .sessions import Sessions

PBM_EXAMINATION: tuple[float, ...] = (0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06)
"""The position-based user's examination probabilities ρ_r for ranks 1-10 (Joachims et al. 2017)."""


@dataclass(frozen=True)
class CascadeProfile:
    """P(click | grade) and P(stop after a click | grade) for grades 0..4."""

    click: tuple[float, ...]
    stop: tuple[float, ...]


CASCADE_PROFILES: dict[str, CascadeProfile] = {
    "perfect": CascadeProfile(click=(0.0, 0.2, 0.4, 0.8, 1.0), stop=(0.0, 0.0, 0.0, 0.0, 0.0)),
    "navigational": CascadeProfile(click=(0.05, 0.3, 0.5, 0.7, 0.95), stop=(0.2, 0.3, 0.5, 0.7, 0.9)),
    "informational": CascadeProfile(click=(0.4, 0.6, 0.7, 0.8, 0.9), stop=(0.1, 0.2, 0.3, 0.4, 0.5)),
}
"""The cascade user's profiles by name (Hofmann, Whiteson & de Rijke 2013), for grades 0-4."""


def graded_attraction(max_grade: int, epsilon: float = 0.1) -> np.ndarray:
    """P(click | examined, grade g) = ε + (1 − ε)(2^g − 1)/(2^gmax − 1) for g = 0..gmax."""
    if max_grade < 1:
        raise ValueError(f"max_grade must be >= 1, got {max_grade}")
    g = np.arange(max_grade + 1, dtype=np.float64)
    return epsilon + (1.0 - epsilon) * (2.0**g - 1.0) / (2.0**max_grade - 1.0)


def _per_grade(table: Sequence[float], max_grade: int) -> np.ndarray:
    """A 5-entry per-grade table (grades 0..4) read for grades 0..max_grade: entry round(4 g / gmax)."""
    idx = np.rint(4.0 * np.arange(max_grade + 1) / max_grade).astype(np.int64)
    return np.asarray(table, dtype=np.float64)[idx]


def _grade_index(grades: np.ndarray, max_grade: int) -> np.ndarray:
    return np.clip(grades, 0, max_grade).astype(np.intp)


def _top_down(
    g: np.ndarray,
    shown: np.ndarray,
    click_p: np.ndarray,
    stop_p: np.ndarray,
    gamma: float | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """Clicks of users reading a list from the top (the cascade and DBN users): at each examined
    rank a click with ``click_p[grade]``, after a click a stop with ``stop_p[grade]``, and (DBN)
    the next rank examined with ``gamma`` (None: always, the cascade). One uniform per rank and
    decision, drawn up front."""
    u = rng.random((2 if gamma is None else 3, *g.shape))
    out = np.zeros(g.shape, dtype=bool)
    examining = np.ones(g.shape[0], dtype=bool)
    for r in range(g.shape[1]):
        examining &= shown[:, r]
        c = examining & (u[0, :, r] < click_p[g[:, r]])
        out[:, r] = c
        examining &= ~(c & (u[1, :, r] < stop_p[g[:, r]]))
        if gamma is not None:
            examining &= u[2, :, r] < gamma
    return out


class User(Protocol):
    """A simulated user: clicks on ``(n, k)`` grades of shown lists (``shown`` marks real slots)."""

    def clicks(self, grades: np.ndarray, shown: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...


@dataclass(frozen=True)
class PositionBasedUser:
    """Position-based user: examination ρ_r^η by rank, attraction by grade (see module docstring)."""

    max_grade: int
    eta: float = 1.0
    epsilon: float = 0.1
    examination: tuple[float, ...] = PBM_EXAMINATION

    def examination_probabilities(self, k: int) -> np.ndarray:
        if k > len(self.examination):
            raise ValueError(
                f"the position-based user has examination probabilities for {len(self.examination)} ranks, not {k}"
            )
        return np.asarray(self.examination[:k], dtype=np.float64) ** self.eta

    def click_probabilities(self, grades: np.ndarray) -> np.ndarray:
        """P(click) per cell of ``(n, k)`` grades."""
        attraction = graded_attraction(self.max_grade, self.epsilon)[_grade_index(grades, self.max_grade)]
        return attraction * self.examination_probabilities(grades.shape[1])

    def clicks(self, grades: np.ndarray, shown: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return (rng.random(grades.shape) < self.click_probabilities(grades)) & shown


@dataclass(frozen=True)
class CascadeUser:
    """Cascade user of one profile (``perfect``, ``navigational``, ``informational`` or a
    `CascadeProfile`): reads top-down, clicks by grade, stops after a click by grade."""

    max_grade: int
    profile: str | CascadeProfile = "informational"

    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        p = CASCADE_PROFILES[self.profile] if isinstance(self.profile, str) else self.profile
        return _per_grade(p.click, self.max_grade), _per_grade(p.stop, self.max_grade)

    def clicks(self, grades: np.ndarray, shown: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        click_p, stop_p = self.tables()
        return _top_down(_grade_index(grades, self.max_grade), shown, click_p, stop_p, None, rng)


@dataclass(frozen=True)
class DBNUser:
    """Dynamic Bayesian network user: attractiveness a(g), satisfaction s(g), continuation γ."""

    max_grade: int
    gamma: float = 0.9
    epsilon: float = 0.1
    attractiveness: tuple[float, ...] | None = None  # per grade 0..max_grade; default the PBM's
    satisfaction: tuple[float, ...] | None = None  # per grade 0..max_grade; default ERR's (2^g - 1)/2^gmax

    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        g = np.arange(self.max_grade + 1, dtype=np.float64)
        a = (
            graded_attraction(self.max_grade, self.epsilon)
            if self.attractiveness is None
            else np.asarray(self.attractiveness, dtype=np.float64)
        )
        s = (2.0**g - 1.0) / 2.0**self.max_grade if self.satisfaction is None else np.asarray(self.satisfaction)
        if len(a) != self.max_grade + 1 or len(s) != self.max_grade + 1:
            raise ValueError(f"attractiveness and satisfaction need one value per grade 0..{self.max_grade}")
        return a, s

    def clicks(self, grades: np.ndarray, shown: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        a, s = self.tables()
        return _top_down(_grade_index(grades, self.max_grade), shown, a, s, self.gamma, rng)


class QueryStream:
    """Query frequencies Zipf-like over ``n_queries``: the query of popularity rank i (1-based) is
    drawn with probability ∝ i^−exponent; which query gets which rank is a seeded shuffle, so the
    head is not simply the first queries of the list."""

    def __init__(self, n_queries: int, exponent: float = 1.0, seed: int = 0) -> None:
        if n_queries < 1:
            raise ValueError("a query stream needs at least one query")
        if exponent < 0:
            raise ValueError(f"exponent must be >= 0, got {exponent}")
        weights = np.arange(1, n_queries + 1, dtype=np.float64) ** -exponent
        self.order = np.random.default_rng(seed).permutation(n_queries)  # order[i]: the query of rank i + 1
        self.probabilities = np.empty(n_queries)
        self.probabilities[self.order] = weights / weights.sum()
        self._cdf = np.cumsum(weights / weights.sum())
        self._cdf[-1] = 1.0

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` query indices (int32)."""
        ranks = np.searchsorted(self._cdf, rng.random(n), side="right")
        return self.order[np.minimum(ranks, len(self.order) - 1)].astype(np.int32)


@dataclass(frozen=True)
class Rankings:
    """A ranker's answers, precomputed: row q holds query q's top-k document codes (into
    ``doc_ids``; -1 past the end of a shorter list) and their grades (unjudged: 0)."""

    query_ids: list[str]
    queries: list[str]
    doc_ids: list[str]
    docs: np.ndarray  # int32 (n_queries, k)
    grades: np.ndarray  # int8 (n_queries, k)
    max_grade: int = field(default=1)

    def __post_init__(self) -> None:
        if self.docs.shape != self.grades.shape or self.docs.shape[0] != len(self.query_ids):
            raise ValueError("docs, grades and query_ids do not describe the same queries")
        if len(self.queries) != len(self.query_ids):
            raise ValueError("one query text per query id")
        shown = self.docs >= 0
        if np.any(shown[:, 1:] & ~shown[:, :-1]):
            raise ValueError("a ranking has a document after an empty slot (lists fill ranks 1, 2, ... in order)")

    @property
    def k(self) -> int:
        return int(self.docs.shape[1])

    @classmethod
    def from_run(
        cls,
        run: Mapping[str, Sequence[str]],
        qrels: Mapping[str, Mapping[str, int]],
        queries: Mapping[str, str],
        k: int = 10,
        max_grade: int | None = None,
    ) -> Rankings:
        """From a run (query id → doc ids, best first), qrels (query id → doc id → grade) and
        query texts. Queries of the run without a text are an error; negative grades count as 0;
        ``max_grade`` defaults to the largest grade in ``qrels`` (at least 1)."""
        qids = list(run)
        missing = [q for q in qids if q not in queries]
        if missing:
            raise ValueError(f"{len(missing)} run queries have no text, e.g. {missing[0]!r}")
        vocab: dict[str, int] = {}
        docs = np.full((len(qids), k), -1, dtype=np.int32)
        grades = np.zeros((len(qids), k), dtype=np.int8)
        top = 1
        for i, q in enumerate(qids):
            judged = qrels.get(q, {})
            for j, d in enumerate(list(run[q])[:k]):
                docs[i, j] = vocab.setdefault(d, len(vocab))
                grades[i, j] = max(0, int(judged.get(d, 0)))
        for judged in qrels.values():
            for g in judged.values():
                top = max(top, int(g))
        return cls(
            query_ids=qids,
            queries=[queries[q] for q in qids],
            doc_ids=list(vocab),
            docs=docs,
            grades=grades,
            max_grade=max_grade if max_grade is not None else top,
        )


def _shuffle_rows(docs: np.ndarray, grades: np.ndarray, rows: np.ndarray, rng: np.random.Generator) -> None:
    """Put the shown documents of ``rows`` in a uniformly random order, in place (empty slots stay last)."""
    if not len(rows):
        return
    keys = rng.random((len(rows), docs.shape[1]))
    keys[docs[rows] < 0] = np.inf
    perm = np.argsort(keys, axis=1)
    docs[rows] = np.take_along_axis(docs[rows], perm, axis=1)
    grades[rows] = np.take_along_axis(grades[rows], perm, axis=1)


def simulate(
    rankings: Rankings,
    user: User,
    n_impressions: int,
    *,
    seed: int = 0,
    exponent: float = 1.0,
    chunk_size: int = 100_000,
    shuffle_rate: float = 0.0,
    writer: EventLogWriter | None = None,
    bundle: str = "simulated",
    bundle_version: str = "",
    n_clients: int | None = None,
    start_ms: int | None = None,
    id_prefix: str | None = None,
) -> Iterator[Sessions]:
    """Simulate ``n_impressions`` impressions of ``rankings`` to ``user``, a chunk at a time.

    Queries are drawn from a `QueryStream` (``exponent``, ``seed``); with probability
    ``shuffle_rate`` an impression shows its top k in a uniformly random order (the randomisation
    that makes position bias estimable: each (query, document) is then seen at several ranks).
    Yields each chunk as `Sessions` (query codes index ``rankings.queries``, document codes
    ``rankings.doc_ids``, ``search_ids`` None). With ``writer``, the chunk is also appended to the
    event log: impressions with ``query_id`` ``<id_prefix><n>`` (default ``sim<seed>-``), one
    millisecond apart from ``start_ms`` (default now), ``client_id`` one of ``n_clients`` keys
    ``u<j>`` (default None: no client id), no stages; one ``click`` event per click, stamped with
    its impression's time.
    """
    if n_impressions < 0 or chunk_size < 1:
        raise ValueError("n_impressions must be >= 0 and chunk_size >= 1")
    if not 0.0 <= shuffle_rate <= 1.0:
        raise ValueError(f"shuffle_rate must be in [0, 1], got {shuffle_rate}")
    rng = np.random.default_rng(seed)
    stream = QueryStream(len(rankings.query_ids), exponent, seed)
    start = int(time.time() * 1000) if start_ms is None else start_ms
    prefix = f"sim{seed}-" if id_prefix is None else id_prefix
    doc_vocab = pa.array(rankings.doc_ids, pa.string())
    query_vocab = pa.array(rankings.queries, pa.string())
    done = 0
    while done < n_impressions:
        n = min(chunk_size, n_impressions - done)
        q = stream.sample(n, rng)
        docs, grades = rankings.docs[q], rankings.grades[q]
        if shuffle_rate > 0:
            _shuffle_rows(docs, grades, np.flatnonzero(rng.random(n) < shuffle_rate), rng)
        shown = docs >= 0
        clicks = user.clicks(grades, shown, rng)
        clients = rng.integers(0, n_clients, n) if n_clients else None
        if writer is not None:
            imp, ev = _tables(
                done, start, prefix, q, docs, clicks, clients, query_vocab, doc_vocab, bundle, bundle_version
            )
            writer.append_table(imp)
            writer.append_table(ev)
        yield Sessions(docs=docs, clicks=clicks, query=q, queries=rankings.queries, doc_ids=rankings.doc_ids)
        done += n


def simulate_sessions(
    rankings: Rankings,
    user: User,
    n_impressions: int,
    *,
    seed: int = 0,
    exponent: float = 1.0,
    chunk_size: int = 100_000,
    shuffle_rate: float = 0.0,
) -> Sessions:
    """`simulate`'s chunks joined into one `Sessions` (for logs that fit in memory)."""
    chunks = list(
        simulate(
            rankings,
            user,
            n_impressions,
            seed=seed,
            exponent=exponent,
            chunk_size=chunk_size,
            shuffle_rate=shuffle_rate,
        )
    )
    if not chunks:
        k = rankings.k
        return Sessions(
            np.zeros((0, k), np.int32),
            np.zeros((0, k), bool),
            np.zeros(0, np.int32),
            rankings.queries,
            rankings.doc_ids,
        )
    return Sessions(
        docs=np.concatenate([c.docs for c in chunks]),
        clicks=np.concatenate([c.clicks for c in chunks]),
        query=np.concatenate([c.query for c in chunks]),
        queries=rankings.queries,
        doc_ids=rankings.doc_ids,
    )


def _tables(
    first: int,
    start_ms: int,
    prefix: str,
    q: np.ndarray,
    docs: np.ndarray,
    clicks: np.ndarray,
    clients: np.ndarray | None,
    query_vocab: pa.Array,
    doc_vocab: pa.Array,
    bundle: str,
    bundle_version: str,
) -> tuple[pa.Table, pa.Table]:
    """One chunk as an impressions table and an events table, built with Arrow kernels."""
    n, k = docs.shape
    number = np.arange(first, first + n, dtype=np.int64)
    query_id = pc.binary_join_element_wise(prefix, pc.cast(pa.array(number), pa.string()), "")
    stamp = pa.array(start_ms + number).cast(pa.timestamp("ms", tz="UTC"))
    client = (
        pa.nulls(n, pa.string())
        if clients is None
        else pc.binary_join_element_wise("u", pc.cast(pa.array(clients), pa.string()), "")
    )
    shown = docs >= 0
    lengths = shown.sum(axis=1)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    hits = pa.ListArray.from_arrays(pa.array(offsets), doc_vocab.take(pa.array(docs[shown])))
    impressions = pa.Table.from_arrays(
        [
            query_id,
            stamp,
            query_vocab.take(pa.array(q)),
            client,
            pa.repeat(pa.scalar(bundle, pa.string()), n),
            pa.repeat(pa.scalar(bundle_version, pa.string()), n),
            pa.nulls(n, pa.string()),
            pa.array(np.full(n, k, dtype=np.int32)),
            pa.array(np.zeros(n, dtype=np.int32)),
            hits,
            pa.nulls(n, pa.list_(pa.string())),
        ],
        schema=IMPRESSION_SCHEMA,
    )
    row, col = np.nonzero(clicks)
    rows = pa.array(row)
    events = pa.Table.from_arrays(
        [
            query_id.take(rows),
            stamp.take(rows),
            client.take(rows),
            pa.repeat(pa.scalar("click", pa.string()), len(row)),
            doc_vocab.take(pa.array(docs[row, col])),
            pa.array((col + 1).astype(np.int32)),
        ],
        schema=EVENT_SCHEMA,
    )
    return impressions, events


class _SwitchWriter:
    """The writer ``simulate`` appends each chunk to, pointing at one log part at a time."""

    def __init__(self) -> None:
        self.target: Any = None

    def append_table(self, table: pa.Table) -> None:
        self.target.append_table(table)


def simulate_log(
    rankings: Rankings,
    user: User,
    curve: Sequence[int],
    directory: Path,
    *,
    seed: int,
    shuffle_rate: float,
    bundle: str,
    chunk_size: int = 10_000,
) -> list[Path]:
    """Simulate ``curve[-1]`` impressions of ``rankings`` to ``user`` into an event log and return
    one log folder per point of ``curve``: ``directory/part-i`` holds the impressions after
    ``curve[i-1]`` up to ``curve[i]``, ``directory/first-N`` links every part up to N (hard links:
    a prefix costs no space). One query stream runs through all the parts. A finished log (every
    prefix there) is reused; an unfinished one is simulated again from the start."""
    prefixes = [directory / f"first-{n}" for n in curve]
    if all(p.is_dir() for p in prefixes):
        return prefixes
    if any(n % chunk_size for n in curve):
        raise ParamError(f"curve points must be multiples of {chunk_size:,}, got {list(curve)}")
    shutil.rmtree(directory, ignore_errors=True)
    switch = _SwitchWriter()
    chunks = simulate(
        rankings,
        user,
        curve[-1],
        seed=seed,
        shuffle_rate=shuffle_rate,
        chunk_size=chunk_size,
        writer=switch,  # type: ignore[arg-type]  # duck-typed: simulate only calls append_table
        bundle=bundle,
        n_clients=100_000,
    )
    done, parts = 0, []
    for i, upto in enumerate(curve):
        part = directory / f"part-{i}"
        with EventLogWriter(part, flush_rows=1_000_000, flush_seconds=3600) as w:
            switch.target = w
            while done < upto:
                done += len(next(chunks))
        parts.append(part)
        tmp = directory / f".first-{upto}.tmp"
        for p in parts:
            for f in p.rglob("*.parquet"):
                dst = tmp / f.relative_to(p)
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.link(f, dst)
        os.replace(tmp, prefixes[i])
        note(f"click log {bundle}: {upto:,} impressions")
    return prefixes


@dataclass(frozen=True)
class ClickArrays:
    """Clicked pairs as int32 arrays (``q`` rows of the rankings' queries, ``d`` their document
    codes) and what was simulated to get them."""

    q: np.ndarray
    d: np.ndarray
    impressions: int
    clicks: int  # clicks of the impressions counted (> len(q) when the last one's clicks were cut)
    rank_counts: np.ndarray  # clicks kept per rank 1..k
    grade_counts: np.ndarray  # clicks kept per grade 0..max_grade
    query_impressions: np.ndarray  # impressions of each of the rankings' queries


def simulate_click_arrays(
    rankings: Rankings,
    *,
    pairs: int = 10_000_000,
    impressions: int = 0,
    eta: float = 1.0,
    epsilon: float = 0.1,
    exponent: float = 1.0,
    seed: int = 0,
    chunk_size: int = 500_000,
) -> ClickArrays:
    """Simulate position-based users (``eta``, ``epsilon``) on ``rankings``, queries drawn
    Zipf-like (``exponent``), a chunk of ``chunk_size`` impressions at a time until ``pairs``
    clicks (cut to exactly that many; 0: no limit) or ``impressions`` impressions (0: no limit);
    the clicks of each chunk are copied into preallocated (or, by impressions, growing) int32
    arrays, so memory stays about 8 bytes a click plus one chunk's lists."""
    user = PositionBasedUser(max_grade=rankings.max_grade, eta=eta, epsilon=epsilon)
    target = pairs
    limit = impressions or np.iinfo(np.int64).max // 2
    cap = target if target else max(1024, impressions)
    q = np.empty(cap, np.int32)
    d = np.empty(cap, np.int32)
    ranks = np.zeros(rankings.k, np.int64)
    grades = np.zeros(rankings.max_grade + 1, np.int64)
    per_query = np.zeros(len(rankings.query_ids), np.int64)
    n = seen = shown = 0
    for chunk in simulate(rankings, user, limit, seed=seed, exponent=exponent, chunk_size=chunk_size):
        rows, cols = np.nonzero(chunk.clicks)
        take = len(rows) if not target else min(len(rows), target - n)
        # clicks of the impressions kept: all of them, or up to the impression of the last click kept
        seen += len(rows) if take == len(rows) else int(np.sum(rows <= rows[take - 1])) if take else 0
        if n + take > len(q):  # by impressions: grow geometrically
            grow = max(n + take, 2 * len(q))
            q, d = np.resize(q, grow), np.resize(d, grow)
        rows, cols = rows[:take], cols[:take]
        q[n : n + take] = chunk.query[rows]
        d[n : n + take] = chunk.docs[rows, cols]
        ranks += np.bincount(cols, minlength=rankings.k)
        grades += np.bincount(rankings.grades[chunk.query[rows], cols].astype(np.int64), minlength=len(grades))
        n += take
        if target and n >= target:
            last = int(rows[-1]) + 1 if take else 0  # impressions up to the last click kept
            shown += last
            per_query += np.bincount(chunk.query[:last], minlength=len(per_query))
            break
        shown += len(chunk.query)
        per_query += np.bincount(chunk.query, minlength=len(per_query))
    if target and n < target:
        raise ValueError(f"the simulation gave {n:,} clicks in {shown:,} impressions, fewer than {target:,}")
    return ClickArrays(
        q[:n].copy() if n < len(q) else q, d[:n].copy() if n < len(d) else d, shown, seen, ranks, grades, per_query
    )
