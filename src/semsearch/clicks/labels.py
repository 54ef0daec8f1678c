"""Labels for learners from a click log: the event log's sessions (``clicks.sessions.Sessions``)
turned into the training data the trainers take, with the position bias in clicks corrected or not.

Clicks are biased by position: under the position-based model (PBM; Joachims, Swaminathan &
Schnabel 2017, "Unbiased Learning-to-Rank with Biased Feedback"; Wang et al. 2018, "Position Bias
Estimation for Unbiased Learning to Rank in Personal Search") a document shown at rank r is
clicked with probability θ_r · α_qd, the examination propensity θ_r times its attractiveness. Raw
click-through rates therefore favour whatever the logging ranker put on top. Two corrections:

- **Inverse propensity weighting** (``ipw``, Joachims et al. 2017, Wang et al. 2018): a click at
  rank r counts 1 / θ_r (relative to rank 1, clipped at ``max_weight``: the clipped IPS estimator,
  which trades a little bias for bounded variance). Then E[Σ clicks / θ_r] / impressions = θ_1 α_qd
  for every rank the pair was shown at, so the corrected rate orders pairs by attractiveness
  whatever rank the logger gave them. The propensities are given, or fitted from the log by
  `clicks.models.PBM` (EM, ``examination_rank1=1.0``: relative propensities). A PBM fitted from a log
  identifies θ only through (query, document) pairs seen at more than one rank (the likelihood
  is unchanged by (θc, α/c) otherwise), so a log of a deterministic logger without randomisation
  cannot give them: `examination_propensities` refuses such a log rather than return arbitrary values.
- **LightGBM's position-debiased lambdarank** (``lightgbm``, LightGBM ≥ 4.1, the ``position``
  array of a Dataset): the score of a training row is split into f(x) + g(position), a
  generalised additive model fitted by lambdarank, with g absorbing what position explains of the
  labels and f, the model kept, what the features explain (the two-tower idea of "Towards
  Disentangling Relevance and Bias in Unbiased Learning to Rank", Zhang et al. 2023, in LightGBM's
  pairwise lambdarank; ``lambdarank_position_bias_regularization`` shrinks g). The labels are the
  raw click-through rates, each row carrying the rank it was shown at; stage-1 candidates the
  logger never showed carry one more position (never examined), so g, not f, explains their lack
  of clicks.
- ``none``: raw click-through rates, for comparison.

`click_pairs` gives the pair models (DSSM, CLSM, BERT(rep), ...) one positive per click (or, with
propensities, 1 / θ_r positives by seeded stochastic rounding, so that a click at rank 10 weighs
what an expected ten clicks at rank 1 do). `click_judgments` gives the stage-2 ranker graded
(query, document) labels: the corrected or raw click-through rate of each shown pair, in
``levels`` equal bins of [0, 1] (LightGBM's lambdarank takes integer labels); given the log's
clients (`clicks.trust.ClientActivity`), it counts each client once per pair with a bounded
weight and sets aside the clients no person could be (`clicks.trust.TrustPolicy`), and says how
many (`ClickJudgments.trust`). `click_grades` grades simulated clicks (no log written) as
`click_judgments` grades raw ones.

Everything is numpy over the sessions' arrays (the log itself is joined by DuckDB in
``read_sessions``): no Python loop over log lines; the per-pair mappings are built over the distinct
(query, document) pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..data import TrainingData
from ..data.beir import Corpus, Fields
from ..data.training import PairList
from ..types import Qrels
from .models import PBM, shown_mask
from .sessions import Sessions
from .simulate import ClickArrays, Rankings
from .trust import ClientActivity, TrustPolicy, TrustReport, assess, report, trusted_rows

Debias = Literal["none", "lightgbm", "ipw"]
DEBIAS: tuple[str, ...] = ("none", "lightgbm", "ipw")

MIN_IDENTIFIED = 0.01
"""The least share of shown (query, document) pairs seen at two ranks or more for which the
examination propensities are fitted from the log (below it they are not identified)."""


def _check_sessions(sessions: Sessions) -> None:
    if len(sessions) == 0:
        raise ValueError("the click log has no impressions")
    if not sessions.clicks.any():
        raise ValueError(f"the click log has {len(sessions):,} impressions but no clicks: nothing to learn from")


def corpus_codes(sessions: Sessions, doc_ids: Sequence[str], *, where: str = "the click log") -> np.ndarray:
    """Each of the log's documents' position in ``doc_ids`` (int32 per ``sessions.doc_ids``); a
    document the collection lacks is an error naming how many and the first few."""
    codes = pc.index_in(pa.array(sessions.doc_ids, pa.string()), value_set=pa.array(list(doc_ids), pa.string()))
    out = pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(np.int32)
    missing = np.flatnonzero(out < 0)
    if len(missing):
        shown = ", ".join(repr(sessions.doc_ids[i]) for i in missing[:3])
        raise ValueError(
            f"{where} shows {len(missing):,} of its {len(out):,} documents that are not in the collection "
            f"({shown}{', ...' if len(missing) > 3 else ''}): was it logged over another collection?"
        )
    return out


def identified_share(sessions: Sessions) -> float:
    """The share of the shown (query, document) pairs seen at two ranks or more: where a PBM fitted
    to the log learns the examination propensities from (0 for a deterministic logger)."""
    mask = shown_mask(sessions)
    rows, cols = np.nonzero(mask)
    if not len(rows):
        return 0.0
    key = sessions.query[rows].astype(np.int64) * max(len(sessions.doc_ids), 1) + sessions.docs[rows, cols]
    pair_rank = np.unique(key * sessions.positions + cols)
    ranks_per_pair = np.unique(pair_rank // sessions.positions, return_counts=True)[1]
    return float(np.mean(ranks_per_pair > 1))


def examination_propensities(sessions: Sessions, given: Sequence[float] | None = None) -> np.ndarray:
    """Relative examination propensities θ_r / θ_1 for ranks 1..``sessions.positions``: ``given``
    (rescaled so rank 1 is 1), or a PBM's fitted by EM to the log (``examination_rank1=1.0``).

    Raises:
        ValueError: ``given`` has too few ranks or a value outside (0, 1] after rescaling, or (fitted)
            fewer than ``MIN_IDENTIFIED`` of the shown pairs are seen at two ranks or more."""
    k = sessions.positions
    if given:
        p = np.asarray(list(given), dtype=np.float64)
        if len(p) < k or not np.all(p > 0):
            raise ValueError(f"propensities: one value > 0 per rank 1..{k} is needed, got {list(given)}")
        p = p[:k] / p[0]
        if np.any(p > 1 + 1e-9):
            raise ValueError(f"propensities: rank 1 must be the most examined, got {list(given)}")
        return p
    _check_sessions(sessions)
    share = identified_share(sessions)
    if share < MIN_IDENTIFIED:
        raise ValueError(
            f"the click log shows {100 * (1 - share):.1f} % of its (query, document) pairs at one rank only, "
            "so the position bias cannot be fitted from it (a PBM identifies the examination propensities "
            "from pairs seen at several ranks): give the propensities (propensities=[...], one per rank), "
            "log with some randomisation (shuffled lists), or debias with LightGBM's position-aware lambdarank"
        )
    theta = PBM(examination_rank1=1.0).fit(sessions).examination
    return np.clip(np.asarray(theta, dtype=np.float64), 1e-6, 1.0)


def click_weights(cols: np.ndarray, prop: np.ndarray | None, max_weight: float) -> np.ndarray:
    """A click at 0-based rank ``cols``'s weight: 1 (no propensities) or min(1 / θ_r, max_weight)."""
    if prop is None:
        return np.ones(len(cols))
    return np.minimum(1.0 / prop[cols], max_weight)


def click_pairs(
    sessions: Sessions,
    corpus: Corpus,
    *,
    fields: Fields = "title",
    propensities: Sequence[float] | np.ndarray | None = None,
    max_weight: float = 10.0,
    seed: int = 0,
) -> TrainingData:
    """Clicked (query, document) pairs as `TrainingData` for the pair models: every click is a
    positive (a pair clicked n times is n positives, as in the click-trained DSSM and CLSM). With
    ``propensities`` (relative, per rank: `examination_propensities`), a click at rank r is repeated
    ⌊w⌋ or ⌈w⌉ times, w = min(1 / θ_r, ``max_weight``), ⌈w⌉ with probability w − ⌊w⌋ (seeded), so
    its expected count is its inverse-propensity weight. The pool is the whole corpus; the
    queries are the log's query texts (ids ``c0``, ``c1``, ... in ``sessions.queries`` order).

    Raises:
        ValueError: the log has no impressions or no clicks, or shows documents the corpus lacks."""
    if max_weight < 1:
        raise ValueError(f"max_weight must be >= 1, got {max_weight}")
    codes = corpus_codes(sessions, corpus.ids)
    _check_sessions(sessions)
    rows, cols = np.nonzero(sessions.clicks)
    q = sessions.query[rows].astype(np.int32)
    d = codes[sessions.docs[rows, cols]]
    if propensities is not None:
        w = click_weights(cols, np.asarray(propensities, dtype=np.float64), max_weight)
        rng = np.random.default_rng(seed)
        times = np.floor(w).astype(np.int64) + (rng.random(len(w)) < w - np.floor(w))
        q, d = np.repeat(q, times), np.repeat(d, times)
    qids = [f"c{i}" for i in range(len(sessions.queries))]
    return TrainingData(
        dict(zip(qids, sessions.queries)), corpus.ids, corpus.joined(fields), PairList(qids, corpus.ids, q, d)
    )


@dataclass(frozen=True)
class ClickJudgments:
    """Graded (query, document) labels from a click log, for a ranker: ``qrels[qid][doc]`` the
    grade of each shown pair, ``positions[qid][doc]`` the 1-based rank it was most often shown at
    (for ``lightgbm``), ``unshown`` the position given to candidates never shown (one past the
    log's last), ``queries`` the query texts by id, ``impressions`` and ``clicks`` the whole log's,
    ``trust`` what the client policy set aside (None: the log's clients were not given, every
    impression counted)."""

    queries: dict[str, str]
    qrels: Qrels
    positions: dict[str, dict[str, int]]
    unshown: int
    debias: str
    propensities: list[float] | None
    impressions: int
    clicks: int
    trust: TrustReport | None = None

    def split(self, dev_share: float, seed: int = 0) -> tuple[ClickJudgments, ClickJudgments]:
        """(train, dev): a seeded ``dev_share`` of the queries (at least one, and one left to train on) held out."""
        qids = sorted(self.qrels)
        if len(qids) < 2:
            raise ValueError(f"the click log has clicked pairs for {len(qids)} query; at least 2 are needed")
        n_dev = min(max(1, round(dev_share * len(qids))), len(qids) - 1)
        dev = set(np.random.default_rng(seed).permutation(len(qids))[:n_dev].tolist())
        parts = []
        for take in (lambda i: i not in dev, lambda i: i in dev):
            keep = [q for i, q in enumerate(qids) if take(i)]
            parts.append(
                ClickJudgments(
                    {q: self.queries[q] for q in keep},
                    {q: self.qrels[q] for q in keep},
                    {q: self.positions[q] for q in keep if q in self.positions},
                    self.unshown,
                    self.debias,
                    self.propensities,
                    self.impressions,
                    self.clicks,
                    self.trust,
                )
            )
        return parts[0], parts[1]


def click_judgments(
    sessions: Sessions,
    *,
    debias: Debias = "lightgbm",
    propensities: Sequence[float] | np.ndarray | None = None,
    levels: int = 5,
    max_weight: float = 10.0,
    min_impressions: int = 1,
    clients: ClientActivity | None = None,
    policy: TrustPolicy | None = None,
) -> ClickJudgments:
    """Per shown (query, document) pair of the log, a grade 0..``levels`` − 1 from its click-through
    rate: raw clicks / impressions (``none``, and ``lightgbm``, whose position array carries the
    bias), or inverse-propensity weighted (``ipw``: Σ min(1 / θ_r, ``max_weight``) over its clicks /
    impressions, with the given or fitted relative propensities). Rates lie in [0, 1] (an IPW rate
    above 1 is capped), cut into ``levels`` equal bins. Pairs shown fewer than ``min_impressions``
    times are left out (their rate is noise). Query ids ``c0``, ``c1``, ... follow
    ``sessions.queries``; queries without a clicked pair are left out (nothing to order).

    With ``clients`` (who made each impression, `clicks.trust.read_activity`), the clients
    ``policy`` (default `TrustPolicy()`) sets aside are left out (propensities fitted without
    them), and a pair's rate is the weighted mean over its clients of each client's own rate on
    it: a client counts once per pair, its weight at most 1 (`TrustPolicy.max_client_queries`);
    an impression without a client id is a client of its own. Without ``clients`` every
    impression counts (the rate is clicks / impressions, as when each impression is its own client).

    Raises:
        ValueError: an unknown ``debias``, an empty log or one without clicks, ``policy`` without
            ``clients``, or ``clients`` not describing ``sessions``."""
    if debias not in DEBIAS:
        raise ValueError(f"debias must be one of {', '.join(DEBIAS)}, got {debias!r}")
    if not 2 <= levels <= 31:
        raise ValueError(f"levels must be in 2..31 (LightGBM's lambdarank labels), got {levels}")
    if policy is not None and clients is None:
        raise ValueError("a trust policy needs the log's clients (clicks.trust.read_activity)")
    _check_sessions(sessions)
    impressions, total_clicks = len(sessions), int(sessions.clicks.sum())
    trust = None
    vote_weight = np.ones(0)
    if clients is not None:
        policy = policy or TrustPolicy()
        verdict = assess(sessions, clients, policy)
        trust = report(sessions, clients, verdict, policy)
        keep_rows = trusted_rows(clients, verdict)
        if not keep_rows.any():
            raise ValueError(f"the trust policy set aside every one of the log's {trust.clients:,} clients")
        sessions, clients = sessions.take(keep_rows), clients.take(np.flatnonzero(keep_rows))
        _check_sessions(sessions)
        vote_weight = verdict.weight
    prop = None
    if debias == "ipw":
        prop = examination_propensities(sessions, None if propensities is None else list(propensities))
    mask = shown_mask(sessions)
    rows, cols = np.nonzero(mask)
    clicked = sessions.clicks[rows, cols]
    n_docs = max(len(sessions.doc_ids), 1)
    key = sessions.query[rows].astype(np.int64) * n_docs + sessions.docs[rows, cols]
    pairs, inv = np.unique(key, return_inverse=True)
    shown = np.bincount(inv, minlength=len(pairs))
    credit = clicked * click_weights(cols, prop, max_weight)
    if clients is None:
        votes, rated = shown.astype(np.float64), np.bincount(inv, credit, minlength=len(pairs))
    else:
        votes, rated = _client_votes(inv, rows, credit, clients, vote_weight, len(pairs))
    rate = np.minimum(rated / votes, 1.0)
    grade = np.minimum(np.floor(rate * levels), levels - 1).astype(np.int64)
    # each pair's most frequent rank: counts of (pair, rank), the largest per pair
    k = sessions.positions
    pr, pr_count = np.unique(inv.astype(np.int64) * k + cols, return_counts=True)
    order = np.lexsort((-pr_count, pr // k))
    first = order[np.r_[True, (pr // k)[order][1:] != (pr // k)[order][:-1]]]
    modal = np.zeros(len(pairs), np.int64)
    modal[pr[first] // k] = pr[first] % k + 1
    keep = shown >= min_impressions
    q_of, d_of = pairs // n_docs, pairs % n_docs
    has_click = np.zeros(len(sessions.queries), bool)
    has_click[q_of[keep & (rated > 0)]] = True
    keep &= has_click[q_of]
    qrels: Qrels = {}
    positions: dict[str, dict[str, int]] = {}
    doc_ids, qs = sessions.doc_ids, q_of[keep].tolist()
    for qi, di, g, r in zip(qs, d_of[keep].tolist(), grade[keep].tolist(), modal[keep].tolist()):
        qid = f"c{qi}"
        qrels.setdefault(qid, {})[doc_ids[di]] = g
        positions.setdefault(qid, {})[doc_ids[di]] = r
    if not any(g > 0 for judged in qrels.values() for g in judged.values()):
        raise ValueError(
            f"every clicked pair's click-through rate is below 1/{levels}: the log is too sparse for "
            f"{levels} levels (fewer levels, or more impressions)"
        )
    return ClickJudgments(
        queries={q: sessions.queries[int(q[1:])] for q in qrels},
        qrels=qrels,
        positions=positions if debias == "lightgbm" else {},
        unshown=k + 1,
        debias=debias,
        propensities=None if prop is None else [round(float(x), 6) for x in prop],
        impressions=impressions,
        clicks=total_clicks,
        trust=trust,
    )


def _client_votes(
    inv: np.ndarray,
    rows: np.ndarray,
    credit: np.ndarray,
    clients: ClientActivity,
    weight: np.ndarray,
    n_pairs: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per pair, the summed weights of the clients that were shown it and the summed weighted
    rates: each (pair, client) one vote, its rate the client's credit on the pair over its
    impressions of it, its weight the client's (an impression without a client: its own, 1)."""
    n_known = len(clients.client_ids)
    client = clients.client[rows].astype(np.int64)
    unit = np.where(client >= 0, client, n_known + rows.astype(np.int64))
    n_units = n_known + int(rows.max(initial=-1)) + 1
    vote, vote_inv = np.unique(inv.astype(np.int64) * n_units + unit, return_inverse=True)
    seen = np.bincount(vote_inv, minlength=len(vote))
    own_rate = np.bincount(vote_inv, credit, minlength=len(vote)) / seen
    u = vote % n_units
    w = np.where(u < n_known, weight[np.minimum(u, max(n_known - 1, 0))] if n_known else 1.0, 1.0)
    pair = vote // n_units
    return np.bincount(pair, w, minlength=n_pairs), np.bincount(pair, w * own_rate, minlength=n_pairs)


def click_grades(rankings: Rankings, arrays: ClickArrays, levels: int = 5) -> dict[str, dict[str, int]]:
    """Graded labels from simulated clicks (`clicks.simulate.simulate_click_arrays`), as
    `click_judgments` with ``debias = "none"`` grades a logged click log: every document the logger showed a query
    that was searched, graded by its raw click-through rate (clicks / the query's impressions;
    each impression shows the whole top k) in ``levels`` equal bins of [0, 1]; queries without a
    click are left out. Query ids are the rankings'."""
    n_docs = max(len(rankings.doc_ids), 1)
    key = arrays.q.astype(np.int64) * n_docs + arrays.d
    pairs, counts = np.unique(key, return_counts=True)
    clicked: dict[int, int] = dict(zip(pairs.tolist(), counts.tolist()))
    out: dict[str, dict[str, int]] = {}
    has_click = np.zeros(len(rankings.query_ids), bool)
    has_click[arrays.q] = True
    for qi in np.flatnonzero(has_click & (arrays.query_impressions > 0)).tolist():
        imps = int(arrays.query_impressions[qi])
        judged = {}
        for di in rankings.docs[qi][rankings.docs[qi] >= 0].tolist():
            rate = clicked.get(qi * n_docs + di, 0) / imps
            judged[rankings.doc_ids[di]] = min(int(rate * levels), levels - 1)
        out[rankings.query_ids[qi]] = judged
    return out
