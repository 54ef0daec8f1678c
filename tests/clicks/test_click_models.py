"""Click models (semsearch.clicks.models): EM and closed-form updates against hand-computed
cases, the DBN's posteriors against brute-force enumeration, conditional and marginal click
probabilities against each other, and recovery of the simulator's parameters."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from semsearch.clicks import PBM_EXAMINATION, CascadeProfile, CascadeUser, DBNUser, PositionBasedUser, Rankings
from semsearch.clicks.models import (
    DBN,
    PBM,
    UBM,
    CascadeModel,
    _dbn_chain,
    log_likelihood,
    perplexity,
    perplexity_by_rank,
    split_sessions,
)
from semsearch.clicks.sessions import Sessions
from semsearch.clicks.simulate import simulate_sessions


def _sessions(
    docs: list[list[int]], clicks: list[list[int]], query: list[int] | None = None, n_docs: int = 3
) -> Sessions:
    return Sessions(
        docs=np.asarray(docs, np.int32),
        clicks=np.asarray(clicks, bool),
        query=np.asarray(query or [0] * len(docs), np.int32),
        queries=["q0", "q1"],
        doc_ids=[f"d{i}" for i in range(n_docs)],
    )


def _rankings(n_queries: int = 200, k: int = 10, n_docs: int = 5000, seed: int = 0) -> Rankings:
    rng = np.random.default_rng(seed)
    docs = np.stack([rng.choice(n_docs, k, replace=False) for _ in range(n_queries)]).astype(np.int32)
    return Rankings(
        [f"q{i}" for i in range(n_queries)],
        [f"query {i}" for i in range(n_queries)],
        [f"d{i}" for i in range(n_docs)],
        docs,
        rng.integers(0, 5, (n_queries, k)).astype(np.int8),
        4,
    )


def test_pbm_em_update_by_hand() -> None:
    """Two sessions of one query: [d0, d1] with d0 clicked, [d1, d0] with nothing clicked. From
    θ = α = 1/2, an unclicked cell has P(E = 1 | C = 0) = θ(1 − α)/(1 − θα) = 1/3 and
    P(A = 1 | C = 0) = α(1 − θ)/(1 − θα) = 1/3, a clicked one 1 and 1. So
    θ_1 = (1 + 1/3)/2 = 2/3, θ_2 = (1/3 + 1/3)/2 = 1/3, α_d0 = (1 + 1/3)/2 = 2/3, α_d1 = 1/3
    (maximum likelihood: prior (0, 0))."""
    s = _sessions([[0, 1], [1, 0]], [[1, 0], [0, 0]])
    m = PBM(max_iter=1, prior=(0, 0)).fit(s)
    assert np.allclose(m.examination, [2 / 3, 1 / 3])
    assert np.allclose(m.alpha[:2], [2 / 3, 1 / 3])
    # second step by hand: cells (θ, α) = rank 1 d0 clicked; rank 2 d1 (1/3, 1/3); rank 1 d1 (2/3, 1/3);
    # rank 2 d0 (1/3, 2/3). P(E|C=0) = θ(1−α)/(1−θα): 2/9 / (8/9) = 1/4; 4/9 / (7/9) = 4/7; 1/9 / (7/9) = 1/7
    # P(A|C=0) = α(1−θ)/(1−θα): 2/9 / (8/9) = 1/4; 1/9 / (7/9) = 1/7; 4/9 / (7/9) = 4/7
    m2 = PBM(max_iter=2, prior=(0, 0)).fit(s)
    assert np.allclose(m2.examination, [(1 + 4 / 7) / 2, (1 / 4 + 1 / 7) / 2])
    assert np.allclose(m2.alpha[:2], [(1 + 4 / 7) / 2, (1 / 4 + 1 / 7) / 2])


def test_cascade_mle_by_hand() -> None:
    """[d0, d1, d2] click at 2: d0 and d1 examined, d1 clicked; [d1, d0, d2] no click: all three
    examined; [d0, d2, d1] clicks at 1 and 3: only d0 examined (stop at the first click).
    α_d0 = 1/3, α_d1 = 1/2, α_d2 = 0/1 (maximum likelihood); the pooled value 2/6. With the
    prior (1, 1): (1 + 1)/(3 + 2), (1 + 1)/(2 + 2), (0 + 1)/(1 + 2)."""
    s = _sessions([[0, 1, 2], [1, 0, 2], [0, 2, 1]], [[0, 1, 0], [0, 0, 0], [1, 0, 1]])
    assert np.allclose(CascadeModel().fit(s).alpha, [2 / 5, 2 / 4, 1 / 3, 2 / 6])
    m = CascadeModel(prior=(0, 0)).fit(s)
    assert np.allclose(m.alpha, [1 / 3, 1 / 2, 0.0, 2 / 6])
    # conditional: α until the first click, 0 after; marginal: α_r Π_{i<r} (1 − α_i)
    probe = _sessions([[1, 0, 2]], [[1, 0, 0]])
    assert np.allclose(m.conditional_click_probabilities(probe), [[1 / 2, 0, 0]])
    assert np.allclose(m.marginal_click_probabilities(probe), [[1 / 2, (1 - 1 / 2) * 1 / 3, 0.0]])


def _brute_force_dbn(a: np.ndarray, s: np.ndarray, gamma: float, clicks: np.ndarray) -> dict[str, np.ndarray | float]:
    """Posteriors of the DBN by enumerating every value of its latent variables: A_r, S_r and the
    coin C_r deciding whether an unsatisfied user goes on (with γ)."""
    positions = len(a)
    total = 0.0
    e_sum, a_sum, s_sum = np.zeros(positions), np.zeros(positions), np.zeros(positions)
    for att in itertools.product([0, 1], repeat=positions):
        for sat in itertools.product([0, 1], repeat=positions):
            for cont in itertools.product([0, 1], repeat=positions):
                p, examined, e, c = 1.0, 1, np.zeros(positions), np.zeros(positions, int)
                for r in range(positions):
                    p *= a[r] if att[r] else 1 - a[r]
                    p *= s[r] if sat[r] else 1 - s[r]
                    p *= gamma if cont[r] else 1 - gamma
                    e[r] = examined
                    c[r] = examined and att[r]
                    satisfied = c[r] and sat[r]
                    examined = examined and not satisfied and cont[r]
                if p == 0 or not np.array_equal(c, clicks):
                    continue
                total += p
                e_sum += p * e
                a_sum += p * np.asarray(att)
                s_sum += p * (np.asarray(sat) * c)
    return {"likelihood": total, "examined": e_sum / total, "attracted": a_sum / total, "satisfied": s_sum / total}


def test_dbn_posteriors_match_brute_force_enumeration() -> None:
    from semsearch.clicks._kernels import dbn_em_sums

    rng = np.random.default_rng(0)
    a, s, gamma = rng.uniform(0.1, 0.9, 3), rng.uniform(0.1, 0.9, 3), 0.7
    patterns = np.array(list(itertools.product([0, 1], repeat=3)), bool)
    chain = _dbn_chain(np.tile(a, (8, 1)), np.tile(s, (8, 1)), gamma, patterns, np.ones((8, 3), bool))
    attracted, satisfied = np.zeros(4), np.zeros(4)
    for i, clicks in enumerate(patterns):
        want = _brute_force_dbn(a, s, gamma, clicks)
        assert chain.likelihood[i] == pytest.approx(want["likelihood"])
        assert np.allclose(chain.examined[i], want["examined"])
        assert np.allclose(chain.attracted[i], want["attracted"])
        assert np.allclose(chain.satisfied[i], want["satisfied"])
        attracted += np.append(want["attracted"], 0)
        satisfied += np.append(want["satisfied"], 0)
    assert chain.likelihood.sum() == pytest.approx(1.0)
    # the compiled E-step sums the same posteriors (cells 0, 1, 2: one pair per rank)
    got_a, got_s = np.zeros(4), np.zeros(4)
    cell = np.tile(np.arange(3), (8, 1))
    moved, could, loglik = dbn_em_sums(
        cell, patterns, np.full(8, 3), np.append(a, 0), np.append(s, 0), gamma, got_a, got_s
    )
    assert np.allclose(got_a, attracted) and np.allclose(got_s, satisfied)
    assert loglik == pytest.approx(np.log(chain.likelihood).sum())
    assert moved == pytest.approx(chain.examined[:, 1:].sum())
    assert could == pytest.approx((chain.examined[:, :2] - chain.satisfied[:, :2]).sum())


@pytest.mark.parametrize("model", [PBM, UBM, CascadeModel, DBN])
def test_conditional_and_marginal_click_probabilities_agree(model: type) -> None:
    """For each fitted model, over all 2^4 click patterns of a 4-result list: the products of
    conditional probabilities sum to 1, and summed over the patterns with a click at r they give
    the marginal P(C_r = 1)."""
    r = _rankings(n_queries=20, k=4, n_docs=200)
    train = simulate_sessions(r, DBNUser(4, gamma=0.8), 4000, seed=1, shuffle_rate=0.5)
    m = model().fit(train)
    patterns = np.array(list(itertools.product([0, 1], repeat=4)), bool)
    probe = Sessions(np.tile(r.docs[3], (16, 1)), patterns, np.full(16, 3, np.int32), r.queries, r.doc_ids)
    cond = m.conditional_click_probabilities(probe)
    p_pattern = np.where(patterns, cond, 1 - cond).prod(axis=1)
    assert p_pattern.sum() == pytest.approx(1.0)
    assert np.allclose(m.marginal_click_probabilities(probe)[0], (p_pattern[:, None] * patterns).sum(axis=0))
    for i in np.flatnonzero(p_pattern > 1e-4):  # (log_likelihood clips probabilities at 1e-6)
        assert log_likelihood(m, probe.take(np.array([i]))) == pytest.approx(np.log(p_pattern[i]), abs=1e-5)


def test_pbm_recovers_the_simulators_examination_within_0_02_per_rank() -> None:
    """A position-based log of 300k impressions of 200 queries, their top 10 shown in a random
    order (so each document is seen at every rank): EM's examination per rank, anchored at the
    simulator's θ_1 = 0.68 (the product θα only fixes θ up to a factor), is within ±0.02 of
    the simulator's at every rank; unanchored, the relative propensities θ_r/θ_1 are too."""
    r = _rankings()
    sessions = simulate_sessions(r, PositionBasedUser(4), 300_000, seed=5, shuffle_rate=1.0)
    true = np.asarray(PBM_EXAMINATION)
    anchored = PBM(examination_rank1=0.68).fit(sessions)
    assert np.abs(anchored.examination - true).max() <= 0.02
    free = PBM().fit(sessions)
    assert np.abs(free.examination / free.examination[0] - true / true[0]).max() <= 0.02 / 0.68
    # attractiveness of the pairs seen often comes back as the grade's ε + (1 − ε)(2^g − 1)/15
    keys = (np.arange(len(r.query_ids))[:, None] * len(r.doc_ids) + r.docs).ravel()
    want = 0.1 + 0.9 * (2.0 ** r.grades.ravel() - 1) / 15
    got = anchored.alpha[np.searchsorted(anchored.pairs.keys, keys)]
    assert np.abs(got - want).mean() < 0.03


def test_dbn_recovers_gamma_and_cascade_recovers_attraction() -> None:
    r = _rankings(n_queries=100)
    dbn_log = simulate_sessions(r, DBNUser(4, gamma=0.7), 100_000, seed=2, shuffle_rate=0.5)
    assert DBN().fit(dbn_log).continuation == pytest.approx(0.7, abs=0.03)
    assert DBN(gamma=0.5).fit(dbn_log).continuation == 0.5  # a given γ is kept
    click = (0.1, 0.3, 0.5, 0.7, 0.9)
    cascade_log = simulate_sessions(
        r, CascadeUser(4, CascadeProfile(click=click, stop=(1.0,) * 5)), 100_000, seed=3, shuffle_rate=0.5
    )
    m = CascadeModel().fit(cascade_log)
    keys = (np.arange(100)[:, None] * len(r.doc_ids) + r.docs).ravel()
    want = np.asarray(click)[r.grades.ravel()]
    index = np.searchsorted(m.pairs.keys, keys)
    got, views = m.alpha[index], m.views[index]
    assert (np.abs(got - want) * views).sum() / views.sum() < 0.025  # weighted by examinations
    z = np.abs(got - want) / np.sqrt(want * (1 - want) / views)  # each pair's MLE: clicks / views, binomial
    assert (z < 3.3).mean() > 0.99


def test_held_out_likelihood_prefers_the_model_that_generated_the_log() -> None:
    r = _rankings(n_queries=100)
    pbm_log = simulate_sessions(r, PositionBasedUser(4), 60_000, seed=4, shuffle_rate=0.5)
    train, test = split_sessions(pbm_log, 0.25, seed=0)
    pbm, cascade = PBM().fit(train), CascadeModel().fit(train)
    assert log_likelihood(pbm, test) > log_likelihood(cascade, test)
    assert perplexity(pbm, test) < perplexity(cascade, test)
    by_rank = perplexity_by_rank(pbm, test)
    assert by_rank.shape == (10,) and (by_rank > 1).all() and (by_rank < 2).all()
    cascade_log = simulate_sessions(
        r, CascadeUser(4, CascadeProfile(click=(0.1, 0.3, 0.5, 0.7, 0.9), stop=(1.0,) * 5)), 60_000, seed=4
    )
    train, test = split_sessions(cascade_log, 0.25, seed=0)
    assert log_likelihood(CascadeModel().fit(train), test) > log_likelihood(PBM().fit(train), test)


def test_unseen_pairs_get_the_pooled_estimate_and_shapes_are_checked() -> None:
    s = _sessions([[0, 1], [1, 0]], [[1, 0], [0, 0]])
    m = PBM(max_iter=1, prior=(0, 0)).fit(s)
    new = _sessions([[2, 0]], [[0, 0]])  # d2 never shown in training
    p = m.conditional_click_probabilities(new)
    assert p[0, 0] == pytest.approx(m.examination[0] * m.alpha[-1])
    assert p[0, 1] == pytest.approx(m.examination[1] * m.alpha[0])
    other_query = _sessions([[0, 1]], [[0, 0]], query=[1])  # same documents, another query: unseen pairs
    assert np.allclose(m.conditional_click_probabilities(other_query)[0], m.examination * m.alpha[-1])
    with pytest.raises(ValueError, match="fitted on 2 positions"):
        m.conditional_click_probabilities(_sessions([[0, 1, 2]], [[0, 0, 0]]))
    with pytest.raises(ValueError, match="no sessions"):
        PBM().fit(s.take(slice(0, 0)))


def test_a_beta_prior_smooths_sparse_pairs() -> None:
    """With pseudo-counts (1, 1) (the default), the hand case's first M-step gives α_d0 = (1 + 1/3
    + 1)/(2 + 2) = 7/12 and α_d1 = (2/3 + 1)/4 = 5/12, and θ the same (the prior is on every
    probability, as in PyClick). On a sparse log (1,000 queries, 20,000 impressions) every
    smoothed model predicts held-out clicks better than its maximum-likelihood fit."""
    s = _sessions([[0, 1], [1, 0]], [[1, 0], [0, 0]])
    m = PBM(max_iter=1).fit(s)
    assert np.allclose(m.alpha[:2], [7 / 12, 5 / 12]) and np.allclose(m.examination, [7 / 12, 5 / 12])
    r = _rankings(n_queries=1000)
    train, test = split_sessions(simulate_sessions(r, DBNUser(4), 20_000, seed=6, shuffle_rate=0.5), 0.25, seed=1)
    for model in (PBM, UBM, DBN, CascadeModel):
        mle, smooth = model(prior=(0, 0)).fit(train), model().fit(train)
        assert log_likelihood(smooth, test) > log_likelihood(mle, test)


@pytest.mark.parametrize("model", [PBM, UBM, CascadeModel, DBN])
def test_fits_do_not_depend_on_the_chunking_of_the_log(model: type, monkeypatch: pytest.MonkeyPatch) -> None:
    import semsearch.clicks.models as models

    r = _rankings(n_queries=30, k=5, n_docs=300)
    log = simulate_sessions(r, DBNUser(4), 2000, seed=9, shuffle_rate=0.5)
    whole = model(max_iter=5).fit(log) if model is not CascadeModel else model().fit(log)
    monkeypatch.setattr(models, "CHUNK", 37)
    chunked = model(max_iter=5).fit(log) if model is not CascadeModel else model().fit(log)
    assert np.array_equal(whole.pairs.keys, chunked.pairs.keys)
    assert np.allclose(whole.conditional_click_probabilities(log), chunked.conditional_click_probabilities(log))


@pytest.mark.parametrize("model", [PBM, UBM, CascadeModel, DBN])
def test_a_model_fitted_on_one_read_scores_another_read_of_the_same_log(model: type, tmp_path) -> None:
    """Read A: a log of 1,200 impressions; read B: its last 600 impressions, logged alone. Each
    read codes queries and documents by its own sorted vocabularies (B lacks documents A has, so
    the same document has another code in B). A model fitted on A scores read B as it scores the
    same impressions of read A: its parameters are keyed by the (query, document) strings."""
    from semsearch.clicks import EventLogWriter, simulate
    from semsearch.clicks.sessions import read_sessions

    r = _rankings(n_queries=300, k=5, n_docs=3000)
    with EventLogWriter(tmp_path / "a") as a_log, EventLogWriter(tmp_path / "b") as b_log:
        for _ in simulate(r, DBNUser(4), 600, seed=3, shuffle_rate=0.5, writer=a_log, start_ms=0, id_prefix="x"):
            pass
        a_log.flush()
        for writer in (a_log, b_log):
            for _ in simulate(r, DBNUser(4), 600, seed=4, shuffle_rate=0.5, writer=writer, start_ms=10**6):
                pass
    a = read_sessions(tmp_path / "a", top_n=5)
    b = read_sessions(tmp_path / "b", top_n=5)
    assert len(a) == 1200 and b.doc_ids != a.doc_ids and b.queries != a.queries
    a_tail = a.take(np.arange(600, 1200))
    assert a_tail.search_ids is not None and a_tail.search_ids.equals(b.search_ids)
    m = model().fit(a)
    assert np.allclose(m.conditional_click_probabilities(b), m.conditional_click_probabilities(a_tail), rtol=0, atol=0)
    assert np.allclose(m.marginal_click_probabilities(b), m.marginal_click_probabilities(a_tail), rtol=0, atol=0)
    assert log_likelihood(m, b) == log_likelihood(m, a_tail)
    assert np.array_equal(perplexity_by_rank(m, b), perplexity_by_rank(m, a_tail))
    # a model fitted on B, scoring A: A's pairs B never saw get the pooled value
    mb = model().fit(b)
    assert np.allclose(mb.conditional_click_probabilities(a_tail), mb.conditional_click_probabilities(b))
    # the per-pair table is keyed by strings
    table = m.attractiveness()
    assert {"query", "doc", "attractiveness"} <= set(table.column_names) and table.num_rows == len(m.pairs.keys)
    assert set(zip(table["query"].to_pylist(), table["doc"].to_pylist(), strict=True)) >= {
        (b.queries[q], b.doc_ids[d]) for q, d in zip(b.query, b.docs[:, 0], strict=True)
    }


def test_em_that_reaches_its_cap_says_so(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SEMSEARCH_PROGRESS", "1")
    r = _rankings(n_queries=20, k=5, n_docs=200)
    log = simulate_sessions(r, DBNUser(4), 2000, seed=9, shuffle_rate=0.5)
    for model in (PBM(max_iter=3), UBM(max_iter=3), DBN(max_iter=3)):
        model.fit(log)
        assert not model.converged and model.iterations == 3 and model.last_change > model.tol
        err = capsys.readouterr().err
        assert f"{type(model).__name__}: EM stopped at its cap of 3 iterations" in err
    done = PBM(max_iter=2000).fit(log)
    assert done.converged and done.iterations < 2000 and 0 <= done.last_change < done.tol
    exact = PBM(max_iter=7, tol=None).fit(log)  # as PyClick: a fixed number of iterations, no note
    assert exact.iterations == 7 and not exact.converged
    assert "EM stopped" not in capsys.readouterr().err
    with pytest.raises(ValueError, match="prior: two pseudo-counts >= 0"):
        PBM(prior=(-1, 1)).fit(log)
