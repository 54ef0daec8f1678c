"""Hybrid retrieval: lexical top-N ∪ semantic top-M, as the BERT paper serves it (Sec. 2.2, 4.4:
inverted index top 300 ∪ k-NN top 20; Table 8 tags each result LEXICAL or SEMANTIC).

The union is ordered as a plain union (lexical order, semantic-only hits after), by reciprocal
rank fusion or by score interpolation (``index.fusion``'s ``rrf`` / ``interpolate``); every hit
keeps where it came from and both stages' scores and ranks, so a ranker or a search page can use
them. The one hybrid of the package: the search bundle, the service and spec rows all use it."""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data import ranked
from ..models.base import Model
from ..types import Run
from .fusion import interpolate, rrf
from .vector import Hits

SCORERS = ("union", "rrf", "interpolate")
Fill = tuple[Mapping[str, float], Mapping[str, float]]
"""A query's lexical scores of the hits only the semantic stage returned, and its semantic scores
of the hits only the lexical stage returned."""


class Source(enum.Flag):
    """Which retrieval stage found a hit; ``.name`` is LEXICAL, SEMANTIC or BOTH."""

    LEXICAL = 1
    SEMANTIC = 2
    BOTH = 3


@dataclass(slots=True)
class HybridHit:
    """One merged hit (treat it as immutable: ``dataclasses.replace`` makes changed copies). Not
    frozen: a search builds hundreds of them, and a frozen dataclass's ``__init__`` calls
    ``object.__setattr__`` per field."""

    doc_id: str
    score: float  # the merged score the list is ordered by
    sources: Source
    lexical: float | None = None  # stage scores and 1-based ranks, None where the stage missed it
    semantic: float | None = None
    lexical_rank: int | None = None
    semantic_rank: int | None = None


_LEXICAL, _SEMANTIC, _BOTH = Source.LEXICAL, Source.SEMANTIC, Source.BOTH  # (module globals: no enum member lookup)


def _check(scorer: str, weight: float) -> None:
    if scorer not in SCORERS:
        raise ValueError(f"scorer must be one of {', '.join(SCORERS)}, got {scorer!r}")
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must be in [0, 1], got {weight}")


def union(lexical: Hits, semantic: Hits, limit: int | None = None, *, fill: Fill | None = None) -> list[HybridHit]:
    """The paper's candidate set without a ranker (Sec. 4.4): the lexical hits in their own order,
    then the semantic-only hits in theirs; the merged score is 1 / position. With ``limit``, only
    the first ``limit`` of them (the service builds just the k it returns). ``fill``: the lexical
    and the semantic score of hits the other stage did not return (``HybridRetriever(complete=True)``)."""
    lex_fill, sem_fill = fill or ({}, {})
    n = len(lexical) + len(semantic) if limit is None else limit
    sem = {d: (r, s) for r, (d, s) in enumerate(semantic, 1)}
    out = []
    for r, (d, s) in enumerate(lexical[:n], 1):
        sr, ss = sem.get(d, (None, None))
        out.append(
            HybridHit(d, 1.0 / r, _LEXICAL, s, sem_fill.get(d), r, None)
            if sr is None
            else HybridHit(d, 1.0 / r, _BOTH, s, ss, r, sr)
        )
    if len(out) < n:
        lex_ids = {d for d, _ in lexical}
        for r, (d, s) in enumerate(semantic, 1):
            if len(out) >= n:
                break
            if d not in lex_ids:
                out.append(HybridHit(d, 1.0 / (len(out) + 1), _SEMANTIC, lex_fill.get(d), s, None, r))
    return out


@dataclass(slots=True)
class Candidates:
    """One query's merged stage-1 candidates as arrays, in ``union`` order (the lexical hits in
    their order, then the semantic-only hits in theirs): positions in the collection, each stage's
    score (NaN where the stage neither returned nor scored it) and 1-based rank (NaN where the stage
    did not return it). What a two-stage search ranks: ids are looked up, and ``HybridHit``s
    built, only for the hits it returns (``hits``)."""

    positions: np.ndarray  # int64
    lexical: np.ndarray  # float64, NaN: no score
    semantic: np.ndarray
    lexical_rank: np.ndarray  # float64, NaN: not returned by the stage
    semantic_rank: np.ndarray

    def __len__(self) -> int:
        return len(self.positions)

    def hits(
        self, ids: Any, rows: Sequence[int] | np.ndarray | None = None, scores: np.ndarray | None = None
    ) -> list[HybridHit]:
        """``HybridHit``s of ``rows`` (default: all, in order), their ids from ``ids``
        (``DocIds`` of the collection) and their score ``scores[row]`` (default: ``union``'s,
        1 / (row + 1)); a NaN stage score or rank becomes None."""
        rows = np.arange(len(self.positions)) if rows is None else np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return []
        doc_ids = ids.take(self.positions[rows]).tolist()
        cols = [
            np.where(np.isnan(a[rows]), None, a[rows]).tolist()  # type: ignore[arg-type, attr-defined]  # numpy stub
            for a in (self.lexical, self.semantic, self.lexical_rank, self.semantic_rank)
        ]
        score = (1.0 / (rows + 1.0) if scores is None else np.asarray(scores, dtype=np.float64)[rows]).tolist()
        out = []
        for d, sc, lx, sm, lr, sr in zip(doc_ids, score, *cols):
            src = _BOTH if lr is not None and sr is not None else _LEXICAL if lr is not None else _SEMANTIC
            out.append(HybridHit(d, sc, src, lx, sm, None if lr is None else int(lr), None if sr is None else int(sr)))
        return out


def union_positions(
    lex_pos: np.ndarray, lex_scores: np.ndarray, sem_pos: np.ndarray, sem_scores: np.ndarray
) -> Candidates:
    """``union`` on positions (each stage's hits best first): the same candidates in the same
    order, with the stage scores and ranks as arrays; the scores a stage did not give are NaN
    (``HybridRetriever`` fills them in when it is ``complete``)."""
    lex_pos, sem_pos = np.asarray(lex_pos, dtype=np.int64), np.asarray(sem_pos, dtype=np.int64)
    nl, ns = len(lex_pos), len(sem_pos)
    sem_only = ~np.isin(sem_pos, lex_pos, assume_unique=True)
    pos = np.concatenate([lex_pos, sem_pos[sem_only]])
    n = len(pos)
    lexical = np.full(n, np.nan)
    lexical[:nl] = lex_scores
    lexical_rank = np.full(n, np.nan)
    lexical_rank[:nl] = np.arange(1, nl + 1)
    semantic = np.full(n, np.nan)
    semantic_rank = np.full(n, np.nan)
    sem_rank = np.arange(1, ns + 1, dtype=np.float64)
    semantic[nl:] = sem_scores[sem_only]
    semantic_rank[nl:] = sem_rank[sem_only]
    if nl and ns:  # the hits both stages returned: their semantic score and rank
        both = ~sem_only
        at = np.searchsorted(lex_pos, sem_pos[both], sorter=(order := np.argsort(lex_pos, kind="stable")))
        rows = order[at]
        semantic[rows] = sem_scores[both]
        semantic_rank[rows] = sem_rank[both]
    return Candidates(pos, lexical, semantic, lexical_rank, semantic_rank)


def merge(
    lexical: Hits,
    semantic: Hits,
    *,
    scorer: str = "rrf",
    weight: float = 0.5,
    rrf_k: int = 60,
    norm: str = "minmax",
    k: int | None = None,
    fill: Fill | None = None,
) -> list[HybridHit]:
    """The union of one query's lexical and semantic hits, best first (at most ``k``). ``scorer``:
    ``"union"`` (``union``), ``"rrf"`` (Σ 1/(rrf_k + rank)) or ``"interpolate"`` (weight·semantic
    + (1 − weight)·lexical, scores normalised per query by ``norm``; weight 0 keeps the lexical
    order with semantic-only hits after). RRF and interpolation break ties by doc id. ``fill``:
    the stage scores of hits that stage did not return (``union``'s).

    Args:
        lexical: the lexical stage's (doc id, score) hits, best first.
        semantic: the semantic stage's hits, best first.
        scorer: "union", "rrf" or "interpolate".
        weight: the semantic weight of "interpolate".
        rrf_k: the rank offset of "rrf".
        norm: per-query score normalisation of "interpolate".
        k: the most hits returned (None: all).
        fill: each stage's scores of the hits it did not return.

    Returns:
        The merged hits, best first."""
    _check(scorer, weight)
    if scorer == "union":
        return union(lexical, semantic, k, fill=fill)
    lex_fill, sem_fill = fill or ({}, {})
    runs = [{"q": dict(lexical)}, {"q": dict(semantic)}]
    fused = (rrf(runs, k=rrf_k) if scorer == "rrf" else interpolate(runs, [1.0 - weight, weight], norm=norm)).get(
        "q", {}
    )
    lex_rank = {d: r for r, (d, _) in enumerate(ranked(runs[0]["q"]), 1)}
    sem_rank = {d: r for r, (d, _) in enumerate(ranked(runs[1]["q"]), 1)}
    out = []
    for d, s in ranked(fused)[:k]:
        src = (Source.LEXICAL if d in lex_rank else Source(0)) | (Source.SEMANTIC if d in sem_rank else Source(0))
        out.append(
            HybridHit(
                d,
                float(s),
                src,
                runs[0]["q"].get(d, lex_fill.get(d)),
                runs[1]["q"].get(d, sem_fill.get(d)),
                lex_rank.get(d),
                sem_rank.get(d),
            )
        )
    return out


def merge_runs(
    lexical: Run,
    semantic: Run,
    *,
    n_lexical: int = 300,
    n_semantic: int = 20,
    scorer: str = "rrf",
    weight: float = 0.5,
    rrf_k: int = 60,
    norm: str = "minmax",
) -> Run:
    """``merge`` for every query of two runs, each cut first to its top ``n_lexical`` /
    ``n_semantic`` documents: the hybrid run of the paper's Table 3.

    Args:
        lexical: the lexical run.
        semantic: the semantic run.
        n_lexical: lexical documents kept per query.
        n_semantic: semantic documents kept per query.
        scorer: as ``merge``.
        weight: as ``merge``.
        rrf_k: as ``merge``.
        norm: as ``merge``.

    Returns:
        The hybrid run."""
    _check(scorer, weight)
    if n_lexical < 0 or n_semantic < 0:
        raise ValueError("n_lexical and n_semantic must be >= 0")
    out: Run = {}
    for q in sorted(lexical.keys() | semantic.keys()):
        hits = merge(
            ranked(lexical.get(q, {}))[:n_lexical],
            ranked(semantic.get(q, {}))[:n_semantic],
            scorer=scorer,
            weight=weight,
            rrf_k=rrf_k,
            norm=norm,
        )
        out[q] = {h.doc_id: h.score for h in hits}
    return out


class HybridRetriever:
    """Lexical and semantic retrieval over the same collection, merged per query (Sec. 2.2, 4.4).
    Any two models with ``retrieve`` (e.g. BM25 and a ``SemanticRetriever``; None: that stage finds
    nothing). With ``concurrent`` the semantic stage runs in a pool thread while the lexical one
    runs in the caller's (numpy, torch and faiss release the GIL for their heavy parts) — on the
    hit-object path only: a ``positional`` retriever merging by ``union`` runs its stages in turn
    on arrays (``candidates``; the lexical kernel is too quick there to pay for a thread). Each
    model's calls hold its lock in ``locks`` (model id -> lock, may be shared with the caller):
    encoders and analyzers keep in-memory caches that are not thread-safe. With ``complete`` every
    merged hit carries both stages' scores: the lexical model scores the semantic-only hits and
    the semantic index the lexical-only ones (its stored vectors against the query embedding it
    searched with); ranks stay None where a stage did not return the hit — what a stage-2 ranker
    needs (BERT paper §4.5)."""

    def __init__(
        self,
        lexical: Model | None,
        semantic: Model | None,
        *,
        n_lexical: int = 300,
        n_semantic: int = 20,
        scorer: str = "rrf",
        weight: float = 0.5,
        rrf_k: int = 60,
        norm: str = "minmax",
        concurrent: bool = False,
        locks: dict[int, threading.Lock] | None = None,
        complete: bool = False,
    ):
        """The two stages and how they merge (the class docstring).

        Args:
            lexical: the lexical stage (None: it finds nothing).
            semantic: the semantic stage (None: it finds nothing).
            n_lexical: lexical hits per query.
            n_semantic: semantic hits per query.
            scorer: how the stages merge (``merge``).
            weight: the semantic weight of "interpolate".
            rrf_k: the rank offset of "rrf".
            norm: per-query score normalisation of "interpolate".
            concurrent: run the semantic stage in a pool thread.
            locks: model id -> lock held around that model's calls.
            complete: score every merged hit by both stages."""
        _check(scorer, weight)
        if n_lexical < 0 or n_semantic < 0 or n_lexical + n_semantic == 0:
            raise ValueError("n_lexical and n_semantic must be >= 0, and not both 0")
        self.lexical, self.semantic = lexical, semantic
        self.n_lexical, self.n_semantic = n_lexical, n_semantic
        self.scorer, self.weight, self.rrf_k, self.norm, self.concurrent = scorer, weight, rrf_k, norm, concurrent
        self.complete = complete
        self.locks = {} if locks is None else locks
        for m in [m for m in (lexical, semantic) if m is not None]:
            self.locks.setdefault(id(m), threading.Lock())
        self._pool: ThreadPoolExecutor | None = None
        self._same_ids: tuple[int, int, bool] | None = None

    @property
    def positional(self) -> bool:
        """Whether both stages search and score by position in one shared collection (a BM25-like
        model and a faiss index over the same documents in the same order): then ``candidates``
        works, and ``timed_search`` merges by ``union`` on arrays."""
        lex, sem = self.lexical, self.semantic
        if lex is not None and not getattr(lex, "positional", False):
            return False
        if sem is not None and not hasattr(getattr(sem, "vectors", None), "search_positions"):
            return False
        if lex is None or sem is None:
            return True
        a, b = lex.doc_ids, sem.doc_ids
        if self._same_ids is None or self._same_ids[:2] != (id(a), id(b)):  # re-checked after re-indexing
            self._same_ids = (id(a), id(b), bool(a == b))
        return self._same_ids[2]

    @property
    def doc_ids(self) -> Any:
        """The collection both stages index (a positional retriever's: ``DocIds``)."""
        return (self.lexical or self.semantic).doc_ids  # type: ignore[union-attr]  # one stage set

    def candidates(
        self,
        queries: Sequence[str],
        *,
        n_lexical: int | None = None,
        n_semantic: int | None = None,
        allowed: np.ndarray | None = None,
    ) -> tuple[list[Candidates], dict[str, float]]:
        """Per query, stage 1's merged candidates as arrays (``Candidates``; both stages' scores
        filled in when ``complete``), and each stage's time in ms (``lexical_ms``,
        ``semantic_ms``, ``complete_ms``, ``merge_ms``). Needs ``positional``. ``allowed`` (bool
        per document position; None: all) restricts both stages' top-k to the documents it marks
        True: each stage's depth is filled from them (the filter inside the kernels)."""
        if not self.positional:
            raise ValueError("candidates: the two stages do not share one positional collection")
        qs = [str(q) for q in queries]
        n_lex = self.n_lexical if n_lexical is None else n_lexical
        n_sem = self.n_semantic if n_semantic is None else n_semantic
        empty = (np.zeros(0, np.int64), np.zeros(0))
        timing: dict[str, float] = {}
        t = time.perf_counter()
        lex: list[tuple[np.ndarray, np.ndarray]] = [empty] * len(qs)
        if self.lexical is not None and n_lex > 0 and qs:
            with self.locks[id(self.lexical)]:
                docs, scores, counts = self.lexical.retrieve_positions(qs, n_lex, allowed=allowed)  # type: ignore[attr-defined]  # positional model
            lex = [(d[:c], s[:c]) for d, s, c in zip(docs, scores, counts.tolist())]
        timing["lexical_ms"] = 1000 * (time.perf_counter() - t)
        t = time.perf_counter()
        sem: list[tuple[np.ndarray, np.ndarray]] = [empty] * len(qs)
        vecs = None
        if self.semantic is not None and n_sem > 0 and qs:
            with self.locks[id(self.semantic)]:
                sem, vecs = self.semantic.search_positions(qs, n_sem, allowed=allowed)  # type: ignore[attr-defined]  # positional index
        timing["semantic_ms"] = 1000 * (time.perf_counter() - t)
        t = time.perf_counter()
        out = [union_positions(lp, ls, sp, ss) for (lp, ls), (sp, ss) in zip(lex, sem)]
        timing["merge_ms"] = 1000 * (time.perf_counter() - t)
        if self.complete:
            t = time.perf_counter()
            for i, (q, c) in enumerate(zip(qs, out)):
                no_lex = np.flatnonzero(np.isnan(c.lexical_rank))
                no_sem = np.flatnonzero(np.isnan(c.semantic_rank))
                if len(no_lex) and self.lexical is not None:
                    with self.locks[id(self.lexical)]:
                        c.lexical[no_lex] = self.lexical.score_positions([q], [c.positions[no_lex]])[0]  # type: ignore[attr-defined]  # positional model
                if len(no_sem) and vecs is not None:
                    with self.locks[id(self.semantic)]:
                        c.semantic[no_sem] = self.semantic.similarity_positions(vecs[i], c.positions[no_sem])  # type: ignore[union-attr]  # positional index
            timing["complete_ms"] = 1000 * (time.perf_counter() - t)
        return out, timing

    def _stage(
        self, model: Model | None, queries: list[str], n: int, allowed: np.ndarray | None = None
    ) -> tuple[list[Hits], float, Any]:
        """One stage's top ``n`` per query, its time (ms), and the query embeddings when the
        model searched with some (``SemanticRetriever.search``); with ``allowed``, the positional
        search inside it (``positional`` checked by the caller)."""
        if model is None or n <= 0:
            return [[] for _ in queries], 0.0, None
        t = time.perf_counter()
        vecs = None
        with self.locks[id(model)]:
            if allowed is not None:
                ids = self.doc_ids
                if hasattr(model, "similarity"):
                    found, vecs = model.search_positions(queries, n, allowed=allowed)  # type: ignore[attr-defined]  # positional index
                    hits = [list(zip(ids.take(p).tolist(), s.tolist())) for p, s in found]
                else:
                    docs, scores, counts = model.retrieve_positions(queries, n, allowed=allowed)  # type: ignore[attr-defined]  # positional model
                    hits = [
                        list(zip(ids.take(d[:c]).tolist(), s[:c].tolist()))
                        for d, s, c in zip(docs, scores, counts.tolist())
                    ]
            elif hasattr(model, "similarity"):
                hits, vecs = model.search(queries, n)  # type: ignore[attr-defined]  # semantic stage
            else:
                hits = model.retrieve(queries, n)
        return hits, 1000 * (time.perf_counter() - t), vecs

    def _fills(self, queries: list[str], lexical: list[Hits], semantic: list[Hits], vecs: Any) -> list[Fill]:
        """Per query, each stage's score of the hits only the other stage returned (see the class
        docstring), so that the merge builds every hit once, complete."""
        out: list[Fill] = []
        for i, (q, lh, sh) in enumerate(zip(queries, lexical, semantic)):
            lex_ids, sem_ids = {d for d, _ in lh}, {d for d, _ in sh}
            no_lex = [d for d, _ in sh if d not in lex_ids]  # (in the order the union lists them)
            no_sem = [d for d, _ in lh if d not in sem_ids]
            lex: dict[str, float] = {}
            sem: dict[str, float] = {}
            if no_lex and self.lexical is not None:
                with self.locks[id(self.lexical)]:
                    lex = dict(zip(no_lex, map(float, self.lexical.score([q], [no_lex])[0])))
            if no_sem and self.semantic is not None and vecs is not None:
                with self.locks[id(self.semantic)]:
                    sem = dict(zip(no_sem, map(float, self.semantic.similarity(vecs[i], no_sem))))  # type: ignore[attr-defined]  # semantic stage
            out.append((lex, sem))
        return out

    def timed_search(
        self,
        queries: Sequence[str],
        k: int | None = None,
        *,
        scorer: str | None = None,
        n_lexical: int | None = None,
        n_semantic: int | None = None,
        allowed: np.ndarray | None = None,
    ) -> tuple[list[list[HybridHit]], dict[str, float]]:
        """``search`` (``scorer`` and the stage depths default to the retriever's) and the time
        each stage took in ms: ``lexical_ms``, ``semantic_ms``, ``merge_ms``.

        Args:
            queries: the query texts.
            k: hits per query (None: all merged hits).
            scorer: overrides the retriever's scorer.
            n_lexical: overrides the lexical depth.
            n_semantic: overrides the semantic depth.
            allowed: bool per document position, True where a document may be returned (None:
                all); inside each stage's top-k (needs ``positional``).

        Returns:
            The hits per query and the stage times in ms."""
        qs, scorer = [str(q) for q in queries], scorer or self.scorer
        n_lex = self.n_lexical if n_lexical is None else n_lexical
        n_sem = self.n_semantic if n_semantic is None else n_semantic
        blank = [i for i, q in enumerate(qs) if not q.strip()]
        if blank:
            raise ValueError(f"empty query text at position {blank[0]}")
        if not qs:
            return [], {}
        if allowed is not None and not self.positional:
            raise ValueError("a filtered search needs both stages searching one positional collection")
        if scorer == "union" and self.positional:  # on arrays; HybridHits only for the hits kept
            cands, timing = self.candidates(qs, n_lexical=n_lex, n_semantic=n_sem, allowed=allowed)
            t = time.perf_counter()
            out = [c.hits(self.doc_ids, None if k is None else np.arange(min(k, len(c)))) for c in cands]
            timing["merge_ms"] += 1000 * (time.perf_counter() - t)
            return out, timing
        if self.concurrent and self.semantic is not None:
            self._pool = self._pool or ThreadPoolExecutor(4, thread_name_prefix="hybrid")
        # one thread hand-off per query, not two: hand-offs and GIL switches dominate at sub-ms stages
        sem_f = self._pool.submit(self._stage, self.semantic, qs, n_sem, allowed) if self._pool else None
        lex, lex_ms, _ = self._stage(self.lexical, qs, n_lex, allowed)
        sem, sem_ms, vecs = sem_f.result() if sem_f else self._stage(self.semantic, qs, n_sem, allowed)
        timing = {"lexical_ms": lex_ms, "semantic_ms": sem_ms}
        fills: list[Fill | None] = [None] * len(qs)
        if self.complete:
            t = time.perf_counter()
            fills = self._fills(qs, lex, sem, vecs)  # type: ignore[assignment]  # hits path
            timing["complete_ms"] = 1000 * (time.perf_counter() - t)
        t = time.perf_counter()
        out = [
            merge(lh, sh, scorer=scorer, weight=self.weight, rrf_k=self.rrf_k, norm=self.norm, k=k, fill=f)
            for lh, sh, f in zip(lex, sem, fills)
        ]
        timing["merge_ms"] = 1000 * (time.perf_counter() - t)
        return out, timing

    def search(self, queries: Sequence[str], k: int | None = None) -> list[list[HybridHit]]:
        """Per query, the merged hits (at most ``k`` if given), with sources and stage scores."""
        return self.timed_search(queries, k)[0]

    def retrieve(self, queries: Sequence[str], k: int) -> list[Hits]:
        """The merged lists as (doc id, merged score), like ``Model.retrieve``."""
        return [[(h.doc_id, h.score) for h in hits] for hits in self.search(queries, k)]

    def close(self) -> None:
        """Stop the stage thread (graceful shutdown)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
