"""Team-draft interleaving (Radlinski, Kurup & Joachims 2008, "How does clickthrough data reflect
retrieval quality?", CIKM): `team_draft` / `team_draft_batch` merge two rankings, `credit` gives
each click to the team that contributed the clicked document, and `interleaving_summary`
aggregates impressions into per-query wins, the preference Δ_AB of Chapelle, Joachims, Radlinski &
Yue 2012 ("Large-scale validation and analysis of interleaved search evaluation", TOIS) and a
two-sided binomial sign test.

Pure functions on arrays; the service (``serve A --compare B``) and the click loop wire them to
the event log and to simulated users. Team codes are ``TEAM_A = 0`` and ``TEAM_B = 1``;
``NO_TEAM = -1`` marks empty positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy.stats import binomtest

__all__ = [
    "InterleavingSummary",
    "NO_TEAM",
    "TEAM_A",
    "TEAM_B",
    "credit",
    "interleaving_summary",
    "outcomes",
    "sign_test_p",
    "team_draft",
    "team_draft_batch",
]

TEAM_A = 0
TEAM_B = 1
NO_TEAM = -1


def _rounds(k: int) -> int:
    return (k + 1) // 2


def team_draft(a: Sequence[str], b: Sequence[str], k: int, rng: np.random.Generator) -> tuple[list[str], list[int]]:
    """Team-draft interleaving of rankings ``a`` and ``b`` cut to ``k`` (Radlinski et al. 2008, Alg. 2).

    The list is built in rounds. At the start of each round both teams have contributed equally
    many documents; a fair coin decides which team picks first, then the other picks. A team
    picks its highest-ranked document not already in the list (duplicates are skipped, so a
    document both rankers want goes to whichever picks it first). As in the paper's Algorithm 2,
    the merge stops, before any pick, as soon as either ranking has no document left that is not
    in the list (so the longer ranking never fills the page alone), or at ``k`` documents.

    Randomness: exactly ``ceil(k / 2)`` coins are drawn, up front, as
    ``rng.integers(0, 2, size=ceil(k / 2))``; coin 1 means A picks first in that round. So the
    result depends only on the inputs and the generator's state, and `team_draft_batch` on one
    row with the same generator gives the same list.

    Why it is fair: within a round each team contributes one document and the order is a coin
    toss, so when A and B rank identically a click is equally likely to credit either team
    (the test of this is in tests/clicks/test_online_comparison.py).

    Returns the interleaved document ids and, per position, the team that contributed it
    (`TEAM_A` or `TEAM_B`).
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    coins = rng.integers(0, 2, size=_rounds(k))
    shown: list[str] = []
    teams: list[int] = []
    seen: set[str] = set()
    ia = ib = 0
    for t in range(k):
        while ia < len(a) and a[ia] in seen:
            ia += 1
        while ib < len(b) and b[ib] in seen:
            ib += 1
        if ia == len(a) or ib == len(b):
            break
        first = TEAM_A if coins[t // 2] == 1 else TEAM_B
        team = first if t % 2 == 0 else 1 - first
        doc = a[ia] if team == TEAM_A else b[ib]
        shown.append(doc)
        teams.append(team)
        seen.add(doc)
    return shown, teams


def _advance(lists: np.ndarray, ptr: np.ndarray, shown: np.ndarray) -> np.ndarray:
    """Move each row's pointer past documents already in ``shown`` (rows x positions so far)."""
    if shown.shape[1] == 0:
        return ptr
    width = lists.shape[1]
    ptr = ptr.copy()
    # a pointer sits on the first document not shown before the last pick, so at first only that
    # pick can be a duplicate; after a step any earlier document can be, for the rows that moved
    cur = lists[np.arange(len(ptr)), np.minimum(ptr, width - 1)]
    idx = np.flatnonzero((ptr < width) & (cur >= 0) & (cur == shown[:, -1]))
    while len(idx):
        ptr[idx] += 1
        cur = lists[idx, np.minimum(ptr[idx], width - 1)]
        idx = idx[(ptr[idx] < width) & (cur >= 0) & (shown[idx] == cur[:, None]).any(axis=1)]
    return ptr


def team_draft_batch(a: np.ndarray, b: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`team_draft` for many impressions at once, on integer document codes.

    ``a`` and ``b``: (n, La) and (n, Lb) non-negative document codes, each row one impression's
    ranking, padded on the right with -1. Draws ``rng.integers(0, 2, size=(n, ceil(k / 2)))``
    (row i's coins are row i's rounds, as in `team_draft`). Returns ``ids`` (n, k) int64 and
    ``teams`` (n, k) int8, both -1 where a row's list ended early. The loop runs over the k
    positions; each position is numpy work over all rows.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f"a and b must be (n, L) arrays with the same n, got {a.shape} and {b.shape}")
    n = a.shape[0]
    coins = rng.integers(0, 2, size=(n, _rounds(k)))
    ids = np.full((n, k), -1, dtype=np.int64)
    teams = np.full((n, k), NO_TEAM, dtype=np.int8)
    if a.shape[1] == 0 or b.shape[1] == 0:
        return ids, teams
    rows = np.arange(n)
    pa = np.zeros(n, dtype=np.int64)
    pb = np.zeros(n, dtype=np.int64)
    active = np.ones(n, dtype=bool)
    for t in range(k):
        pa = _advance(a, pa, ids[:, :t])
        pb = _advance(b, pb, ids[:, :t])
        ca = a[rows, np.minimum(pa, a.shape[1] - 1)]
        cb = b[rows, np.minimum(pb, b.shape[1] - 1)]
        active &= (pa < a.shape[1]) & (ca >= 0) & (pb < b.shape[1]) & (cb >= 0)
        if not active.any():
            break
        first = np.where(coins[:, t // 2] == 1, TEAM_A, TEAM_B)
        team = first if t % 2 == 0 else 1 - first
        ids[active, t] = np.where(team == TEAM_A, ca, cb)[active]
        teams[active, t] = team[active]
    return ids, teams


def credit(teams: np.ndarray, clicks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clicks credited to A and to B per impression: a click on a document credits the team that
    contributed it (Radlinski et al. 2008).

    ``teams``: (n, k) or (k,) team codes per position (-1 = empty); ``clicks``: same shape, bool
    or click counts (a document clicked twice counts twice). Clicks on empty positions count for
    nobody. Returns two int64 arrays of length n (a scalar impression gives arrays of length 1).
    """
    t = np.atleast_2d(np.asarray(teams))
    c = np.atleast_2d(np.asarray(clicks)).astype(np.int64)
    if t.shape != c.shape:
        raise ValueError(f"teams and clicks must have the same shape, got {t.shape} and {c.shape}")
    return (c * (t == TEAM_A)).sum(axis=1), (c * (t == TEAM_B)).sum(axis=1)


def outcomes(clicks_a: np.ndarray, clicks_b: np.ndarray) -> np.ndarray:
    """Per impression +1 (A wins: more clicks credited to A), -1 (B wins) or 0 (tie, including
    impressions without clicks), int8."""
    return np.sign(np.asarray(clicks_a, dtype=np.int64) - np.asarray(clicks_b, dtype=np.int64)).astype(np.int8)


def sign_test_p(wins_a: int, wins_b: int) -> float:
    """Two-sided binomial sign test of wins_a vs wins_b under H0 P(A wins | not tied) = 1/2
    (scipy.stats.binomtest); 1.0 when there is nothing to test."""
    n = int(wins_a) + int(wins_b)
    return 1.0 if n == 0 else float(binomtest(int(wins_a), n, 0.5).pvalue)


@dataclass(frozen=True)
class InterleavingSummary:
    """Interleaving outcome over impressions (see `interleaving_summary` for the definitions)."""

    n_impressions: int
    n_clicked: int
    wins_a: int
    wins_b: int
    ties: int
    delta: float
    p_value: float
    per_query: dict[str, tuple[int, int, int]]
    query_wins_a: int
    query_wins_b: int
    query_ties: int
    query_p_value: float
    bootstrap_ci: tuple[float, float] | None = None
    bootstrap_p: float | None = None

    @property
    def winner(self) -> Literal["A", "B", "tie"]:
        """The ranker preferred by Δ_AB (without regard to significance)."""
        return "A" if self.delta > 0 else "B" if self.delta < 0 else "tie"

    def to_markdown(self, a: str = "A", b: str = "B") -> str:
        """One-row table (``a`` vs ``b``) with a footnote defining the columns."""
        header = ["Comparison", "Impressions", "With clicks", f"{a} wins", f"{b} wins", "Ties", "Δ_AB", "p"]
        header += [f"Queries won {a} / {b} / tied", "p (queries)"]
        row = [f"{a} vs {b}", f"{self.n_impressions:,}", f"{self.n_clicked:,}", f"{self.wins_a:,}"]
        row += [f"{self.wins_b:,}", f"{self.ties:,}", f"{self.delta:+.4f}", f"{self.p_value:.3g}"]
        row += [f"{self.query_wins_a:,} / {self.query_wins_b:,} / {self.query_ties:,}", f"{self.query_p_value:.3g}"]
        if self.bootstrap_ci is not None:
            header += ["Δ_AB interval (query bootstrap)", "p (bootstrap)"]
            row += [f"{self.bootstrap_ci[0]:+.4f} – {self.bootstrap_ci[1]:+.4f}", f"{self.bootstrap_p:.3g}"]
        lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1), "| " + " | ".join(row) + " |"]
        note = (
            "Team-draft interleaving (Radlinski et al. 2008): a click credits the ranker that contributed "
            "the document; an impression with clicks is won by the ranker with more credited clicks. "
            "Δ_AB = (wins + ties / 2) / impressions with clicks − 0.5 (Chapelle et al. 2012), > 0 when "
            f"{a} is preferred; p: two-sided binomial sign test over non-tied impressions; queries are won "
            "by the ranker with more impression wins, p (queries): sign test over non-tied queries."
        )
        return "\n".join(lines) + "\n\n" + note + "\n"

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "per_query"}
        d["per_query"] = {q: {"wins_a": w[0], "wins_b": w[1], "ties": w[2]} for q, w in self.per_query.items()}
        return d


def _delta(wins_a: np.ndarray | float, ties: np.ndarray | float, clicked: np.ndarray | float) -> Any:
    with np.errstate(invalid="ignore", divide="ignore"):
        d = (np.asarray(wins_a, dtype=np.float64) + 0.5 * np.asarray(ties)) / np.asarray(clicked) - 0.5
    return np.where(np.asarray(clicked) > 0, d, 0.0)


def interleaving_summary(
    clicks_a: np.ndarray,
    clicks_b: np.ndarray,
    queries: Sequence[str] | np.ndarray | None = None,
    *,
    bootstrap: int = 0,
    rng: np.random.Generator | None = None,
    confidence: float = 0.95,
) -> InterleavingSummary:
    """Aggregate interleaved impressions (credited clicks per impression, from `credit`).

    * An impression with clicks is a win for A when A's credited clicks exceed B's, a win for B
      in the reverse case, a tie otherwise. Impressions without clicks express no preference and
      are left out of everything but ``n_impressions``, as in Chapelle et al. 2012.
    * ``delta`` = Δ_AB = (wins_A + ties / 2) / (wins_A + wins_B + ties) − 0.5 (Chapelle et al.
      2012): in [−0.5, 0.5], > 0 when A is preferred.
    * ``p_value``: two-sided binomial sign test of wins_A against wins_B over the non-tied
      impressions (scipy.stats.binomtest, H0: each non-tied impression is won by A with
      probability 1/2, which holds when A and B are equally good because team-draft is fair).
      Impressions are treated as independent; when a few queries dominate the traffic, the
      per-query aggregates below are the more conservative view.
    * ``per_query``: query -> (wins_A, wins_B, ties) over its impressions with clicks. A query is
      won by the ranker with more impression wins (Radlinski et al. 2008 aggregate per query the
      same way); ``query_p_value`` is the sign test over the non-tied queries.
    * ``bootstrap_ci`` and ``bootstrap_p``: the query bootstrap resamples queries with
      replacement (their impressions travel together, so correlation within a query is kept) and
      reports the percentile interval of Δ_AB and a two-sided bootstrap p: twice the smaller
      share of resampled Δ_AB at or below / at or above 0, capped at 1.

    Everything is counted with numpy over the arrays.

    Args:
        clicks_a: clicks credited to A per impression, 1-D.
        clicks_b: clicks credited to B per impression, 1-D, as long as ``clicks_a``.
        queries: each impression's query (None: all impressions belong to one query "").
        bootstrap: how many times the query bootstrap resamples (0: no bootstrap, its fields None).
        rng: the bootstrap's random generator (None: ``np.random.default_rng(0)``).
        confidence: the bootstrap interval's confidence level, in (0, 1).

    Returns:
        The ``InterleavingSummary`` with the fields above.

    Raises:
        ValueError: ``clicks_a``, ``clicks_b`` and ``queries`` are not 1-D with one entry per impression.
    """
    ca = np.asarray(clicks_a, dtype=np.int64)
    cb = np.asarray(clicks_b, dtype=np.int64)
    if ca.shape != cb.shape or ca.ndim != 1:
        raise ValueError(f"clicks_a and clicks_b must be 1-D of the same length, got {ca.shape} and {cb.shape}")
    n = ca.shape[0]
    qs = np.zeros(n, dtype=np.int64) if queries is None else np.asarray(queries)
    if qs.shape != (n,):
        raise ValueError(f"queries must have one entry per impression ({n}), got shape {qs.shape}")
    names, inverse = np.unique(qs, return_inverse=True)
    if queries is None:
        names = np.array([""])
    o = outcomes(ca, cb)
    clicked = (ca + cb) > 0
    nq = len(names)
    qa = np.bincount(inverse, weights=o == 1, minlength=nq).astype(np.int64)
    qb = np.bincount(inverse, weights=o == -1, minlength=nq).astype(np.int64)
    qt = np.bincount(inverse, weights=clicked & (o == 0), minlength=nq).astype(np.int64)
    wins_a, wins_b, ties = int(qa.sum()), int(qb.sum()), int(qt.sum())
    n_clicked = wins_a + wins_b + ties
    query_a, query_b = int((qa > qb).sum()), int((qb > qa).sum())
    query_t = int(((qa == qb) & (qa + qb + qt > 0)).sum())
    boot_ci: tuple[float, float] | None = None
    boot_p: float | None = None
    if bootstrap > 0:
        gen = rng if rng is not None else np.random.default_rng(0)
        qc = qa + qb + qt
        deltas = np.empty(bootstrap)
        chunk = max(1, 2_000_000 // max(nq, 1))
        for s in range(0, bootstrap, chunk):
            m = min(chunk, bootstrap - s)
            w = gen.multinomial(nq, np.full(nq, 1.0 / nq), size=m)
            deltas[s : s + m] = _delta(w @ qa, w @ qt, w @ qc)
        tail = (1.0 - confidence) / 2.0
        lo, hi = np.quantile(deltas, [tail, 1.0 - tail])
        boot_ci = (float(lo), float(hi))
        boot_p = float(min(1.0, 2.0 * min((deltas <= 0).mean(), (deltas >= 0).mean())))
    return InterleavingSummary(
        n_impressions=n,
        n_clicked=n_clicked,
        wins_a=wins_a,
        wins_b=wins_b,
        ties=ties,
        delta=float(_delta(wins_a, ties, n_clicked)),
        p_value=sign_test_p(wins_a, wins_b),
        per_query={str(q): (int(x), int(y), int(z)) for q, x, y, z in zip(names, qa, qb, qt) if x + y + z > 0},
        query_wins_a=query_a,
        query_wins_b=query_b,
        query_ties=query_t,
        query_p_value=sign_test_p(query_a, query_b),
        bootstrap_ci=boot_ci,
        bootstrap_p=boot_p,
    )
