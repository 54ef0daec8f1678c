"""Click models fitted from a click log's sessions, and their standard evaluation.

Written on numpy because no well-kept click-model library is on the package index: ``clickmodels``
(2014) and ``gecasmo`` (0.0.1) are unmaintained, PyClick is not published, and ``clax-models``
fits by gradient descent on JAX, a framework the project does not otherwise use. The models and
their estimation follow Chuklin, Markov & de Rijke, "Click Models for Web Search" (2015), ch. 3-4:

- `PBM`, the position-based model (Richardson et al. 2007, Craswell et al. 2008; the propensity
  model of Joachims et al. 2017): P(C_r = 1) = θ_r · α_qd, examination θ per rank,
  attractiveness α per (query, document), fitted by EM. The likelihood only depends on the
  products θ_r α_qd, so θ and α are identified up to a common factor (θc, α/c), and only where a
  (query, document) is seen at more than one rank. EM finds one maximum on that ridge;
  ``examination_rank1`` moves it to θ_1 = the given value (a known anchor, or 1.0 for the
  relative propensities θ_r / θ_1 that inverse-propensity weighting needs), clipping α at 1
  where the anchor asks for more.
- `UBM`, the user browsing model (Dupret & Piwowarski 2008): as PBM with the examination θ_{r,r'}
  indexed by the rank and the rank r' of the previous click (0: none), fitted by the same EM.
- `CascadeModel` (Craswell et al. 2008): the user reads top-down and stops at the first click;
  closed-form MLE α_qd = clicks / examinations, a document being examined when it is at or above
  the session's first click (or anywhere when nothing was clicked); cells below the first click
  are outside the model and not counted.
- `DBN`, the dynamic Bayesian network model (Chapelle & Zhang 2009): examined documents attract
  with a_qd, a click satisfies with s_qd, an unsatisfied user goes on with γ; fitted by EM with
  exact posteriors of the examination chain from a forward-backward pass per session (a compiled
  loop over the sessions, `_kernels.dbn_em_sums`) and γ learnt unless given.

A model's parameters are keyed by the (query, document) strings: a fitted model keeps its training
vocabularies, and the sessions it scores (another read of the log, another log) are mapped into
them, so codes that differ between two reads cannot mix pairs up. Pairs missing from the training
log get the pooled estimate (all its training cells counted as one pair).

A pair seen a few times gets extreme maximum likelihood estimates (one click in one view: α = 1).
Every model takes ``prior = (a, b)``: pseudo-counts of a "yes" and b "no" added to every
probability it estimates (attractiveness, examination, satisfaction, continuation), so each
M-step is the posterior mean under a Beta(a, b) prior (the MAP under Beta(a + 1, b + 1)). The
default (1, 1) is what PyClick (Chuklin, Markov & de Rijke's reference implementation) does
implicitly: each of its parameters starts every EM iteration at 1/2 as numerator 1 over
denominator 2. (0, 0) is maximum likelihood. EM stops when its objective (the log-likelihood plus
the log-prior, per cell or per session) gains less than ``tol`` an iteration; one that reaches
``max_iter`` first says so on stderr with its last gain and records ``converged = False``;
``tol=None`` runs exactly ``max_iter`` iterations, as PyClick does.

Evaluation as in the book's ch. 5: `log_likelihood` (mean over sessions of log P(session's
clicks), from the conditional click probabilities), `perplexity_by_rank` (2^−mean log2
P(C_r = c_r) with the marginal click probability at each rank) and `perplexity`, their mean.
Probabilities are clipped to [1e-6, 1 − 1e-6] so that a click a model rules out (a second click
under the cascade model) costs log 1e-6, not −∞.
`fit_click_models` fits the four to a log's sessions and reports each one's held-out figures.

Sessions are `semsearch.clicks.sessions.Sessions` (column j = rank j + 1; -1: nothing shown); a cell
after the first empty slot of a session is treated as outside the list.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..progress import note
from .sessions import Sessions, read_sessions

EPS = 1e-6


class ClickModel(Protocol):
    """A fitted click model: click probabilities for each cell of a `Sessions`."""

    def fit(self, sessions: Sessions) -> ClickModel: ...

    def attractiveness(self) -> pa.Table:
        """Each training (query, document) pair's fitted attractiveness (``query``, ``doc``,
        ``attractiveness``, and any other per-pair parameter)."""
        ...

    def conditional_click_probabilities(self, sessions: Sessions) -> np.ndarray:
        """P(C_r = 1 | the session's clicks above r), ``(n, positions)``."""
        ...

    def marginal_click_probabilities(self, sessions: Sessions) -> np.ndarray:
        """P(C_r = 1), not conditioned on the session's other clicks, ``(n, positions)``."""
        ...


# -- (query, document) pairs -----------------------------------------------------------------------


def shown_mask(sessions: Sessions) -> np.ndarray:
    """The cells inside each session's list: shown, and no empty slot above."""
    return np.cumprod(sessions.docs >= 0, axis=1).astype(bool)


CHUNK = 262_144  # sessions per step of the passes over a log that build (sessions × ranks) temporaries


def _slices(n: int) -> list[slice]:
    return [slice(start, min(n, start + CHUNK)) for start in range(0, n, CHUNK)]


def _pair_keys(sessions: Sessions, rows: slice = slice(None)) -> np.ndarray:
    return sessions.query[rows].astype(np.int64)[:, None] * max(len(sessions.doc_ids), 1) + sessions.docs[rows]


def _code_map(into: list[str], names: list[str]) -> np.ndarray:
    """Each of ``names``' position in ``into`` (-1: absent), an int64 array of len(names)."""
    if names is into or names == into:
        return np.arange(len(names), dtype=np.int64)
    found = pc.index_in(pa.array(names, pa.string()), value_set=pa.array(into, pa.string()))
    return np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), np.int64)


@dataclass
class _Pairs:
    """The (query, document) pairs a model has parameters for: sorted keys query·n_docs + doc, the
    codes into the training sessions' ``queries`` and ``doc_ids`` (kept, so that other sessions'
    codes are translated by string, not trusted)."""

    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    queries: list[str] = field(default_factory=list)
    doc_ids: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, sessions: Sessions, mask: np.ndarray) -> tuple[_Pairs, np.ndarray]:
        """The pairs of the masked cells, and each cell's pair index (int32; -1 outside the mask),
        a chunk of sessions at a time."""
        chunks = _slices(len(sessions))
        unique = np.unique(np.concatenate([np.unique(_pair_keys(sessions, c)[mask[c]]) for c in chunks]))
        index = np.empty(mask.shape, dtype=np.int32)
        for c in chunks:
            index[c] = np.where(mask[c], np.searchsorted(unique, _pair_keys(sessions, c)), -1)
        return cls(unique, sessions.queries, sessions.doc_ids), index

    def lookup(self, sessions: Sessions, mask: np.ndarray) -> np.ndarray:
        """Each masked cell's pair index, len(keys) (the pooled slot) for pairs not seen in
        training; the sessions' query and document codes are first mapped into the training
        vocabularies by their strings."""
        query = _code_map(self.queries, sessions.queries)[sessions.query]
        doc_map = _code_map(self.doc_ids, sessions.doc_ids)
        docs = np.where(sessions.docs >= 0, doc_map[np.maximum(sessions.docs, 0)], -1)
        known = mask & (query >= 0)[:, None] & (docs >= 0)
        keys = query[:, None] * max(len(self.doc_ids), 1) + docs
        pos = np.minimum(np.searchsorted(self.keys, keys), max(len(self.keys) - 1, 0))
        found = known & (len(self.keys) > 0)
        if len(self.keys):
            found &= self.keys[pos] == keys
        return np.where(found, pos, len(self.keys))

    def table(self) -> pa.Table:
        """The pairs as strings, in key order: ``query``, ``doc``."""
        n_docs = max(len(self.doc_ids), 1)
        return pa.table(
            {
                "query": pa.array(self.queries, pa.string()).take(pa.array(self.keys // n_docs)),
                "doc": pa.array(self.doc_ids, pa.string()).take(pa.array(self.keys % n_docs)),
            }
        )


def _check_prior(prior: tuple[float, float]) -> None:
    if len(prior) != 2 or min(prior) < 0:
        raise ValueError(f"prior: two pseudo-counts >= 0, got {prior!r}")


def _log_prior(p: np.ndarray, prior: tuple[float, float]) -> float:
    """Σ a log p + b log(1 − p): the log of the Beta(a + 1, b + 1) density the M-step maximises
    (up to its constant), for the EM's objective."""
    if prior == (0.0, 0.0) or not len(p):
        return 0.0
    q = np.clip(p, 1e-12, 1 - 1e-12)
    return float(prior[0] * np.log(q).sum() + prior[1] * np.log1p(-q).sum())


def _cap_note(name: str, max_iter: int, change: float, tol: float) -> None:
    note(
        f"{name}: EM stopped at its cap of {max_iter} iterations, the objective still gaining "
        f"{change:.3g} an iteration (tol {tol:g}); raise max_iter for the fit it was converging to"
    )


def _check(sessions: Sessions, positions: int | None = None) -> None:
    if len(sessions) == 0:
        raise ValueError("no sessions")
    if positions is not None and sessions.positions != positions:
        raise ValueError(f"the model was fitted on {positions} positions, these sessions have {sessions.positions}")


# -- position-based and user-browsing models (EM over examination × attractiveness) --------------


def previous_click_rank(clicks: np.ndarray) -> np.ndarray:
    """For each cell, the 1-based rank of the last click above it (0: none)."""
    n, positions = clicks.shape
    ranks = np.where(clicks, np.arange(1, positions + 1), 0)
    prev = np.zeros_like(ranks)
    prev[:, 1:] = np.maximum.accumulate(ranks, axis=1)[:, :-1]
    return prev


@dataclass
class _ExaminationEM:
    """EM for P(C = 1) = θ_e · α_u with examination index e per cell: PBM (e = rank) and UBM
    (e = rank, previous click rank). Identical (pair, e, click) cells share their posteriors, so
    the log is first reduced to counts of those triples and each iteration costs their number."""

    max_iter: int = 200
    tol: float | None = 1e-9  # on the objective per cell; None: exactly max_iter iterations
    init_examination: float = 0.5
    init_attractiveness: float = 0.5
    prior: tuple[float, float] = (1.0, 1.0)
    examination_rank1: float | None = None
    pairs: _Pairs = field(default_factory=_Pairs)
    theta: np.ndarray = field(default_factory=lambda: np.zeros(0))
    alpha: np.ndarray = field(default_factory=lambda: np.zeros(1))  # per pair, then the pooled value
    positions: int = 0
    iterations: int = 0
    converged: bool = False
    last_change: float = float("nan")  # the objective's gain in the last iteration

    def _exam_index(self, clicks: np.ndarray) -> np.ndarray:
        """The examination parameter of each cell of ``(n, positions)`` sessions with these clicks."""
        raise NotImplementedError

    def n_exam(self, positions: int) -> int:
        """How many examination parameters a model of ``positions`` ranks has."""
        raise NotImplementedError

    def fit(self, sessions: Sessions) -> _ExaminationEM:
        _check(sessions)
        mask = shown_mask(sessions)
        self.positions = sessions.positions
        self.pairs, pair = _Pairs.of(sessions, mask)
        n_exam, n_pairs = self.n_exam(self.positions), len(self.pairs.keys)
        codes, counts = [], []
        for c in _slices(len(sessions)):  # counts of identical (pair, examination, click) cells
            m = mask[c]
            triple = (pair[c][m].astype(np.int64) * n_exam + self._exam_index(sessions.clicks[c])[m]) * 2
            part, part_count = np.unique(triple + sessions.clicks[c][m], return_counts=True)
            codes.append(part)
            counts.append(part_count)
        uniq, inverse = np.unique(np.concatenate(codes), return_inverse=True)
        count = np.bincount(inverse, np.concatenate(counts).astype(np.float64), minlength=len(uniq))
        return self.fit_cells(uniq, count, n_pairs)

    def fit_cells(self, uniq: np.ndarray, count: np.ndarray, n_pairs: int) -> _ExaminationEM:
        """The EM on a log reduced to its distinct cells: ``uniq`` the sorted codes (pair ·
        n_exam + examination index) · 2 + clicked, ``count`` how many cells of each (what a log
        partitioned over machines adds up: ``clicks.distributed``); ``n_pairs`` pairs, indexed as
        ``pairs`` orders them (``positions`` set). The M-step adds the prior's pseudo-counts to θ
        and α alike, so with ``tol=None`` and the same start it is PyClick's EM step for step."""
        _check_prior(self.prior)
        pa_, pb = self.prior
        n_exam = self.n_exam(self.positions)
        clicked = (uniq % 2).astype(bool)
        e = (uniq // 2) % n_exam
        u = uniq // 2 // n_exam
        e_denominator = np.bincount(e, count, minlength=n_exam) + pa_ + pb
        u_denominator = np.bincount(u, count, minlength=n_pairs) + pa_ + pb
        theta = np.full(n_exam, self.init_examination)
        alpha = np.full(n_pairs, self.init_attractiveness)
        total, last = count.sum(), -np.inf
        self.iterations, self.converged, self.last_change = 0, False, float("nan")
        for _ in range(self.max_iter):
            t, a = theta[e], alpha[u]
            unclicked = np.maximum(1.0 - t * a, 1e-12)
            post_e = np.where(clicked, 1.0, t * (1.0 - a) / unclicked)
            post_a = np.where(clicked, 1.0, a * (1.0 - t) / unclicked)
            new_theta = np.divide(
                np.bincount(e, count * post_e, minlength=n_exam) + pa_,
                e_denominator,
                out=theta.copy(),
                where=e_denominator > 0,
            )
            new_alpha = np.divide(
                np.bincount(u, count * post_a, minlength=n_pairs) + pa_,
                u_denominator,
                out=alpha.copy(),
                where=u_denominator > 0,
            )
            theta, alpha = new_theta, new_alpha
            self.iterations += 1
            if self.tol is None:
                continue
            # converged when the objective (log-likelihood plus log-prior) per cell gains less
            # than tol (the parameters themselves keep drifting along the ridge of equal
            # likelihood (θc, α/c), and the α of rarely seen pairs creeps towards 0 or 1 for
            # hundreds of iterations without a prior)
            p = np.clip(theta[e] * alpha[u], 1e-12, 1 - 1e-12)
            ll = (count * np.where(clicked, np.log(p), np.log1p(-p))).sum()
            objective = float((ll + _log_prior(theta, self.prior) + _log_prior(alpha, self.prior)) / total)
            self.last_change = objective - last
            last = objective
            if self.last_change < self.tol:
                self.converged = True
                break
        if self.tol is not None and not self.converged:
            _cap_note(type(self).__name__, self.max_iter, self.last_change, self.tol)
        if self.examination_rank1 is not None:
            # the likelihood is the same for (θc, α/c): rescale the maximum found to the anchor
            scale = self.examination_rank1 / theta[0]  # θ_1 (UBM: θ_{1,0}, rank 1 has no click above)
            theta, alpha = np.minimum(theta * scale, 1.0), np.minimum(alpha / scale, 1.0)
        self.theta = theta
        # the pooled attractiveness for pairs not seen in training: every cell as one pair
        t, a = theta[e], alpha[u]
        post_a = np.where(clicked, 1.0, a * (1.0 - t) / np.maximum(1.0 - t * a, 1e-12))
        self.alpha = np.append(alpha, (count * post_a).sum() / count.sum())
        return self

    def attractiveness(self) -> pa.Table:
        """Each training (query, document) pair's fitted attractiveness: ``query``, ``doc``,
        ``attractiveness``."""
        return self.pairs.table().append_column("attractiveness", pa.array(self.alpha[:-1]))

    def _cell_params(self, sessions: Sessions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        _check(sessions, self.positions)
        mask = shown_mask(sessions)
        return mask, self.alpha[self.pairs.lookup(sessions, mask)], self._exam_index(sessions.clicks)

    def conditional_click_probabilities(self, sessions: Sessions) -> np.ndarray:
        mask, alpha, exam = self._cell_params(sessions)
        return np.where(mask, self.theta[exam] * alpha, 0.0)


@dataclass
class PBM(_ExaminationEM):
    """Position-based model: examination θ_r per rank, attractiveness α per (query, document)."""

    def _exam_index(self, clicks: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.arange(clicks.shape[1]), clicks.shape)

    def n_exam(self, positions: int) -> int:
        return positions

    @property
    def examination(self) -> np.ndarray:
        """θ_r for ranks 1..positions."""
        return self.theta

    def marginal_click_probabilities(self, sessions: Sessions) -> np.ndarray:
        return self.conditional_click_probabilities(sessions)

    def fit(self, sessions: Sessions) -> PBM:
        super().fit(sessions)
        return self


@dataclass
class UBM(_ExaminationEM):
    """User browsing model: examination θ_{r, r'} by rank r and the rank r' < r of the previous
    click (0: no click above); ``examination[r - 1, r']``."""

    def _exam_index(self, clicks: np.ndarray) -> np.ndarray:
        positions = clicks.shape[1]
        return np.arange(positions) * (positions + 1) + previous_click_rank(clicks)

    def n_exam(self, positions: int) -> int:
        return positions * (positions + 1)

    @property
    def examination(self) -> np.ndarray:
        """θ_{r, r'} as ``(positions, positions + 1)``: row r - 1, column r' (0: no click above)."""
        return self.theta.reshape(self.positions, self.positions + 1)

    def marginal_click_probabilities(self, sessions: Sessions) -> np.ndarray:
        """Sum over where the last click above each rank was: last[:, r'] = P(last click above r is r')."""
        mask, alpha, _ = self._cell_params(sessions)
        n, positions = mask.shape
        theta = self.examination
        last = np.zeros((n, positions + 1))
        last[:, 0] = 1.0
        out = np.zeros((n, positions))
        for r in range(positions):
            p_click = last[:, : r + 1] * theta[r, : r + 1] * alpha[:, r : r + 1]
            out[:, r] = np.where(mask[:, r], p_click.sum(axis=1), 0.0)
            last[:, : r + 1] -= np.where(mask[:, r : r + 1], p_click, 0.0)
            last[:, r + 1] = np.where(mask[:, r], p_click.sum(axis=1), 0.0)
        return out

    def fit(self, sessions: Sessions) -> UBM:
        super().fit(sessions)
        return self


# -- cascade model (closed form) ---------------------------------------------------------------------


@dataclass
class CascadeModel:
    """Cascade model: α per (query, document) = (clicks + a) / (examinations + a + b), the prior's
    pseudo-counts (a, b) added to the closed-form MLE (see module docstring)."""

    prior: tuple[float, float] = (1.0, 1.0)
    pairs: _Pairs = field(default_factory=_Pairs)
    alpha: np.ndarray = field(default_factory=lambda: np.zeros(1))
    views: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # examinations per pair
    positions: int = 0

    def fit(self, sessions: Sessions) -> CascadeModel:
        _check(sessions)
        _check_prior(self.prior)
        self.positions = sessions.positions
        mask = shown_mask(sessions)
        examined = mask & (previous_click_rank(sessions.clicks) == 0)  # at or above the first click
        self.pairs, pair = _Pairs.of(sessions, examined)
        n_pairs = len(self.pairs.keys)
        clicks = np.bincount(pair[examined], sessions.clicks[examined], minlength=n_pairs)
        self.views = np.bincount(pair[examined], minlength=n_pairs)
        a, b = self.prior
        with np.errstate(invalid="ignore", divide="ignore"):
            per_pair = (clicks + a) / (self.views + a + b)
        self.alpha = np.append(per_pair, clicks.sum() / max(self.views.sum(), 1))
        return self

    def attractiveness(self) -> pa.Table:
        """Each training (query, document) pair's α: ``query``, ``doc``, ``attractiveness``."""
        return self.pairs.table().append_column("attractiveness", pa.array(self.alpha[:-1]))

    def _alpha(self, sessions: Sessions) -> tuple[np.ndarray, np.ndarray]:
        _check(sessions, self.positions)
        mask = shown_mask(sessions)
        return mask, np.where(mask, self.alpha[self.pairs.lookup(sessions, mask)], 0.0)

    def conditional_click_probabilities(self, sessions: Sessions) -> np.ndarray:
        mask, alpha = self._alpha(sessions)
        return np.where(previous_click_rank(sessions.clicks) == 0, alpha, 0.0)

    def marginal_click_probabilities(self, sessions: Sessions) -> np.ndarray:
        mask, alpha = self._alpha(sessions)
        no_click_above = np.ones_like(alpha)
        no_click_above[:, 1:] = np.cumprod(1.0 - alpha, axis=1)[:, :-1]
        return alpha * no_click_above


# -- dynamic Bayesian network model (EM with forward-backward) ---------------------------------------


@dataclass
class _Chain:
    """Per-cell quantities of the DBN's examination chain for a batch of sessions."""

    forward1: np.ndarray  # P(E_r = 1, C_<r)
    forward0: np.ndarray  # P(E_r = 0, C_<r)
    examined: np.ndarray  # P(E_r = 1 | C)
    attracted: np.ndarray  # P(A_r = 1 | C)
    satisfied: np.ndarray  # P(S_r = 1 | C)
    likelihood: np.ndarray  # P(C) per session


def _dbn_chain(a: np.ndarray, s: np.ndarray, gamma: float, clicks: np.ndarray, mask: np.ndarray) -> _Chain:
    """Exact posteriors of the DBN given each session's clicks: E_1 = 1; C_r = E_r A_r; a click
    satisfies with s; E_{r+1} = E_r (1 − S_r) with probability γ. Cells outside ``mask`` (the tail
    past the list) emit nothing and are ignored."""
    n, positions = clicks.shape
    c = clicks & mask
    e1 = np.where(mask, np.where(c, a, 1.0 - a), 1.0)  # P(c_r | E_r = 1)
    e0 = np.where(c, 0.0, 1.0)  # P(c_r | E_r = 0)
    tau = np.where(c, gamma * (1.0 - s), gamma)  # P(E_{r+1} = 1 | E_r = 1, c_r)
    f1 = np.zeros((n, positions + 1))
    f0 = np.zeros((n, positions + 1))
    f1[:, 0] = 1.0
    for r in range(positions):
        step = f1[:, r] * e1[:, r]
        f1[:, r + 1] = step * tau[:, r]
        f0[:, r + 1] = step * (1.0 - tau[:, r]) + f0[:, r] * e0[:, r]
    b1 = np.ones((n, positions + 1))
    b0 = np.ones((n, positions + 1))
    for r in range(positions - 1, -1, -1):
        b1[:, r] = e1[:, r] * (tau[:, r] * b1[:, r + 1] + (1.0 - tau[:, r]) * b0[:, r + 1])
        b0[:, r] = e0[:, r] * b0[:, r + 1]
    likelihood = np.maximum(b1[:, 0], 1e-300)
    examined = np.where(mask, f1[:, :positions] * b1[:, :positions] / likelihood[:, None], 0.0)
    attracted = np.where(mask, np.where(c, 1.0, a * (1.0 - examined)), 0.0)
    stop_after = s * b0[:, 1:]  # P(S = 1, rest | clicked here) up to the common factor
    go_on = (1.0 - s) * (gamma * b1[:, 1:] + (1.0 - gamma) * b0[:, 1:])
    satisfied = np.where(c, stop_after / np.maximum(stop_after + go_on, 1e-300), 0.0)
    return _Chain(f1[:, :positions], f0[:, :positions], examined, attracted, satisfied, likelihood)


@dataclass
class DBN:
    """Dynamic Bayesian network model: attractiveness a and satisfaction s per (query, document),
    continuation γ (learnt by EM unless ``gamma`` is given)."""

    gamma: float | None = None
    max_iter: int = 100
    tol: float | None = 1e-7  # on the objective per session; None: exactly max_iter iterations
    init: float = 0.5
    prior: tuple[float, float] = (1.0, 1.0)
    init_gamma: float = 0.9
    pairs: _Pairs = field(default_factory=_Pairs)
    a: np.ndarray = field(default_factory=lambda: np.zeros(1))
    s: np.ndarray = field(default_factory=lambda: np.zeros(1))
    continuation: float = 0.9
    positions: int = 0
    iterations: int = 0
    converged: bool = False
    last_change: float = float("nan")

    def fit(self, sessions: Sessions) -> DBN:
        from ._kernels import dbn_em_sums

        _check(sessions)
        _check_prior(self.prior)
        pa_, pb = self.prior
        self.positions = sessions.positions
        mask = shown_mask(sessions)
        clicks = np.ascontiguousarray(sessions.clicks & mask)
        self.pairs, pair = _Pairs.of(sessions, mask)
        n_pairs = len(self.pairs.keys)
        cell = np.ascontiguousarray(np.where(mask, pair, n_pairs))  # n_pairs: the pooled slot
        length = mask.sum(axis=1).astype(np.int64)
        views = np.bincount(cell[mask], minlength=n_pairs + 1).astype(np.float64)
        clicked = np.bincount(cell[clicks], minlength=n_pairs + 1).astype(np.float64)
        seen = np.arange(n_pairs + 1) < n_pairs  # the pooled slot is set after the EM
        a = np.full(n_pairs + 1, self.init)
        s = np.full(n_pairs + 1, self.init)
        gamma = self.gamma if self.gamma is not None else self.init_gamma
        attracted, satisfied = np.zeros(n_pairs + 1), np.zeros(n_pairs + 1)
        last = -np.inf
        self.iterations, self.converged, self.last_change = 0, False, float("nan")
        for _ in range(self.max_iter):
            attracted[:] = 0.0
            satisfied[:] = 0.0
            moved, could, loglik = dbn_em_sums(cell, clicks, length, a, s, gamma, attracted, satisfied)
            # the objective of the parameters before this update: log-likelihood plus log-prior
            objective = (
                loglik
                + _log_prior(a[seen & (views > 0)], self.prior)
                + _log_prior(s[seen & (clicked > 0)], self.prior)
                + (_log_prior(np.array([gamma]), self.prior) if self.gamma is None else 0.0)
            ) / len(sessions)
            new_a = np.divide(attracted + pa_, views + pa_ + pb, out=a.copy(), where=views > 0)
            new_s = np.divide(satisfied + pa_, clicked + pa_ + pb, out=s.copy(), where=clicked > 0)
            learn_gamma = self.gamma is None and could + pa_ + pb > 0
            new_gamma = min((moved + pa_) / (could + pa_ + pb), 1.0) if learn_gamma else gamma
            a, s, gamma = new_a, new_s, new_gamma
            self.iterations += 1
            if self.tol is None:
                continue
            self.last_change = objective - last
            last = objective
            if self.last_change < self.tol:
                self.converged = True
                break
        if self.tol is not None and not self.converged:
            _cap_note("DBN", self.max_iter, self.last_change, self.tol)
        # the pooled slot: every training cell as one pair, under the fitted parameters
        attracted[:] = 0.0
        satisfied[:] = 0.0
        dbn_em_sums(cell, clicks, length, a, s, gamma, attracted, satisfied)
        a[n_pairs] = attracted[:n_pairs].sum() / views[:n_pairs].sum()
        s[n_pairs] = satisfied[:n_pairs].sum() / max(clicked[:n_pairs].sum(), 1.0)
        self.a, self.s, self.continuation = a, s, gamma
        return self

    def attractiveness(self) -> pa.Table:
        """Each training (query, document) pair's attractiveness and satisfaction: ``query``,
        ``doc``, ``attractiveness``, ``satisfaction``."""
        table = self.pairs.table().append_column("attractiveness", pa.array(self.a[:-1]))
        return table.append_column("satisfaction", pa.array(self.s[:-1]))

    def _params(self, sessions: Sessions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        _check(sessions, self.positions)
        mask = shown_mask(sessions)
        cell = self.pairs.lookup(sessions, mask)
        return mask, np.where(mask, self.a[cell], 0.0), np.where(mask, self.s[cell], 0.0)

    def conditional_click_probabilities(self, sessions: Sessions) -> np.ndarray:
        mask, a, s = self._params(sessions)
        chain = _dbn_chain(a, s, self.continuation, sessions.clicks, mask)
        seen = chain.forward1 + chain.forward0  # P(C_<r)
        return np.where(mask, a * chain.forward1 / np.maximum(seen, 1e-300), 0.0)

    def marginal_click_probabilities(self, sessions: Sessions) -> np.ndarray:
        mask, a, s = self._params(sessions)
        examined = np.ones(len(sessions))
        out = np.zeros(a.shape)
        for r in range(a.shape[1]):
            out[:, r] = examined * a[:, r]
            examined = examined * self.continuation * (1.0 - a[:, r] * s[:, r])
        return np.where(mask, out, 0.0)


# -- evaluation --------------------------------------------------------------------------------------


def _log2_prob(p_click: np.ndarray, clicks: np.ndarray) -> np.ndarray:
    p = np.clip(p_click, EPS, 1.0 - EPS)
    return np.where(clicks, np.log2(p), np.log2(1.0 - p))


def log_likelihood(model: ClickModel, sessions: Sessions) -> float:
    """Mean over sessions of log P(the session's clicks) (natural log), from the conditional click
    probabilities: Σ_r log P(C_r = c_r | C_<r)."""
    mask = shown_mask(sessions)
    cells = _log2_prob(model.conditional_click_probabilities(sessions), sessions.clicks)
    return float(np.where(mask, cells, 0.0).sum(axis=1).mean() * np.log(2.0))


def perplexity_by_rank(model: ClickModel, sessions: Sessions) -> np.ndarray:
    """Per rank r: 2^(−mean over sessions showing r of log2 P(C_r = c_r)), P the marginal click
    probability (1 is a perfect prediction, 2 a coin toss). NaN for a rank no session shows."""
    mask = shown_mask(sessions)
    cells = np.where(mask, _log2_prob(model.marginal_click_probabilities(sessions), sessions.clicks), 0.0)
    shown = mask.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(2.0 ** (-cells.sum(axis=0) / shown))


def perplexity(model: ClickModel, sessions: Sessions) -> float:
    """The mean of `perplexity_by_rank` over the ranks some session shows."""
    return float(np.nanmean(perplexity_by_rank(model, sessions)))


def split_sessions(sessions: Sessions, test_fraction: float = 0.25, seed: int = 0) -> tuple[Sessions, Sessions]:
    """A seeded random split of the impressions into training and held-out sessions."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    test = np.random.default_rng(seed).random(len(sessions)) < test_fraction
    return sessions.take(np.flatnonzero(~test)), sessions.take(np.flatnonzero(test))


def fit_click_models(
    log: str | Path,
    *,
    seed: int,
    true_examination: Sequence[float] | np.ndarray,
    top_n: int = 10,
    prior: tuple[float, float] = (0.0, 0.0),
) -> list[dict[str, Any]]:
    """PBM, UBM, cascade and DBN fitted by EM on 75 % of the log's sessions (ranks 1..``top_n``),
    each with its held-out log-likelihood and perplexity (Chuklin et al. 2015); PBM's examination
    per rank beside the simulator's (relative to rank 1: a position-based model identifies it only
    up to a factor). ``prior``: maximum likelihood by default, the estimator whose recovery of the
    simulator's examination the click loop reports (a Beta(1, 1) prior pulls rarely seen pairs'
    attractiveness towards 1/2, which the examination estimate then absorbs: docs/clicks.md)."""
    sessions = read_sessions(log, top_n=top_n)
    train, test = split_sessions(sessions, 0.25, seed=seed)
    rows = []
    pbm = PBM(examination_rank1=1.0, prior=prior)
    models: list[tuple[str, Any]] = [
        ("PBM", pbm),
        ("UBM", UBM(prior=prior)),
        ("cascade", CascadeModel(prior=prior)),
        ("DBN", DBN(prior=prior)),
    ]
    for name, model in models:
        t = time.perf_counter()
        model.fit(train)
        row: dict[str, Any] = {
            "model": name,
            "sessions": len(train),
            "log_likelihood": log_likelihood(model, test),
            "perplexity": perplexity(model, test),
            "fit_s": round(time.perf_counter() - t, 1),
        }
        if model is pbm:
            true = np.asarray(true_examination[:top_n], dtype=np.float64)
            row["examination"] = [round(float(x), 4) for x in pbm.examination]
            row["max_error"] = float(np.max(np.abs(pbm.examination - true / true[0])))
        rows.append(row)
        note(f"click model {name}: held-out perplexity {row['perplexity']:.4f} ({row['fit_s']} s)")
    return rows


# -- fitting several models to a log, with their held-out figures (``semsearch clicks fit``) -----------

MODEL_NAMES = ("pbm", "ubm", "dbn", "cascade")
"""The click models by name: `PBM`, `UBM`, `DBN`, `CascadeModel`."""


def make_model(name: str, *, prior: tuple[float, float] = (1.0, 1.0), max_iter: int | None = None) -> Any:
    """A click model by name (`MODEL_NAMES`) with a prior and an EM iteration cap (None: the model's
    default; the cascade model's closed form has none)."""
    kinds: dict[str, Any] = {"pbm": PBM, "ubm": UBM, "dbn": DBN, "cascade": CascadeModel}
    if name not in kinds:
        raise ValueError(f"model must be one of {', '.join(MODEL_NAMES)}, got {name!r}")
    if max_iter is not None and max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    _check_prior(prior)
    if name == "cascade" or max_iter is None:
        return kinds[name](prior=prior)
    return kinds[name](prior=prior, max_iter=max_iter)


def _summary(name: str, model: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"pairs": int(len(model.pairs.keys))}
    if name == "cascade":
        out["pooled_attractiveness"] = float(model.alpha[-1])
        return out
    change = model.last_change if np.isfinite(model.last_change) else None
    out.update(iterations=model.iterations, converged=model.converged, last_change=change)
    if name == "dbn":
        out.update(continuation=float(model.continuation), pooled_attractiveness=float(model.a[-1]))
    else:
        out.update(examination=np.asarray(model.examination).tolist(), pooled_attractiveness=float(model.alpha[-1]))
    return out


def held_out(model: Any, test: Sessions) -> dict[str, Any]:
    """A fitted model's figures on held-out sessions: mean log-likelihood per session, perplexity
    and perplexity by rank (None for a rank no session shows)."""
    by_rank = perplexity_by_rank(model, test)
    return {
        "sessions": len(test),
        "log_likelihood": log_likelihood(model, test),
        "perplexity": float(np.nanmean(by_rank)),
        "perplexity_by_rank": [None if np.isnan(x) else float(x) for x in by_rank],
    }


@dataclass
class ModelFits:
    """Click models fitted to a log: ``models`` (name -> the model fitted on all the sessions),
    ``report`` (name -> its parameters' summary and, with a held-out share, ``held_out``: the
    figures of the same model fitted on the rest)."""

    models: dict[str, Any]
    report: dict[str, dict[str, Any]]

    def attractiveness(self) -> pa.Table:
        """Every model's per-(query, document) parameters, one row a (model, query, document):
        ``model``, ``query``, ``doc``, ``attractiveness``, ``satisfaction`` (DBN; else null)."""
        parts = []
        for name, model in self.models.items():
            t = model.attractiveness()
            if "satisfaction" not in t.column_names:
                t = t.append_column("satisfaction", pa.nulls(t.num_rows, pa.float64()))
            parts.append(t.add_column(0, "model", pa.array([name] * t.num_rows, pa.string())))
        return pa.concat_tables(parts)


def fit_models(
    sessions: Sessions,
    names: Sequence[str] = MODEL_NAMES,
    *,
    prior: tuple[float, float] = (1.0, 1.0),
    max_iter: int | None = None,
    test_fraction: float = 0.25,
    seed: int = 0,
) -> ModelFits:
    """Each named model fitted to all of ``sessions``; with ``test_fraction`` > 0 also fitted to a
    seeded random share of the rest and scored on the share held out (`held_out`)."""
    if not names:
        raise ValueError("no click model named")
    for name in names:
        make_model(name, prior=prior, max_iter=max_iter)  # checks the names and settings first
    split = split_sessions(sessions, test_fraction, seed) if test_fraction > 0 else None
    models, report = {}, {}
    for name in names:
        t = time.perf_counter()
        models[name] = make_model(name, prior=prior, max_iter=max_iter).fit(sessions)
        report[name] = _summary(name, models[name])
        if split is not None:
            report[name]["held_out"] = held_out(
                make_model(name, prior=prior, max_iter=max_iter).fit(split[0]), split[1]
            )
        report[name]["seconds"] = round(time.perf_counter() - t, 3)
    return ModelFits(models, report)
