"""The coordinator of a sharded bundle (``shard``): the search a user asks of one bundle, answered
by scattering each round to every shard and merging what they return.

Per batch of queries: the spelling correction and the query embeddings once, here; stage 1 in
every shard (``Shard.stage1``), merged into the collection's lexical top n and semantic top m
(equal scores by doc id, as one index orders them; an IVF-PQ index that re-scores merges the
shards' code-score short lists into the one index's short list and has the shards holding it
score it exactly); their union; the missing stage scores and the ranker's per-document feature
columns from the shards that hold the candidates (``Shard.complete``); the per-query features
and the booster here. Each shard scores with the collection's statistics, so the hits and scores
are the single bundle's (tested on Home Depot and a synthetic collection).

Shards are reached through a ``ShardClient``: in this process (``LocalShards``) or as Ray Serve
deployments (``serving.cluster``). A shard that does not answer fails the search with
``ShardUnavailable`` naming it (the service's 503): a partial answer would look complete."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

import numpy as np

from ...models.base import ModelDirError, best_k
from ...plugins import load_model
from ...text import Analyzer, SpellCorrector
from ..filters import Filter, FilterIndex, Tally
from ..hybrid import merge, union_positions
from ..searcher import BundleSearcher, Capabilities, Hit, Result, SearchBase, SearchRequest
from ..semantic import SemanticRetriever, encoder_id
from .options import LoadOptions
from .search import Bundle, ResultCache
from .shard import SHARD, SHARDED, Shard, ShardVersionError, Stage1, is_sharded, read_sharded


class ShardUnavailable(RuntimeError):
    """A shard did not answer (its replicas are gone or failing): the search cannot be complete."""

    def __init__(self, shard: int, cause: BaseException):
        super().__init__(f"shard {shard} is unavailable ({type(cause).__name__}: {cause})")
        self.shard = shard


class ShardClient(Protocol):
    """How the coordinator reaches one shard: ``submit(method, *args)`` runs ``Shard.method``
    there and returns a future of its result."""

    def submit(self, method: str, *args: Any) -> Any: ...


class LocalShards:
    """Shards loaded in this process, each round run on every shard at once in a thread pool
    (the lexical kernel and faiss release the GIL)."""

    def __init__(self, shards: Sequence[Shard]):
        self.shards = list(shards)
        self._pool = ThreadPoolExecutor(max(1, len(shards)), thread_name_prefix="shard")

    def clients(self) -> list[ShardClient]:
        return [_LocalClient(s, self._pool) for s in self.shards]

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class _LocalClient:
    def __init__(self, shard: Shard, pool: ThreadPoolExecutor):
        self.shard, self.pool = shard, pool

    def submit(self, method: str, *args: Any) -> Future[Any]:
        return self.pool.submit(self.shard.call, method, *args)


class _Ids:
    """Doc ids by global position, for ``Candidates.hits``."""

    def __init__(self, ids: dict[int, str]):
        self.ids = ids

    def take(self, positions: np.ndarray) -> np.ndarray:
        return np.array([self.ids[int(p)] for p in positions], dtype=object)


def _merged(parts: list[tuple[np.ndarray, np.ndarray, list[str]]], offsets: Sequence[int], n: int):
    """The best ``n`` of the shards' hit lists (local positions, scores, ids) by score, equal
    scores by id: (global positions, scores, ids)."""
    pos = np.concatenate([p + off for (p, _, _), off in zip(parts, offsets)]) if parts else np.zeros(0, np.int64)
    scores = np.concatenate([s for _, s, _ in parts]) if parts else np.zeros(0)
    ids = [d for _, _, ds in parts for d in ds]
    if not len(pos):
        return pos.astype(np.int64), scores, ids
    order = sorted(range(len(pos)), key=lambda i: (-float(scores[i]), ids[i]))[:n]
    return pos[order].astype(np.int64), scores[order], [ids[i] for i in order]


class ShardedBundle(SearchBase):
    """A sharded bundle searched through its shards (module docstring); a ``BundleSearcher``
    like a ``Bundle``: the same requests and answers, ``hits``, ``filters`` and the bundle's
    description."""

    store = "faiss"
    capabilities = Capabilities(fallible=True, remote=True)
    """Its shards may not answer (``ShardUnavailable``); a search waits on them; no explain."""
    base = None
    """No plain bundle in this process (the documents are in the shards)."""

    def __init__(
        self,
        path: str | Path,
        clients: Sequence[ShardClient],
        options: LoadOptions | None = None,
        *,
        close: Callable[[], None] | None = None,
    ):
        opts = options or LoadOptions()
        p = Path(path)
        coord = read_sharded(p, verify=opts.verify)
        self.path, self.manifest = p, coord
        if len(clients) != len(coord["shards"]):
            raise ValueError(f"{p}: {len(coord['shards'])} shards, {len(clients)} clients given")
        self.clients = list(clients)
        self.offsets = [int(s["offset"]) for s in coord["shards"]]
        self.sizes = [int(s["documents"]) for s in coord["shards"]]
        self._close = close
        self.observe: Callable[[int, str, float, bool], None] | None = None
        """Called with (shard, round, seconds, answered) for every call to a shard (the service's metrics)."""
        self.lexical = (
            SimpleNamespace(analyzer=Analyzer.from_config(coord["analyzer"])) if coord.get("lexical") else None
        )
        """The lexical analyzer (the page's highlighting); the lexical models are in the shards."""
        self.semantic: dict[str, SemanticRetriever] = {}
        for e in coord.get("models", []):
            enc = load_model(p / e["path"])
            if encoder_id(enc) != e["encoder"]:
                raise ModelDirError(
                    f"{p / SHARDED}: model {e['name']!r} is {e['encoder']!r}, its folder holds {encoder_id(enc)!r}"
                )
            r = SemanticRetriever(enc, e["kind"], e["metric"])  # type: ignore[arg-type]  # a saved encoder  # (no index: the shards hold the vectors)
            r.query_cache = opts.query_cache
            self.semantic[e["name"]] = r
        rk = coord.get("ranker")
        self.ranker: Any = None
        if rk:
            from ...ranking.lambdamart import LambdaMART

            self.ranker = LambdaMART.load(p / rk["path"])
            self.stage_features = list(rk["stage_features"])
            self.n_lexical_rank, self.n_semantic_rank = int(rk["n_lexical"]), int(rk["n_semantic"])
        sp = coord.get("spelling")
        self.corrector = SpellCorrector.load(p / sp["path"]) if sp else None
        self.correct_queries = bool(opts.correct_queries and self.corrector is not None)
        schema = coord.get("schema") or {}
        self.filters = FilterIndex([], schema.get("facets", []), schema.get("numeric", []))
        """The filterable fields (what filters parse against; each shard masks its own documents)."""
        self.results = ResultCache(opts.result_cache)
        self._docs_lock = threading.Lock()
        self._enc_lock = threading.Lock()
        self._docs: OrderedDict[str, tuple[str, str, dict[str, Any]]] = OrderedDict()
        """The recent hits' titles, texts and stored fields, fetched from their shards by the search
        that returned them (``hits`` is called on the service's event loop, where no shard may be
        waited for)."""
        self._dims = {e["name"]: e for e in coord.get("models", [])}

    @classmethod
    def open_local(cls, path: str | Path, options: LoadOptions | None = None) -> ShardedBundle:
        """The sharded bundle at ``path`` with every shard loaded in this process."""
        opts = options or LoadOptions()
        p = Path(path)
        coord = read_sharded(p, verify=opts.verify)
        shards = [Shard(p / s["path"], verify=opts.verify) for s in coord["shards"]]
        listed = coord.get("files") or {}
        for s, sh in zip(coord["shards"], shards):
            # (unverified, the shard folders must still be the ones listed: two swapped shards
            # would answer at each other's offsets; the Ray replicas check the same digest)
            if sh.version != listed.get(f"{s['path']}/{SHARD}"):
                raise ModelDirError(f"{sh.path}: not the shard its sharded bundle lists ({SHARD} differs)")
        local = LocalShards(shards)
        return cls(p, local.clients(), opts, close=local.close)

    # -- what the service reads ---------------------------------------------------------------------
    def __len__(self) -> int:
        return sum(self.sizes)

    @property
    def filterable(self) -> bool:
        return bool(self.filters.fields)

    @property
    def two_stage(self) -> bool:
        return self.ranker is not None

    def explainable_models(self) -> list[str]:
        return []

    def explain(self, *_: Any, **__: Any) -> dict[str, Any]:
        raise ValueError("explain is not available on a sharded bundle")

    def explain_rank(self, *_: Any, **__: Any) -> dict[str, Any]:
        raise ValueError("explain is not available on a sharded bundle")

    def searched(self, query: str, correct: bool | None = None) -> str:
        if self.correct_queries if correct is None else correct:
            return self.corrector.correct(query)  # type: ignore[union-attr]  # guarded
        return query

    # -- search ----------------------------------------------------------------------------------------
    def _scatter(self, method: str, per_shard: Sequence[tuple[Any, ...]]) -> list[Any]:
        """``method`` run on every shard with its arguments, at once; its results in shard order."""
        futures = []
        t = time.perf_counter()
        for i, (c, args) in enumerate(zip(self.clients, per_shard)):
            try:
                futures.append(c.submit(method, *args))
            except Exception as e:  # any failure to reach a shard
                self._observe(i, method, t, False)
                raise ShardUnavailable(i, e) from e
        out = []
        for i, f in enumerate(futures):
            try:
                out.append(f.result())
            except Exception as e:  # any failure of a shard's answer
                self._observe(i, method, t, False)
                raise ShardUnavailable(i, e) from e
            self._observe(i, method, t, True)
        return out

    def _observe(self, shard: int, method: str, t: float, ok: bool) -> None:
        if self.observe is not None:
            self.observe(shard, method, time.perf_counter() - t, ok)

    def search_group(self, requests: Sequence[SearchRequest]) -> list[Result]:
        """``Bundle.search_group`` over the shards: the same requests and answers."""
        t0 = time.perf_counter()
        o = requests[0]
        queries = [self.searched(r.query, o.correct) for r in requests]
        flt = None
        if o.filters is not None:
            flt = o.filters if isinstance(o.filters, Filter) else self.filters.parse(o.filters)
            if not flt:
                flt = None
        allowed = o.allowed
        key = o.result_key(
            None if flt is None else repr(flt),
            None if allowed is None else hashlib.blake2b(np.packbits(allowed).tobytes(), digest_size=16).digest(),
        )
        out = self.results.answer(
            queries,
            key,
            t0,
            lambda todo: self._consistent(todo, o, flt, t0),
        )
        self._fetch_documents([h.doc_id for r in out for h in r.hits])
        return out

    VERSION_RETRIES = 5
    """Times a search runs again when its rounds reached two versions of a shard (a rollout)."""

    def _consistent(self, *args: Any) -> list[Result]:
        """``_search``, run again while a rollout gives its rounds two versions of a shard."""
        for attempt in range(self.VERSION_RETRIES + 1):
            try:
                return self._search(*args)
            except ShardUnavailable as e:
                if not isinstance(e.__cause__, ShardVersionError) or attempt == self.VERSION_RETRIES:
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    DOCUMENTS_KEPT = 50_000
    """Hits whose documents the coordinator keeps (``_docs``)."""

    def _fetch_documents(self, ids: list[str]) -> None:
        """The documents of ``ids`` into ``_docs``: those not there fetched from the shards."""
        with self._docs_lock:
            missing = [d for d in dict.fromkeys(ids) if d not in self._docs]
            for d in ids:
                if d in self._docs:
                    self._docs.move_to_end(d)
        if missing:
            found: dict[str, Any] = {}
            for part in self._scatter("documents", [(missing,)] * len(self.clients)):
                found.update(part)
            with self._docs_lock:
                self._docs.update(found)
                while len(self._docs) > max(self.DOCUMENTS_KEPT, len(ids)):
                    self._docs.popitem(last=False)

    def _search(self, queries: list[str], req: SearchRequest, flt: Filter | None, t0: float) -> list[Result]:
        """The rounds of a search of ``queries`` under ``req``'s options (``flt``: its filter parsed)."""
        k, model, merge_by, allowed, facets = req.depth, req.model, req.merge_by, req.allowed, req.facets
        timing: dict[str, float] = {}
        name = model if model is not None else next(iter(self.semantic), None)
        if self.two_stage:
            nl, ns = self.n_lexical_rank, self.n_semantic_rank
        else:
            nl, ns = max(req.n_lexical, k), max(req.n_semantic, 1)
        t = time.perf_counter()
        vecs = None
        if name is not None and ns > 0:
            with self._enc_lock:
                vecs = self.semantic[name].encode_queries(queries)
        timing["encode_ms"] = 1000 * (time.perf_counter() - t)
        t = time.perf_counter()
        slices = [None if allowed is None else allowed[o : o + n] for o, n in zip(self.offsets, self.sizes)]
        r1: list[list[Stage1]] = self._scatter("stage1", [(queries, vecs, name, nl, ns, flt, s) for s in slices])
        versions = [r[0].version if r else None for r in r1]  # (the later rounds must reach these)
        ids: list[dict[int, str]] = [{} for _ in queries]
        lex, sem = [], []
        for i in range(len(queries)):
            lp, ls, li = _merged([r[i].lexical for r in r1], self.offsets, nl)
            lex.append((lp, ls))
            ids[i].update(zip(lp.tolist(), li))
        short = any(r[i].short for r in r1 for i in range(len(queries)))
        if short:  # IVF-PQ with re-scoring: the one index's short list, scored exactly where it is held
            e = self._dims[str(name)]
            size = min(len(self), max(ns, int(e["params"]["rerank"])))
            lists = [_merged([r[i].semantic for r in r1], self.offsets, size) for i in range(len(queries))]
            exact = self._scatter(
                "rescore",
                [
                    (vecs, name, [p[(p >= o) & (p < o + n)] - o for p, _, _ in lists], v)
                    for o, n, v in zip(self.offsets, self.sizes, versions)
                ],
            )
            for i, (p, _, di) in enumerate(lists):
                scores = np.zeros(len(p))
                for j, (o, n) in enumerate(zip(self.offsets, self.sizes)):
                    scores[(p >= o) & (p < o + n)] = exact[j][i]
                order = sorted(range(len(p)), key=lambda x: (-float(scores[x]), di[x]))[:ns]
                sem.append((p[order], scores[order]))
                ids[i].update((int(p[x]), di[x]) for x in order)
        else:
            for i in range(len(queries)):
                sp, ss, si = _merged([r[i].semantic for r in r1], self.offsets, ns)
                sem.append((sp, ss))
                ids[i].update(zip(sp.tolist(), si))
        timing["stage1_ms"] = 1000 * (time.perf_counter() - t)
        cands = [union_positions(lp, ls, sp, ss) for (lp, ls), (sp, ss) in zip(lex, sem)]
        kept = k
        if not self.two_stage:
            found_hits = []
            for i, c in enumerate(cands):
                if merge_by == "union":
                    found_hits.append(
                        c.hits(_Ids(ids[i]), np.arange(len(c)) if facets else np.arange(min(kept, len(c))))
                    )
                else:
                    lh = [(ids[i][int(p)], float(s)) for p, s in zip(*lex[i])]
                    sh = [(ids[i][int(p)], float(s)) for p, s in zip(*sem[i])]
                    found_hits.append(merge(lh, sh, scorer=merge_by, k=None if facets else kept))
            tallies: list[Tally | None] = [None] * len(queries)
            if facets:
                pos_of = [{v: p for p, v in ids[i].items()} for i in range(len(queries))]
                tallies = self._tallies(
                    versions,
                    queries,
                    [np.array([pos_of[i][h.doc_id] for h in hs], np.int64) for i, hs in enumerate(found_hits)],
                )
            timing["total_ms"] = 1000 * (time.perf_counter() - t0)
            timing["batch"] = float(len(queries))
            return [
                Result(hs[:k], dict(timing), q, None if tl is None else tl.counts(facets), tl)
                for q, hs, tl in zip(queries, found_hits, tallies)
            ]
        # two-stage: fill each stage's missing scores, the document features, then the booster
        t = time.perf_counter()
        per_shard: list[tuple[Any, ...]] = []
        where: list[list[np.ndarray]] = []
        for o, n, v in zip(self.offsets, self.sizes, versions):
            pos, need_l, need_s, mine = [], [], [], []
            for c in cands:
                sel = np.flatnonzero((c.positions >= o) & (c.positions < o + n))
                mine.append(sel)
                pos.append(c.positions[sel] - o)
                need_l.append(np.flatnonzero(np.isnan(c.lexical_rank[sel])))
                need_s.append(
                    np.flatnonzero(np.isnan(c.semantic_rank[sel])) if vecs is not None else np.zeros(0, np.int64)
                )
            where.append(mine)
            per_shard.append((queries, vecs, name, pos, need_l, need_s, True, facets > 0, v))
        r2 = self._scatter("complete", per_shard)
        timing["complete_ms"] = 1000 * (time.perf_counter() - t)
        t = time.perf_counter()
        from ...ranking.features import Groups, stage_matrix

        blocks, tallies = [], []
        for i, c in enumerate(cands):
            cols = None
            tally: Tally | None = None
            for j in range(len(self.clients)):
                rows = where[j][i]
                lexf, semf, dcols, tl = r2[j][i]
                if not len(rows):
                    continue
                nl_idx = rows[np.flatnonzero(np.isnan(c.lexical_rank[rows]))]
                c.lexical[nl_idx] = lexf
                if vecs is not None:
                    ns_idx = rows[np.flatnonzero(np.isnan(c.semantic_rank[rows]))]
                    c.semantic[ns_idx] = semf
                if cols is None:
                    cols = np.zeros((len(c), dcols.shape[1]))
                cols[rows] = dcols
                if tl is not None:
                    tally = tl if tally is None else tally + tl
            raw = np.column_stack([c.lexical, c.semantic, c.lexical_rank, c.semantic_rank])
            stage = stage_matrix(self.stage_features, raw, nl, ns)
            blocks.append(np.hstack([stage, cols]) if cols is not None else stage)
            tallies.append(tally if facets else None)
        sizes = [len(c) for c in cands]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        X = np.vstack(blocks) if blocks else np.zeros((0, 0))
        scores = (
            self.ranker.predict(Groups([str(i) for i in range(len(cands))], [], X, np.zeros(len(X), np.int64), offsets))
            if len(X)
            else np.zeros(0)
        )
        out = []
        for i, (q, c) in enumerate(zip(queries, cands)):
            s = scores[offsets[i] : offsets[i + 1]]
            names = [ids[i][int(p)] for p in c.positions]
            ranks = np.argsort(np.argsort(np.array(names, dtype=object), kind="stable"), kind="stable")
            hits = c.hits(_Ids(ids[i]), best_k(s, ranks, k), s)
            tl = tallies[i]
            out.append((q, hits, tl))
        timing["rank_ms"] = 1000 * (time.perf_counter() - t)
        timing["total_ms"] = 1000 * (time.perf_counter() - t0)
        timing["batch"] = float(len(queries))
        return [Result(h, dict(timing), q, None if tl is None else tl.counts(facets), tl) for q, h, tl in out]

    def _tallies(
        self, versions: list[str | None], queries: list[str], positions: list[np.ndarray]
    ) -> list[Tally | None]:
        """The facet tally of each query's hits at ``positions`` (global), added up over the shards."""
        per_shard = []
        for o, n, v in zip(self.offsets, self.sizes, versions):
            pos = [p[(p >= o) & (p < o + n)] - o for p in positions]
            empty = [np.zeros(0, np.int64)] * len(queries)
            per_shard.append((queries, None, None, pos, empty, empty, False, True, v))
        r = self._scatter("complete", per_shard)
        out: list[Tally | None] = []
        for i in range(len(queries)):
            t: Tally | None = None
            for j in range(len(self.clients)):
                tl = r[j][i][3]
                t = tl if t is None else t + tl
            out.append(t)
        return out

    def hits(self, result: Result) -> list[Hit]:
        """Plain rows for a result: each hit's title, text and stored fields, from its shard."""
        ids = [h.doc_id for h in result.hits]
        with self._docs_lock:
            docs = {d: self._docs[d] for d in ids if d in self._docs}
        if len(docs) < len(set(ids)):  # (evicted since its search: fetched again)
            self._fetch_documents(ids)
            with self._docs_lock:
                docs = {d: self._docs[d] for d in ids}
        return [Hit(r, h.doc_id, h.score, *docs[h.doc_id]) for r, h in enumerate(result.hits, 1)]

    def close(self) -> None:
        if self._close is not None:
            self._close()


def open_bundle(path: str | Path, options: LoadOptions | None = None) -> BundleSearcher:
    """The bundle at ``path``: a plain one (``Bundle.load``) or a sharded one with every shard in
    this process (``ShardedBundle.open_local``)."""
    if is_sharded(path):
        return ShardedBundle.open_local(path, options)
    return Bundle.load(path, options)


__all__ = ["LocalShards", "open_bundle", "ShardClient", "ShardUnavailable", "ShardedBundle"]
