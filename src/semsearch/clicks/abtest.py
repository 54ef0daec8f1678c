"""A/B buckets in the 2020 semantic-retrieval paper's Table 7 layout (two control and two
experiment buckets of live traffic, clicked-search rate per bucket): `bucket_of` hashes a user key
to a bucket, `ab_table` gives the rate per bucket on all, head and tail queries with Wilson
intervals and tests of experiment against control (two-proportion z-test over searches, and
`clustered_rate_test` over users), as an `ABTable` with a Markdown rendering.

Pure functions on arrays; the service (``serve A --compare B``) and the A/B simulations wire them
to the event log and to simulated users.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import norm

__all__ = [
    "ABComparison",
    "ABTable",
    "BucketLayout",
    "DEFAULT_SALT",
    "Rate",
    "SEGMENTS",
    "ab_table",
    "bucket_of",
    "clustered_rate_test",
    "head_queries",
    "two_proportion_ztest",
    "wilson_interval",
]

DEFAULT_SALT = "semsearch-ab"


def bucket_of(keys: Sequence[str] | np.ndarray, n_buckets: int = 4, salt: str = DEFAULT_SALT) -> np.ndarray:
    """Bucket of each user key: the first 8 bytes of BLAKE2b(salt + NUL + key), as an unsigned
    big-endian integer, mod ``n_buckets`` (int64 array).

    Stable: the same key, salt and number of buckets give the same bucket on every machine and
    run (no process-seeded ``hash()``); a new salt reshuffles users for a new experiment. The
    64-bit digest is uniform, so buckets are balanced up to a bias of n_buckets / 2^64. Each
    distinct key is hashed once."""
    if n_buckets < 1:
        raise ValueError(f"n_buckets must be >= 1, got {n_buckets}")
    names, inverse = np.unique(np.asarray(keys, dtype=str), return_inverse=True)
    prefix = salt.encode() + b"\0"
    digests = np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(prefix + str(k).encode(), digest_size=8).digest(), "big") % n_buckets
            for k in names
        ),
        dtype=np.int64,
        count=len(names),
    )
    return digests[inverse.reshape(-1)]


def head_queries(queries: Sequence[str] | np.ndarray, share: float = 0.5) -> set[str]:
    """The head: the most frequent queries, taken in order of frequency (ties by query string),
    until they cover at least ``share`` of all searches; the rest is the tail. So with
    ``share=0.5`` the head is the smallest set of top queries making up half the traffic."""
    if not 0 <= share <= 1:
        raise ValueError(f"share must be in [0, 1], got {share}")
    names, counts = np.unique(np.asarray(queries, dtype=str), return_counts=True)
    if len(names) == 0 or share == 0:
        return set()
    order = np.lexsort((names, -counts))  # count descending, then query ascending
    covered = np.cumsum(counts[order])
    n_head = int(np.searchsorted(covered, share * covered[-1] - 1e-9)) + 1
    return {str(q) for q in names[order[:n_head]]}


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson 1927; Agresti & Coull 1998):
    (p̂ + z²/2n ± z √(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n), with z the two-sided normal quantile.
    Unlike the Wald interval it stays inside [0, 1] and covers well near 0 and 1. (0, 1) for n = 0."""
    if n == 0:
        return 0.0, 1.0
    z = float(norm.isf((1 - confidence) / 2))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # at p̂ = 0 (p̂ = 1) the lower (upper) bound is exactly 0 (1); say so rather than round
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def clustered_rate_test(
    clicked: np.ndarray, users: np.ndarray, control: np.ndarray, experiment: np.ndarray
) -> tuple[float, float]:
    """Experiment vs control clicked-search rate with users, the unit of randomisation, as the
    unit of analysis: a user's searches share the user's habits, so they are not independent
    and the search-level z-test understates the variance when users search several times.

    Each arm's rate R = Σ_u x_u / Σ_u n_u (x_u clicked searches, n_u searches of user u in the
    arm) gets the delta-method variance of a ratio of means, Var(R) ≈ s²(x_u − R n_u) / (N n̄²)
    over the arm's N users (Deng, Knoblich & Lu 2018, "Applying the delta method in metric
    analytics", KDD); z = (R_e − R_c) / √(Var_e + Var_c), two-sided normal p. ``users``: an
    integer code per search; ``control``/``experiment``: bool masks of the searches. Returns
    (z, p); (0, 1) when an arm has fewer than two users or no variance."""
    c = np.asarray(clicked, dtype=np.float64)
    u = np.asarray(users)

    def arm(sel: np.ndarray) -> tuple[float, float]:
        _, inv = np.unique(u[sel], return_inverse=True)
        x = np.bincount(inv.reshape(-1), weights=c[sel])
        n = np.bincount(inv.reshape(-1)).astype(np.float64)
        if len(n) < 2:
            return 0.0, math.inf
        r = float(x.sum() / n.sum())
        return r, float((x - r * n).var(ddof=1) / (len(n) * n.mean() ** 2))

    (rc, vc), (re, ve) = arm(np.asarray(control, dtype=bool)), arm(np.asarray(experiment, dtype=bool))
    se = math.sqrt(vc + ve)
    if not 0 < se < math.inf:
        return 0.0, 1.0
    z = (re - rc) / se
    return z, float(2 * norm.sf(abs(z)))


def two_proportion_ztest(x_control: int, n_control: int, x_experiment: int, n_experiment: int) -> tuple[float, float]:
    """Two-sided two-proportion z-test with the pooled rate: z = (p_e − p_c) / √(p (1 − p)
    (1/n_c + 1/n_e)). Returns (z, p); (0, 1) when a group is empty or the pooled rate is 0 or 1."""
    if n_control == 0 or n_experiment == 0:
        return 0.0, 1.0
    pooled = (x_control + x_experiment) / (n_control + n_experiment)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_control + 1 / n_experiment))
    if se == 0:
        return 0.0, 1.0
    z = (x_experiment / n_experiment - x_control / n_control) / se
    return z, float(2 * norm.sf(abs(z)))


@dataclass(frozen=True)
class BucketLayout:
    """How user keys map to buckets and which buckets are control and which experiment. The
    default is the 2020 paper's Table 7: four buckets, two control, two experiment."""

    n_buckets: int = 4
    control: tuple[int, ...] = (0, 1)
    experiment: tuple[int, ...] = (2, 3)
    salt: str = DEFAULT_SALT

    def __post_init__(self) -> None:
        used = self.control + self.experiment
        if len(set(used)) != len(used) or not all(0 <= b < self.n_buckets for b in used):
            raise ValueError(f"control {self.control} and experiment {self.experiment} must be distinct buckets")
        if not self.control or not self.experiment:
            raise ValueError("need at least one control and one experiment bucket")

    def name(self, bucket: int) -> str:
        """``control 1``, ``control 2``, ``experiment 1``, ...; ``unused 4`` for the others."""
        for role, group in (("control", self.control), ("experiment", self.experiment)):
            if bucket in group:
                return f"{role} {group.index(bucket) + 1}"
        return f"unused {bucket}"

    def arm(self, keys: Sequence[str] | np.ndarray) -> np.ndarray:
        """Per key 0 (control), 1 (experiment) or -1 (a bucket in neither): which ranker serves it."""
        b = bucket_of(keys, self.n_buckets, self.salt)
        out = np.full(b.shape, -1, dtype=np.int8)
        out[np.isin(b, self.control)] = 0
        out[np.isin(b, self.experiment)] = 1
        return out


SEGMENTS = ("all", "head", "tail")


@dataclass(frozen=True)
class Rate:
    """Clicked-search rate of a group of searches, with its Wilson interval."""

    searches: int
    clicked: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.clicked / self.searches if self.searches else 0.0

    @classmethod
    def of(cls, clicked: int, searches: int, confidence: float) -> Rate:
        return cls(searches, clicked, *wilson_interval(clicked, searches, confidence))


@dataclass(frozen=True)
class ABComparison:
    """Experiment vs control (or control 1 vs control 2, the A/A check) on one segment:
    difference and relative lift of the clicked-search rate; ``z`` and ``p`` of the pooled
    two-proportion z-test with searches as the unit, ``z_users`` and ``p_users`` of the same
    difference with users as the unit (`clustered_rate_test`)."""

    segment: str
    label: str
    control: Rate
    experiment: Rate
    z: float
    p: float
    z_users: float = 0.0
    p_users: float = 1.0

    @property
    def difference(self) -> float:
        return self.experiment.rate - self.control.rate

    @property
    def lift(self) -> float:
        return self.difference / self.control.rate if self.control.rate else math.inf


@dataclass(frozen=True)
class ABTable:
    """Clicked-search rate per bucket and segment (all / head / tail queries) and the tests; the
    2020 paper's Table 7 layout with head and tail columns added. Render with `to_markdown`."""

    layout: BucketLayout
    rows: dict[str, dict[str, Rate]]
    comparisons: tuple[ABComparison, ...]
    head_share: float
    n_head_queries: int
    n_queries: int
    confidence: float

    def to_markdown(self) -> str:
        """Rows = buckets then the pooled arms, columns = clicked-search rate (%) with its
        interval per segment; then the tests and a footnote with the definitions."""
        pct = round(self.confidence * 100)
        header = ["Bucket", "Searches"]
        for seg in SEGMENTS:
            name = "Clicked-search rate" if seg == "all" else f"{seg.capitalize()} queries"
            header += [name, f"{pct} % CI"]
        lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
        for label, cells in self.rows.items():
            row = [label, f"{cells['all'].searches:,}"]
            for seg in SEGMENTS:
                r = cells[seg]
                row += [f"{100 * r.rate:.2f} %", f"{100 * r.low:.2f}–{100 * r.high:.2f}"]
            lines.append("| " + " | ".join(row) + " |")
        tests = [
            "| Test | Segment | Δ rate (points) | Lift | z | p | z (users) | p (users) |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for c in self.comparisons:
            test = [c.label, c.segment, f"{100 * c.difference:+.2f}", f"{100 * c.lift:+.2f} %", f"{c.z:.2f}"]
            test += [f"{c.p:.3g}", f"{c.z_users:.2f}", f"{c.p_users:.3g}"]
            tests.append("| " + " | ".join(test) + " |")
        note = (
            "Clicked-search rate: share of searches with at least one click; intervals are Wilson score "
            f"intervals at {pct} %. Head: the most frequent queries (ties by query) that together make up "
            f"{100 * self.head_share:g} % of all searches ({self.n_head_queries:,} of {self.n_queries:,} "
            "distinct queries); tail: the rest. Tests, experiment buckets pooled against control buckets "
            "pooled and the control buckets against each other (A/A): two-sided two-proportion z-test "
            "(pooled) with searches as the unit, and with users as the unit (delta method, per-user "
            "clicked and total searches), which allows for searches of one user being alike. "
            f"Users are assigned by BLAKE2b of their key with salt {self.layout.salt!r} "
            f"mod {self.layout.n_buckets}."
        )
        return "\n".join(lines) + "\n\n" + "\n".join(tests) + "\n\n" + note + "\n"

    def to_json(self) -> dict[str, Any]:
        def rate(r: Rate) -> dict[str, Any]:
            return {"searches": r.searches, "clicked": r.clicked, "rate": r.rate, "low": r.low, "high": r.high}

        return {
            "layout": {
                "n_buckets": self.layout.n_buckets,
                "control": list(self.layout.control),
                "experiment": list(self.layout.experiment),
                "salt": self.layout.salt,
            },
            "confidence": self.confidence,
            "head_share": self.head_share,
            "n_head_queries": self.n_head_queries,
            "n_queries": self.n_queries,
            "rows": {label: {s: rate(r) for s, r in cells.items()} for label, cells in self.rows.items()},
            "comparisons": [
                {
                    "label": c.label,
                    "segment": c.segment,
                    "control": rate(c.control),
                    "experiment": rate(c.experiment),
                    "difference": c.difference,
                    "lift": c.lift,
                    "z": c.z,
                    "p": c.p,
                    "z_users": c.z_users,
                    "p_users": c.p_users,
                }
                for c in self.comparisons
            ],
        }


def ab_table(
    user_keys: Sequence[str] | np.ndarray,
    queries: Sequence[str] | np.ndarray,
    clicks: np.ndarray,
    layout: BucketLayout | None = None,
    *,
    head_share: float = 0.5,
    confidence: float = 0.95,
) -> ABTable:
    """The A/B table of a search log: one entry per search, with the user's key, the query and its clicks.

    Per bucket, and pooled per arm, the clicked-search rate (share of searches with at least one
    click; the 2020 paper's Table 7 metric) with Wilson intervals, on all searches, head queries
    and tail queries (`head_queries` over the whole log, so the split is the same in every
    bucket). Comparisons: experiment arm vs control arm on each segment, and control 1 vs
    control 2 (an A/A check: with a sound assignment and a valid test it is significant in
    about 5 % of logs) when there are two or more control buckets; each by the search-level
    `two_proportion_ztest` and by the user-level `clustered_rate_test`, the one to trust when
    users search several times. Searches of unused buckets are left out.

    Args:
        user_keys: each search's user key, bucketed by `bucket_of` with the layout's salt.
        queries: each search's query.
        clicks: each search's number of clicks (or a bool: clicked).
        layout: the buckets and which are control and experiment (None: ``BucketLayout()``).
        head_share: the share of all searches the head queries make up (`head_queries`), in [0, 1].
        confidence: the Wilson intervals' confidence level, in (0, 1).

    Returns:
        The ``ABTable`` of rates and tests.

    Raises:
        ValueError: ``user_keys``, ``queries`` and ``clicks`` differ in length, or ``head_share`` is out of [0, 1].
    """
    lay = layout if layout is not None else BucketLayout()
    qs = np.asarray(queries, dtype=str)
    clicked = np.asarray(clicks) > 0
    if len(qs) != len(clicked) or len(user_keys) != len(clicked):
        raise ValueError(
            f"user_keys, queries and clicks need one entry per search, got {len(user_keys)}, {len(qs)}, {len(clicked)}"
        )
    bucket = bucket_of(user_keys, lay.n_buckets, lay.salt)
    head = head_queries(qs, head_share)
    is_head = np.isin(qs, np.array(sorted(head), dtype=str))
    masks = {"all": np.ones(len(qs), dtype=bool), "head": is_head, "tail": ~is_head}

    def rates(sel: np.ndarray) -> dict[str, Rate]:
        return {s: Rate.of(int((clicked & sel & m).sum()), int((sel & m).sum()), confidence) for s, m in masks.items()}

    rows = {lay.name(b): rates(bucket == b) for b in lay.control + lay.experiment}
    arms = {"control": np.isin(bucket, lay.control), "experiment": np.isin(bucket, lay.experiment)}
    if len(lay.control) > 1 or len(lay.experiment) > 1:
        rows.update({f"{arm} (all)": rates(sel) for arm, sel in arms.items()})
    ctrl, exp = rates(arms["control"]), rates(arms["experiment"])
    _, users = np.unique(np.asarray(user_keys, dtype=str), return_inverse=True)
    users = users.reshape(-1)
    comps = []
    for s in SEGMENTS:
        z, p = two_proportion_ztest(ctrl[s].clicked, ctrl[s].searches, exp[s].clicked, exp[s].searches)
        zu, pu = clustered_rate_test(clicked, users, arms["control"] & masks[s], arms["experiment"] & masks[s])
        comps.append(ABComparison(s, "experiment vs control", ctrl[s], exp[s], z, p, zu, pu))
    if len(lay.control) > 1:
        b1, b2 = lay.control[0], lay.control[1]
        c1, c2 = rows[lay.name(b1)]["all"], rows[lay.name(b2)]["all"]
        z, p = two_proportion_ztest(c1.clicked, c1.searches, c2.clicked, c2.searches)
        zu, pu = clustered_rate_test(clicked, users, bucket == b1, bucket == b2)
        comps.append(ABComparison("all", "control 2 vs control 1 (A/A)", c1, c2, z, p, zu, pu))
    return ABTable(lay, rows, tuple(comps), head_share, len(head), int(len(np.unique(qs))), confidence)
