"""Search bundles: one self-contained directory with everything the search service needs — the
documents, a lexical index, one vector index per neural encoder, an optional ranker, and a
manifest with versions and per-file sha256 checksums (the serving side of the BERT paper,
Sec. 2.2 and 4.4: inverted index ∪ semantic k-NN index, results tagged LEXICAL / SEMANTIC).

A bundle is built in ``BUNDLE.tmp-<pid>`` beside the target, fsynced, then swapped in by renames
(old → ``.BUNDLE.old``, new → ``BUNDLE``, old removed). A build killed at any point leaves a
loadable bundle: before the swap the old one is untouched; between the two renames ``load``
falls back to ``.BUNDLE.old``. The next build of the same target removes the ``.tmp-<pid>``
folders of builds whose process is gone; ``load`` never takes such a folder for a bundle. Loading verifies every checksum and that each vector index was
built by the encoder stored beside it (``SemanticRetriever``'s probe check)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..data import Corpus, DataFormatError, join_fields, load_corpus, write_corpus
from ..data._io import TMP_SUFFIX, fsync_tree, pid_alive, replace_dir, tmp_dir, write_json
from ..models import Model
from ..models.base import ModelDirError, best_k, id_ranks
from ..models.base import sha256_file as _sha256
from ..plugins import load_model
from ..ranking.rescore import check_weight, is_pair_scorer, rescore_top
from ..text import SpellCorrector
from .hybrid import SCORERS, HybridHit, HybridRetriever, Source
from .semantic import SemanticRetriever, encoder_id
from .vector import VectorIndex

MANIFEST = "manifest.json"
FORMAT = 2
STORES = ("faiss", "postgres")
PG_DSN_ENV = "SEMSEARCH_PG_DSN"
"""DSN of the PostgreSQL server holding a postgres-store bundle's vectors (never written into the
manifest: it may carry a password). Without it, an embedded server runs on the data directory
the manifest names."""
N_LEXICAL, N_SEMANTIC = 300, 20
"""Stage-1 depths of a search without a two-stage ranker (the BERT paper's Sec. 4.4)."""
RESULT_CACHE_ENV = "SEMSEARCH_RESULT_CACHE"
RESCORE_ENV = "SEMSEARCH_RESCORE"
"""``semsearch serve --rescore`` sets it for each worker's bundle: "on" (its stage-3 cross-encoder
re-scores the depth the bundle was built with), a number (that depth), or "off"/"0"/unset."""
RESCORE_WEIGHT_ENV = "SEMSEARCH_RESCORE_WEIGHT"  # serve --rescore-weight, for each worker's Bundle.load
RESCORE_WEIGHT = 1.0  # a new bundle's stage-3 blend weight (index build --rescore-weight)
CORRECT_ENV = "SEMSEARCH_CORRECT_QUERIES"
"""0 / off / false / no: a loaded bundle searches queries as typed (``semsearch serve
--no-correct-queries`` sets it off for each worker); else it corrects them if it has a corrector."""
SPELLING = "spelling.json"  # the bundle's spelling corrector (its documents' word counts)
SLEEP_ENV = "SEMSEARCH_BUILD_SLEEP"
"""Seconds to pause after writing the files and before the swap (tests kill a build there)."""


@dataclass(frozen=True)
class Hit:
    rank: int
    doc_id: str
    score: float
    title: str
    text: str


@dataclass
class Result:
    """One query's answer: hits (merged, best first) and the time each stage took (ms)."""

    hits: list[HybridHit]
    timing: dict[str, float] = field(default_factory=dict)
    query: str = ""  # the text searched: the query, spell-corrected when the bundle corrects queries


def is_encoder(model: Any) -> bool:
    """Encoders (DSSM, CLSM, bi-encoders) get a vector index; anything else is the lexical stage."""
    return callable(getattr(model, "encode_queries", None)) and callable(getattr(model, "encode_documents", None))


_SERVERS: dict[str, Any] = {}
_SERVERS_LOCK = threading.Lock()


def pg_dsn(data: str | Path | None, dsn: str | None = None) -> str:
    """The DSN for a postgres store: ``dsn``, else $SEMSEARCH_PG_DSN, else an embedded PostgreSQL
    + pgvector server on ``data`` (started once per process, stopped at exit)."""
    dsn = dsn or os.environ.get(PG_DSN_ENV)
    if dsn:
        return dsn
    if data is None:
        raise ValueError(f"no PostgreSQL server: give a DSN (--pg-dsn or ${PG_DSN_ENV}) or a data directory")
    from .pgstore import EmbeddedPostgres

    key = str(Path(data).resolve())
    with _SERVERS_LOCK:
        if key not in _SERVERS:
            Path(key).parent.mkdir(parents=True, exist_ok=True)
            _SERVERS[key] = EmbeddedPostgres(key)
        return str(_SERVERS[key].dsn)


def _collection_prefix(out: Path) -> str:
    """``semsearch_<hash of the bundle path>``: the PostgreSQL collections of builds of ``out``
    are named ``<prefix>_<pid>_<tag>_<i>``, so the next build knows which are its own."""
    return "semsearch_" + hashlib.sha1(str(Path(out).resolve()).encode()).hexdigest()[:8]


def _drop_orphans(dsn: str, out: Path, prefix: str) -> list[str]:
    """Drop the collections a killed build of ``out`` created but never swapped in: named by this
    bundle path's prefix, their build's process gone, and listed by neither the bundle at ``out``
    nor its ``.old`` backup. Returns their names."""
    from .pgstore import connect, drop_collection, list_collections

    keep: set[str] = set()
    for d in (out, out.with_name(f".{out.name}.old")):
        try:
            m = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
            keep |= {e.get("collection") for e in m.get("models", []) if isinstance(e, dict)}
        except (OSError, ValueError, AttributeError):
            continue
    orphans = []
    for name in list_collections(dsn):
        parts = name[len(prefix) + 1 :].split("_") if name.startswith(prefix + "_") else []
        if len(parts) == 3 and parts[0].isdigit() and name not in keep and not pid_alive(int(parts[0])):
            orphans.append(name)
    if orphans:
        with connect(dsn) as conn:
            for name in orphans:
                drop_collection(conn, name)
    return orphans


def _drop_collections(manifest: dict[str, Any] | None, dsn: str | None) -> None:
    """Best effort: drop the postgres collections of a bundle that has just been replaced."""
    if not manifest or manifest.get("store") != "postgres" or dsn is None:
        return
    try:
        from .pgstore import connect, drop_collection

        conn = connect(dsn)
        try:
            with conn.transaction():
                for m in manifest.get("models", []):
                    if m.get("collection"):
                        drop_collection(conn, m["collection"])
        finally:
            conn.close()
    except Exception:  # noqa: BLE001 — a stale collection costs disk, never correctness
        pass


StageSearch = Callable[..., list[list[HybridHit]]]
"""``search(query texts, n_lexical, n_semantic, ef_search=None)``: stage 1 of a bundle being built,
each hit with both stages' scores (what ``train_ranker`` learns from); ``ef_search``: the HNSW
efSearch for this call. ``train_ranker``'s log may name the efSearch to serve with
(``search_effort.chosen``), which the bundle's index then keeps."""


def build_bundle(
    corpus: Corpus,
    models: Sequence[Model],
    out: str | Path,
    *,
    ranker: Model | None = None,
    train_ranker: Callable[[StageSearch], tuple[Model, dict[str, Any]]] | None = None,
    dataset: str = "",
    fields: str = "title+text",
    kind: str = "flat",
    store: str = "faiss",
    pg_data: str | Path | None = None,
    postgres_dsn: str | None = None,
    vector_cache: str | Path | None = None,
    rescorer: Model | None = None,
    rescore_depth: int = 10,
    rescore_weight: float = RESCORE_WEIGHT,
    index_params: Mapping[str, int] | None = None,
    spelling: bool = True,
) -> Path:
    """Index ``corpus`` with each model (at most one lexical model; each encoder gets a vector
    index of ``kind``) and save everything as a bundle at ``out``, replacing it atomically.
    ``train_ranker``: called with the new bundle's stage 1 (lexical ∪ first encoder) once it is
    indexed, returns the stage-2 ranker to include (a two-stage search, trained in the build) and
    its training log (saved beside it as ``ranker/training.json``).
    ``store = "postgres"`` also loads each encoder's vectors into PostgreSQL/pgvector (HNSW), in a
    collection named per build, so a killed build never touches the collections the current
    bundle uses; the server is ``postgres_dsn`` / $SEMSEARCH_PG_DSN, else an embedded one on
    ``pg_data`` (default: ``.semsearch-pg`` beside the bundle). The faiss index is kept too.
    ``vector_cache``: a directory keeping each encoder's document vectors of this collection
    (``SemanticRetriever.embed``), so a rebuild, or a build whose encoder shares another's
    documents (a distilled query encoder), does not encode the collection again.
    ``rescorer``: a trained cross-encoder kept as the optional stage 3, which re-scores the first
    ``rescore_depth`` hits of each search when the bundle is loaded with ``rescore=True``, each
    scored z(ranker) + ``rescore_weight`` · z(cross-encoder) (inf: the cross-encoder's score alone).
    ``spelling``: keep a spelling corrector of the documents' words (``text.SpellCorrector``),
    which corrects every query before its search unless the bundle is loaded without it."""
    if store not in STORES:
        raise ValueError(f"store must be one of {', '.join(STORES)}, got {store!r}")
    lexical = [m for m in models if not is_encoder(m)]
    encoders = [m for m in models if is_encoder(m)]
    if len(lexical) > 1:
        raise ValueError(f"at most one lexical model per bundle, got {', '.join(m.name for m in lexical)}")
    if not models:
        raise ValueError("a bundle needs at least one model")
    if ranker is not None and train_ranker is not None:
        raise ValueError("give a trained ranker or train_ranker, not both")
    if rescorer is not None and not is_pair_scorer(rescorer):
        raise ValueError(f"the stage-3 re-scorer must be a cross-encoder (bert-rel), not {rescorer.name}")
    if not isinstance(rescore_depth, int) or isinstance(rescore_depth, bool) or rescore_depth < 1:
        raise ValueError(f"rescore depth must be an integer >= 1, got {rescore_depth!r}")
    rescore_weight = check_weight(rescore_weight)
    names = [encoder_id(e) for e in encoders]
    if len(set(names)) != len(names):
        raise ValueError(f"two encoders with the same name in one bundle: {names}")
    out = Path(out)
    if TMP_SUFFIX.search(out.name):
        raise ValueError(
            f"{out}: a bundle name may not end in .tmp-<number> (kept for the temporary folders of builds)"
        )
    tmp = tmp_dir(out)  # stale builds' folders removed first
    try:
        texts = corpus.joined(fields)
        write_corpus(corpus, tmp / "documents.jsonl")
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "semsearch": __version__,
            "dataset": dataset,
            "fields": fields,
            "store": store,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "documents": len(corpus),
            "lexical": None,
            "models": [],
            "ranker": None,
            "rescorer": None,
            "spelling": None,
        }
        if spelling:
            corrector = SpellCorrector.fit(texts)
            corrector.save(tmp / SPELLING)
            manifest["spelling"] = {"path": SPELLING, "words": len(corrector.counts)}
        if lexical:
            lexical[0].index(corpus.ids, texts)  # type: ignore[arg-type]
            lexical[0].save(tmp / "lexical")
            manifest["lexical"] = {"name": lexical[0].name, "path": "lexical"}
        dsn = None
        if store == "postgres" and encoders:
            data_dir = Path(pg_data) if pg_data else out.parent / ".semsearch-pg"
            dsn = pg_dsn(data_dir, postgres_dsn)
            manifest["postgres"] = {
                "data": None if (postgres_dsn or os.environ.get(PG_DSN_ENV)) else str(data_dir.resolve())
            }
        prefix = _collection_prefix(out)
        build_tag = f"{prefix}_{os.getpid()}_{secrets.token_hex(2)}"
        if dsn is not None:
            _drop_orphans(dsn, out, prefix)
        retrievers = []
        for i, (enc, name) in enumerate(zip(encoders, names)):
            r = SemanticRetriever(enc, kind, cache=vector_cache, **dict(index_params or {}))  # type: ignore[arg-type]
            retrievers.append(r)
            vecs = r.embed(corpus.ids, texts, progress=f"encoding documents ({name})")  # type: ignore[arg-type]
            r.index_vectors(corpus.ids, vecs)
            entry = {"name": name, "kind": kind, "dim": r.dim, "path": f"models/{name}"}
            if dsn is not None:
                from .pgstore import PgVectorStore

                entry["collection"] = f"{build_tag}_{i}"
                PgVectorStore.create(
                    dsn, entry["collection"], corpus.ids, vecs, metric=r.metric, model=encoder_id(enc)
                ).close()
            manifest["models"].append(entry)
        log: dict[str, Any] | None = None
        if train_ranker is not None:
            semantic = retrievers[0] if retrievers else None
            stage1 = HybridRetriever(lexical[0] if lexical else None, semantic, scorer="union", complete=True)

            def stage1_search(
                qs: Sequence[str], nl: int, ns: int, ef_search: int | None = None
            ) -> list[list[HybridHit]]:
                if ef_search is None:
                    return stage1.timed_search(qs, None, n_lexical=nl, n_semantic=ns)[0]
                if semantic is None:
                    raise ValueError("search_efforts: the bundle has no neural model (no vector index to set)")
                if store != "faiss":
                    raise ValueError(
                        "search_efforts chooses the faiss index's efSearch; a postgres store searches with its own"
                    )
                own = semantic.vectors.params.get("efSearch") if semantic.vectors is not None else None
                if own is None:
                    raise ValueError(
                        f"search_efforts: efSearch is an HNSW setting; this bundle's vector index is {kind!r} "
                        "(use --vector-index hnsw or hnswsq)"
                    )
                semantic.vectors.set_search_params(efSearch=ef_search)  # type: ignore[union-attr]
                try:
                    return stage1.timed_search(qs, None, n_lexical=nl, n_semantic=ns)[0]
                finally:
                    semantic.vectors.set_search_params(efSearch=own)  # type: ignore[union-attr]

            try:
                ranker, log = train_ranker(stage1_search)
            finally:
                stage1.close()
            effort = (log or {}).get("search_effort")
            if effort and semantic is not None:  # the efSearch chosen on dev is what the bundle serves with
                semantic.set_search_params(efSearch=int(effort["chosen"]))
        for r, name in zip(retrievers, names):  # (saved once the served settings are known)
            r.save(tmp / "models" / name)
        if ranker is not None:
            if list(ranker.doc_ids) != corpus.ids:
                raise ValueError(
                    f"the ranker's feature models index other documents than {dataset or 'this collection'}; "
                    "train it on this data set (or index it over these documents)"
                )
            ranker.save(tmp / "ranker")
            manifest["ranker"] = {"name": ranker.name, "path": "ranker"}
            if log:  # how a ranker trained in the build learnt (depths tried on dev, importance)
                write_json(tmp / "ranker" / "training.json", log)
        if rescorer is not None:
            rescorer.save(tmp / "rescorer")
            manifest["rescorer"] = {
                "name": rescorer.name,
                "path": "rescorer",
                "depth": rescore_depth,
                "weight": None if math.isinf(rescore_weight) else rescore_weight,
            }  # null: alone
        pause = float(os.environ.get(SLEEP_ENV, "0") or 0)
        if pause > 0:
            time.sleep(pause)
        manifest["files"] = {p.relative_to(tmp).as_posix(): _sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
        write_json(tmp / MANIFEST, manifest)
        fsync_tree(tmp)
        try:
            previous = json.loads((out / MANIFEST).read_text(encoding="utf-8")) if (out / MANIFEST).is_file() else None
        except (OSError, ValueError):
            previous = None
        replace_dir(tmp, out)
        if previous and previous.get("store") == "postgres":
            old_dsn = None
            try:
                old_dsn = pg_dsn((previous.get("postgres") or {}).get("data"), postgres_dsn)
            except Exception:  # noqa: BLE001
                pass
            _drop_collections(previous, old_dsn)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _open_store(
    store: str, retriever: SemanticRetriever, path: Path, entry: dict[str, Any], manifest: dict[str, Any]
) -> None:
    """Swap the retriever's faiss index for the PostgreSQL collection the manifest names, checked
    against the encoder stored in the bundle (model id and dimension)."""
    if store == "faiss":
        return
    if store not in STORES:
        raise ModelDirError(f"{path}: unknown vector store {store!r} (one of {', '.join(STORES)})")
    if not entry.get("collection"):
        raise ModelDirError(f"{path}: bundle was built without a postgres store; rebuild it with --store postgres")
    from .pgstore import PgVectorStore

    dsn = pg_dsn((manifest.get("postgres") or {}).get("data"))
    try:
        retriever.vectors = PgVectorStore.open(
            dsn, entry["collection"], expect_model=encoder_id(retriever.encoder), expect_dim=int(entry["dim"])
        )  # type: ignore[assignment]
    except KeyError:
        raise ModelDirError(f"{path}: postgres collection {entry['collection']!r} is missing from the server") from None


_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FIELDS = ("title+text", "title", "text")


def _manifest_error(p: Path, key: str, what: str, value: Any) -> ModelDirError:
    return ModelDirError(f"{p / MANIFEST}: {key!r} must be {what}, got {value!r}"[:500])


def _rel_path(p: Path, value: Any, key: str) -> str:
    """A path inside the bundle (relative, no '..'), as the manifest names its files and models."""
    if (
        not isinstance(value, str)
        or not value
        or Path(value).is_absolute()
        or ".." in Path(value).parts
        or "\\" in value
        or "\x00" in value
    ):
        raise _manifest_error(p, key, "a relative path inside the bundle", value)
    return value


def _entry(p: Path, value: Any, key: str, *, encoder: bool = False) -> dict[str, Any]:
    """One ``lexical`` / ``ranker`` / ``rescorer`` / ``models[i]`` entry: a name and a path (encoders: kind, dim)."""
    if not isinstance(value, dict):
        raise _manifest_error(p, key, "a table", value)
    if not isinstance(value.get("name"), str) or not value["name"]:
        raise _manifest_error(p, f"{key}.name", "a model name", value.get("name"))
    _rel_path(p, value.get("path"), f"{key}.path")
    if encoder:
        dim = value.get("dim")
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise _manifest_error(p, f"{key}.dim", "a positive integer", dim)
        if "collection" in value and not isinstance(value["collection"], str):
            raise _manifest_error(p, f"{key}.collection", "a collection name", value["collection"])
    return value


def read_manifest(p: Path) -> dict[str, Any]:
    """``manifest.json`` of bundle ``p``, its shape checked once (the one place): every key the
    loader reads has its type, every path stays inside the bundle. ModelDirError names the file
    and the key, what it must be and what it is."""
    f = p / MANIFEST
    try:
        manifest = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelDirError(f"{p}: unreadable {MANIFEST} ({e})") from None
    if not isinstance(manifest, dict):
        raise _manifest_error(p, "(top level)", "a table", type(manifest).__name__)
    if manifest.get("format") != FORMAT:
        raise ModelDirError(f"{p}: bundle format {manifest.get('format')!r} is not {FORMAT}; rebuild it")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise _manifest_error(p, "files", "a table of file -> sha256", files)
    for rel, digest in files.items():
        _rel_path(p, rel, f"files.{rel}")
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise _manifest_error(p, f"files.{rel}", "a sha256 hex digest", digest)
    if "documents.jsonl" not in files:
        raise ModelDirError(f"{f}: 'files' does not list documents.jsonl")
    docs = manifest.get("documents")
    if docs is not None and (not isinstance(docs, int) or isinstance(docs, bool) or docs < 0):
        raise _manifest_error(p, "documents", "a document count", docs)
    if manifest.get("fields", "title+text") not in _FIELDS:
        raise _manifest_error(p, "fields", f"one of {', '.join(_FIELDS)}", manifest.get("fields"))
    if manifest.get("store", "faiss") not in STORES:
        raise _manifest_error(p, "store", f"one of {', '.join(STORES)}", manifest.get("store"))
    if not isinstance(manifest.get("postgres", {}), dict):
        raise _manifest_error(p, "postgres", "a table", manifest.get("postgres"))
    for key in ("lexical", "ranker", "rescorer"):
        if manifest.get(key) is not None:
            _entry(p, manifest[key], key)
    depth = (manifest.get("rescorer") or {}).get("depth", 10)
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise _manifest_error(p, "rescorer.depth", "a positive integer", depth)
    sp = manifest.get("spelling")
    if sp is not None:
        if not isinstance(sp, dict):
            raise _manifest_error(p, "spelling", "a table", sp)
        _rel_path(p, sp.get("path"), "spelling.path")
    models = manifest.get("models", [])
    if not isinstance(models, list):
        raise _manifest_error(p, "models", "a list", models)
    for i, m in enumerate(models):
        _entry(p, m, f"models[{i}]", encoder=True)
    names = [m["name"] for m in models]
    if len(set(names)) != len(names):
        raise _manifest_error(p, "models", "entries with distinct names", names)
    if manifest.get("lexical") is None and not models:
        raise ModelDirError(f"{f}: names neither a lexical model nor a neural one")
    return manifest


def _verify_files(p: Path, files: Mapping[str, str]) -> None:
    """Every file the manifest lists is there with its sha256, and nothing else is (a file
    added or swapped in from elsewhere is refused, not served)."""
    for rel, digest in files.items():
        f = p / rel
        if not f.is_file():
            raise ModelDirError(f"{p}: missing file {rel} (listed in {MANIFEST} 'files')")
        found = _sha256(f)
        if found != digest:
            raise ModelDirError(
                f"{p}: checksum mismatch for {rel}: {MANIFEST} 'files' says sha256 {digest[:12]}…, "
                f"the file has {found[:12]}… (bundle modified or corrupt)"
            )
    extra = sorted(
        x.relative_to(p).as_posix()
        for x in p.rglob("*")
        if x.is_file() and x.name != MANIFEST and x.relative_to(p).as_posix() not in files
    )
    if extra:
        raise ModelDirError(
            f"{p}: file {extra[0]} is not listed in {MANIFEST} 'files' ({len(extra)} unlisted; bundle modified)"
        )


def _same_name(p: Path, key: str, manifest_name: str, model: Any) -> None:
    """The model loaded from ``key``'s directory is the one the manifest names."""
    found = encoder_id(model)
    if found != manifest_name:
        raise ModelDirError(
            f"{p / MANIFEST}: {key!r} says {manifest_name!r}, but its directory holds a {found!r} model"
        )


def _top(hits: Sequence[HybridHit], scores: np.ndarray, k: int) -> list[int]:
    """Positions of the ``k`` best hits by (score desc, doc id): only the hits scoring at least the
    k-th best score (ties at the cut included) are sorted by that key, not all ~160 candidates."""
    s = np.asarray(scores, dtype=np.float64)
    idx = range(len(s))
    if len(s) > k:
        kth = np.partition(-s, k - 1)[k - 1]
        idx = np.flatnonzero(-s <= kth).tolist()
    return sorted(idx, key=lambda i: (-float(s[i]), hits[i].doc_id))[:k]


class Bundle:
    """A loaded bundle: documents, the lexical model, the semantic retrievers, the ranker."""

    QUERY_CACHE = 4096
    """Recent distinct query embeddings each semantic retriever keeps (``SemanticRetriever.query_cache``)."""
    RESULT_CACHE = 2048
    """Recent distinct searches whose results are kept (a loaded bundle never changes, so a
    repeated search gets the same answer without running either stage or the ranker again);
    $SEMSEARCH_RESULT_CACHE overrides it (``semsearch serve --result-cache``), 0 turns it off."""

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        corpus: Corpus,
        lexical: Model | None,
        semantic: Mapping[str, SemanticRetriever],
        ranker: Model | None,
        *,
        query_cache: int = QUERY_CACHE,
        result_cache: int | None = None,
        rescorer: Any = None,
        rescore_depth: int = 10,
        rescore: bool = False,
        rescore_weight: float = math.inf,
        corrector: SpellCorrector | None = None,
        correct_queries: bool = True,
    ):
        self.path, self.manifest, self.corpus = path, manifest, corpus
        self.corrector = corrector
        self.correct_queries = bool(correct_queries and corrector is not None)
        """Whether searches correct their queries' spelling by default (``search_many``'s ``correct``)."""
        self.store = "faiss"  # where the vectors are searched: faiss, or postgres (set by load)
        self.result_cache = (
            int(os.environ.get(RESULT_CACHE_ENV) or self.RESULT_CACHE) if result_cache is None else result_cache
        )
        self._results: OrderedDict[tuple[Any, ...], Result] = OrderedDict()
        self._results_lock = threading.Lock()
        for r in semantic.values():
            r.query_cache = query_cache
        self.lexical, self.semantic, self.ranker = lexical, dict(semantic), ranker
        if rescore and rescorer is None:
            raise ValueError(
                f"{path}: this bundle has no stage-3 cross-encoder to re-score with (build it with --rescorer)"
            )
        if rescore_depth < 1:
            raise ValueError(f"rescore depth must be >= 1, got {rescore_depth}")
        self.rescorer, self.rescore_depth, self.rescore = rescorer, rescore_depth, rescore
        self.rescore_weight = check_weight(rescore_weight)
        """Stage 3: the cross-encoder, how many of the ranked hits it re-scores, whether it runs, and
        its weight in their new score beside the ranker's (inf: its score alone)."""
        for name, m in [("lexical", lexical), *semantic.items(), ("ranker", ranker)]:
            if m is not None and list(m.doc_ids) != corpus.ids:
                raise ModelDirError(f"{path}: {name} index and documents do not match (different document ids)")
        if ranker is not None and hasattr(ranker, "use_texts"):  # per-pair text features read the documents
            ranker.use_texts(corpus.ids, corpus.joined(manifest.get("fields", "title+text")))
        # encoders and analyzers keep in-memory caches (e.g. the trigram word table) that are not
        # thread-safe: one lock per stage model; lexical and semantic still run at the same time
        self._locks = {
            id(m): threading.Lock() for m in [lexical, *semantic.values(), ranker, rescorer] if m is not None
        }
        self.two_stage = bool(getattr(ranker, "stage_features", None))
        """The ranker re-ranks stage 1's merged hits with their stage scores (fills them in)."""
        if self.two_stage:
            for name, r in self.semantic.items():
                if not isinstance(r.vectors, VectorIndex):
                    raise ModelDirError(
                        f"{path}: a two-stage bundle scores candidates against the stored vectors of "
                        f"{name}; serve it with the faiss store, not {type(r.vectors).__name__}"
                    )
                r.vectors.stored_vectors()  # read them now, not during the first search
        # a two-stage search runs its stages one after the other: with one core per worker, handing
        # the semantic stage to a thread cost more than it overlapped (load test, one worker, 25
        # clients, new queries: 111.7 req/s sequential, 99.0 concurrent)
        self._hybrid = {
            name: HybridRetriever(
                lexical, sem, scorer="union", concurrent=not self.two_stage, locks=self._locks, complete=self.two_stage
            )
            for name, sem in (self.semantic.items() if self.semantic else [(None, None)])
        }
        self._id_ranks: np.ndarray | None = None  # each document's rank by id (ties), made on first use

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        store: str | None = None,
        verify: bool = True,
        query_cache: int = QUERY_CACHE,
        result_cache: int | None = None,
        rescore: bool | None = None,
        rescore_depth: int | None = None,
        rescore_weight: float | None = None,
        correct_queries: bool | None = None,
    ) -> Bundle:
        """Read a bundle (or its ``.old`` backup left by a build killed mid-swap), check every
        file against the manifest's sha256 and each vector index against its encoder;
        ``query_cache``: recent query embeddings kept per neural model, ``result_cache``: recent
        searches' results (None: ``RESULT_CACHE`` or $SEMSEARCH_RESULT_CACHE; 0: none); ``rescore``:
        run the bundle's stage-3 cross-encoder (None: as $SEMSEARCH_RESCORE says), on the first
        ``rescore_depth`` hits (None: the depth it was built with), blended with the ranker's scores
        at ``rescore_weight`` (None: $SEMSEARCH_RESCORE_WEIGHT, else as built; a bundle built before
        the blend, or with weight null, orders them by the cross-encoder alone); ``correct_queries``: correct
        each query's spelling before its search, if the bundle has a corrector (None: unless
        $SEMSEARCH_CORRECT_QUERIES is 0 or off)."""
        p = Path(path)
        if TMP_SUFFIX.search(p.name):
            raise ModelDirError(
                f"{p}: the temporary folder of a build (unfinished or killed), not a bundle; "
                "load the bundle it was building, or rebuild it"
            )
        backup = p.with_name(f".{p.name}.old")
        if not (p / MANIFEST).is_file() and (backup / MANIFEST).is_file():
            p = backup
        if not (p / MANIFEST).is_file():
            raise ModelDirError(f"{p}: not a semsearch bundle (no {MANIFEST}); build one with 'semsearch index build'")
        manifest = read_manifest(p)
        if verify:
            _verify_files(p, manifest["files"])
        try:
            corpus = load_corpus(p / "documents.jsonl")
        except (OSError, DataFormatError) as e:
            raise ModelDirError(f"{p}: unreadable documents.jsonl ({e})") from None
        if manifest.get("documents", len(corpus)) != len(corpus):
            raise ModelDirError(
                f"{p / MANIFEST}: 'documents' says {manifest['documents']}, documents.jsonl holds {len(corpus)}"
            )
        lex = manifest.get("lexical")
        lexical = load_model(p / lex["path"]) if lex else None
        if lex:
            _same_name(p, "lexical.name", lex["name"], lexical)
        store = store or manifest.get("store", "faiss")
        semantic = {}
        for i, m in enumerate(manifest.get("models", [])):
            r = SemanticRetriever.load(p / m["path"])
            _same_name(p, f"models[{i}].name", m["name"], r.encoder)
            if r.dim != m["dim"]:
                raise ModelDirError(
                    f"{p / MANIFEST}: 'models[{i}].dim' says {m['dim']}, "
                    f"the {m['name']} encoder in {m['path']} embeds in {r.dim} dimensions"
                )
            _open_store(store, r, p / m["path"], m, manifest)
            semantic[m["name"]] = r
        rk = manifest.get("ranker")
        ranker = load_model(p / rk["path"]) if rk else None
        if rk:
            _same_name(p, "ranker.name", rk["name"], ranker)
        rs = manifest.get("rescorer")
        rescorer = load_model(p / rs["path"]) if rs else None
        if rs:
            _same_name(p, "rescorer.name", rs["name"], rescorer)
            if not is_pair_scorer(rescorer):
                raise ModelDirError(f"{p / MANIFEST}: 'rescorer' is a {rs['name']} model, not a cross-encoder")
        if rescore is None:
            env = os.environ.get(RESCORE_ENV, "").strip().lower()
            rescore = env not in ("", "0", "off")
            if rescore and env.isdigit() and rescore_depth is None:
                rescore_depth = int(env)
        if rescore_depth is None:
            rescore_depth = int(rs["depth"]) if rs else 10
        if rescore_weight is None:
            env = os.environ.get(RESCORE_WEIGHT_ENV, "").strip()
            built = rs.get("weight") if rs else None
            if env:
                try:
                    value: Any = float(env)
                except ValueError:
                    value = env  # not a number: check_weight says so, naming the variable
                rescore_weight = check_weight(value, f"${RESCORE_WEIGHT_ENV}")
            elif built is None:
                rescore_weight = math.inf
            else:
                try:
                    rescore_weight = check_weight(built, f"{p / MANIFEST}: rescorer.weight")
                except ValueError as e:
                    raise ModelDirError(str(e)) from None
        sp = manifest.get("spelling")
        try:
            corrector = SpellCorrector.load(p / sp["path"]) if sp else None
        except ValueError as e:
            raise ModelDirError(str(e)) from None
        if correct_queries is None:
            correct_queries = os.environ.get(CORRECT_ENV, "").strip().lower() not in ("0", "off", "false", "no")
        bundle = cls(
            p,
            manifest,
            corpus,
            lexical,
            semantic,
            ranker,
            query_cache=query_cache,
            result_cache=result_cache,
            rescorer=rescorer,
            rescore_depth=rescore_depth,
            rescore=rescore,
            rescore_weight=rescore_weight,
            corrector=corrector,
            correct_queries=correct_queries,
        )
        bundle.store = store
        return bundle

    # -- search -----------------------------------------------------------------------------------
    def encoder(self, name: str | None = None) -> Any:
        """The named (default: first) encoder model of the bundle."""
        if not self.semantic:
            raise ValueError("this bundle has no neural model")
        if name is None:
            return next(iter(self.semantic.values())).encoder
        if name not in self.semantic:
            raise ValueError(f"no model {name!r} in this bundle (has {', '.join(self.semantic)})")
        return self.semantic[name].encoder

    def document_text(self, doc_id: str) -> str:
        """The document's text as the bundle indexed it (its ``fields``)."""
        i = self.corpus.index[doc_id]
        return join_fields(self.corpus.titles[i], self.corpus.texts[i], self.manifest.get("fields", "title+text"))

    def explain(self, query: str, doc_id: str, *, model: str | None = None, top: int = 5) -> dict[str, Any]:
        """``models.explain`` for a query and a bundle document with a DSSM/CLSM model of the bundle."""
        from ..models.explain import explain
        from ..models.neural import NeuralEncoder

        if doc_id not in self.corpus.index:
            raise KeyError(f"no document {doc_id!r}")
        name = model or next(iter(self.semantic), None)
        if name is None or name not in self.semantic:
            raise ValueError(f"no model {model!r} in this bundle" if model else "this bundle has no neural model")
        enc = self.semantic[name].encoder
        if not isinstance(enc, NeuralEncoder):
            raise ValueError(f"explain needs a DSSM or CLSM model, {name} is not one")
        with self._locks[id(self.semantic[name])]:
            return {"doc_id": doc_id, **explain(enc, self.searched(query), self.document_text(doc_id), top=top)}

    def searched(self, query: str, correct: bool | None = None) -> str:
        """The text a search for ``query`` runs with: spell-corrected when ``correct`` says so (None:
        as the bundle was loaded, ``correct_queries``), else ``query`` itself."""
        if self.correct_queries if correct is None else correct:
            return self.corrector.correct(query)  # type: ignore[union-attr]
        return query

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        model: str | None = None,
        merge_by: str = "union",
        n_lexical: int = N_LEXICAL,
        n_semantic: int = N_SEMANTIC,
        correct: bool | None = None,
    ) -> Result:
        """Lexical top ``n_lexical`` and semantic top ``n_semantic`` (run concurrently by the
        ``HybridRetriever`` of ``model``), merged by ``merge_by``: union (lexical order, semantic-only
        hits after; the default: on homedepot dev RRF with a 2-epoch DSSM lowered BM25's NDCG@10),
        rrf or interpolate (weight 0.5, min-max); re-ranked by the ranker if the bundle has one; the
        top ``k`` with their sources and a timing breakdown. A two-stage bundle (its ranker has
        stage features) retrieves at the depths its ranker was trained for, and every hit's score
        is the ranker's. ``search_many`` of one query."""
        return self.search_many(
            [query], k, model=model, merge_by=merge_by, n_lexical=n_lexical, n_semantic=n_semantic, correct=correct
        )[0]

    def search_many(
        self,
        queries: Sequence[str],
        k: int = 10,
        *,
        model: str | None = None,
        merge_by: str = "union",
        n_lexical: int = N_LEXICAL,
        n_semantic: int = N_SEMANTIC,
        correct: bool | None = None,
    ) -> list[Result]:
        """``search`` for several queries in one pass (the service's micro-batches): one encoder call
        and one vector search for all of them, one feature matrix and one ranker prediction for all
        their candidates. Each query gets the hits ``search`` gives it alone (a batched encoder may
        round its embedding in the last bit, so scores agree to float rounding); the timing is the
        batch's (``batch``: how many distinct queries it searched). ``correct``: search each query
        spell-corrected (``SpellCorrector``; None: as the bundle was loaded), every stage with the
        corrected text; ``Result.query`` is the text searched."""
        blank = [i for i, q in enumerate(queries) if not q.strip()]
        if blank:
            raise ValueError("empty query" if len(queries) == 1 else f"empty query at position {blank[0]}")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if merge_by not in SCORERS:
            raise ValueError(f"merge must be one of {', '.join(SCORERS)}, got {merge_by!r}")
        t0 = time.perf_counter()
        if correct and self.corrector is None:
            raise ValueError("this bundle has no spelling corrector (build it again to have one)")
        queries = [self.searched(q, correct) for q in queries]
        settings = (k, model, merge_by, n_lexical, n_semantic)
        out: list[Result | None] = [None] * len(queries)
        if self.result_cache > 0:
            with self._results_lock:
                for i, q in enumerate(queries):
                    hit = self._results.get((q, *settings))
                    if hit is not None:
                        self._results.move_to_end((q, *settings))
                        ms = 1000 * (time.perf_counter() - t0)
                        out[i] = Result(list(hit.hits), {"cached_ms": ms, "total_ms": ms}, q)
        todo = list(dict.fromkeys(q for q, r in zip(queries, out) if r is None))  # each distinct query once
        if todo:
            found = dict(zip(todo, self._search(todo, k, model, merge_by, n_lexical, n_semantic, t0)))
            if self.result_cache > 0:
                with self._results_lock:
                    for q, r in found.items():
                        self._results[(q, *settings)] = r
                    while len(self._results) > self.result_cache:
                        self._results.popitem(last=False)
            out = [
                r if r is not None else Result(list(found[q].hits), dict(found[q].timing), q)
                for q, r in zip(queries, out)
            ]
        return out  # type: ignore[return-value]

    def _stage1(
        self, queries: list[str], k: int, model: str | None, merge_by: str, n_lexical: int, n_semantic: int
    ) -> tuple[list[list[HybridHit]], dict[str, float]]:
        """Stage 1 of ``search_many`` (and of ``explain_rank``): each query's merged hits from
        ``model``'s hybrid, all of them when a ranker re-orders them, at the ranker's depths in a
        two-stage bundle."""
        hybrid = self._hybrid.get(model if model is not None else next(iter(self._hybrid)))
        if hybrid is None:
            raise ValueError(f"no model {model!r} in this bundle (has {', '.join(self.semantic) or 'none'})")
        if self.two_stage:
            n_lexical, n_semantic = self.ranker.n_lexical, self.ranker.n_semantic  # type: ignore[union-attr]
        else:
            n_lexical, n_semantic = max(n_lexical, k), max(n_semantic, 1)
        return hybrid.timed_search(
            queries,
            None if self.ranker is not None else self._kept(k),
            scorer=merge_by,
            n_lexical=n_lexical,
            n_semantic=n_semantic,
        )

    def _kept(self, k: int) -> int:
        """Hits a search keeps ranked before stage 3: ``k``, or the depth stage 3 re-scores if deeper."""
        return max(k, self.rescore_depth) if self.rescore else k

    def _ranked(
        self, hybrid: HybridRetriever, queries: list[str], k: int
    ) -> tuple[list[list[HybridHit]], dict[str, float]]:
        """A two-stage search on arrays (``HybridRetriever.candidates``, ``score_candidates``):
        each query's best ``k`` candidates by the ranker's score, ties by doc id, the only ones
        that become ``HybridHit``s. The same hits as stage 1's merged hits ranked one by one."""
        rk: Any = self.ranker
        cands, timing = hybrid.candidates(queries, n_lexical=rk.n_lexical, n_semantic=rk.n_semantic)
        t2 = time.perf_counter()
        with self._locks[id(rk)]:
            scores = rk.score_candidates(queries, cands)
        ids = hybrid.doc_ids
        if self._id_ranks is None:  # every model of a bundle indexes the corpus's ids in its order
            self._id_ranks = id_ranks(self.corpus.ids)
        ranks = self._id_ranks
        found = [c.hits(ids, best_k(s, ranks[c.positions], k), s) for c, s in zip(cands, scores)]
        timing["rank_ms"] = 1000 * (time.perf_counter() - t2)
        return found, timing

    def _search(
        self, queries: list[str], k: int, model: str | None, merge_by: str, n_lexical: int, n_semantic: int, t0: float
    ) -> list[Result]:
        hybrid = self._hybrid.get(model if model is not None else next(iter(self._hybrid)))
        if (
            self.two_stage and hybrid is not None and hybrid.positional
        ):  # (the merge order does not matter: all re-ranked)
            found, timing = self._ranked(hybrid, queries, self._kept(k))
        else:
            found, timing = self._stage1(queries, k, model, merge_by, n_lexical, n_semantic)
        if self.ranker is not None and "rank_ms" not in timing:
            t2 = time.perf_counter()
            with self._locks[id(self.ranker)]:
                scores = (
                    self.ranker.score_hits(queries, found)
                    if self.two_stage  # type: ignore[attr-defined]
                    else self.ranker.score(queries, [[h.doc_id for h in hits] for hits in found])
                )
            ranked = []
            for hits, s in zip(found, scores):
                ranked.append([replace(hits[i], score=float(s[i])) for i in _top(hits, s, self._kept(k))])
            found = ranked
            timing["rank_ms"] = 1000 * (time.perf_counter() - t2)
        if self.rescore:
            t3 = time.perf_counter()
            with self._locks[id(self.rescorer)]:
                found = rescore_top(
                    self.rescorer,
                    queries,
                    found,
                    self.rescore_depth,
                    lambda h: self.document_text(h.doc_id),
                    self.rescore_weight,
                )
            timing["rescore_ms"] = 1000 * (time.perf_counter() - t3)
        timing["total_ms"] = 1000 * (time.perf_counter() - t0)
        timing["batch"] = float(len(queries))
        return [Result(hits[:k], dict(timing), q) for q, hits in zip(queries, found)]

    def explain_rank(self, query: str, doc_id: str, *, top: int = 10, model: str | None = None) -> dict[str, Any]:
        """Why a bundle with a LambdaMART ranker ranks ``doc_id`` where it does for ``query``: which stage found
        it, both stage scores and ranks, the ranker's score and the ``top`` feature contributions
        by size (LightGBM's per-prediction SHAP values; contributions + bias = score). A document
        stage 1 did not return has no ranker score (its ``source`` is None)."""
        if not hasattr(self.ranker, "explain_hits"):
            raise ValueError("this bundle has no LambdaMART ranker to explain")
        if doc_id not in self.corpus.index:
            raise KeyError(f"no document {doc_id!r}")
        if top < 1:
            raise ValueError(f"top must be >= 1, got {top}")
        if not query.strip():
            raise ValueError("empty query")
        query = self.searched(query)  # the text search() ranks
        rk: Any = self.ranker
        (hits,), _ = self._stage1([query], 1, model, "union", N_LEXICAL, N_SEMANTIC)  # as search() with its defaults
        at = next((i for i, h in enumerate(hits) if h.doc_id == doc_id), None)
        if at is None:
            return {
                "doc_id": doc_id,
                "score": None,
                "bias": None,
                "source": None,
                "lexical_score": None,
                "semantic_score": None,
                "lexical_rank": None,
                "semantic_rank": None,
                "contributions": [],
            }
        with self._locks[id(self.ranker)]:
            scores, X, contrib, base = rk.explain_hits(query, hits)
        h = hits[at]
        rows = sorted(
            (
                {"feature": f, "value": float(X[at, j]), "contribution": float(contrib[at, j])}
                for j, f in enumerate(rk.feature_names)
            ),
            key=lambda r: -abs(r["contribution"]),
        )
        return {
            "doc_id": doc_id,
            "score": float(scores[at]),
            "bias": float(base[at]),
            "source": h.sources.name,
            "lexical_score": h.lexical,
            "semantic_score": h.semantic,
            "lexical_rank": h.lexical_rank,
            "semantic_rank": h.semantic_rank,
            "contributions": rows[:top],
        }

    def hits(self, result: Result) -> list[Hit]:
        """Plain (rank, id, score, title, text) rows for a result."""
        out = []
        for r, h in enumerate(result.hits, 1):
            i = self.corpus.index[h.doc_id]
            out.append(Hit(r, h.doc_id, h.score, self.corpus.titles[i], self.corpus.texts[i]))
        return out

    def close(self) -> None:
        """Stop the search threads (graceful shutdown)."""
        for h in self._hybrid.values():
            h.close()


__all__ = ["Bundle", "Hit", "Result", "STORES", "Source", "build_bundle", "is_encoder"]
