"""A vector index split into shards that are searched together (issue 20 item 3).

At tens of millions of documents one faiss index outgrows a machine's memory or its build time;
the usual answer (faiss's ``IndexShards``, Vespa/Milvus segments) is several indexes over
disjoint parts of the collection, each searched for the query's top k, their hits merged. For IVF
the shards must share one trained coarse quantizer and product quantizer — trained once, on a
sample, and copied into every shard — so a document gets the same list and the same code in
whichever shard it lands, and a query probes the same lists everywhere. Then the merged top k
equals the unsharded index's, which the tests check (inner product, cosine and L2; flat and
IVF-PQ, with and without exact re-scoring).

The merge orders by score (higher is nearer for every metric, see ``VectorIndex``), equal scores
by doc id — the unsharded convention. IVF-PQ with re-scoring merges the shards' code-distance
short lists first and re-scores the global short list, as one index would; re-scoring each
shard's own list would look at more candidates than the unsharded index does and answer
differently. HNSW shards are separate graphs: allowed, but approximate in their own way.

A sharded index saves as one directory per shard (``shard-00000`` ..., each a ``VectorIndex``
directory, so a shard can be built and shipped on its own) and ``sharded_index.json``."""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..models.base import ModelDirError
from .vector import Hits, VectorIndex, _as_matrix, _unit

SHARDED_META = "sharded_index.json"
SHARD_DIR = "shard-{:05d}"


class ShardedVectorIndex:
    """``shards`` ``VectorIndex``es over disjoint documents, searched together."""

    def __init__(self, shards: Sequence[VectorIndex]):
        if not shards:
            raise ValueError("a sharded index needs at least one shard")
        first = shards[0]
        for s in shards[1:]:
            if (s.dim, s.kind, s.metric, s.model) != (first.dim, first.kind, first.metric, first.model):
                raise ValueError("shards must share dimension, kind, metric and model")
        seen: set[str] = set()
        for s in shards:
            if seen.intersection(s.doc_ids):
                raise ValueError("a document id is in two shards")
            seen.update(s.doc_ids)
        self.shards = list(shards)

    @classmethod
    def build(cls, doc_ids: Sequence[str], vectors: Any, shards: int, kind: str = "flat", metric: str = "cosine", *,
              train_sample: int | None = None, model: str = "", threads: int | None = None,
              **params: int) -> "ShardedVectorIndex":
        """Split ``doc_ids``/``vectors`` into ``shards`` contiguous parts (as ``encode --shard i/N``
        writes them). IVF-PQ: the quantizers are trained once, on the first ``train_sample``
        vectors (default: all), and every shard starts from a copy of that trained, empty index."""
        v = np.asarray(vectors, dtype=np.float32)
        if v.ndim != 2:
            raise ValueError(f"vectors must be a 2-d matrix, got shape {v.shape}")
        if len(doc_ids) != len(v):
            raise ValueError(f"{len(doc_ids)} doc ids but {len(v)} vectors")
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}")
        template = VectorIndex(v.shape[1], kind, metric, model=model, threads=threads, **params)
        if kind == "ivfpq":
            sample = v[: train_sample or len(v)]
            template._train(_unit(sample) if metric == "cosine" else sample)
        n = len(v)
        parts = []
        for i in range(shards):
            lo, hi = i * n // shards, (i + 1) * n // shards
            parts.append(template.empty_copy())
            parts[-1].add(doc_ids[lo:hi], v[lo:hi])
        return cls(parts)

    # -- searching --------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        return self.shards[0].dim

    def __len__(self) -> int:
        return sum(len(s) for s in self.shards)

    def set_search_params(self, **params: int) -> None:
        for s in self.shards:
            s.set_search_params(**params)

    def search(self, queries: Any, k: int) -> list[Hits]:
        """Per query vector, the top ``k`` over all shards (doc id, score), best first, equal
        scores by doc id: the unsharded index's answer."""
        if k < 1:
            raise ValueError("k must be at least 1")
        first = self.shards[0]
        q = _as_matrix(queries, first.dim, "query vectors")
        if first._reranks:
            return self._rescored(q, k)
        per_shard = [s.search(q, k) for s in self.shards]
        return [merge([hits[i] for hits in per_shard], k) for i in range(len(q))]

    def _rescored(self, q: np.ndarray, k: int) -> list[Hits]:
        """IVF-PQ with re-scoring: the shards' code-score short lists merged to the global short
        list of ``rerank``, then re-scored exactly in the shards that hold them."""
        first = self.shards[0]
        qn = _unit(q) if first.metric == "cosine" else q
        n = len(self)
        short = min(n, max(k, first.params["rerank"]))
        found = []  # per shard: (code scores, positions)
        for s in self.shards:
            found.append(s._faiss_search(qn, min(len(s), short)) if len(s) else (None, None))
        out = []
        for i, qv in enumerate(qn):
            cand = []  # (code score, shard, position)
            for j, (scores, pos) in enumerate(found):
                if scores is not None:
                    cand += [(float(sc), j, int(p)) for sc, p in zip(scores[i], pos[i]) if p >= 0]
            cand = heapq.nlargest(short, cand, key=lambda c: c[0])
            lists = []
            for j, s in enumerate(self.shards):
                p = np.array([c[2] for c in cand if c[1] == j], dtype=np.int64)
                lists.append(s._exact_top(qv, p, k) if len(p) else [])
            out.append(merge(lists, k))
        return out

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        for i, s in enumerate(self.shards):
            s.save(d / SHARD_DIR.format(i))
        meta = {"shards": len(self.shards), "count": len(self), **{k: v for k, v in self.shards[0].meta().items()
                                                                   if k in ("kind", "metric", "dim", "model")}}
        (d / SHARDED_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> "ShardedVectorIndex":
        """Read ``save``'s directory; ``kwargs`` as ``VectorIndex.load`` (``expect_model`` ...)."""
        d = Path(path)
        try:
            meta = json.loads((d / SHARDED_META).read_text(encoding="utf-8"))
            n = int(meta["shards"])
        except FileNotFoundError:
            raise ModelDirError(f"{d}: not a sharded vector index (missing {SHARDED_META})") from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ModelDirError(f"{d / SHARDED_META}: unreadable ({e})") from None
        ix = cls([VectorIndex.load(d / SHARD_DIR.format(i), **kwargs) for i in range(n)])
        if len(ix) != meta.get("count"):
            raise ModelDirError(f"{d}: shards hold {len(ix)} vectors, {SHARDED_META} says {meta.get('count')}")
        return ix


def merge(lists: Sequence[Hits], k: int) -> Hits:
    """The best ``k`` of several best-first hit lists over disjoint documents: by score, equal
    scores by doc id."""
    return heapq.nsmallest(k, (h for hits in lists for h in hits), key=lambda h: (-h[1], h[0]))
