"""Query spelling correction on Home Depot (../shared/data): what it changes on dev, and that BM25
ranks the changed queries' judged titles better for it."""

from __future__ import annotations

import pytest

from semsearch.data import BeirDataset
from semsearch.evaluation import evaluate, paired_ttest
from semsearch.models import rank
from semsearch.plugins import create_model
from semsearch.text import SpellCorrector

pytestmark = pytest.mark.integration


def test_homedepot_dev_corrections_help_bm25(shared_data):
    ds = BeirDataset(shared_data / "homedepot")
    corpus, queries, qrels = ds.corpus(), ds.queries(), ds.qrels("dev")
    corrector = SpellCorrector.fit(corpus.titles)
    assert 15_000 < len(corrector.counts) < 25_000  # distinct title tokens
    for typed, fixed in [
        ("koehler cimarron bathroom sink", "kohler cimarron bathroom sink"),
        ("riobi blower vac 9056", "ryobi blower vac 9056"),
        ("12000 btuair conditioners window", "12000 btu air conditioners window"),
        ("6x8 pressure treated", "6x8 pressure treated"),
    ]:
        assert corrector.correct(typed) == fixed
    dev = {q: queries[q] for q in qrels}
    corrected = corrector.correct_all(dev)
    changed = [q for q in dev if corrected[q] != dev[q]]
    assert 0.08 < len(changed) / len(dev) < 0.25  # measured: 185 of 1,187 (15.6 %)
    bm25 = create_model("bm25", k1=0.6, b=0.25)
    bm25.index(corpus.ids, corpus.titles)
    sub = {q: qrels[q] for q in changed}
    cands = {q: list(qrels[q]) for q in changed}
    metrics = ["ndcg@1", "ndcg@10"]
    raw = evaluate(rank(bm25, {q: dev[q] for q in changed}, cands), sub, metrics)
    fixed_ = evaluate(rank(bm25, {q: corrected[q] for q in changed}, cands), sub, metrics)
    # measured on the 185 changed queries, as typed -> corrected: NDCG@1 0.654 -> 0.676, @10 0.867 -> 0.872 (p 0.11)
    gain = fixed_.mean["ndcg@10"] - raw.mean["ndcg@10"]
    assert 0.003 < gain < 0.05, gain
    assert fixed_.mean["ndcg@1"] > raw.mean["ndcg@1"]
    assert paired_ttest(fixed_.per_query["ndcg@10"], raw.per_query["ndcg@10"]).p < 0.3
