"""Compiled paths of the served ranker's features: the same numbers as the code they replaced."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from semsearch.models.postings import rows_dot


def test_rows_dot_is_scipys_product_to_the_bit() -> None:
    rng = np.random.default_rng(0)
    W = sp.random(300, 80, density=0.08, format="csr", random_state=1, dtype=np.float32)
    W.sort_indices()
    for _ in range(20):
        rows = rng.integers(0, 300, size=int(rng.integers(0, 60)))
        terms = np.unique(rng.integers(0, 80, size=int(rng.integers(0, 6)))).astype(np.int64)
        w = rng.random(len(terms))
        qv = np.zeros(80)
        qv[terms] = w
        want = (W[rows] @ qv) if len(rows) else np.zeros(0)
        got = rows_dot(W.indptr, W.indices, W.data, rows, terms, w)
        assert got.dtype == np.float64 and np.array_equal(got, want)


def test_lexical_candidate_scores_as_before() -> None:
    """``LexicalModel.score`` (compiled rows, query terms without scipy) gives what the scipy path
    gave: the candidates' rows times the dense query counts, plus the addend times the query's length."""
    from semsearch.models.base import positions
    from semsearch.plugins import create_model

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(40)]
    docs = [" ".join(rng.choice(words, size=int(rng.integers(1, 9)))) for _ in range(120)]
    ids = [f"d{i}" for i in range(len(docs))]
    for kind in ("bm25", "ulm"):
        m = create_model(kind)
        m.index(ids, docs)
        for q in ("w1 w2 w1", "w3 unknown", "nothing known", "w39"):
            cands = [ids[i] for i in rng.choice(len(ids), size=30, replace=False)]
            ix = m.lexical_index
            qc = ix.query_counts([q])
            qv = np.zeros(len(ix.vocab))
            qv[qc.indices] = qc.data.astype(np.float32)
            pos = positions(ix.position, cands)
            want = m._doc_major[pos] @ qv
            if m._addend is not None:
                want = want + float(qc.sum()) * m._addend[pos]
            assert np.array_equal(m.score([q], [cands])[0], want), (kind, q)


def test_doc_words_pair_features_as_pair_columns() -> None:
    from semsearch.ranking.features import PAIR_FEATURES, DocWords, pair_columns

    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(30)] + ["2x4", "Drill", "drill"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(0, 9)))) for _ in range(80)]
    ids = [f"d{i}" for i in range(len(texts))]
    table = DocWords(ids, texts)
    queries = ["w1 w2 w1", "drill 2x4 unknown", "???", "w29"]
    cands = [[ids[i] for i in rng.choice(len(ids), size=int(rng.integers(0, 25)), replace=False)] for _ in queries]
    for names in (list(PAIR_FEATURES), ["query_coverage", "doc_words"]):
        want = pair_columns(names, queries, [[texts[ids.index(d)] for d in c] for c in cands])
        got = table.columns(names, queries, cands)
        assert got.shape == want.shape and np.array_equal(got, want)


def test_top_k_as_the_full_sort() -> None:
    from semsearch.index.bundle import top_positions
    from semsearch.index.hybrid import HybridHit, Source

    rng = np.random.default_rng(11)
    for n in (0, 1, 5, 40):
        hits = [HybridHit(f"d{rng.integers(0, 10**6)}", 0.0, Source.LEXICAL) for _ in range(n)]
        s = rng.integers(0, 4, size=n).astype(np.float64)  # many ties at the cut
        for k in (1, 3, 10, 50):
            want = sorted(range(n), key=lambda i: (-float(s[i]), hits[i].doc_id))[:k]
            assert top_positions(hits, s, k) == want


def test_ranker_features_by_position_as_by_id() -> None:
    """The ranker's feature models scoring candidate positions looked up once give the matrix
    that scoring them by id gives."""
    from semsearch.plugins import create_model
    from semsearch.ranking.features import PAIR_FEATURES

    rng = np.random.default_rng(2)
    words = [f"w{i}" for i in range(25)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 8)))) for _ in range(60)]
    ids = [f"d{i}" for i in range(len(texts))]
    r = create_model("lambdamart", features=["bm25", "ulm"], pair_features=list(PAIR_FEATURES))
    r.index(ids, texts)
    assert r._by_position is not None
    queries = ["w1 w2", "w3 w3 w4", "nothing"]
    cands = [[ids[i] for i in rng.choice(len(ids), size=15, replace=False)] for _ in queries]
    fast = r.features(queries, cands)
    r._by_position, r._words = None, None
    slow = r.features(queries, cands)
    assert np.array_equal(fast, slow)
