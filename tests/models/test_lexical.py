"""Lexical models against their formulas, a reference implementation (bm25s), and each other."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from semsearch.models import BM25, ModelDirError, rank
from semsearch.params import ParamError
from semsearch.plugins import create_model, load_model, model_names, resolve_model

IDS = ["d1", "d2", "d3", "d4", "d5"]
DOCS = ["the cat sat on the mat", "cat cat dog", "a bird in the hand", "dog eats dog food", ""]


def _bm25_by_hand(query, k1, b):
    toks = [d.split() for d in DOCS]
    n, avgdl = len(toks), sum(map(len, toks)) / len(toks)
    out = []
    for t in toks:
        s = 0.0
        for q in query.split():
            df = sum(q in x for x in toks)
            tf = t.count(q)
            if tf:
                s += math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1 - b + b * len(t) / avgdl))
        out.append(s)
    return np.array(out)


@pytest.fixture()
def bm25():
    m = create_model("bm25", k1=1.2, b=0.75)
    m.index(IDS, DOCS)
    return m


def test_bm25_matches_formula(bm25):
    for q in ["cat", "dog cat", "bird hand the", "dog dog"]:
        got = bm25.score([q], [IDS])[0]
        np.testing.assert_allclose(got, _bm25_by_hand(q, 1.2, 0.75), rtol=1e-5)


def test_retrieve_agrees_with_scoring_everything(bm25):
    scores = bm25.score(["dog cat"], [IDS])[0]
    hits = bm25.retrieve(["dog cat"], 10)[0]
    assert [d for d, _ in hits] == [IDS[i] for i in np.argsort(-scores) if scores[i] > 0]
    assert bm25.retrieve(["zebra"], 3) == [[]]  # nothing matches: nothing retrieved
    assert len(bm25.retrieve(["the cat dog bird"], 2)[0]) == 2


def test_ties_are_broken_by_doc_id():
    m = create_model("bm25")
    m.index(["b", "c", "a"], ["same words", "same words", "same words"])
    assert [d for d, _ in m.retrieve(["same"], 3)[0]] == ["a", "b", "c"]
    run = rank(m, {"q": "same"}, {"q": ["c", "a", "b"]}, k=2)
    assert list(run["q"]) == ["a", "b"]


def test_unknown_candidate_and_bad_params(bm25):
    with pytest.raises(ValueError, match="not in the indexed collection"):
        bm25.score(["cat"], [["d1", "nope"]])
    with pytest.raises(ParamError, match=r"bm25 parameter 'b' must be <= 1, got 2"):
        create_model("bm25", b=2)
    with pytest.raises(ParamError, match="bm25 has no parameter 'mu'"):
        create_model("bm25", mu=3)
    with pytest.raises(ParamError, match=r"no parameter 'k1x' \(did you mean 'k1'\?\)"):
        create_model("bm25", k1x=3)
    with pytest.raises(ParamError, match="bm25 parameter 'k1' must be a number, got 'high'"):
        create_model("bm25", k1="high")
    with pytest.raises(ParamError, match="'stats' must be one of 'collection', 'exclude-query-pool'"):
        create_model("tfidf", stats="pooled")
    with pytest.raises(ParamError, match="'analyzer' must be one of 'paper', 'english', 'cjk', 'auto'"):
        create_model("ulm", analyzer="french")
    with pytest.raises(ParamError, match="random parameter 'seed' must be a whole number"):
        create_model("random", seed=1.5)
    with pytest.raises(ValueError, match="unknown model"):
        create_model("bm26")
    with pytest.raises(RuntimeError, match="index"):
        create_model("bm25").score(["x"], [["d1"]])
    assert {"bm25", "ulm", "tfidf", "random"} <= set(model_names())


def test_empty_query_scores_zero(bm25):
    assert bm25.score([""], [IDS])[0].tolist() == [0.0] * 5


def _ql(query, mu=None, lam=None):
    toks = [d.split() for d in DOCS]
    total = sum(map(len, toks))
    out = []
    for t in toks:
        s = 0.0
        for q in query.split():
            p_c = sum(x.count(q) for x in toks) / total
            if p_c == 0:
                continue
            tf = t.count(q)
            if mu is not None:
                s += math.log((tf + mu * p_c) / (len(t) + mu))
            else:
                s += math.log((1 - lam) * tf / len(t) + lam * p_c) if t else math.log(lam * p_c)
        out.append(s)
    return np.array(out)


@pytest.mark.parametrize("query", ["cat", "dog food", "the cat dog zebra"])
def test_query_likelihood_is_rank_equivalent_to_the_full_formula(bm25, query):
    ulm = create_model("ulm", mu=3.0)
    ulm.use_index(bm25.lexical_index)
    got, want = ulm.score([query], [IDS])[0], _ql(query, mu=3.0)
    np.testing.assert_allclose(got - want, (got - want)[0], atol=1e-5)  # differ by a per-query constant
    jm = ulm.with_params(lam=0.3)
    assert jm.params() == {"analyzer": "paper", "stats": "collection", "mu": 0.0, "lam": 0.3}
    got, want = jm.score([query], [IDS[:4]])[0], _ql(query, lam=0.3)[:4]
    np.testing.assert_allclose(got - want, (got - want)[0], atol=1e-5)
    with pytest.raises(ValueError, match="exactly one"):
        create_model("ulm", mu=10, lam=0.5)


def test_tfidf_is_a_cosine(bm25):
    t = create_model("tfidf")
    t.use_index(bm25.lexical_index)
    s = t.score(["cat dog", "zebra"], [IDS, IDS])
    assert np.all(s[0] <= 1 + 1e-6) and s[0].max() > 0.5 and s[1].tolist() == [0.0] * 5
    # a document scored against its own text is the maximum cosine, 1
    assert t.score(["dog eats dog food"], [["d4"]])[0][0] == pytest.approx(1.0, abs=1e-5)


def test_save_load_round_trip(tmp_path, bm25):
    bm25.save(tmp_path / "m")
    again = load_model(tmp_path / "m")
    assert isinstance(again, BM25) and again.params() == bm25.params()
    assert again.retrieve(["dog cat"], 5) == bm25.retrieve(["dog cat"], 5)
    assert resolve_model(str(tmp_path / "m"), k1=2.0).params()["k1"] == 2.0


def test_corrupt_or_mismatched_model_directory(tmp_path, bm25):
    bm25.save(tmp_path / "m")
    (tmp_path / "m" / "lexical.npz").write_bytes(b"garbage")
    with pytest.raises(ModelDirError, match="corrupt"):
        load_model(tmp_path / "m")
    with pytest.raises(ModelDirError, match="not 'ulm'"):
        create_model("ulm").load(tmp_path / "m")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelDirError, match="no model at .*without config.json"):
        resolve_model(str(tmp_path / "empty"))
    (tmp_path / "m" / "config.json").write_text("{")
    with pytest.raises(ModelDirError, match="unreadable"):
        load_model(tmp_path / "m")


def test_stats_from_a_subset(bm25):
    ix = bm25.lexical_index
    st = ix.stats(exclude=[1, 3])
    assert st.n_docs == 3 and st.df[ix.vocab.ids["dog"]] == 0
    other = bm25.with_stats(st)
    # 'dog' is unseen in the background: its idf grows, so d2 (dog) overtakes d1 on 'dog cat'
    assert other.score(["dog"], [["d2"]])[0][0] > bm25.score(["dog"], [["d2"]])[0][0]
    assert bm25.with_stats(None).score(["dog"], [IDS])[0].tolist() == bm25.score(["dog"], [IDS])[0].tolist()


def test_random_order_is_reproducible():
    r = create_model("random", seed=3)
    r.index(IDS, DOCS)
    a = r.score(["q"], [IDS])[0]
    assert a.tolist() == create_model("random", seed=3).score(["q"], [IDS])[0].tolist()
    assert a.tolist() != r.with_params(seed=4).score(["q"], [IDS])[0].tolist()
    assert len(r.retrieve(["q"], 2)[0]) == 2


def test_bm25_matches_bm25s_reference():
    """Same tokens, same k1/b, Lucene idf: our scores equal bm25s's (the peer we benchmark against)."""
    bm25s = pytest.importorskip("bm25s")
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(60)]
    docs = [" ".join(rng.choice(words, size=rng.integers(1, 30))) for _ in range(300)]
    ids = [str(i) for i in range(300)]
    ours = create_model("bm25", k1=1.5, b=0.75)
    ours.index(ids, docs)
    ref = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    ref.index([d.split() for d in docs], show_progress=False)
    for q in ["w1 w2", "w3", "w10 w11 w12 w59"]:
        got = ours.score([q], [ids])[0]
        want = ref.get_scores(q.split())
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_best_k_keeps_ties_at_the_cut_and_orders_them_by_doc_id():
    from semsearch.models.base import best_k, id_ranks

    ids = ["c", "a", "d", "b"]
    scores = np.array([1.0, 2.0, 1.0, 1.0])
    ranks = id_ranks(ids)
    assert ranks.tolist() == [2, 0, 3, 1]
    assert [ids[i] for i in best_k(scores, ranks, 3)] == ["a", "b", "c"]
    assert best_k(scores, ranks, 0).tolist() == [] and len(best_k(scores, ranks, 10)) == 4


def test_default_retrieve_breaks_ties_by_doc_id():
    class Flat(create_model("random").__class__):  # scores every document the same
        def score(self, queries, candidates):
            return [np.zeros(len(c)) for c in candidates]

    m = Flat()
    m.index(["z", "m", "a"], ["", "", ""])
    assert [d for d, _ in m.retrieve(["q"], 2)[0]] == ["a", "m"]


def test_exclude_query_pool_statistics(bm25):
    """stats = "exclude-query-pool": each query's statistics leave out the documents of its pool."""
    ix = bm25.lexical_index
    pooled = bm25.with_params(stats="exclude-query-pool")
    with pytest.raises(ValueError, match="needs each query's pool"):
        pooled.score(["dog"], [IDS])
    pooled.use_pools({"dog": {IDS[1], IDS[3], "not-in-corpus"}})
    want = bm25.with_stats(ix.stats(exclude=[1, 3]))
    for m in (pooled, pooled.with_params(k1=1.5)):  # the pools follow with_params
        w = want.with_params(k1=m.p.k1)
        assert m.score(["dog", "cat"], [IDS, IDS])[0].tolist() == w.score(["dog"], [IDS])[0].tolist()
        assert m.score(["cat"], [IDS])[0].tolist() == bm25.with_params(k1=m.p.k1).score(["cat"], [IDS])[0].tolist()
        assert m.retrieve(["dog"], 3) == w.retrieve(["dog"], 3)
    for kind in ("ulm", "tfidf"):
        m = create_model(kind, stats="exclude-query-pool")
        m.use_index(ix)
        m.use_pools({"dog": [IDS[1]]})
        plain = create_model(kind)
        plain.use_index(ix)
        plain = plain.with_stats(ix.stats(exclude=[1]))
        np.testing.assert_allclose(m.score(["dog"], [IDS])[0], plain.score(["dog"], [IDS])[0])


def test_lexical_recipe_and_old_configs(bm25, tmp_path):
    from semsearch.training import recipe

    assert recipe("bm25", {"k1": 1.2, "analyzer": "english", "stats": "exclude-query-pool"}) == (
        {"k1": 1.2, "analyzer": "english", "stats": "exclude-query-pool"},
        None,
    )
    with pytest.raises(ParamError, match=r"--param: bm25 has no parameter 'epochs'"):
        recipe("bm25", {"epochs": 3}, where="--param")
    bm25.with_params(k1=1.1).save(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["params"] == {"stats": "collection", "k1": 1.1, "b": 0.75} and cfg["analyzer"] == bm25.analyzer.config()
    cfg["params"] = {"k1": 1.1, "b": 0.75, "lr": 0.1}  # an older config: names the model no longer has are ignored
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    back = load_model(tmp_path / "m")
    assert back.params() == bm25.with_params(k1=1.1).params()
    assert back.score(["dog"], [IDS])[0].tolist() == bm25.with_params(k1=1.1).score(["dog"], [IDS])[0].tolist()


def test_query_pools(tiny_data):
    from semsearch.data import open_dataset, query_pools

    ds = open_dataset("tiny")
    pools = query_pools(ds)
    judged = {q for s in ds.splits for q in ds.qrels(s)}
    assert set(pools) == judged | set(ds.queries())  # the run ranks every query
    assert {f"d{i:02d}" for i in range(20)} <= pools["q0"] and set(ds.qrels("train")["q0"]) <= pools["q0"]
    by_text = query_pools(ds, {"q0": "red", "q3": "cat"})
    assert by_text == {"red": pools["q0"], "cat": pools["q3"]}


def _reference_retrieve(m, queries, k):
    """The formula the compiled kernel replaced: the sparse product Q @ W, the addend, best_k."""
    from semsearch.models.base import best_k

    ix = m.lexical_index
    qc = ix.query_counts(queries)
    scale = np.asarray(qc.sum(axis=1), dtype=np.float64).ravel()
    s = (m._query_weights(ix, qc).astype(np.float32) @ m._postings).tocsr()
    out = []
    for i in range(len(queries)):
        docs, sc = s.indices[s.indptr[i] : s.indptr[i + 1]], s.data[s.indptr[i] : s.indptr[i + 1]].astype(np.float64)
        if m._addend is not None:
            sc = sc + scale[i] * m._addend[docs]
        out.append([(ix.doc_ids[docs[j]], float(sc[j])) for j in best_k(sc, ix.id_order[docs], k)])
    return out


@pytest.mark.parametrize("name", ["bm25", "ulm", "tfidf"])
@pytest.mark.parametrize("parallel", [False, True])
def test_compiled_retrieval_equals_sparse_product_and_best_k(name, parallel, monkeypatch):
    """Generated collection with Zipfian words (common words' postings outnumber the documents:
    the kernel's dense scan; rare words: its touched list) and many ties (short texts, shuffled
    ids): the kernel's hits — ids, order and scores to the bit — equal the sparse-product formula
    at every k, on the calling thread and in the parallel batch."""
    from semsearch.models.postings import PostingsTopK

    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(400)]
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    ids = [f"d{i:04d}" for i in rng.permutation(1500)]
    texts = [" ".join(rng.choice(words, size=rng.integers(0, 30), p=p)) for _ in ids]
    queries = [
        " ".join(
            rng.choice(words + ["unknown"], size=rng.integers(0, 6), p=np.append(p, 0.0) * 0.9 + 0.1 / (len(words) + 1))
        )
        for _ in range(300)
    ]
    m = create_model(name)
    m.index(ids, texts)
    walked = np.zeros(len(queries), dtype=np.int64)
    qc = m.lexical_index.query_counts(queries)
    m._top_k.search(qc.indptr, qc.indices, qc.data, np.zeros(len(queries)), 10, walked=walked)
    assert (walked >= len(ids)).sum() > 20 and (walked < len(ids)).sum() > 20  # both of the kernel's paths
    monkeypatch.setattr(PostingsTopK, "PARALLEL_FROM", 1 if parallel else 10**9)
    for k in (1, 3, 10, 1499, 1500, 5000):
        assert m.retrieve(queries, k) == _reference_retrieve(m, queries, k)
    ids_, scores, counts = m.retrieve_arrays(queries, 10)
    assert [list(zip(d[:n], s[:n])) for d, s, n in zip(ids_.tolist(), scores.tolist(), counts)] == m.retrieve(
        queries, 10
    )
    assert all(d == "" for row, n in zip(ids_, counts) for d in row[n:])


def test_compiled_retrieval_from_many_threads(bm25):
    """Server threads search the same model at once (the kernel releases the GIL; each thread
    has its own scratch): every thread gets the single-threaded answer."""
    from concurrent.futures import ThreadPoolExecutor

    queries = ["the cat", "dog", "cat dog", "sat mat", "", "bird"] * 50
    want = [bm25.retrieve([q], 5)[0] for q in queries]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda q: bm25.retrieve([q], 5)[0], queries))
    assert got == want
