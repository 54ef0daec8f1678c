"""The portable stage-2 ranker (``ranking.lambdamart.PORTABLE``): its booster input does not move
with what depends on the collection (the scale of BM25's scores, the level of the cosines, the
documents' lengths), and a ranker trained on one collection re-ranks another's bundle."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.ranking import Groups, LambdaMART
from semsearch.ranking.features import STAGE_FEATURES, DocWords
from semsearch.ranking.lambdamart import PORTABLE, RANKER_ONLY, TWO_STAGE, LambdaMARTParams

BOOSTER = {k: v for k, v in PORTABLE.items() if k in LambdaMARTParams.names() and k not in RANKER_ONLY}
FEATURES = [*PORTABLE["stage_features"], *PORTABLE["pair_features"]]


def _groups(rng: np.random.Generator) -> Groups:
    """Three queries' stage-1 candidates: BM25 scores, cosines, both ranks, query coverage."""
    sizes = [7, 4, 9]
    n = sum(sizes)
    X = np.column_stack(
        [
            rng.uniform(0, 20, n),  # lexical_score
            rng.uniform(0.1, 0.9, n),  # semantic_score
            rng.integers(1, 101, n),  # lexical_rank
            rng.integers(1, 101, n),  # semantic_rank
            rng.uniform(0, 1, n),  # query_coverage
        ]
    )
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return Groups([f"q{i}" for i in range(3)], [f"d{i}" for i in range(n)], X, np.zeros(n, np.int64), offsets)


def test_the_booster_input_does_not_move_with_the_scale_of_the_scores():
    """BM25's scores scaled (another collection's idf and lengths) and the cosines scaled (another
    kind of text) leave every column the booster sees unchanged; a ranker given the raw scores
    (the build's default two-stage ranker) sees them move."""
    assert FEATURES[:2] == ["lexical_score", "semantic_score"]
    assert set(PORTABLE["stage_features"]) == set(STAGE_FEATURES)
    g = _groups(np.random.default_rng(0))
    other = Groups(g.qids, g.docs, g.X.copy(), g.y, g.offsets)
    other.X[:, 0] *= 3.7
    other.X[:, 1] *= 0.6
    portable = LambdaMART(FEATURES, **BOOSTER)
    assert not any(c in ("lexical_score", "semantic_score") for c in portable.columns)
    assert "lexical_score (ratio to query max)" in portable.columns
    a, b = portable.matrix(g), portable.matrix(other)
    assert a.shape == (len(g.X), len(portable.columns))
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    raw = LambdaMART(FEATURES, query_norm=TWO_STAGE["query_norm"])
    assert not np.allclose(raw.matrix(g), raw.matrix(other))
    # each feature's copies are attributed to it (explanations sum them)
    assert {portable.base_feature(c) for c in portable.columns} == set(FEATURES)


def test_scale_free_names_features():
    with pytest.raises(ValueError, match="scale_free"):
        LambdaMART(FEATURES, scale_free=["bm25"])


def test_query_coverage_does_not_move_with_the_documents_lengths():
    """The share of the query's words a document has stays when documents grow by other words and
    the collection grows by other documents; the document length (left out) does not."""
    ids, texts = ["a", "b", "c"], ["red cat", "blue dog sleeps", "red dog"]
    small = DocWords(ids, texts)
    longer = DocWords([*ids, "x", "y"], [t + " and more words here" for t in texts] + ["green", "tall tree"])
    q, cands = ["red dog"], [["a", "b", "c"]]
    np.testing.assert_array_equal(
        small.columns(["query_coverage"], q, cands), longer.columns(["query_coverage"], q, cands)
    )
    assert not np.array_equal(small.columns(["doc_words"], q, cands), longer.columns(["doc_words"], q, cands))


def test_a_portable_ranker_reranks_another_collection(make_two_stage, tmp_path):
    """A ranker with only portable features, trained in one bundle's build, is included in a bundle
    of other documents (``index build --ranker DIR``) and re-ranks its searches; a ranker with
    feature models bound to its documents is refused there."""
    from semsearch.data import open_dataset
    from semsearch.index.bundle.search import Bundle

    params = ["features=[]", 'pair_features=["query_coverage"]', 'scale_free=["lexical_score","semantic_score"]']
    src = make_two_stage(tmp_path / "src", "[[5,5]]", *(x for p in params for x in ("--ranker-param", p)))
    corpus = open_dataset("tiny").corpus()
    keep = list(range(len(corpus.ids)))[::-1][: len(corpus.ids) - 3]  # other documents, another order
    tsv = tmp_path / "other.tsv"
    tsv.write_text("".join(f"new-{corpus.ids[i]}\t{corpus.titles[i]}\n" for i in keep), encoding="utf-8")
    enc = tmp_path / "src-enc"

    def build(ranker, out):
        args = ["index", "build", "--data", str(tsv), "--models", f"bm25,{enc}", "--analyzer", "english"]
        return CliRunner().invoke(app, [*args, "--fields", "title", "--ranker", str(ranker), "--out", str(out)])

    r = build(src / "ranker", tmp_path / "other")
    assert r.exit_code == 0, r.output
    b = Bundle.load(tmp_path / "other")
    assert b.two_stage and b.ranker.portable
    hits = b.search("red cat", 5).hits
    assert hits and all(h.doc_id.startswith("new-") for h in hits)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    default = make_two_stage(tmp_path / "default")  # bm25 and ulm feature models over the tiny documents
    r = build(default / "ranker", tmp_path / "refused")
    assert r.exit_code != 0 and "other documents" in r.output
