"""Vector index and hybrid retrieval on real homedepot data."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def homedepot(shared_data: Path):  # type: ignore[no-untyped-def]
    import os

    os.environ["SEMSEARCH_DATA"] = str(shared_data)
    from semsearch.data import open_dataset

    return open_dataset("homedepot")


def test_hnsw_and_ivfpq_recall_against_exact_on_all_titles(homedepot) -> None:  # type: ignore[no-untyped-def]
    """LSA (k = 100, fitted on the train pairs in seconds) embeddings of all 54,667 titles; HNSW
    must find nearly all of exact search's top 20, IVF-PQ (20 bytes a vector) most of it."""
    from semsearch.data import TrainingData
    from semsearch.index import VectorIndex, recall_at_k
    from semsearch.plugins import create_model
    from semsearch.training import fit

    corpus = homedepot.corpus()
    m = create_model("lsa")
    fit(m, TrainingData.from_dataset(homedepot, "train", threshold=3, fields="title"), progress=False)
    docs = m.encode_documents(corpus.titles)
    queries = m.encode_queries(list(homedepot.queries().values())[:300])
    exact = VectorIndex.build(corpus.ids, docs, "flat", model="lsa").search(queries, 20)
    hnsw = VectorIndex.build(corpus.ids, docs, "hnsw", model="lsa")
    ivfpq = VectorIndex.build(corpus.ids, docs, "ivfpq", model="lsa", nlist=256, m=20, nbits=8, nprobe=16)
    r_hnsw, r_ivfpq = (
        recall_at_k(hnsw.search(queries, 20), exact, 20),
        recall_at_k(ivfpq.search(queries, 20), exact, 20),
    )
    print(f"recall@20 vs exact: hnsw {r_hnsw:.3f}, ivfpq {r_ivfpq:.3f}")
    assert 0.9 <= r_hnsw <= 1.0
    assert 0.65 <= r_ivfpq < r_hnsw
    assert ivfpq.bytes_per_doc() < 0.5 * VectorIndex.build(corpus.ids[:1000], docs[:1000], "flat").bytes_per_doc()


def test_hybrid_recall_beats_each_index_alone_on_a_subsample(homedepot) -> None:  # type: ignore[no-untyped-def]
    """BM25 top-50 ∪ off-the-shelf MiniLM top-10 over 2,000 titles (the judged titles of 100 test
    queries and random others): the union must find clearly more relevant titles than either."""
    from semsearch.evaluation import evaluate
    from semsearch.index import HybridRetriever, SemanticRetriever, Source
    from semsearch.plugins import create_model

    corpus, queries, qrels = homedepot.corpus(), homedepot.queries(), homedepot.qrels("test")
    qids = sorted(q for q in qrels if any(g >= 1 for g in qrels[q].values()))[:100]
    keep = {d for q in qids for d in qrels[q] if d in corpus.index}
    rest = [d for d in corpus.ids if d not in keep]
    keep |= set(random.Random(0).sample(rest, 2000 - len(keep)))
    ids = sorted(keep)
    titles = [corpus.titles[corpus.index[d]] for d in ids]
    bm25 = create_model("bm25")
    bm25.index(ids, titles)
    sem = SemanticRetriever(create_model("bert-rep", normalize=True), "hnsw", metric="ip")
    sem.index(ids, titles, progress=None)
    hybrid = HybridRetriever(bm25, sem, n_lexical=50, n_semantic=10)
    texts = [queries[q] for q in qids]
    hits = hybrid.search(texts)
    sub = {q: qrels[q] for q in qids}

    def recall(run):  # type: ignore[no-untyped-def]
        return evaluate(run, sub, ["recall@100"]).mean["recall@100"]

    r_lex = recall({q: dict(h) for q, h in zip(qids, bm25.retrieve(texts, 50))})
    r_sem = recall({q: dict(h) for q, h in zip(qids, sem.retrieve(texts, 10))})
    r_hyb = recall({q: {h.doc_id: h.score for h in hs} for q, hs in zip(qids, hits)})
    print(f"recall: BM25 top-50 {r_lex:.3f}, MiniLM top-10 {r_sem:.3f}, union {r_hyb:.3f}")
    assert r_hyb >= max(r_lex, r_sem) + 0.02
    assert 0.6 <= r_sem <= r_hyb <= 1.0
    kinds = {h.sources for hs in hits for h in hs}
    assert kinds == {Source.LEXICAL, Source.SEMANTIC, Source.BOTH}
    both = [h for hs in hits for h in hs if h.sources is Source.BOTH]
    assert all(h.lexical is not None and h.semantic is not None for h in both)
    assert np.mean([len(hs) for hs in hits]) <= 60


def test_filtered_vector_recall_at_1_percent_selectivity(homedepot, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Filtered k-NN over all 54,667 titles (LSA vectors, k = 100), 1 % of the titles allowed (a
    random 1 %, and the titles of one 1 % slice of the id order): recall@100 against the exact
    filtered top 100 must be >= 0.95 for hnsw and hnswsq, both as served (the planner scores so few
    allowed titles exactly) and through faiss's id selector alone (``EXACT_BELOW`` = 0: the graph
    walk with the bitmap, efSearch widened); every hit allowed."""
    from semsearch.data import TrainingData
    from semsearch.index import VectorIndex
    from semsearch.plugins import create_model
    from semsearch.training import fit

    corpus = homedepot.corpus()
    m = create_model("lsa")
    fit(m, TrainingData.from_dataset(homedepot, "train", threshold=3, fields="title"), progress=False)
    docs = m.encode_documents(corpus.titles)
    queries = m.encode_queries(list(homedepot.queries().values())[:200])
    n = len(corpus.ids)
    rng = np.random.default_rng(0)
    masks = {"random": rng.random(n) < 0.01, "slice": np.zeros(n, dtype=bool)}
    masks["slice"][n // 3 : n // 3 + n // 100] = True
    exact_ix = VectorIndex.build(corpus.ids, docs, "flat", model="lsa")
    served_below = VectorIndex.EXACT_BELOW
    truths = {name: exact_ix.search_positions(queries, 100, allowed=allowed) for name, allowed in masks.items()}
    for kind in ("hnsw", "hnswsq"):
        ix = VectorIndex.build(corpus.ids, docs, kind, model="lsa")
        for name, allowed in masks.items():
            truth = truths[name]
            for planner in ("served", "selector"):
                monkeypatch.setattr(VectorIndex, "EXACT_BELOW", served_below if planner == "served" else 0)
                got = ix.search_positions(queries, 100, allowed=allowed)
                assert all(allowed[p].all() and len(p) == len(t) for (p, _), (t, _) in zip(got, truth))
                recall = np.mean(
                    [len(set(p.tolist()) & set(t.tolist())) / len(t) for (p, _), (t, _) in zip(got, truth)]
                )
                print(f"{kind} {name} 1% {planner}: filtered recall@100 {recall:.3f}")
                assert recall >= 0.95, (kind, name, planner, recall)
