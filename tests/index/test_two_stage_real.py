"""The two-stage search (`make serve`'s system) on real Home Depot data, small enough for CI: a
sub-collection of the titles judged for 1,100 sampled queries plus 4,000 others. Stage 1 =
BM25 (english) ∪ MiniLM's title vectors in an 8-bit HNSW index (hnswsq), searched with the static
query encoder distilled from MiniLM on the train queries and titles (`static-query`, the titles
encoded once for both through the vector cache); stage 2 = LambdaMART trained in the build on the
train queries' stage-1 candidates, depths chosen on dev; scored on held-out test queries over the
whole sub-collection (unjudged = not relevant) against BM25 alone, served through HTTP."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_two_stage_beats_bm25_served(shared_data: Path, tmp_path: Path) -> None:
    os.environ["SEMSEARCH_DATA"] = str(shared_data)
    from fastapi.testclient import TestClient

    from semsearch.data import Corpus, EvalSet, open_dataset
    from semsearch.evaluation import evaluate, paired_ttest
    from semsearch.index import build_bundle
    from semsearch.plugins import create_model
    from semsearch.ranking.lambdamart import TWO_STAGE
    from semsearch.serving import create_app
    from semsearch.training import recipe
    from semsearch.training.ranker import fit_stage_ranker

    ds = open_dataset("homedepot")
    queries, full = ds.queries(), ds.corpus()
    rng = random.Random(0)
    qrels = {s: ds.qrels(s) for s in ("train", "dev", "test")}
    pick = {
        s: sorted(rng.sample(sorted(q for q in qrels[s] if queries.get(q, "").strip()), n))
        for s, n in (("train", 600), ("dev", 200), ("test", 300))
    }
    sub = {s: {q: qrels[s][q] for q in pick[s]} for s in pick}
    keep = {d for s in sub for q in sub[s] for d in sub[s][q]} | set(rng.sample(full.ids, 4000))
    rows = [i for i, d in enumerate(full.ids) if d in keep]
    corpus = Corpus([full.ids[i] for i in rows], [full.titles[i] for i in rows], [full.texts[i] for i in rows])

    kw, args = recipe(
        "lambdamart",
        {**TWO_STAGE, "stage_depths": [[50, 50], [100, 50]], "rel_threshold": 3, "search_efforts": [64, 128]},
    )
    ranker = create_model("lambdamart", **kw)
    ranker.index(corpus.ids, corpus.joined("title"))
    logs = []

    def train(search):  # type: ignore[no-untyped-def]
        logs.append(
            fit_stage_ranker(
                ranker,
                search,
                EvalSet(queries, {}, sub["train"]),
                EvalSet(queries, {}, sub["dev"]),
                args=args,
                progress=False,
            )
        )
        return ranker, logs[-1]

    from semsearch.data import TrainingData
    from semsearch.training import fit

    student = create_model("static-query")
    train_data = TrainingData(
        queries,
        corpus.ids,
        corpus.titles,
        [(q, d) for q in pick["train"] for d, g in sub["train"][q].items() if g >= 1],
        sub["train"],
    )
    _, sargs = recipe("static-query", {"spans": 1, "epochs": 4, "cache": str(tmp_path / "vectors")})
    log = fit(student, train_data, EvalSet(queries, {}, sub["dev"]), args=sargs, progress=False)
    assert log["best_dev"] > 0.8, log  # mean cosine to MiniLM on the dev queries (full size: 0.893)
    two = build_bundle(
        corpus,
        [create_model("bm25", analyzer="english"), student],
        tmp_path / "two",
        train_ranker=train,
        fields="title",
        vector_index="hnswsq",
        vector_cache=tmp_path / "vectors",
    )
    bm25 = build_bundle(corpus, [create_model("bm25")], tmp_path / "bm25", fields="title")
    assert logs and {(t["n_lexical"], t["n_semantic"]) for t in logs[0]["tried"]} == {(50, 50), (100, 50)}
    effort = logs[0]["search_effort"]  # the served efSearch, chosen on dev; the bundle's index keeps it
    assert [t["efSearch"] for t in effort["tried"]] == [64, 128] and effort["chosen"] in (64, 128)
    assert (
        json.loads((two / "models" / "static-query" / "index" / "vector_index.json").read_text())["params"]["efSearch"]
        == effort["chosen"]
    )

    runs = {}
    for name, path in (("two", two), ("bm25", bm25)):
        with TestClient(create_app(path)) as c:
            runs[name] = {
                q: {
                    h["doc_id"]: h["score"] for h in c.get("/search", params={"q": queries[q], "k": 100}).json()["hits"]
                }
                for q in pick["test"]
            }
    res = {
        n: {
            **evaluate(r, sub["test"], ["ndcg@10"]).per_query,
            **evaluate(r, sub["test"], ["recall@100"], rel_threshold=3).per_query,
        }
        for n, r in runs.items()
    }
    mean = {n: {m: sum(v.values()) / len(v) for m, v in r.items()} for n, r in res.items()}
    print("two-stage", mean["two"], "bm25", mean["bm25"])
    # measured at writing: two-stage 0.584 / 0.903 vs BM25 0.513 / 0.824
    # (nDCG@10 / Recall@100; an easier sub-collection)
    assert mean["two"]["ndcg@10"] > mean["bm25"]["ndcg@10"] + 0.03
    assert mean["two"]["recall@100"] > mean["bm25"]["recall@100"] + 0.03
    for m in ("ndcg@10", "recall@100"):
        t = paired_ttest(res["two"][m], res["bm25"][m])
        assert t.p < 0.01 and t.mean_diff > 0, (m, t)
