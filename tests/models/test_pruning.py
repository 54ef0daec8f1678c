"""Dynamic pruning (block-max MaxScore) against exhaustive scoring: the same hits, the same order,
the same float scores to the bit, while scoring fewer postings."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from semsearch.models.postings import PostingsTopK
from semsearch.plugins import create_model


def _zipf_postings(rng, n_docs, n_terms, mean_len, quantized):
    """Term-major CSR of a Zipfian collection, BM25-like weights (the term's idf times a per-posting
    factor): factors from 4 values (many exact ties) or random (float32 sums that depend on their
    order)."""
    p = 1.0 / np.arange(1, n_terms + 1)
    p /= p.sum()
    lengths = rng.integers(1, 2 * mean_len, n_docs)
    rows = np.repeat(np.arange(n_docs), lengths)
    cols = rng.choice(n_terms, size=len(rows), p=p)
    m = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(n_docs, n_terms))
    m.sum_duplicates()
    idf = np.log1p(n_docs / np.maximum(np.bincount(m.indices, minlength=n_terms), 1))
    if quantized:
        factor = rng.choice(np.array([0.25, 0.5, 0.75, 1.0]), size=m.nnz)
    else:
        factor = rng.random(m.nnz) * 0.6 + 0.4
    m.data = (idf[m.indices] * factor).astype(np.float32)
    return m.T.tocsr()


def _queries(rng, n_terms, n):
    """CSR queries: one term, a few, or 12-20 terms (SciFact-like); weights 1-3 or random."""
    p = 1.0 / np.arange(1, n_terms + 1)
    p /= p.sum()
    rows = []
    for i in range(n):
        size = (1, 2, 3, 5, 12, 20)[i % 6]
        terms = np.unique(rng.choice(n_terms, size=size, p=p))
        w = (
            rng.integers(1, 4, len(terms)).astype(np.float32)
            if i % 2
            else (rng.random(len(terms)) + 0.1).astype(np.float32)
        )
        rows.append((terms, w))
    qptr = np.cumsum([0] + [len(t) for t, _ in rows])
    return qptr, np.concatenate([t for t, _ in rows]), np.concatenate([w for _, w in rows])


def _search_both(kern, qptr, qterms, qweights, scale, k):
    out = {}
    for mode in ("off", "on"):
        walked = np.zeros(len(qptr) - 1, dtype=np.int64)
        out[mode] = (*kern.search(qptr, qterms, qweights, scale, k, walked=walked, prune=mode), walked)
    return out


def _assert_identical(a, b):
    (d0, s0, c0, _), (d1, s1, c1, _) = a, b
    assert np.array_equal(c0, c1)
    assert np.array_equal(d0, d1)
    assert np.array_equal(s0.view(np.int64), s1.view(np.int64))  # bitwise


@pytest.fixture(scope="module")
def collections():
    rng = np.random.default_rng(11)
    out = []
    for quantized in (True, False):
        post = _zipf_postings(rng, 12_000, 300, 6, quantized)
        ranks = rng.permutation(12_000)  # doc id order is not position order
        out.append((post, ranks))
    return out


@pytest.mark.parametrize("addend", [False, True])
def test_pruned_kernel_equals_exhaustive(collections, addend):
    """Every k from 1 to past the matches, one-term to 20-term queries, exact ties (quantized
    weights) and order-dependent float32 sums (random weights), with and without a per-document
    addend: hits, order and scores identical to the bit; and far fewer postings scored."""
    rng = np.random.default_rng(5)
    for post, ranks in collections:
        n_docs = post.shape[1]
        add = -np.log1p(rng.integers(1, 40, n_docs) / 7.0) if addend else None
        kern = PostingsTopK(post.indptr, post.indices, post.data, n_docs, ranks, add)
        qptr, qterms, qweights = _queries(rng, post.shape[0], 120)
        scale = np.diff(qptr).astype(np.float64)
        walked = {"off": 0, "on": 0}
        for k in (1, 2, 10, 57, 1000, 20_000):
            got = _search_both(kern, qptr, qterms, qweights, scale, k)
            _assert_identical(got["off"], got["on"])
            if k <= 10:
                for mode in walked:
                    walked[mode] += int(got[mode][3].sum())
        assert walked["on"] < 0.4 * walked["off"], walked  # pruning really skipped postings


def test_pruned_kernel_keeps_ties_at_the_cut():
    """Every document scores the same: the top k are the k smallest doc id ranks, wherever they
    sit in the postings (pruning must not skip a document that would tie the k-th score)."""
    n_docs = 5000
    ranks = np.random.default_rng(3).permutation(n_docs)
    indptr = np.array([0, n_docs])
    kern = PostingsTopK(indptr, np.arange(n_docs), np.full(n_docs, 0.75, dtype=np.float32), n_docs, ranks)
    for k in (1, 7, 300):
        got = _search_both(kern, np.array([0, 1]), np.array([0]), np.array([2.0], dtype=np.float32), np.zeros(1), k)
        _assert_identical(got["off"], got["on"])
        assert sorted(ranks[got["on"][0][0]]) == list(range(k))


def test_pruned_batch_runs_in_parallel(collections, monkeypatch):
    post, ranks = collections[1]
    kern = PostingsTopK(post.indptr, post.indices, post.data, post.shape[1], ranks)
    qptr, qterms, qweights = _queries(np.random.default_rng(8), post.shape[0], 200)
    serial = kern.search(qptr, qterms, qweights, np.zeros(200), 10, prune="on")
    monkeypatch.setattr(PostingsTopK, "PARALLEL_FROM", 1)
    parallel = kern.search(qptr, qterms, qweights, np.zeros(200), 10, prune="on")
    assert all(np.array_equal(a, b) for a, b in zip(serial, parallel))


@pytest.mark.parametrize("parallel", [False, True])
def test_auto_chooses_per_query(collections, monkeypatch, parallel):
    """ "auto" prunes the queries with many postings and scores the others exhaustively, in one
    batch; the answers are those of either kernel."""
    post, ranks = collections[0]
    kern = PostingsTopK(post.indptr, post.indices, post.data, post.shape[1], ranks)
    qptr, qterms, qweights = _queries(np.random.default_rng(4), post.shape[0], 150)
    monkeypatch.setattr(PostingsTopK, "PRUNE_FROM", 3000)
    monkeypatch.setattr(PostingsTopK, "PRUNE_PER_K", 0)
    monkeypatch.setattr(PostingsTopK, "PARALLEL_FROM", 1 if parallel else 10**9)
    got = {}
    for mode in ("off", "on", "auto"):
        walked = np.zeros(150, dtype=np.int64)
        got[mode] = (*kern.search(qptr, qterms, qweights, np.zeros(150), 10, walked=walked, prune=mode), walked)
    _assert_identical(got["off"], got["auto"])
    n_post = np.array([int(np.diff(post.indptr)[qterms[qptr[i] : qptr[i + 1]]].sum()) for i in range(150)])
    pruned = n_post >= 3000
    assert 10 < pruned.sum() < 140
    assert np.array_equal(got["auto"][3], np.where(pruned, got["on"][3], got["off"][3]))


def test_prune_switch_and_unordered_postings():
    indptr, indices = np.array([0, 3]), np.array([2, 0, 1])  # doc ids not ascending
    kern = PostingsTopK(indptr, indices, np.ones(3, dtype=np.float32), 3, np.arange(3))
    q = (np.array([0, 1]), np.array([0]), np.ones(1, dtype=np.float32), np.zeros(1))
    with pytest.raises(ValueError, match="ascending"):
        kern.search(*q, 2, prune="on")
    assert kern.search(*q, 2, prune="auto")[2].tolist() == [2]  # falls back to scoring everything
    with pytest.raises(ValueError, match="prune"):
        kern.prune = "sometimes"  # type: ignore[assignment]


@pytest.mark.parametrize("name", ["bm25", "ulm", "tfidf"])
def test_models_retrieve_the_same_with_pruning_on_and_off(name):
    """Through the models (``pruning``): BM25, the unigram LM (its addend) and TF-IDF give the
    same ``retrieve_arrays`` and ``retrieve`` with pruning off, on and auto."""
    rng = np.random.default_rng(2)
    words = [f"w{i}" for i in range(300)]
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    ids = [f"d{i:05d}" for i in rng.permutation(8000)]
    texts = [" ".join(rng.choice(words, size=rng.integers(1, 12), p=p)) for _ in ids]
    queries = [" ".join(rng.choice(words, size=(1, 2, 4, 15)[i % 4], p=p)) for i in range(80)] + ["", "unknown w1"]
    m = create_model(name)
    m.index(ids, texts)
    results = {}
    for mode in ("off", "on", "auto"):
        m.pruning = mode
        assert m._top_k.prune == mode
        results[mode] = [m.retrieve_arrays(queries, k) for k in (1, 10, 100)] + [m.retrieve(queries, 10)]
    for mode in ("on", "auto"):
        for a, b in zip(results["off"][:3], results[mode][:3]):
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[2], b[2])
            assert np.array_equal(a[1].view(np.int64), b[1].view(np.int64))
        assert results["off"][3] == results[mode][3]
    walked = {}
    for mode in ("off", "on"):  # the model's own kernel and query arrays: pruning skipped postings
        walked[mode] = np.zeros(len(queries), dtype=np.int64)
        m._top_k.search(*m._query_arrays(queries), 10, walked=walked[mode], prune=mode)
    assert walked["on"].sum() < 0.5 * walked["off"].sum(), {k: int(v.sum()) for k, v in walked.items()}
    assert m.with_params().pruning == "auto"
    m.pruning = "off"
    assert m.with_params().pruning == "off"
    with pytest.raises(ValueError, match="pruning"):
        m.pruning = "yes"  # type: ignore[assignment]


def _reference_top_k(post, ranks, qptr, qterms, qweights, scale, addend, k):
    """Per query the best k by (score desc, doc id rank asc) of the scipy product's float32 sums
    (plus the addend in float64): what every kernel must return, to the bit."""
    n_terms, n_docs = post.shape
    q = sp.csr_matrix((qweights, qterms, qptr), shape=(len(qptr) - 1, n_terms), dtype=np.float32)
    s = (q @ post).tocsr()
    out = []
    for i in range(s.shape[0]):
        docs = s.indices[s.indptr[i] : s.indptr[i + 1]]
        sc = s.data[s.indptr[i] : s.indptr[i + 1]].astype(np.float64)
        if addend is not None:
            sc = sc + scale[i] * addend[docs]
        order = np.lexsort((ranks[docs], -sc))[:k]
        out.append((docs[order], sc[order]))
    return out


@pytest.mark.parametrize("addend", [None, "negative", "mixed"])
def test_exhaustive_kernel_equals_the_sparse_product(collections, addend):
    """The exhaustive kernel's two scans — the dense one (runs of documents by their largest
    score, a run that cannot reach the heap skipped) on long queries, the touched list on short
    ones — against the scipy product sorted by (score desc, rank asc): ids, order and scores
    to the bit at every k, exact ties (quantized weights) included, with an addend of either
    sign (its bound decides which runs are skipped)."""
    rng = np.random.default_rng(12)
    for post, ranks in collections:
        n_docs = post.shape[1]
        add = {
            None: None,
            "negative": -np.log1p(rng.integers(1, 40, n_docs) / 7.0),
            "mixed": rng.normal(0, 0.3, n_docs),
        }[addend]
        kern = PostingsTopK(post.indptr, post.indices, post.data, n_docs, ranks, add, prune="off")
        qptr, qterms, qweights = _queries(rng, post.shape[0], 90)
        scale = np.diff(qptr).astype(np.float64)
        walked = np.zeros(len(qptr) - 1, dtype=np.int64)
        kern.search(qptr, qterms, qweights, scale, 1, walked=walked)
        assert (walked >= n_docs).sum() > 10 and (walked < n_docs).sum() > 10  # both scans
        for k in (1, 3, 10, 100, 1000, n_docs):
            docs, scores, counts = kern.search(qptr, qterms, qweights, scale, k)
            want = _reference_top_k(post, ranks, qptr, qterms, qweights, scale, add, k)
            for i, (d, s) in enumerate(want):
                assert counts[i] == len(d)
                assert np.array_equal(docs[i, : counts[i]], d)
                assert np.array_equal(scores[i, : counts[i]].view(np.int64), s.view(np.int64))


@pytest.mark.parametrize("addend", [False, True])
@pytest.mark.parametrize("share", [0.0, 0.003, 0.05, 0.5, 1.0])
def test_allowed_mask_equals_the_ranking_of_the_allowed_documents(collections, addend, share):
    """``allowed``: every kernel (exhaustive, pruned, and the allowed documents' rows, chosen per
    query when they are fewer entries than its postings) returns exactly the reference ranking of
    the allowed documents alone: ids, order and scores to the bit, at every k."""
    rng = np.random.default_rng(21)
    for post, ranks in collections:
        n_docs = post.shape[1]
        add = -np.log1p(rng.integers(1, 40, n_docs) / 7.0) if addend else None
        kern = PostingsTopK(post.indptr, post.indices, post.data, n_docs, ranks, add)
        allowed = rng.random(n_docs) < share
        qptr, qterms, qweights = _queries(rng, post.shape[0], 90)
        scale = np.diff(qptr).astype(np.float64)
        for k in (1, 10, 100, n_docs):
            want = _reference_top_k(post, ranks, qptr, qterms, qweights, scale, add, n_docs)
            paths = set()
            for mode in ("off", "on", "auto"):
                walked = np.zeros(len(qptr) - 1, dtype=np.int64)
                docs, scores, counts = kern.search(
                    qptr, qterms, qweights, scale, k, walked=walked, prune=mode, allowed=allowed
                )
                rows_cost = int(np.diff(kern.doc_major[0])[allowed].sum())
                paths |= {"rows" if w == rows_cost else "postings" for w in walked.tolist()}
                for i, (d, s) in enumerate(want):
                    keep = allowed[d]
                    d, s = d[keep][:k], s[keep][:k]
                    assert counts[i] == len(d), (mode, k, i)
                    assert np.array_equal(docs[i, : counts[i]], d), (mode, k, i)
                    assert np.array_equal(scores[i, : counts[i]].view(np.int64), s.view(np.int64))
            if 0 < share < 0.1:
                assert "rows" in paths  # few allowed documents: their rows were read
            if share >= 0.5:
                assert "postings" in paths


def test_allowed_mask_in_parallel_batches_and_bad_masks(collections, monkeypatch):
    post, ranks = collections[1]
    n_docs = post.shape[1]
    kern = PostingsTopK(post.indptr, post.indices, post.data, n_docs, ranks)
    allowed = np.random.default_rng(3).random(n_docs) < 0.2
    qptr, qterms, qweights = _queries(np.random.default_rng(8), post.shape[0], 200)
    serial = kern.search(qptr, qterms, qweights, np.zeros(200), 10, allowed=allowed)
    monkeypatch.setattr(PostingsTopK, "PARALLEL_FROM", 1)
    parallel = kern.search(qptr, qterms, qweights, np.zeros(200), 10, allowed=allowed)
    assert all(np.array_equal(a, b) for a, b in zip(serial, parallel))
    assert allowed[serial[0][serial[0] >= 0]].all()
    none = kern.search(qptr, qterms, qweights, np.zeros(200), 10, allowed=np.zeros(n_docs, dtype=bool))
    assert none[2].sum() == 0
    with pytest.raises(ValueError, match="allowed"):
        kern.search(qptr, qterms, qweights, np.zeros(200), 10, allowed=np.ones(n_docs - 1, dtype=bool))
    with pytest.raises(ValueError, match="allowed"):
        kern.search(qptr, qterms, qweights, np.zeros(200), 10, allowed=np.ones(n_docs, dtype=np.int8))
