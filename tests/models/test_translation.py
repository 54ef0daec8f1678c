"""Translation models (WTM = IBM Model 1, PTM = phrases up to 3 words) on tiny generated pairs."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import scipy.sparse as sp

from semsearch.data import TrainingData
from semsearch.models.translation import PhraseTranslationModel, WordTranslationModel, key_terms, ngram_keys, phrase_key
from semsearch.params import ParamError
from semsearch.plugins import create_model, load_model
from semsearch.training import fit, recipe
from semsearch.training.args import IBM1Args
from semsearch.training.translation import _grow_diag_final, extract_phrases, ibm1

# query word -> the title word users' products call it
SYNONYMS = {"sofa": "couch", "tv": "television", "fridge": "refrigerator", "drill": "driver", "lamp": "light"}
FILLER = ["black", "white", "steel", "wood", "large", "small", "set", "pack"]


def _pairs(n: int = 300, seed: int = 0) -> list[tuple[str, str]]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        q, t = rnd.choice(list(SYNONYMS.items()))
        colour = rnd.choice(FILLER[:2])
        query = f"{colour} {q}" if rnd.random() < 0.5 else q
        title = " ".join(rnd.sample(FILLER, 3) + [t] + ([colour] if colour in query else []))
        out.append((query, title))
    # a fixed phrase: "tv stand" is sold as "television console"
    out += [("tv stand", f"{rnd.choice(FILLER)} television console {rnd.choice(FILLER)}") for _ in range(40)]
    return out


def trained(name: str, data: TrainingData, progress: bool = False, **raw):  # type: ignore[no-untyped-def]
    """A model of kind ``name`` trained with ``raw`` (model parameters and training arguments)."""
    kw, args = recipe(name, raw)
    m = create_model(name, **kw)
    return m, fit(m, data, args=args, progress=progress)


@pytest.fixture(scope="module")
def data() -> TrainingData:
    return TrainingData.from_pairs(_pairs())


@pytest.fixture(scope="module")
def wtm(data) -> WordTranslationModel:
    return trained("wtm", data, iterations=15)[0]


@pytest.fixture(scope="module")
def ptm(data) -> PhraseTranslationModel:
    return trained("ptm", data, iterations=15)[0]


DOCS = {
    "d1": "black couch large",
    "d2": "white television console",
    "d3": "steel refrigerator",
    "d4": "wood driver set",
    "d5": "",  # an empty title
    "d6": "sofa",  # a literal match
}


def _indexed(model):
    model.index(list(DOCS), list(DOCS.values()))
    return model


# -- IBM Model 1 -----------------------------------------------------------------------------------
def test_em_log_likelihood_never_decreases_and_rows_sum_to_one(data):
    m, log = trained("wtm", data, iterations=20, tol=0.0)
    lls = [it["log_likelihood"] for it in log["em"]["iterations"]]
    assert len(lls) >= 5
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(lls, lls[1:]))
    assert all(math.isfinite(x) for x in lls)
    rows = np.asarray(m.word_table.sum(axis=1)).ravel()
    used = rows > 0
    np.testing.assert_allclose(rows[used], 1.0, atol=1e-9)


def test_raw_ibm1_rows_sum_to_one_with_null():
    src = sp.csr_matrix(np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1]], dtype=float))
    tgt = sp.csr_matrix(np.array([[1, 0, 0], [0, 0, 1], [1, 0, 1]], dtype=float))
    res = ibm1(src, tgt, iterations=30, tol=0.0)
    np.testing.assert_allclose(np.asarray(res.table.sum(axis=1)).ravel(), 1.0, atol=1e-9)
    assert res.null.sum() == pytest.approx(1.0)
    # pair 1 (w0, w1 -> q0), pair 3 (w0, w2 -> q0, q2): q0 follows w0
    assert res.table[0, 0] > 0.5


def test_em_learns_the_planted_translations(wtm):
    for q, t in SYNONYMS.items():
        best, p = wtm.translations(t, 1)[0]
        assert best == q and p > 0.3, (t, wtm.translations(t, 3))


def test_em_that_stops_improving_says_so(data):
    _, log = trained("wtm", data, iterations=50, tol=0.05)
    assert len(log["em"]["iterations"]) < 50
    assert log["em"]["stopped"].startswith("stopped after iteration")


def test_em_progress_bar_runs(data, monkeypatch):
    monkeypatch.setenv("SEMSEARCH_PROGRESS", "1")
    _, log = trained("wtm", data, progress=True, iterations=2)
    assert log["em"]["iterations"][-1]["tokens_per_s"] > 0


# -- WTM ranking -------------------------------------------------------------------------------------
def test_wtm_score_equals_hand_computation(wtm):
    m = _indexed(wtm.with_params(alpha=0.3, mu=0.2))
    q = "black sofa"
    (s,) = m.score([q], [["d1", "d3"]])
    st = m._state
    ext = st["ext"]
    total = st["total"]
    counts = {w: sum(t.split().count(w) for t in DOCS.values()) for w in ("black", "sofa")}
    for d, got in zip(["d1", "d3"], s):
        words = DOCS[d].split()
        want = 0.0
        for qw in q.split():
            pc = max(counts[qw], 0.5) / total
            ml = words.count(qw) / len(words)
            tr = sum(_t(wtm, qw, w, ext) for w in words) / len(words)
            want += math.log(0.3 * pc + 0.7 * (0.2 * ml + 0.8 * tr))
        assert got == pytest.approx(want, rel=1e-9)


def _t(model, q: str, w: str, ext) -> float:
    """P(q|w) from the trained table, or the identity for a word without translations."""
    i, j = model.vocab.ids.get(w), model.vocab.ids.get(q)
    if i is None or model.word_table.getrow(i).nnz == 0:
        return float(q == w)
    return float(model.word_table[i, j]) if j is not None else 0.0


def test_wtm_ranks_the_translated_title_first(wtm):
    m = _indexed(wtm.with_params(alpha=0.1, mu=0.0))
    cands = ["d1", "d2", "d3", "d4", "d5"]
    for q, d in [("sofa", "d1"), ("fridge", "d3"), ("drill", "d4"), ("tv", "d2")]:
        (s,) = m.score([q], [cands])
        assert cands[int(np.argmax(s))] == d, (q, s)
    # a title word never seen in training translates to itself: "sofa" matches literally
    (s,) = m.score(["sofa"], [["d1", "d6"]])
    assert s[1] > s[0]


def test_with_params_shares_training_and_needs_no_refit(wtm):
    m = _indexed(wtm)
    other = m.with_params(alpha=0.5)
    assert other.word_table is m.word_table and other.params()["alpha"] == 0.5
    assert not np.allclose(m.score(["sofa"], [list(DOCS)])[0], other.score(["sofa"], [list(DOCS)])[0])
    with pytest.raises(ValueError, match="unknown parameters"):
        m.with_params(gamma=1)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        m.with_params(alpha=1.5)


# -- bad input -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["wtm", "ptm"])
def test_bad_input_gives_finite_scores(name, wtm, ptm):
    m = _indexed((wtm if name == "wtm" else ptm).with_params(alpha=0.0, mu=0.0))  # no smoothing at all
    queries = ["", "!!!", "zebra quokka", "sofa", "tv stand"]
    scores = m.score(queries, [list(DOCS)] * len(queries))
    for s in scores:
        assert np.isfinite(s).all()
    assert (scores[0] == 0).all() and (scores[1] == 0).all()  # empty after analysis
    z = m.score(["zebra quokka"], [list(DOCS)])[0]
    assert np.allclose(z, z[0])  # no word overlaps anything: every document ties
    with pytest.raises(ValueError, match="not in the indexed collection"):
        m.score(["sofa"], [["nope"]])
    with pytest.raises(ValueError, match="candidate lists"):
        m.score(["sofa", "tv"], [["d1"]])


def test_untrained_or_unindexed_model_raises(wtm):
    with pytest.raises(RuntimeError, match="not trained"):
        create_model("wtm").index(["a"], ["text"])
    fresh = wtm.with_params()
    fresh._state = {}
    with pytest.raises(RuntimeError, match="no collection indexed"):
        fresh.score(["sofa"], [["d1"]])


def test_training_pairs_with_empty_sides():
    pairs = [("sofa", "couch"), ("", "couch black"), ("sofa", ""), ("!!", "??"), ("tv", "television")] * 5
    _, log = trained("wtm", TrainingData.from_pairs(pairs), iterations=5)
    assert all(math.isfinite(it["log_likelihood"]) for it in log["em"]["iterations"])
    _, log2 = trained("wtm", TrainingData.from_pairs(pairs), null=False, iterations=5)
    assert log2["em"]["skipped_target_tokens"] == 5.0  # "sofa" with an empty title cannot be generated
    p, _ = trained("ptm", TrainingData.from_pairs(pairs), iterations=5)
    _indexed(p)
    assert np.isfinite(p.score(["sofa"], [list(DOCS)])[0]).all()


# -- PTM ------------------------------------------------------------------------------------------------
def test_ptm_with_beta_zero_is_the_wtm(wtm, ptm):
    w = _indexed(wtm.with_params(alpha=0.2, mu=0.3))
    p = _indexed(ptm.with_params(alpha=0.2, mu=0.3, beta=0.0))
    qs = ["black sofa", "tv stand", "white tv stand large", "fridge"]
    for a, b in zip(w.score(qs, [list(DOCS)] * 4), p.score(qs, [list(DOCS)] * 4)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_ptm_learns_the_phrase_and_uses_it(ptm):
    assert ptm.phrase_translations("television console", 1)[0][0] == "tv stand"
    p = _indexed(ptm.with_params(alpha=0.1, mu=0.0, beta=0.7))
    (s,) = p.score(["tv stand"], [list(DOCS)])
    assert list(DOCS)[int(np.argmax(s))] == "d2"
    # the phrase channel adds evidence for the title holding the translated phrase
    (s0,) = p.with_params(beta=0.0).score(["tv stand"], [list(DOCS)])
    assert s[1] - np.max(np.delete(s, 1)) > s0[1] - np.max(np.delete(s0, 1))


def test_grow_diag_final_and_phrase_extraction():
    # query "a b c", title "x y z w": a-x, b-y (both directions), c-z only one way
    qd = {(0, 0), (1, 1), (2, 2)}
    dq = {(0, 0), (1, 1)}
    A = _grow_diag_final(3, 4, qd, dq)
    assert A == {(0, 0), (1, 1), (2, 2)}
    got = {(tuple(key_terms(q)), tuple(key_terms(d))) for q, d in extract_phrases([10, 11, 12], [20, 21, 22, 23], A, 3)}
    assert ((10,), (20,)) in got and ((10, 11), (20, 21)) in got and ((10, 11, 12), (20, 21, 22)) in got
    assert ((12,), (22, 23)) in got  # the unaligned title word w extends the span
    assert ((10, 11), (20,)) not in got  # inconsistent: b's link leaves the span
    assert all(len(q) <= 3 and len(d) <= 3 for q, d in got)


def test_ngram_keys_round_trip():
    tokens = np.array([1, 2, 3, 4, 5], dtype=np.int64)
    offsets = np.array([0, 3, 3, 5])  # rows: [1 2 3], [], [4 5]
    rows, keys = ngram_keys(tokens, offsets, 2)
    assert rows.tolist() == [0, 0, 2]
    assert [key_terms(int(k)) for k in keys] == [[1, 2], [2, 3], [4, 5]]
    assert phrase_key([0]) != phrase_key([0, 0]) != phrase_key([0, 0, 0])
    rows3, keys3 = ngram_keys(tokens, offsets, 3)
    assert rows3.tolist() == [0] and key_terms(int(keys3[0])) == [1, 2, 3]


# -- persistence ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["wtm", "ptm"])
def test_save_load_round_trip(name, wtm, ptm, tmp_path):
    m = _indexed((wtm if name == "wtm" else ptm).with_params(alpha=0.15, mu=0.25))
    m.save(tmp_path / name)
    assert not list((tmp_path / name).glob("*.pkl"))
    back = load_model(tmp_path / name)
    assert type(back) is type(m) and back.params() == m.params()
    qs = ["black sofa", "tv stand", ""]
    for a, b in zip(m.score(qs, [list(DOCS)] * 3), back.score(qs, [list(DOCS)] * 3)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    # saved before indexing: loads trained, without a collection
    fresh = (wtm if name == "wtm" else ptm).with_params()
    fresh._state = {}
    fresh.save(tmp_path / f"{name}-bare")
    bare = load_model(tmp_path / f"{name}-bare")
    _indexed(bare)
    assert np.isfinite(bare.score(["sofa"], [list(DOCS)])[0]).all()


@pytest.mark.parametrize("name", ["wtm", "ptm"])
def test_retrieve_scores_the_whole_collection(name, wtm, ptm):
    m = _indexed((wtm if name == "wtm" else ptm).with_params(alpha=0.1))
    hits = m.retrieve(["sofa", "tv stand"], 3)
    for q, h in zip(["sofa", "tv stand"], hits):
        assert len(h) == 3 and h[0][1] >= h[1][1] >= h[2][1]
        (s,) = m.score([q], [list(DOCS)])
        np.testing.assert_allclose([x for _, x in h], np.sort(s)[::-1][:3])
    assert hits[0][0][0] in ("d1", "d6") and hits[1][0][0] == "d2"
    with pytest.raises(ValueError):
        m.retrieve(["sofa"], 0)


@pytest.mark.parametrize(
    "kind,raw,name",
    [
        ("wtm", {"iteration": 5}, "iteration"),
        ("wtm", {"alpha": 1.5}, "alpha"),
        ("ptm", {"beta": -0.1}, "beta"),
        ("ptm", {"max_len": 4}, "max_len"),
        ("wtm", {"null": "no"}, "null"),
        ("wtm", {"tol": -1.0}, "tol"),
        ("ptm", {"min_prob": 1.0}, "min_prob"),
        ("wtm", {"iterations": 0}, "iterations"),
        ("wtm", {"beta": 0.5}, "beta"),
    ],
)
def test_bad_parameters_name_themselves(kind, raw, name):
    with pytest.raises(ParamError, match=f"'{name}'"):
        recipe(kind, raw)


def test_recipe_splits_model_parameters_from_training_arguments():
    kw, args = recipe(
        "ptm", {"alpha": 0.1, "beta": 0.3, "max_len": 2, "iterations": 4, "null": False, "min_prob": 0.01}
    )
    assert kw == {"alpha": 0.1, "beta": 0.3, "max_len": 2}
    assert args == IBM1Args(iterations=4, null=False, min_prob=0.01) and args.tol == 1e-4
    assert recipe("wtm", {"mu": 0.5}) == ({"mu": 0.5}, IBM1Args())


def test_a_model_saved_before_typed_parameters_still_loads(ptm, tmp_path):
    """config.json of the old layout: the analyzer apart, training settings (and max_len) under "settings"."""
    m = _indexed(ptm.with_params(alpha=0.15, mu=0.25))
    m.save(tmp_path / "old")
    (tmp_path / "old" / "config.json").write_text(
        json.dumps(
            {
                "model": "ptm",
                "params": {"alpha": 0.15, "mu": 0.25, "beta": 0.5},
                "analyzer": {"stem": None, "stopwords": False},
                "settings": {"iterations": 15, "tol": 1e-4, "null": True, "min_prob": 1e-4, "max_len": 3},
            }
        )
    )
    back = load_model(tmp_path / "old")
    assert back.params() == m.params() and back.p.max_len == 3
    qs = ["black sofa", "tv stand"]
    for a, b in zip(m.score(qs, [list(DOCS)] * 2), back.score(qs, [list(DOCS)] * 2)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
