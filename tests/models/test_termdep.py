"""Term-dependency models: the positional index, the SDM against a hand computation, LCE."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from semsearch.models.termdep import LatentConceptExpansion, PositionalIndex, SequentialDependence
from semsearch.params import ParamError
from semsearch.plugins import create_model, load_model

DOCS = {
    "a": "cordless drill with drill bit set",
    "b": "drill cordless kit",
    "c": "hammer drill bit for concrete with cordless battery pack and charger included",
    "d": "",
    "e": "garden hose reel",
    "f": "cordless",
}


@pytest.fixture(scope="module")
def index() -> PositionalIndex:
    return PositionalIndex.build(list(DOCS), list(DOCS.values()))


def _toks(d: str) -> list[str]:
    return DOCS[d].split()


def test_positional_index_layout(index):
    assert len(index) == 6 and index.lengths.tolist() == [len(_toks(d)) for d in DOCS]
    assert [index.vocab.terms[t] for t in index.doc_tokens(2)] == _toks("c")
    flat, starts = index.padded
    for i, d in enumerate(DOCS):
        got = flat[starts[i] : starts[i] + len(_toks(d))]
        assert [index.vocab.terms[t] for t in got] == _toks(d)
    assert index.counts.shape == (6, len(index.vocab)) and index.counts.sum() == sum(index.lengths)


def _pair_counts(tokens: list[str], a: str, b: str, ordered: bool, window: int) -> int:
    if ordered:
        return sum(1 for i in range(len(tokens) - 1) if tokens[i] == a and tokens[i + 1] == b)
    near = lambda i: range(max(0, i - window + 1), min(len(tokens), i + window))  # noqa: E731
    return sum(1 for i, t in enumerate(tokens) if t == a and any(tokens[j] == b for j in near(i) if j != i))


@pytest.mark.parametrize(
    "a,b", [("cordless", "drill"), ("drill", "bit"), ("drill", "cordless"), ("drill", "drill"), ("bit", "with")]
)
@pytest.mark.parametrize("ordered,window", [(True, 2), (False, 8), (False, 3)])
def test_pair_counts_match_brute_force(index, a, b, ordered, window):
    docs, tf = index.pair_tf(index.vocab.ids[a], index.vocab.ids[b], ordered=ordered, window=window)
    got = dict(zip(docs.tolist(), tf.tolist()))
    for i, d in enumerate(DOCS):
        assert got.get(i, 0) == _pair_counts(_toks(d), a, b, ordered, window), (d, a, b)


def test_windows_never_cross_documents():
    ix = PositionalIndex.build(["x", "y"], ["alpha beta", "gamma alpha"])
    docs, _ = ix.pair_tf(ix.vocab.ids["alpha"], ix.vocab.ids["gamma"], ordered=False, window=16)
    assert docs.tolist() == [1]
    docs, _ = ix.pair_tf(ix.vocab.ids["beta"], ix.vocab.ids["gamma"], ordered=True, window=2)
    assert docs.tolist() == []


def _hand_sdm(query: str, doc: str, lt: float, lo: float, lu: float, mu: float, window: int = 8) -> float:
    """Metzler & Croft's SDM written out directly from the formula."""
    docs = [v.split() for v in DOCS.values()]
    total = sum(len(t) for t in docs)
    q = query.split()
    D = DOCS[doc].split()

    def f(tf_d: float, cf: float) -> float:
        return math.log((tf_d + mu * max(cf, 0.5) / total) / (len(D) + mu))

    s = lt * sum(f(D.count(w), sum(t.count(w) for t in docs)) for w in q)
    for a, b in zip(q, q[1:]):
        s += lo * f(_pair_counts(D, a, b, True, 2), sum(_pair_counts(t, a, b, True, 2) for t in docs))
        s += lu * f(_pair_counts(D, a, b, False, window), sum(_pair_counts(t, a, b, False, window) for t in docs))
    return s


@pytest.mark.parametrize("query", ["cordless drill", "drill bit cordless", "drill", "cordless zebra drill", "zebra"])
def test_sdm_equals_hand_computation(index, query):
    m = create_model("mrf", lambda_t=0.8, lambda_o=0.15, lambda_u=0.05, mu=10)
    m.use_index(index)
    (s,) = m.score([query], [list(DOCS)])
    want = [_hand_sdm(query, d, 0.8, 0.15, 0.05, 10) for d in DOCS]
    np.testing.assert_allclose(s, want, rtol=1e-12)
    # the full-collection path gives the same numbers
    hits = dict(m.retrieve([query], len(DOCS))[0])
    np.testing.assert_allclose([hits[d] for d in DOCS], want, rtol=1e-12)


def test_dependence_features_reward_the_ordered_phrase(index):
    m = create_model("mrf", mu=10)
    m.use_index(index)
    uni = m.with_params(lambda_o=0.0, lambda_u=0.0)
    (s,), (u,) = m.score(["cordless drill"], [["a", "b"]]), uni.score(["cordless drill"], [["a", "b"]])
    # "a" holds the exact bigram, "b" has both words out of order: the #1 feature separates them more
    assert (s[0] - s[1]) > (u[0] - u[1])


def test_with_params_reuses_the_cached_statistics(index):
    m = create_model("mrf")
    m.use_index(index)
    m.score(["cordless drill"], [list(DOCS)])
    clone = m.with_params(lambda_o=0.3)
    assert clone._cache is m._cache and clone.params()["lambda_o"] == 0.3
    with pytest.raises(ParamError, match="mrf parameter 'mu' must be > 0, got 0"):
        m.with_params(mu=0)
    with pytest.raises(ParamError, match="mrf has no parameter 'k1'"):
        create_model("mrf", k1=1.2)


def test_termdep_params_are_typed(index, tmp_path):
    from semsearch.training import recipe

    with pytest.raises(ParamError, match=r"lce has no parameter 'fb_term' \(did you mean 'fb_terms'\?\)"):
        create_model("lce", fb_term=3)
    with pytest.raises(ParamError, match="mrf parameter 'window' must be <= 16, got 20"):
        create_model("mrf", window=20)
    with pytest.raises(ParamError, match="lce parameter 'fb_docs' must be a whole number, got 2.5"):
        create_model("lce", fb_docs=2.5)
    with pytest.raises(ParamError, match="mrf parameter 'lambda_t' must be >= 0"):
        create_model("mrf", lambda_t=-1)
    assert recipe("lce", {"fb_docs": 5.0, "mu": 100, "analyzer": "english"}) == (
        {"fb_docs": 5.0, "mu": 100, "analyzer": "english"},
        None,
    )
    m = create_model("lce", mu=10, fb_docs=3.0)
    assert m.p.fb_docs == 3 and m.p.window == 8
    m.use_index(index)
    m.save(tmp_path / "lce")
    cfg = json.loads((tmp_path / "lce" / "config.json").read_text())
    cfg["params"] = {**cfg["params"], "window": 8.0, "fb_docs": 3.0, "epochs": 5}  # an older config
    (tmp_path / "lce" / "config.json").write_text(json.dumps(cfg))
    back = load_model(tmp_path / "lce")
    assert back.params() == m.params()
    np.testing.assert_allclose(
        back.score(["cordless drill"], [list(DOCS)])[0], m.score(["cordless drill"], [list(DOCS)])[0]
    )


def test_bad_input_is_finite(index):
    m = create_model("lce", mu=5)
    m.use_index(index)
    for q in ["", "???", "zebra giraffe", "cordless"]:
        (s,) = m.score([q], [list(DOCS)])
        assert np.isfinite(s).all(), q
    assert (m.score([""], [list(DOCS)])[0] == 0).all()
    with pytest.raises(ValueError, match="not in the indexed collection"):
        m.score(["drill"], [["zz"]])
    with pytest.raises(RuntimeError, match="no collection indexed"):
        create_model("mrf").score(["drill"], [["a"]])
    empty = create_model("mrf")
    empty.index(["x", "y"], ["", "..."])
    assert np.isfinite(empty.score(["drill bit"], [["x", "y"]])[0]).all()


def test_lce_expansion(index):
    m = create_model("lce", mu=10, fb_docs=3, fb_terms=4)
    m.use_index(index)
    terms, w = m.expansion("cordless drill")
    names = {index.vocab.terms[t] for t in terms}
    assert len(terms) == 4 and not names & {"cordless", "drill"}
    assert w.sum() == pytest.approx(1.0) and (w > 0).all() and (np.diff(w) <= 1e-12).all()
    assert "hose" not in names  # only words of the pseudo-relevant documents
    # fb_weight = 0 is the SDM; otherwise the expansion changes the scores
    sdm = create_model("mrf", mu=10)
    sdm.use_index(index)
    cands = list(DOCS)
    np.testing.assert_allclose(
        m.with_params(fb_weight=0).score(["cordless drill"], [cands])[0], sdm.score(["cordless drill"], [cands])[0]
    )
    assert not np.allclose(m.score(["cordless drill"], [cands])[0], sdm.score(["cordless drill"], [cands])[0])
    assert m.expansion("")[0].size == 0


def test_retrieve_orders_by_score_then_id(index):
    m = create_model("mrf", mu=10)
    m.use_index(index)
    hits = m.retrieve(["zebra"], 6)[0]  # no match: scores differ only by length
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True) and len(hits) == 6
    with pytest.raises(ValueError):
        m.retrieve(["drill"], 0)
    lce = create_model("lce", mu=10)
    lce.use_index(index)
    assert lce.retrieve(["cordless drill"], 2)[0][0][0] in DOCS


@pytest.mark.parametrize("name", ["mrf", "lce"])
def test_save_load_round_trip(name, tmp_path):
    m = create_model(name, mu=7, lambda_o=0.2)
    m.index(list(DOCS), list(DOCS.values()))
    m.save(tmp_path / name)
    back = load_model(tmp_path / name)
    assert isinstance(back, SequentialDependence) and back.params() == m.params()
    assert isinstance(back, LatentConceptExpansion) == (name == "lce")
    np.testing.assert_allclose(
        back.score(["cordless drill bit"], [list(DOCS)])[0], m.score(["cordless drill bit"], [list(DOCS)])[0]
    )
