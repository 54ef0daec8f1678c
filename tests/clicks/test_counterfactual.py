"""Off-policy estimators on logged bandit feedback (semsearch.clicks.counterfactual.off_policy_estimate):
a hand case, the policy's two forms, unbiasedness on a simulated log whose true value is known, opt-in
clipping, the seeded bootstrap, and the errors at the edge. Parity with Open Bandit Pipeline on the
Open Bandit Dataset is in test_counterfactual_obp.py; the ranker estimators in test_online_comparison.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from semsearch.clicks.counterfactual import OFF_POLICY_ESTIMATORS, off_policy_estimate


def test_hand_case() -> None:
    reward = np.array([1.0, 0.0, 1.0, 0.0])
    action = np.array([0, 1, 2, 0])
    pscore = np.array([0.5, 0.25, 0.25, 0.5])
    pi = np.array([[0.8, 0.1, 0.1], [0.2, 0.6, 0.2], [0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])
    q = np.array([[0.6, 0.2, 0.1], [0.5, 0.1, 0.1], [0.2, 0.2, 0.4], [0.3, 0.3, 0.3]])
    est = off_policy_estimate(reward, action, pscore, pi, estimated_rewards=q, n_bootstrap=0)
    w = np.array([0.8 / 0.5, 0.6 / 0.25, 0.5 / 0.25, 1.0 / 0.5])
    dm = (pi * q).sum(axis=1)
    residual = w * (reward - np.array([0.6, 0.1, 0.4, 0.3]))
    assert est.ips.value == pytest.approx((w * reward).mean())
    assert est.snips.value == pytest.approx((w * reward).sum() / w.sum())  # the weights normalise
    assert est.get("dm").value == pytest.approx(dm.mean())
    assert est.get("dr").value == pytest.approx(dm.mean() + residual.mean())
    assert est.get("sndr").value == pytest.approx(dm.mean() + residual.sum() / w.sum())
    assert est.mean_weight == pytest.approx(w.mean()) and est.clip is None
    assert est.ips.se == pytest.approx((w * reward).std(ddof=1) / 2) and est.ips.interval is None
    clipped = off_policy_estimate(reward, action, pscore, pi, clip=1.8, n_bootstrap=0)
    assert clipped.ips.value == pytest.approx((np.minimum(w, 1.8) * reward).mean())
    assert clipped.dm is None and "dm" not in clipped.to_json()
    with pytest.raises(ValueError, match="estimated_rewards"):
        clipped.get("dr")


def test_deterministic_actions_equal_their_one_hot_distribution() -> None:
    rng = np.random.default_rng(3)
    n, k, slots = 500, 4, 2
    action, position = rng.integers(0, k, n), rng.integers(0, slots, n)
    reward = rng.random(n) < 0.3
    pscore = np.full(n, 1 / k)
    q = rng.random((n, k, slots))
    chosen = rng.integers(0, k, (n, slots))
    dist = np.zeros((n, k, slots))
    for s in range(slots):
        dist[np.arange(n), chosen[:, s], s] = 1.0
    kw = {"position": position, "estimated_rewards": q, "n_bootstrap": 50, "seed": 4}
    a = off_policy_estimate(reward, action, pscore, chosen[np.arange(n), position], **kw)
    b = off_policy_estimate(reward, action, pscore, dist, **kw)
    assert a.to_json() == b.to_json()


def _simulated(n: int, seed: int) -> dict[str, np.ndarray]:
    """A logged contextual bandit with 5 actions: reward probability θ(x, a) from a context
    feature, a softmax logger, a different softmax evaluation policy; the true value is
    E_x Σ_a π(a|x) θ(x, a)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    arms = np.arange(5)
    theta = 1 / (1 + np.exp(-(x[:, None] * (arms - 2) / 2 - 1.5)))
    logger = np.exp(-0.5 * x[:, None] * (arms - 2))
    logger /= logger.sum(axis=1, keepdims=True)
    target = np.exp(0.8 * x[:, None] * (arms - 2))
    target /= target.sum(axis=1, keepdims=True)
    action = (rng.random(n)[:, None] > logger.cumsum(axis=1)).sum(axis=1)
    reward = (rng.random(n) < theta[np.arange(n), action]).astype(float)
    return {
        "reward": reward,
        "action": action,
        "pscore": logger[np.arange(n), action],
        "policy": target,
        "theta": theta,
        "truth": np.array((target * theta).sum(axis=1).mean()),
    }


def test_estimators_are_unbiased_where_the_literature_says() -> None:
    log = _simulated(20_000, seed=0)
    truth = float(log["truth"])
    args = (log["reward"], log["action"], log["pscore"], log["policy"])
    exact = off_policy_estimate(*args, estimated_rewards=log["theta"], n_bootstrap=300)
    biased_model = log["theta"] * 0.5 + 0.2
    biased = off_policy_estimate(*args, estimated_rewards=biased_model, n_bootstrap=0)
    for name in OFF_POLICY_ESTIMATORS:
        assert abs(exact.get(name).z(truth)) < 3, (name, exact.get(name), truth)
        interval = exact.get(name).interval
        assert interval is not None and interval[0] < exact.get(name).value < interval[1]
    assert abs(exact.ips.z(truth)) < 3 and exact.ips.interval is not None
    assert exact.ips.interval[0] < truth < exact.ips.interval[1]
    # a wrong reward model: DM is off, DR and SNDR still unbiased (Dudík et al. 2011)
    assert abs(biased.get("dm").z(truth)) > 10
    assert abs(biased.get("dr").z(truth)) < 3 and abs(biased.get("sndr").z(truth)) < 3
    # a right one: DR's variance is below IPS'
    assert exact.get("dr").se < exact.ips.se
    assert abs(exact.mean_weight - 1) < 0.05  # the weights average 1 under the logger
    # clipping is opt-in; with rewards >= 0 it lowers the estimate and its spread
    clipped = off_policy_estimate(*args, clip=2.0, n_bootstrap=0)
    assert clipped.ips.value < exact.ips.value and clipped.ips.se < exact.ips.se
    assert json.loads(json.dumps(exact.to_json()))["dr"]["low"] == pytest.approx(exact.get("dr").interval[0])


def test_bootstrap_is_seeded() -> None:
    log = _simulated(2_000, seed=1)
    args = (log["reward"], log["action"], log["pscore"], log["policy"])
    a = off_policy_estimate(*args, n_bootstrap=200, seed=7)
    b = off_policy_estimate(*args, n_bootstrap=200, seed=7)
    c = off_policy_estimate(*args, n_bootstrap=200, seed=8)
    wide = off_policy_estimate(*args, n_bootstrap=200, seed=7, alpha=0.01)
    assert a == b and a.ips.interval != c.ips.interval
    assert a.ips.interval is not None and wide.ips.interval is not None
    assert wide.ips.interval[0] <= a.ips.interval[0] and wide.ips.interval[1] >= a.ips.interval[1]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"clip": 0.0}, "clip"),
        ({"clip": math.nan}, "clip"),
        ({"n_bootstrap": -1}, "n_bootstrap"),
        ({"n_bootstrap": 1.5}, "n_bootstrap"),
        ({"alpha": 1.0}, "alpha"),
        ({"pscore": np.array([0.5, 0.0, 0.5])}, "pscore"),
        ({"pscore": np.array([0.5, 0.5])}, "pscore"),
        ({"action": np.array([0.0, 1.0, 1.0])}, "action"),
        ({"policy": np.array([[0.5, 0.6], [0.5, 0.5], [0.5, 0.5]])}, "policy"),
        ({"policy": np.array([0, 1, 5]), "estimated_rewards": np.zeros((3, 2))}, "policy"),
        ({"policy": np.full((3, 2, 2), 0.5)}, "position"),
        ({"position": np.array([0, -1, 0])}, "position"),
        ({"estimated_rewards": np.zeros((3, 3))}, "actions"),
        ({"estimated_rewards": np.zeros(3)}, "estimated_rewards"),
        ({"estimated_rewards": np.zeros((3, 2, 2))}, "position"),
        ({"reward": np.zeros(0), "action": np.zeros(0, int), "pscore": np.zeros(0)}, "reward"),
    ],
)
def test_errors_name_the_parameter(change: dict[str, object], match: str) -> None:
    kw: dict[str, object] = {
        "reward": np.array([1.0, 0.0, 1.0]),
        "action": np.array([0, 1, 1]),
        "pscore": np.array([0.5, 0.5, 0.5]),
        "policy": np.array([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]),
    } | change
    with pytest.raises(ValueError, match=match):
        off_policy_estimate(**kw)  # type: ignore[arg-type]
