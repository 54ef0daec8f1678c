"""Building a bundle: index the documents with each model, train the optional stage-2 ranker,
write everything beside the target with checksums and swap it in atomically."""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ... import __version__
from ...data import Corpus, write_corpus
from ...data.files import TMP_SUFFIX, fsync_tree, replace_dir, tmp_dir, write_json
from ...models import Model
from ...models.base import sha256_file as _sha256
from ...models.base import similarity_of
from ...ranking.rescore import is_pair_scorer
from ...text import SpellCorrector
from ..hybrid import HybridHit, HybridRetriever
from ..semantic import SemanticRetriever, encoder_id
from .manifest import FORMAT, MANIFEST, SPELLING
from .options import BuildOptions, Fields
from .store import PG_DSN_ENV, collection_prefix, drop_collections, drop_orphans, pg_dsn


def is_encoder(model: Any) -> bool:
    """Encoders (DSSM, CLSM, bi-encoders) get a vector index; anything else is the lexical stage."""
    return callable(getattr(model, "encode_queries", None)) and callable(getattr(model, "encode_documents", None))


StageSearch = Callable[..., list[list[HybridHit]]]
"""``search(query texts, n_lexical, n_semantic, ef_search=None)``: stage 1 of a bundle being built,
each hit with both stages' scores (what ``train_ranker`` learns from); ``ef_search``: the HNSW
efSearch for this call. ``train_ranker``'s log may name the efSearch to serve with
(``search_effort.chosen``), which the bundle's index then keeps."""


def stage1_searcher(stage1: HybridRetriever, semantic: SemanticRetriever | None, store: str, kind: str) -> StageSearch:
    """The ``StageSearch`` a ranker learns from: ``stage1``'s union search at the depths asked, with
    the HNSW efSearch of ``semantic`` set for the call when one is given (and restored after)."""

    def stage1_search(qs: Sequence[str], nl: int, ns: int, ef_search: int | None = None) -> list[list[HybridHit]]:
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
        semantic.vectors.set_search_params(efSearch=ef_search)  # type: ignore[union-attr]  # checked
        try:
            return stage1.timed_search(qs, None, n_lexical=nl, n_semantic=ns)[0]
        finally:
            semantic.vectors.set_search_params(efSearch=own)  # type: ignore[union-attr]  # checked

    return stage1_search


def build_bundle(
    corpus: Corpus,
    models: Sequence[Model],
    out: str | Path,
    options: BuildOptions | None = None,
    *,
    ranker: Model | None = None,
    train_ranker: Callable[[StageSearch], tuple[Model, dict[str, Any]]] | None = None,
    rescorer: Model | None = None,
    known_vectors: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    manifest_extra: Mapping[str, Any] | None = None,
    **changes: Any,
) -> Path:
    """Index ``corpus`` with each model and save everything as a bundle at ``out``, replacing it
    atomically. ``options`` say how; the models are the arguments.

    A ``train_ranker`` is called once the new bundle's stage 1 (lexical ∪ first encoder) is indexed
    and returns the stage-2 ranker to include (a two-stage search, trained in the build) and its
    training log, saved beside it as ``ranker/training.json``. A ``rescorer`` re-scores the first
    ``rescore_depth`` hits of each search when the bundle is loaded with ``rescore=True``, each
    scored z(ranker) + ``rescore_weight`` · z(cross-encoder) (inf: the cross-encoder's score alone).

    Of the options: ``store = "postgres"`` also loads each encoder's vectors into
    PostgreSQL/pgvector (HNSW), in a collection named per build, so a killed build never touches
    the collections the current bundle uses; the server is ``postgres_dsn`` / $SEMSEARCH_PG_DSN,
    else an embedded one on ``pg_data`` (default: ``.semsearch-pg`` beside the bundle). The faiss
    index is kept too. ``vector_cache``: a directory keeping each encoder's document vectors of
    this collection (``SemanticRetriever.embed``), so a rebuild, or a build whose encoder shares
    another's documents (a distilled query encoder), does not encode the collection again.
    ``spelling``: keep a spelling corrector of the documents' words (``text.SpellCorrector``),
    which corrects every query before its search unless the bundle is loaded without it.

    Args:
        corpus: the documents, indexed (their ``fields`` joined) and saved in the bundle.
        models: the built models: at most one lexical model; each encoder gets a vector index of ``vector_index``.
        out: the bundle's folder (its name may not end in ``.tmp-<number>``).
        options: how to build (``BuildOptions``; None: its defaults).
        ranker: a trained stage-2 ranker over these documents, to include (None: none).
        train_ranker: called with the bundle's stage 1 (``StageSearch``), returns the ranker and its log (None: none).
        rescorer: a trained cross-encoder (bert-rel) kept as the optional stage 3 (None: none).
        known_vectors: per encoder name, document vectors computed before (doc id -> vector); the
            documents without one are encoded (``bundle.reindex``: a bundle's own vectors kept).
        manifest_extra: keys added to the manifest (e.g. ``changes_seq`` of a merge).
        **changes: ``BuildOptions`` fields changed from ``options``, e.g. ``dataset="tiny"`` (a ``Path``: its text).

    Returns:
        The bundle's folder, ``out``.

    Raises:
        ValueError: no models, two lexical models or two encoders of one name, both ``ranker`` and
            ``train_ranker``, a ``rescorer`` that is not a cross-encoder, a ranker over other documents,
            or a build's temporary name as ``out``.
        ParamError: an unknown or invalid option in ``changes``."""
    o = (options or BuildOptions()).replace(
        where="build_bundle", **{k: str(v) if isinstance(v, Path) else v for k, v in changes.items()}
    )
    dataset, fields, kind, store, spelling = o.dataset, o.fields, o.vector_index, o.store, o.spelling
    pg_data, postgres_dsn, vector_cache = o.pg_data, o.postgres_dsn, o.vector_cache
    rescore_depth, rescore_weight, index_params = o.rescore_depth, o.rescore_weight, o.index_params
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
        if corpus.schema is not None:  # a table's columns: the fields searched, the facets, numeric and stored ones
            manifest["schema"] = corpus.schema
        if spelling:
            corrector = SpellCorrector.fit(texts)
            corrector.save(tmp / SPELLING)
            manifest["spelling"] = {"path": SPELLING, "words": len(corrector.counts)}
        if lexical:
            lexical[0].index(corpus.ids, texts)
            lexical[0].save(tmp / "lexical")
            manifest["lexical"] = {"name": lexical[0].name, "path": "lexical"}
        dsn = None
        if store == "postgres" and encoders:
            data_dir = Path(pg_data) if pg_data else out.parent / ".semsearch-pg"
            dsn = pg_dsn(data_dir, postgres_dsn)
            manifest["postgres"] = {
                "data": None if (postgres_dsn or os.environ.get(PG_DSN_ENV)) else str(data_dir.resolve())
            }
        prefix = collection_prefix(out)
        build_tag = f"{prefix}_{os.getpid()}_{secrets.token_hex(2)}"
        if dsn is not None:
            drop_orphans(dsn, out, prefix)
        retrievers = []
        for i, (enc, name) in enumerate(zip(encoders, names, strict=True)):
            metric = "cosine" if similarity_of(enc) == "cosine" else "ip"
            r = SemanticRetriever(enc, kind, metric, cache=vector_cache, **dict(index_params or {}))  # type: ignore[arg-type]  # validated
            retrievers.append(r)
            known = (known_vectors or {}).get(name) or {}
            todo = [i for i, d in enumerate(corpus.ids) if d not in known]
            if not known:
                vecs = r.embed(corpus.ids, texts, progress=f"encoding documents ({name})")
            else:
                fresh = r.embed([corpus.ids[i] for i in todo], [texts[i] for i in todo]) if todo else np.zeros((0, 0))
                at = dict(zip(todo, range(len(todo)), strict=True))
                vecs = np.stack([fresh[at[i]] if i in at else known[d] for i, d in enumerate(corpus.ids)]).astype(
                    np.float32
                )
            r.index_vectors(corpus.ids, vecs)
            entry: dict[str, Any] = {"name": name, "kind": kind, "dim": r.dim, "path": f"models/{name}"}
            if dsn is not None:
                from ..pgstore import PgVectorStore

                entry["collection"] = f"{build_tag}_{i}"
                PgVectorStore.create(
                    dsn, entry["collection"], corpus.ids, vecs, metric=r.metric, model=encoder_id(enc)
                ).close()
            manifest["models"].append(entry)
        log: dict[str, Any] | None = None
        if train_ranker is not None:
            semantic = retrievers[0] if retrievers else None
            stage1 = HybridRetriever(lexical[0] if lexical else None, semantic, scorer="union", complete=True)

            stage1_search = stage1_searcher(stage1, semantic, store, kind)

            try:
                ranker, log = train_ranker(stage1_search)
            finally:
                stage1.close()
            effort = (log or {}).get("search_effort")
            if effort and semantic is not None:  # the efSearch chosen on dev is what the bundle serves with
                semantic.set_search_params(efSearch=int(effort["chosen"]))
        for r, name in zip(retrievers, names, strict=True):  # (saved once the served settings are known)
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
        manifest.update(manifest_extra or {})
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
            except Exception:  # noqa: BLE001  # no server for the old store: its collections stay (disk, not correctness)
                pass
            drop_collections(previous, old_dsn)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def included_ranker(ranker: str | Path, corpus: Corpus, fields: Fields) -> Model:
    """A saved stage-2 ranker to include in a build (``index build --ranker``): its directory, or
    ``portable`` (the packaged one; a directory of that name is ./portable). A portable ranker (no
    feature model bound to the documents it learnt on) is pointed at ``corpus``'s documents."""
    from ...plugins import load_model
    from ...ranking.lambdamart import PORTABLE_DIR

    if str(ranker) == "portable":
        if not (PORTABLE_DIR / "config.json").is_file():
            raise ValueError(
                "--ranker portable: this installation has no packaged portable ranker "
                "(python -m semsearch.experiments.portable --install trains it)"
            )
        ranker = PORTABLE_DIR
    rk = load_model(ranker)
    if getattr(rk, "portable", False):
        rk.use_texts(corpus.ids, corpus.joined(fields))  # type: ignore[attr-defined]  # a portable ranker
    return rk
