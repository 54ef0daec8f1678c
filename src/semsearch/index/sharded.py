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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..data.files import atomic_write, write_json
from ..models.base import ModelDirError
from ..models.doc_ids import DocIds
from ..types import Part
from .vector import Hits, VectorIndex, as_matrix, unit_rows

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
        if len(shards) > 1 and DocIds(chain.from_iterable(s.doc_ids for s in shards)).first_duplicate() is not None:
            raise ValueError("a document id is in two shards")  # (a compact check: no set of every id)
        self.shards = list(shards)

    @classmethod
    def from_encoded(
        cls,
        paths: Sequence[str | Path],
        kind: str = "ivfpq",
        metric: str = "cosine",
        *,
        train_sample: int = 100_000,
        threads: int | None = None,
        **params: int,
    ) -> ShardedVectorIndex:
        """One shard per encoded file (``semsearch encode --shard I/N``: the .npy and its .json),
        in shard order; the files must be the N shards of one encoding, each complete. IVF-PQ:
        the quantizers are trained once on the first ``train_sample`` vectors, read from the first
        shards, and shared.

        Args:
            paths: the shards' .npy files, in shard order.
            kind: the vector index kind.
            metric: "cosine", "ip" or "l2".
            train_sample: vectors the IVF-PQ quantizers are trained on.
            threads: faiss threads.
            **params: the index kind's parameters.

        Returns:
            The sharded index."""
        shards = complete_encoding(paths)
        template = _trained_template(shards, kind, metric, train_sample, threads, params)
        out = []
        for e in shards:
            ix = template.empty_copy()
            ix.add(e.ids, np.load(e.path, allow_pickle=False))
            out.append(ix)
        return cls(out)

    @classmethod
    def build(
        cls,
        doc_ids: Sequence[str],
        vectors: Any,
        shards: int,
        kind: str = "flat",
        metric: str = "cosine",
        *,
        train_sample: int | None = None,
        model: str = "",
        threads: int | None = None,
        **params: int,
    ) -> ShardedVectorIndex:
        """Split ``doc_ids``/``vectors`` into ``shards`` contiguous parts (as ``encode --shard i/N``
        writes them). IVF-PQ: the quantizers are trained once, on the first ``train_sample``
        vectors (default: all), and every shard starts from a copy of that trained, empty index.

        Args:
            doc_ids: one id per vector.
            vectors: (n, dim) document vectors.
            shards: the number of shards.
            kind: the vector index kind.
            metric: "cosine", "ip" or "l2".
            train_sample: vectors the IVF-PQ quantizers are trained on (None: all).
            model: the encoder's id.
            threads: faiss threads.
            **params: the index kind's parameters.

        Returns:
            The sharded index."""
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
            template.train(unit_rows(sample) if metric == "cosine" else sample)
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
        q = as_matrix(queries, first.dim, "query vectors")
        if first.reranks:
            return self._rescored(q, k)
        per_shard = [s.search(q, k) for s in self.shards]
        return [merge([hits[i] for hits in per_shard], k) for i in range(len(q))]

    def _rescored(self, q: np.ndarray, k: int) -> list[Hits]:
        """IVF-PQ with re-scoring: the shards' code-score short lists merged to the global short
        list of ``rerank``, then re-scored exactly in the shards that hold them."""
        first = self.shards[0]
        qn = unit_rows(q) if first.metric == "cosine" else q
        n = len(self)
        short = min(n, max(k, first.params["rerank"]))
        found = [s.short_list(q, short) for s in self.shards]  # per shard, per query: (positions, code scores)
        out = []
        for i, qv in enumerate(qn):
            cand = []  # (code score, shard, position)
            for j, shard_lists in enumerate(found):
                pos, code = shard_lists[i]
                cand += [(float(sc), j, int(p)) for sc, p in zip(code, pos)]
            cand = heapq.nlargest(short, cand, key=lambda c: c[0])
            lists = []
            for j, s in enumerate(self.shards):
                p = np.array([c[2] for c in cand if c[1] == j], dtype=np.int64)
                if len(p):
                    top, scores = s.rescore_positions(qv, p, k)
                    lists.append(list(zip(s.doc_ids.take(top).tolist(), scores.tolist())))  # type: ignore[attr-defined]  # positional index
                else:
                    lists.append([])
            out.append(merge(lists, k))
        return out

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        for i, s in enumerate(self.shards):
            s.save(d / SHARD_DIR.format(i))
        meta = {
            "shards": len(self.shards),
            "count": len(self),
            **{k: v for k, v in self.shards[0].meta().items() if k in ("kind", "metric", "dim", "model")},
        }
        write_json(d / SHARDED_META, meta)

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> ShardedVectorIndex:
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


def complete_encoding(paths: Sequence[str | Path]) -> list[EncodedShard]:
    """The encoded shards at ``paths`` in shard order, checked to be all N shards of one encoding
    (same model, texts and side), each complete; ValueError naming what is missing or foreign."""
    shards = sorted((EncodedShard.read(p) for p in paths), key=lambda e: e.shard[0])
    if not shards:
        raise ValueError("from_encoded: no shards given")
    n = shards[0].shard[1]
    first = shards[0]
    for e in shards:
        if (e.model, e.texts, e.side, e.shard[1]) != (first.model, first.texts, first.side, n):
            raise ValueError(
                f"{e.path}: shard of another encoding ({e.model}, {e.texts}, {e.side}, of {e.shard[1]}) "
                f"than {first.path} ({first.model}, {first.texts}, {first.side}, of {n})"
            )
    got = [e.part for e in shards]
    if [p.index for p in got] != list(range(n)):  # named as --shard names them, counted from 1
        missing = [str(Part(i, n)) for i in range(1, n + 1) if Part(i, n) not in got]
        raise ValueError(f"from_encoded: shards {', '.join(missing or map(str, got))} missing or repeated")
    return shards


def _trained_template(
    shards: Sequence[EncodedShard],
    kind: str,
    metric: str,
    train_sample: int,
    threads: int | None,
    params: dict[str, int],
) -> VectorIndex:
    """An empty index of the shards' dimension and model; IVF-PQ trained on the first
    ``train_sample`` vectors, read from the first shards."""
    first = shards[0]
    dim = int(np.load(first.path, mmap_mode="r").shape[1])
    template = VectorIndex(dim, kind, metric, model=first.model, threads=threads, **params)
    if kind == "ivfpq":
        parts, need = [], train_sample
        for e in shards:
            if need <= 0:
                break
            parts.append(np.asarray(np.load(e.path, mmap_mode="r")[:need], dtype=np.float32))
            need -= len(parts[-1])
        sample = np.vstack(parts)
        template.train(unit_rows(sample) if metric == "cosine" else sample)
    return template


def one_index_from_encoded(
    paths: Sequence[str | Path],
    kind: str = "ivfpq",
    metric: str = "cosine",
    *,
    train_sample: int = 100_000,
    threads: int | None = None,
    **params: int,
) -> VectorIndex:
    """All encoded shards in one ``VectorIndex`` (``index from-shards --one-index``): for one
    machine, where a single index answers faster than N shards searched one after another (one
    coarse search, one short list, where N shards repeat the coarse work N times). The same
    answers as ``ShardedVectorIndex.from_encoded`` over the same files (tested). Memory peaks at
    the full vectors (IVF-PQ with re-scoring) plus one shard.

    Args:
        paths: the shards' .npy files, in shard order.
        kind: the vector index kind.
        metric: "cosine", "ip" or "l2".
        train_sample: vectors the IVF-PQ quantizers are trained on.
        threads: faiss threads.
        **params: the index kind's parameters.

    Returns:
        One index over every shard's vectors."""
    shards = complete_encoding(paths)
    ix = _trained_template(shards, kind, metric, train_sample, threads, params)
    ix.add_parts(
        ((e.ids, np.load(e.path, allow_pickle=False)) for e in shards), total=sum(e.rows[1] - e.rows[0] for e in shards)
    )
    return ix


def merge(lists: Sequence[Hits], k: int) -> Hits:
    """The best ``k`` of several best-first hit lists over disjoint documents: by score, equal
    scores by doc id."""
    return heapq.nsmallest(k, (h for hits in lists for h in hits), key=lambda h: (-h[1], h[0]))


def parse_shard(text: str) -> Part:
    """``--shard``'s ``"I/N"``: shard I of N, counted from 1 as every ``Part``; a ValueError
    naming ``--shard`` otherwise."""
    return Part.parse(text, "--shard")


@dataclass
class EncodedShard:
    """One encoded shard: ``path`` (.npy, one row per text) and its sidecar ``path.json`` saying
    what it is (model, texts, side, shard, rows, doc ids). The sidecar is written last, so a
    shard whose sidecar matches is complete and is skipped when the encoding is run again.
    ``shard`` is (index from 0, N), as the sidecars and the Ray folder's file names have always
    counted; ``part`` is the same shard as the CLI writes it (``Part``, from 1)."""

    path: Path
    model: str
    texts: str
    side: str
    shard: tuple[int, int]
    rows: tuple[int, int]
    ids: list[str] = field(default_factory=list)

    @property
    def part(self) -> Part:
        return Part(self.shard[0] + 1, self.shard[1])

    @property
    def sidecar(self) -> Path:
        return self.path.with_name(self.path.name + ".json")

    def _meta(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "texts": self.texts,
            "side": self.side,
            "shard": list(self.shard),
            "rows": list(self.rows),
        }

    def done(self) -> bool:
        """The shard is on disk, complete, from the same model, texts, side and I/N."""
        try:
            old: EncodedShard = EncodedShard.read(self.path)
        except (ValueError, ModelDirError):
            return False
        return old._meta() == self._meta() and old.ids == self.ids

    def write(self, vectors: np.ndarray) -> None:
        """Write the shard: the .npy atomically (a failed write leaves none), then the sidecar,
        whose presence says the shard is complete."""
        with atomic_write(self.path, binary=True) as f:
            np.save(f, vectors, allow_pickle=False)
        self.write_sidecar(dim=int(vectors.shape[1]))

    def write_sidecar(self, dim: int) -> None:
        with atomic_write(self.sidecar) as f:
            json.dump({**self._meta(), "dim": dim, "ids": self.ids}, f, ensure_ascii=False)

    @classmethod
    def read(cls, path: str | Path) -> EncodedShard:
        """An encoded shard from its .npy path; ValueError if it or its sidecar is missing,
        unreadable or inconsistent (rows, ids)."""
        p = Path(path)
        side = p.with_name(p.name + ".json")
        try:
            meta = json.loads(side.read_text(encoding="utf-8"))
            e = cls(
                p,
                str(meta["model"]),
                str(meta["texts"]),
                str(meta["side"]),
                tuple(meta["shard"]),
                tuple(meta["rows"]),
                [str(i) for i in meta["ids"]],
            )
            shape = np.load(p, mmap_mode="r", allow_pickle=False).shape
        except FileNotFoundError as err:
            raise ValueError(f"{p}: not a complete encoded shard (missing {Path(err.filename).name})") from None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{p}: unreadable encoded shard ({err})") from None
        if len(shape) != 2 or shape[0] != e.rows[1] - e.rows[0] or len(e.ids) != shape[0]:
            raise ValueError(f"{p}: holds {shape} vectors, its sidecar rows {e.rows} and {len(e.ids)} ids")
        return e


class Encoded(NamedTuple):
    """What ``encode_file`` did: the .npy written (or found complete), its rows and dimension."""

    path: Path
    rows: int
    dim: int
    seconds: float
    skipped: bool


def read_texts(texts: Path) -> tuple[list[str], list[str]]:
    """(ids, texts) of a BEIR corpus.jsonl (title + text), a queries.jsonl, or a text file with
    one text per line (ids: line numbers from 0)."""
    from ..data import iter_corpus, join_fields, load_queries
    from ..data.files import read_lines

    if texts.suffix == ".jsonl" and texts.name.startswith("corpus"):
        docs = list(iter_corpus(texts))
        return [d.id for d in docs], [join_fields(d.title, d.text) for d in docs]
    if texts.suffix == ".jsonl":
        queries = load_queries(texts)
        return list(queries), list(queries.values())
    items = read_lines(texts)
    return [str(i) for i in range(len(items))], items


def encode_file(
    model_dir: Path, texts: Path, out_path: Path, *, side: str = "document", shard: Part | None = None
) -> Encoded:
    """``semsearch encode``: the texts (or ``shard``, part I of N of them, contiguous) encoded
    by the saved encoder into ``out_path`` (.npy, written atomically); a shard also gets its
    sidecar (``EncodedShard``) and is skipped when already complete. Ray workers call this too.

    Args:
        model_dir: the saved encoder.
        texts: the file of texts, one per line.
        out_path: the .npy written.
        side: "document" or "query".
        shard: the part of the texts to encode (None: all).

    Returns:
        The .npy written (or found complete), its rows and dimension."""
    from ..plugins import load_model

    if out_path.suffix != ".npy":  # where np.save(out_path) would write
        out_path = out_path.with_name(out_path.name + ".npy")
    m = load_model(model_dir)
    if not hasattr(m, "encode_queries"):
        raise ValueError(f"{model_dir}: a {m.name} model is not an encoder")
    ids, items = read_texts(texts)
    part = shard or Part(1, 1)
    lo, hi = part.rows(len(items))
    info = EncodedShard(
        out_path,
        model=str(Path(model_dir).resolve()),
        texts=str(texts.resolve()),
        side=side,
        shard=(part.index, part.n),
        rows=(lo, hi),
        ids=ids[lo:hi],
    )
    if shard is not None and info.done():
        return Encoded(out_path, hi - lo, int(np.load(out_path, mmap_mode="r").shape[1]), 0.0, True)
    start = time.perf_counter()
    vecs = m.encode_queries(items[lo:hi]) if side == "query" else m.encode_documents(items[lo:hi])  # type: ignore[attr-defined]  # an encoder
    if shard is not None:
        info.write(vecs)
    else:
        with atomic_write(out_path, binary=True) as f:  # a failed write leaves no partial .npy
            np.save(f, vecs, allow_pickle=False)
    return Encoded(out_path, int(vecs.shape[0]), int(vecs.shape[1]), time.perf_counter() - start, False)


def shard_path(out_dir: Path, i: int, n: int) -> Path:
    """Where shard ``i`` (counted from 0, as the file names do) of ``n`` goes in a folder of shards."""
    return Path(out_dir) / f"shard-{i:05d}-of-{n:05d}.npy"


def encode_with_ray(
    model_dir: Path, texts: Path, out_dir: Path, shards: int, *, side: str = "document", address: str | None = None
) -> list[Encoded]:
    """All ``shards`` shards of an encoding as Ray Data tasks (``map_batches``, one shard a task),
    on the cluster at ``address`` (None: a local Ray started here, or the one already running).
    Each task runs ``encode_file`` into ``out_dir`` — a folder every worker reaches (shared
    storage) — so a rerun skips the shards already complete. Ray is an optional dependency
    (``pip install 'semsearch[ray]'``).

    Args:
        model_dir: the saved encoder, reachable by every worker.
        texts: the file of texts, one per line.
        out_dir: the shards' folder, reachable by every worker.
        shards: the number of shards.
        side: "document" or "query".
        address: the Ray cluster (None: local).

    Returns:
        Each shard's ``Encoded``, in shard order."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("encoding with Ray needs Ray: pip install 'semsearch[ray]' (ray[data])") from None
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    model_dir, texts, out_dir = Path(model_dir).resolve(), Path(texts).resolve(), Path(out_dir).resolve()

    def run(batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        done = [
            encode_file(
                model_dir, texts, shard_path(out_dir, int(i), shards), side=side, shard=Part(int(i) + 1, shards)
            )
            for i in batch["shard"]
        ]
        return {
            "path": [str(d.path) for d in done],
            "rows": [d.rows for d in done],
            "dim": [d.dim for d in done],
            "seconds": [d.seconds for d in done],
            "skipped": [d.skipped for d in done],
        }

    rows = ray.data.from_items([{"shard": i} for i in range(shards)]).map_batches(run, batch_size=1).take_all()
    return sorted(
        (
            Encoded(Path(r["path"]), int(r["rows"]), int(r["dim"]), float(r["seconds"]), bool(r["skipped"]))
            for r in rows
        ),
        key=lambda e: e.path.name,
    )
