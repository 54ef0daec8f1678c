"""Simulated clicks as a spec's training data: the click-scale regime of the DSSM and CLSM papers
(tens of millions of query–clicked-title pairs) stood in for by simulated users on a logging ranker.

A spec row's ``train`` block takes ``clicks = { ... }`` (`ClickSource`): the logging ranker
(BM25 over the collection, ``k`` results per query of the training split), the users
(`clicks.PositionBasedUser`: examination ρ_r^η, attraction ε + (1 − ε)(2^g − 1)/(2^gmax − 1)
with the split's grades, unjudged documents grade 0), the query stream (`clicks.QueryStream`,
Zipf ``exponent``) and how many click pairs to collect. Every click is one positive pair, as
``clicks.labels.click_pairs`` makes them from a logged click log, but here straight from the
simulator's chunks into two int32 arrays (query row, document position in the collection;
`clicks.simulate.simulate_click_arrays`):
nothing goes to disk, no Python object per click, memory ≈ 8 bytes a pair plus one chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..clicks.labels import click_grades
from ..clicks.simulate import Rankings, simulate_click_arrays
from ..data import TrainingData
from ..data.beir import BeirDataset
from ..data.training import PairList

CLICK_KEYS = (
    "pairs",
    "impressions",
    "eta",
    "epsilon",
    "k",
    "logger",
    "analyzer",
    "exponent",
    "seed",
    "chunk",
    "judgments",
    "levels",
)


@dataclass(frozen=True)
class ClickSource:
    """A simulated click log to train on: ``pairs`` clicked pairs (the simulation stops once it
    has them; 0: all clicks of ``impressions`` impressions), logged by ``logger`` (``bm25``)
    with ``analyzer`` over the row's fields, top ``k``, for users of the position-based model
    (``eta``, ``epsilon``), queries drawn Zipf-like (``exponent``), all seeded by ``seed``."""

    pairs: int = 10_000_000
    impressions: int = 0  # 0: as many as ``pairs`` takes; with pairs = 0, this many impressions
    eta: float = 1.0
    epsilon: float = 0.1
    k: int = 10
    logger: str = "bm25"
    analyzer: str = "english"
    exponent: float = 1.0
    seed: int = 0
    chunk: int = 500_000  # impressions simulated at a time (memory bound)
    judgments: bool = (
        False  # also graded labels from the clicks (`clicks.labels.click_grades`), for trainers that read qrels
    )
    levels: int = 5  # grades of ``judgments``: the raw click-through rate in ``levels`` equal bins of [0, 1]

    @classmethod
    def of(cls, raw: Mapping[str, Any], where: str = "clicks") -> ClickSource:
        """From a spec's ``train.clicks`` table; unknown keys and bad values are ValueErrors."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where} must be a table, got {raw!r}")
        unknown = sorted(set(raw) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"{where} has unknown keys {unknown}; keys: {', '.join(CLICK_KEYS)}")
        src = cls(**raw)
        ints = {"pairs": src.pairs, "impressions": src.impressions, "k": src.k, "seed": src.seed, "chunk": src.chunk}
        for name, v in ints.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{where}.{name} must be an integer >= 0, got {v!r}")
        if src.pairs == 0 and src.impressions == 0:
            raise ValueError(f"{where}: give pairs or impressions (> 0)")
        if not 1 <= src.k <= 10:
            raise ValueError(f"{where}.k must be in 1..10 (the position-based user's ranks), got {src.k}")
        if not 2 <= src.levels <= 31:
            raise ValueError(f"{where}.levels must be in 2..31, got {src.levels}")
        if src.chunk < 1:
            raise ValueError(f"{where}.chunk must be >= 1")
        if src.logger != "bm25":
            raise ValueError(f"{where}.logger must be 'bm25', got {src.logger!r}")
        if src.analyzer not in ("english", "paper"):
            raise ValueError(f"{where}.analyzer must be 'english' or 'paper', got {src.analyzer!r}")
        if not 0 <= src.epsilon <= 1 or src.eta < 0 or src.exponent < 0:
            raise ValueError(f"{where}: epsilon must be in [0, 1], eta and exponent >= 0")
        return src


def logger_rankings(
    ds: BeirDataset, split: str, fields_: str, k: int, analyzer: str = "english", corpus: Any = None
) -> Rankings:
    """BM25's top ``k`` over the whole collection for each query of ``split`` that has a text, as
    `clicks.Rankings` whose document codes are positions in the corpus (``doc_ids`` = the
    corpus ids) and whose grades are the split's (unjudged: 0)."""
    from ..models import rank
    from ..plugins import create_model

    corpus = corpus if corpus is not None else ds.corpus()
    queries = ds.queries()
    qrels = ds.qrels(split, check=True)
    texts = {q: queries[q] for q in qrels if q in queries}
    model = create_model("bm25", analyzer=analyzer)
    model.index(corpus.ids, corpus.joined(fields_))
    run = rank(model, texts, None, k=k)
    index = {d: i for i, d in enumerate(corpus.ids)}
    qids = list(texts)
    docs = np.full((len(qids), k), -1, np.int32)
    grades = np.zeros((len(qids), k), np.int8)
    for i, q in enumerate(qids):
        judged = qrels.get(q, {})
        top = sorted(run.get(q, {}).items(), key=lambda x: (-x[1], x[0]))[:k]
        for j, (d, _) in enumerate(top):
            docs[i, j] = index[d]
            grades[i, j] = max(0, int(judged.get(d, 0)))
    top_grade = max([1] + [int(g) for judged in qrels.values() for g in judged.values()])
    return Rankings(qids, [texts[q] for q in qids], list(corpus.ids), docs, grades, max_grade=top_grade)


def simulated_training(
    ds: BeirDataset, split: str, fields_: str, raw: Mapping[str, Any], corpus: Any = None
) -> tuple[TrainingData, dict[str, Any]]:
    """A spec row's ``train.clicks`` made into `TrainingData` (one positive per simulated click,
    a `PairList` over the split's query ids and the corpus) and a log of the simulation."""
    import time

    src = ClickSource.of(raw)
    corpus = corpus if corpus is not None else ds.corpus()
    t0 = time.perf_counter()
    rankings = logger_rankings(ds, split, fields_, src.k, src.analyzer, corpus)
    t1 = time.perf_counter()
    arrays = simulate_click_arrays(
        rankings,
        pairs=src.pairs,
        impressions=src.impressions,
        eta=src.eta,
        epsilon=src.epsilon,
        exponent=src.exponent,
        seed=src.seed,
        chunk_size=src.chunk,
    )
    t2 = time.perf_counter()
    queries = dict(zip(rankings.query_ids, rankings.queries))
    data = TrainingData(
        queries,
        list(corpus.ids),
        corpus.joined(fields_),
        PairList(rankings.query_ids, rankings.doc_ids, arrays.q, arrays.d),
        qrels=click_grades(rankings, arrays, src.levels) if src.judgments else {},
    )
    log = {
        "source": "simulated clicks",
        "settings": {f.name: getattr(src, f.name) for f in fields(src)},
        "queries": len(rankings.query_ids),
        "pairs": int(len(arrays.q)),
        "distinct_pairs": int(len(np.unique(arrays.q.astype(np.int64) * len(corpus.ids) + arrays.d))),
        "impressions": arrays.impressions,
        "clicks_per_impression": round(arrays.clicks / max(arrays.impressions, 1), 4),
        "clicks_by_rank": arrays.rank_counts.tolist(),
        "clicks_by_grade": arrays.grade_counts.tolist(),
        "logger_seconds": round(t1 - t0, 1),
        "simulation_seconds": round(t2 - t1, 1),
    }
    return data, log
