"""Hybrid retrieval: lexical top-N ∪ semantic top-M, as the BERT paper serves it (Sec. 2.2, 4.4:
inverted index top 300 ∪ k-NN top 20; Table 8 tags each result LEXICAL or SEMANTIC).

The union is ordered by reciprocal rank fusion or by score interpolation (``index.fusion``'s
``rrf`` / ``interpolate``); every hit keeps where it came from and both stages' scores and ranks,
so a ranker or a search page can use them."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..data import ranked
from ..models.base import Model
from ..types import Run
from .fusion import interpolate, rrf
from .vector import Hits

SCORERS = ("rrf", "interpolate")


class Source(enum.Flag):
    """Which retrieval stage found a hit; ``.name`` is LEXICAL, SEMANTIC or BOTH."""

    LEXICAL = 1
    SEMANTIC = 2
    BOTH = 3


@dataclass(frozen=True)
class HybridHit:
    doc_id: str
    score: float  # the merged score the list is ordered by
    sources: Source
    lexical: float | None = None  # stage scores and 1-based ranks, None where the stage missed it
    semantic: float | None = None
    lexical_rank: int | None = None
    semantic_rank: int | None = None


def _check(scorer: str, weight: float) -> None:
    if scorer not in SCORERS:
        raise ValueError(f"scorer must be one of {', '.join(SCORERS)}, got {scorer!r}")
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must be in [0, 1], got {weight}")


def merge(lexical: Hits, semantic: Hits, *, scorer: str = "rrf", weight: float = 0.5, rrf_k: int = 60,
          norm: str = "minmax") -> list[HybridHit]:
    """The union of one query's lexical and semantic hits, best first. ``scorer``: ``"rrf"``
    (Σ 1/(rrf_k + rank)) or ``"interpolate"`` (weight·semantic + (1 − weight)·lexical, scores
    normalised per query by ``norm``; weight 0 keeps the lexical order with semantic-only hits
    after). Ties by doc id."""
    _check(scorer, weight)
    runs = [{"q": dict(lexical)}, {"q": dict(semantic)}]
    fused = (rrf(runs, k=rrf_k) if scorer == "rrf" else interpolate(runs, [1.0 - weight, weight], norm=norm)).get("q", {})
    lex_rank = {d: r for r, (d, _) in enumerate(ranked(runs[0]["q"]), 1)}
    sem_rank = {d: r for r, (d, _) in enumerate(ranked(runs[1]["q"]), 1)}
    out = []
    for d, s in ranked(fused):
        src = (Source.LEXICAL if d in lex_rank else Source(0)) | (Source.SEMANTIC if d in sem_rank else Source(0))
        out.append(HybridHit(d, float(s), src, runs[0]["q"].get(d), runs[1]["q"].get(d), lex_rank.get(d), sem_rank.get(d)))
    return out


def merge_runs(lexical: Run, semantic: Run, *, n_lexical: int = 300, n_semantic: int = 20, scorer: str = "rrf",
               weight: float = 0.5, rrf_k: int = 60, norm: str = "minmax") -> Run:
    """``merge`` for every query of two runs, each cut first to its top ``n_lexical`` /
    ``n_semantic`` documents: the hybrid run of the paper's Table 3."""
    _check(scorer, weight)
    if n_lexical < 0 or n_semantic < 0:
        raise ValueError("n_lexical and n_semantic must be >= 0")
    out: Run = {}
    for q in sorted(lexical.keys() | semantic.keys()):
        hits = merge(ranked(lexical.get(q, {}))[:n_lexical], ranked(semantic.get(q, {}))[:n_semantic],
                     scorer=scorer, weight=weight, rrf_k=rrf_k, norm=norm)
        out[q] = {h.doc_id: h.score for h in hits}
    return out


class HybridRetriever:
    """Lexical and semantic retrieval over the same collection, merged per query. Any two models
    with ``retrieve`` (e.g. BM25 and a ``SemanticRetriever``); with ``concurrent`` both stages run
    at once in two threads (numpy, torch and faiss release the GIL for their heavy parts)."""

    def __init__(self, lexical: Model, semantic: Model, *, n_lexical: int = 300, n_semantic: int = 20,
                 scorer: str = "rrf", weight: float = 0.5, rrf_k: int = 60, norm: str = "minmax",
                 concurrent: bool = False):
        _check(scorer, weight)
        if n_lexical < 0 or n_semantic < 0 or n_lexical + n_semantic == 0:
            raise ValueError("n_lexical and n_semantic must be >= 0, and not both 0")
        self.lexical, self.semantic = lexical, semantic
        self.n_lexical, self.n_semantic = n_lexical, n_semantic
        self.scorer, self.weight, self.rrf_k, self.norm, self.concurrent = scorer, weight, rrf_k, norm, concurrent

    def _stage(self, model: Model, queries: list[str], n: int) -> list[Hits]:
        return model.retrieve(queries, n) if n > 0 else [[] for _ in queries]

    def search(self, queries: Sequence[str], k: int | None = None) -> list[list[HybridHit]]:
        """Per query, the merged hits (at most ``k`` if given), with sources and stage scores."""
        qs = [str(q) for q in queries]
        blank = [i for i, q in enumerate(qs) if not q.strip()]
        if blank:
            raise ValueError(f"empty query text at position {blank[0]}")
        if not qs:
            return []
        if self.concurrent:
            with ThreadPoolExecutor(2) as pool:
                lex_f = pool.submit(self._stage, self.lexical, qs, self.n_lexical)
                sem_f = pool.submit(self._stage, self.semantic, qs, self.n_semantic)
                lex, sem = lex_f.result(), sem_f.result()
        else:
            lex, sem = self._stage(self.lexical, qs, self.n_lexical), self._stage(self.semantic, qs, self.n_semantic)
        out = []
        for lh, sh in zip(lex, sem):
            hits = merge(lh, sh, scorer=self.scorer, weight=self.weight, rrf_k=self.rrf_k, norm=self.norm)
            out.append(hits[:k] if k is not None else hits)
        return out

    def retrieve(self, queries: Sequence[str], k: int) -> list[Hits]:
        """The merged lists as (doc id, merged score), like ``Model.retrieve``."""
        return [[(h.doc_id, h.score) for h in hits] for hits in self.search(queries, k)]
