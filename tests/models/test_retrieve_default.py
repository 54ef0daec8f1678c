"""``Model.retrieve``'s default (score every document) on a stand-in model: blocks of queries
bounded by ``RETRIEVE_PAIRS``, and the same top-k as scoring every query at once."""

from __future__ import annotations

import numpy as np

from semsearch.models import base
from semsearch.models.base import Model


class Recorder(Model):
    """Scores document j for query q by a fixed pseudo-random table; records each call's pairs."""

    name = "recorder"

    def __init__(self, n_docs: int):
        self._ids = [f"d{i}" for i in range(n_docs)]
        self.calls: list[int] = []

    def index(self, doc_ids, texts):  # pragma: no cover - the collection is fixed
        self._ids = list(doc_ids)

    @property
    def doc_ids(self):
        return self._ids

    def save(self, path):  # pragma: no cover - not saved
        raise NotImplementedError

    @classmethod
    def load(cls, path):  # pragma: no cover - not saved
        raise NotImplementedError

    def score(self, queries, candidates):
        self.calls.append(sum(len(c) for c in candidates))
        out = []
        for q, docs in zip(queries, candidates):
            rng = np.random.default_rng(sum(map(ord, q)))
            table = rng.permutation(len(self._ids)).astype(np.float64)
            out.append(table[[int(d[1:]) for d in docs]])
        return out


def test_default_retrieve_scores_blocks_of_queries(monkeypatch):
    queries = [f"query {i}" for i in range(10)]
    m = Recorder(40)
    expected = [
        sorted(((d, float(s)) for d, s in zip(m.doc_ids, sc)), key=lambda x: -x[1])[:5]
        for sc in m.score(queries, [m.doc_ids] * len(queries))
    ]
    monkeypatch.setattr(base, "RETRIEVE_PAIRS", 120)  # 3 queries of 40 documents a call
    m.calls.clear()
    assert m.retrieve(queries, 5) == expected
    assert m.calls == [120, 120, 120, 40]
    monkeypatch.setattr(base, "RETRIEVE_PAIRS", 10)  # fewer pairs than documents: one query a call
    m.calls.clear()
    assert m.retrieve(queries, 5) == expected and m.calls == [40] * 10
