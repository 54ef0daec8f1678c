"""A sharded bundle (issue 51): one collection split into N shard folders plus a coordinator
folder, and the searches one shard answers.

``split_bundle`` writes it from a built bundle. Each shard holds a contiguous range of the
documents (their ``documents.jsonl`` lines, stored fields and all), the lexical model and the
ranker's feature models over them, and each encoder's vector index over their vectors. What makes
a shard's scores the single bundle's scores is kept global: every lexical model keeps the whole
collection's vocabulary and statistics (document count, document and collection frequencies,
mean length: ``LexicalModel.subset``), and an IVF-PQ index keeps the trained quantizers and each
document's own codes (``VectorIndex.subset``). The coordinator folder holds what runs once per
query: the encoders (the query is embedded once and sent to every shard), the spelling corrector
and the stage-2 ranker's booster (``coordinator.ShardedBundle``).

A ``Shard`` answers the rounds of a sharded two-stage search, with positions local to the shard
(the coordinator adds the shard's offset) and plain arrays in and out, so the same object serves
in-process or as a Ray Serve deployment:

1. ``stage1``: each query's lexical and semantic top-k inside the shard (under the search's
   filter), with their ids (the merge breaks equal scores by id, as one index does). IVF-PQ with
   re-scoring returns its code-score short list instead (``short``): the coordinator merges the
   shards' lists into the one index's short list and has ``rescore`` score it exactly.
2. ``complete``: for the merged candidates the shard holds, each stage's score where that stage
   did not return them and the ranker's per-document feature columns, and the facet tally.
3. ``documents``: the hits' titles, texts and stored fields."""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...data import DataFormatError, load_corpus
from ...data.files import atomic_dir, write_json
from ...models.base import ModelDirError, sha256_file
from ...models.lexical import LexicalModel
from ...plugins import load_model
from ..filters import Filter, FilterIndex, Tally
from ..semantic import encoder_id
from ..vector import VectorIndex
from .manifest import MANIFEST, SHARDED, SPELLING, verify_files
from .search import Bundle

SHARD = "shard.json"
"""A shard folder's manifest."""
SHARD_DIR = "shard-{:05d}"
SHARDED_FORMAT = 1

Arrays = tuple[np.ndarray, np.ndarray, list[str]]
"""A stage's hits in a shard: local positions (int64), scores (float64) and ids, best first."""


def _files(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): sha256_file(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in (SHARD, SHARDED)
    }


def _verify(root: Path, files: Any, manifest: str) -> None:
    if not isinstance(files, dict) or not files:
        raise ModelDirError(f"{root / manifest}: 'files' must be a table of file -> sha256")
    outside = [rel for rel in files if not isinstance(rel, str) or Path(rel).is_absolute() or ".." in Path(rel).parts]
    if outside:
        raise ModelDirError(f"{root / manifest}: 'files' names {outside[0]!r}, not a file inside the shard")
    verify_files(root, files, manifest)


def _read_json(f: Path) -> dict[str, Any]:
    try:
        obj = json.loads(f.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelDirError(f"{f.parent}: not a sharded bundle part (no {f.name})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelDirError(f"{f}: unreadable ({e})") from None
    if not isinstance(obj, dict) or obj.get("format") != SHARDED_FORMAT:
        raise ModelDirError(f"{f}: not a sharded bundle manifest of format {SHARDED_FORMAT}")
    return obj


def split_bundle(bundle: str | Path | Bundle, out: str | Path, shards: int) -> Path:
    """Write ``bundle`` (a built bundle, faiss store) as a sharded bundle of ``shards`` parts at
    ``out`` (atomically: ``out`` is the old folder or the whole new one). Documents are split into
    contiguous ranges of (almost) equal size, in the bundle's order.

    Raises:
        ValueError: ``shards`` < 1 or more than the documents; a bundle this cannot shard (the
            postgres store, a stage-3 cross-encoder, a ranker that is not a two-stage ranker over
            positional features)."""
    src = bundle if isinstance(bundle, Bundle) else Bundle.load(bundle, result_cache=0, correct_queries=False)
    m = src.manifest
    n = len(src.corpus)
    if shards < 1 or shards > n:
        raise ValueError(f"shards must be between 1 and the {n} documents, got {shards}")
    if src.store != "faiss":
        raise ValueError(f"{src.path}: a sharded bundle is built from a faiss-store bundle, not {src.store}")
    if src.rescorer is not None:
        raise ValueError(f"{src.path}: a bundle with a stage-3 cross-encoder cannot be sharded (it reads texts)")
    rk: Any = src.ranker
    if rk is not None and not (src.two_stage and rk.positional):
        raise ValueError(f"{src.path}: its ranker is not a two-stage ranker over positional features; cannot shard")
    out = Path(out)
    lines = (src.path / "documents.jsonl").read_bytes().splitlines(keepends=True)
    if len(lines) != n:
        raise ModelDirError(f"{src.path}/documents.jsonl: {len(lines)} lines, the bundle holds {n} documents")
    bounds = [i * n // shards for i in range(shards + 1)]
    with atomic_dir(out) as tmp:
        entries: list[dict[str, Any]] = []
        for i in range(shards):
            lo, hi = bounds[i], bounds[i + 1]
            d = tmp / SHARD_DIR.format(i)
            d.mkdir()
            (d / "documents.jsonl").write_bytes(b"".join(lines[lo:hi]))
            shard: dict[str, Any] = {
                "format": SHARDED_FORMAT,
                "shard": i,
                "shards": shards,
                "offset": lo,
                "documents": hi - lo,
                "fields": m.get("fields", "title+text"),
                "schema": m.get("schema"),
            }
            if src.lexical is not None:
                src.lexical.subset(lo, hi).save(d / "lexical")  # type: ignore[attr-defined]  # a lexical model
                shard["lexical"] = {"name": m["lexical"]["name"], "path": "lexical"}
            shard["vectors"] = []
            for e in m.get("models", []):
                ix = src.semantic[e["name"]].vectors
                assert isinstance(ix, VectorIndex)
                ix.subset(lo, hi).save(d / "vectors" / e["name"])
                shard["vectors"].append({"name": e["name"], "path": f"vectors/{e['name']}", "model": ix.model})
            if rk is not None:
                shard["features"] = []
                for j, (name, f) in enumerate(zip(rk.model_names, rk.models, strict=True)):
                    f.subset(lo, hi).save(d / "features" / f"{j:02d}")
                    shard["features"].append({"name": name, "path": f"features/{j:02d}"})
                shard["pair_features"] = list(rk.pair_features)
            shard["files"] = _files(d)
            write_json(d / SHARD, shard)
            entries.append({"path": SHARD_DIR.format(i), "offset": lo, "documents": hi - lo})  # (str values)
        coord: dict[str, Any] = {
            "format": SHARDED_FORMAT,
            "dataset": m.get("dataset"),
            "fields": m.get("fields", "title+text"),
            "schema": m.get("schema"),
            "documents": n,
            "created_from": {k: m.get(k) for k in ("created", "semsearch")},
            "lexical": None,
            "models": [],
            "ranker": None,
            "spelling": None,
            "shards": entries,
        }
        if src.lexical is not None:
            coord["lexical"] = {"name": m["lexical"]["name"]}
            coord["analyzer"] = src.lexical.analyzer.config()  # type: ignore[attr-defined]  # a lexical model
        for e in m.get("models", []):
            r = src.semantic[e["name"]]
            shutil.copytree(src.path / e["path"] / "encoder", tmp / "models" / e["name"] / "encoder")
            assert isinstance(r.vectors, VectorIndex)
            coord["models"].append(
                {
                    "name": e["name"],
                    "path": f"models/{e['name']}/encoder",
                    "dim": r.dim,
                    "kind": r.vectors.kind,
                    "metric": r.vectors.metric,
                    "params": dict(r.vectors.params),
                    "encoder": encoder_id(r.encoder),
                }
            )
        if rk is not None:
            rdir = src.path / m["ranker"]["path"]
            (tmp / "ranker").mkdir()
            for f in rdir.iterdir():
                if f.is_file():
                    shutil.copy2(f, tmp / "ranker" / f.name)
            coord["ranker"] = {
                "name": m["ranker"]["name"],
                "path": "ranker",
                "stage_features": list(rk.stage_features),
                "features": list(rk.model_names),
                "pair_features": list(rk.pair_features),
                "n_lexical": rk.n_lexical,
                "n_semantic": rk.n_semantic,
            }
        if m.get("spelling"):
            shutil.copy2(src.path / m["spelling"]["path"], tmp / SPELLING)
            coord["spelling"] = {"path": SPELLING}
        coord["files"] = {rel: digest for rel, digest in _files(tmp).items() if not rel.startswith("shard-")} | {
            f"{e['path']}/{SHARD}": sha256_file(tmp / e["path"] / SHARD) for e in entries
        }
        write_json(tmp / SHARDED, coord)
    if not isinstance(bundle, Bundle):
        src.close()
    return out


def read_sharded(path: str | Path, verify: bool = True) -> dict[str, Any]:
    """The coordinator manifest of the sharded bundle at ``path``, its coordinator files checked
    (``verify``); the shards are checked by whoever loads them."""
    p = Path(path)
    coord = _read_json(p / SHARDED)
    shards = coord.get("shards")
    if not isinstance(shards, list) or not shards:
        raise ModelDirError(f"{p / SHARDED}: 'shards' must be a non-empty list")
    if verify:
        files = coord.get("files")
        if not isinstance(files, dict):
            raise ModelDirError(f"{p / SHARDED}: 'files' must be a table of file -> sha256")
        for rel, digest in files.items():
            f = p / rel
            if ".." in Path(rel).parts or not f.is_file():
                raise ModelDirError(f"{p}: missing file {rel} (listed in {SHARDED} 'files')")
            if sha256_file(f) != digest:
                raise ModelDirError(f"{p}: checksum mismatch for {rel} (sharded bundle modified or corrupt)")
    return coord


def is_sharded(path: str | Path) -> bool:
    """Whether ``path`` is a sharded bundle's coordinator folder (not a plain bundle)."""
    p = Path(path)
    return (p / SHARDED).is_file() and not (p / MANIFEST).is_file()


@dataclass
class Stage1:
    """One shard's stage-1 answer for one query: each stage's hits (``Arrays``); ``short``: for
    an IVF-PQ index that re-scores, the code-score short list in place of ``semantic``'s scores
    (``rescore`` scores them exactly)."""

    lexical: Arrays
    semantic: Arrays
    short: bool = False
    version: str = ""
    """The answering shard's version (its ``shard.json``'s sha256): the later rounds of the search
    must reach the same version (``ShardVersionError``)."""


class ShardVersionError(RuntimeError):
    """A round reached another version of the shard than the search's first round did (a replica
    of a new version, during a rollout): the search is run again."""


class Shard:
    """One loaded shard (module docstring): its documents, lexical model, vector indexes, the
    ranker's feature models and filter columns."""

    def __init__(self, path: str | Path, verify: bool = True):
        p = Path(path)
        meta = _read_json(p / SHARD)
        if verify:
            _verify(p, meta.get("files"), SHARD)
        self.path, self.meta = p, meta
        self.lock = threading.Lock()
        """Held by ``call`` around each round: the analyzers' and encoders' caches are not thread-safe."""
        self.version = sha256_file(p / SHARD)
        self.index, self.offset = int(meta["shard"]), int(meta["offset"])
        try:
            self.corpus = load_corpus(p / "documents.jsonl", stored_fields=True)
        except (OSError, DataFormatError) as e:
            raise ModelDirError(f"{p}: unreadable documents.jsonl ({e})") from None
        if len(self.corpus) != meta["documents"]:
            raise ModelDirError(
                f"{p / SHARD}: 'documents' says {meta['documents']}, documents.jsonl holds {len(self.corpus)}"
            )
        self.corpus.schema = meta.get("schema")
        lex = meta.get("lexical")
        self.lexical: Any = load_model(p / lex["path"]) if lex else None
        self.vectors: dict[str, VectorIndex] = {
            v["name"]: VectorIndex.load(p / v["path"], expect_model=v["model"]) for v in meta.get("vectors", [])
        }
        for v in self.vectors.values():
            v.stored_vectors()  # read now, not during the first search
        self.ranker: Any = None
        if "features" in meta:
            from ...ranking.lambdamart import LambdaMARTRanker

            feats = {f["name"]: load_model(p / f["path"]) for f in meta["features"]}
            self.ranker = LambdaMARTRanker.from_models(feats, meta.get("pair_features", []))
            self.ranker.use_texts(self.corpus.ids, self.corpus.joined(meta.get("fields", "title+text")))
        for name, m in [
            ("lexical", self.lexical),
            *self.vectors.items(),
            *((f"feature {f.name}", f) for f in (self.ranker.models if self.ranker else [])),
        ]:
            if m is not None and list(m.doc_ids) != self.corpus.ids:
                raise ModelDirError(f"{p}: {name} index and documents do not match (different document ids)")
        schema = meta.get("schema") or {}
        self.filters = FilterIndex(
            self.corpus.stored if self.corpus.stored is not None else [{}] * len(self.corpus),
            schema.get("facets", []),
            schema.get("numeric", []),
        )
        if isinstance(self.lexical, LexicalModel):
            self.lexical.prepare()  # the kernel built now, not during the first search

    def __len__(self) -> int:
        return len(self.corpus)

    ROUNDS = ("info", "stage1", "rescore", "complete", "documents")

    def call(self, method: str, *args: Any) -> Any:
        """Round ``method`` (one of ``ROUNDS``) with ``args``, one round at a time (``lock``): what
        a ``ShardClient`` runs, in this process or in a Ray Serve replica."""
        if method not in self.ROUNDS:
            raise ValueError(f"no shard round {method!r}")
        with self.lock:
            return getattr(self, method)(*args)

    def info(self) -> dict[str, Any]:
        """Which shard this is and what it holds (the coordinator checks it against its manifest)."""
        return {"shard": self.index, "offset": self.offset, "documents": len(self), "path": str(self.path)}

    def mask(self, flt: Filter | None, allowed: np.ndarray | None) -> np.ndarray | None:
        """The shard's documents a search may return: the filter's and ``allowed``'s (this shard's
        slice of the collection's mask; None: all)."""
        mask = None if allowed is None else np.asarray(allowed, dtype=bool)
        if flt is not None:
            fm = self.filters.mask(flt)
            if fm is not None:
                mask = fm if mask is None else mask & fm
        return mask

    def stage1(
        self,
        queries: list[str],
        vectors: np.ndarray | None,
        model: str | None,
        n_lexical: int,
        n_semantic: int,
        flt: Filter | None = None,
        allowed: np.ndarray | None = None,
    ) -> list[Stage1]:
        """Per query, the shard's lexical top ``n_lexical`` and semantic top ``n_semantic`` of
        ``model``'s index searched with ``vectors`` (the coordinator's query embeddings)."""
        mask = self.mask(flt, allowed)
        ids = self.corpus.ids
        empty: Arrays = (np.zeros(0, np.int64), np.zeros(0), [])
        lex = [empty] * len(queries)
        if self.lexical is not None and n_lexical > 0:
            docs, scores, counts = self.lexical.retrieve_positions(queries, n_lexical, allowed=mask)
            lex = [
                (d[:c].astype(np.int64), s[:c].astype(np.float64), [ids[j] for j in d[:c]])
                for d, s, c in zip(docs, scores, counts.tolist())
            ]
        sem = [empty] * len(queries)
        short = False
        if model is not None and vectors is not None and n_semantic > 0 and len(self):
            ix = self.vectors[model]
            if ix.kind == "ivfpq" and ix.reranks and mask is None:
                short = True
                sem = [
                    (p, s, [ids[j] for j in p]) for p, s in ix.short_list(vectors, max(n_semantic, ix.params["rerank"]))
                ]
            else:
                sem = [(p, s, [ids[j] for j in p]) for p, s in ix.search_positions(vectors, n_semantic, allowed=mask)]
        return [Stage1(lx, sm, short, self.version) for lx, sm in zip(lex, sem)]

    def _same_version(self, version: str | None) -> None:
        if version is not None and version != self.version:
            raise ShardVersionError(
                f"shard {self.index}: version {self.version[:12]}, the search began on {version[:12]}"
            )

    def rescore(
        self, vectors: np.ndarray, model: str, positions: list[np.ndarray], version: str | None = None
    ) -> list[np.ndarray]:
        """Exact scores (the full vectors) of each query's short-list documents at ``positions``
        (``version``: the shard version they are positions of)."""
        self._same_version(version)
        ix = self.vectors[model]
        return [ix.similarity_positions(v, p) for v, p in zip(vectors, positions)]

    def complete(
        self,
        queries: list[str],
        vectors: np.ndarray | None,
        model: str | None,
        positions: list[np.ndarray],
        need_lexical: list[np.ndarray],
        need_semantic: list[np.ndarray],
        features: bool,
        tally: bool,
        version: str | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None, Tally | None]]:
        """Per query, for its candidates at ``positions`` in this shard: the lexical scores of
        those at ``need_lexical`` (indices into ``positions``), the semantic scores of those at
        ``need_semantic``, the ranker's per-document feature columns of all of them
        (``features``) and their facet tally (``tally``); ``version``: the shard version they are
        positions of (``ShardVersionError`` if this is another)."""
        self._same_version(version)
        out = []
        for i, (q, pos) in enumerate(zip(queries, positions)):
            nl, ns = need_lexical[i], need_semantic[i]
            lex = (
                self.lexical.score_positions([q], [pos[nl]])[0].astype(np.float64)
                if len(nl) and self.lexical is not None
                else np.zeros(0)
            )
            sem = (
                self.vectors[model].similarity_positions(vectors[i], pos[ns])
                if len(ns) and model is not None and vectors is not None
                else np.zeros(0)
            )
            cols = self.ranker.document_columns([q], [pos]) if features and self.ranker is not None else None
            out.append((lex, sem, cols, self.filters.tally(pos) if tally else None))
        return out

    def documents(self, doc_ids: list[str]) -> dict[str, tuple[str, str, dict[str, Any]]]:
        """Title, text and stored fields of those of ``doc_ids`` this shard holds."""
        index = self.corpus.index
        out = {}
        for d in doc_ids:
            i = index.get(d)
            if i is not None:
                out[d] = (self.corpus.titles[i], self.corpus.texts[i], self.corpus.fields(i))
        return out


__all__ = ["SHARD", "SHARDED", "Shard", "ShardVersionError", "Stage1", "is_sharded", "read_sharded", "split_bundle"]
