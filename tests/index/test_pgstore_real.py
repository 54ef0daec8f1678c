"""PgVectorStore on real homedepot embeddings against the faiss VectorIndex."""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration


def _p50_ms(search, queries: np.ndarray) -> float:  # type: ignore[no-untyped-def]
    """Median wall time of one single-query search call, in milliseconds."""
    times = []
    for row in queries:
        t0 = time.perf_counter()
        search(row[None, :])
        times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times))


def test_pgvector_matches_faiss_on_lsa_titles(shared_data: Path, pg_dsn: str) -> None:
    """LSA (k = 100, fitted on the train pairs) embeddings of 5,000 random titles and 300 queries:
    exact search in PostgreSQL returns faiss Flat's top 20 (ids, scores within 1e-5), its HNSW
    index finds at least 95% of it; prints p50 single-query latencies."""
    import os

    os.environ["SEMSEARCH_DATA"] = str(shared_data)
    from semsearch.data import TrainingData, open_dataset
    from semsearch.index import VectorIndex, recall_at_k
    from semsearch.index.pgstore import PgVectorStore
    from semsearch.plugins import create_model
    from semsearch.training import fit

    ds = open_dataset("homedepot")
    corpus = ds.corpus()
    m = create_model("lsa")
    fit(m, TrainingData.from_dataset(ds, "train", threshold=3, fields="title"), progress=False)
    pick = sorted(random.Random(0).sample(range(len(corpus.ids)), 5000))
    ids = [corpus.ids[i] for i in pick]
    titles = [corpus.titles[i] for i in pick]
    docs = m.encode_documents(titles)
    queries = m.encode_queries(list(ds.queries().values())[:300])

    flat = VectorIndex.build(ids, docs, "flat", model="lsa")
    hnsw = VectorIndex.build(ids, docs, "hnsw", model="lsa")
    t0 = time.perf_counter()
    store = PgVectorStore.create(pg_dsn, "homedepot_lsa", ids, docs, titles, model="lsa")
    build_s = time.perf_counter() - t0
    store.close()
    with PgVectorStore.open(pg_dsn, "homedepot_lsa", expect_model="lsa", expect_dim=docs.shape[1]) as s:
        truth = flat.search(queries, 20)
        exact = s.search(queries, 20, exact=True)
        approx = s.search(queries, 20)
        lat = {
            "pg hnsw": _p50_ms(lambda q: s.search(q, 20), queries),
            "pg exact": _p50_ms(lambda q: s.search(q, 20, exact=True), queries),
            "faiss flat": _p50_ms(lambda q: flat.search(q, 20), queries),
            "faiss hnsw": _p50_ms(lambda q: hnsw.search(q, 20), queries),
        }
        assert s.texts(ids[:2]) == titles[:2]
    assert [[d for d, _ in h] for h in exact] == [[d for d, _ in h] for h in truth]
    assert np.allclose([[x for _, x in h] for h in exact], [[x for _, x in h] for h in truth], atol=1e-5, rtol=0)
    recall = recall_at_k(approx, truth, 20)
    print(
        f"5,000 titles, LSA dim {docs.shape[1]}: build (COPY + HNSW) {build_s:.2f}s; pg HNSW recall@20 "
        f"{recall:.3f} (faiss HNSW {recall_at_k(hnsw.search(queries, 20), truth, 20):.3f}); p50 ms: "
        + ", ".join(f"{k} {v:.2f}" for k, v in lat.items())
    )
    assert 0.95 <= recall <= 1.0
    assert lat["pg hnsw"] < lat["pg exact"]
