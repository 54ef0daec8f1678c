"""A bundle's models over another document set: the full rebuild a served bundle's changes are
measured against, and what a merge of those changes writes (``index.live``).

The lexical model, the ranker's feature models and the spelling corrector are fitted anew over
the documents; each encoder's vector index is built anew, from the bundle's stored vectors for
the documents whose id and indexed text are unchanged (an encoder is deterministic per text), the
vectors given for others, and fresh encodings for the rest; the ranker's booster, the stage-1
depths, the vector index kind and parameters (efSearch) and the stage-3 cross-encoder are kept."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...data import Corpus
from .build import build_bundle
from .options import BuildOptions
from .search import Bundle


def reindex(
    bundle: str | Path | Bundle,
    corpus: Corpus,
    out: str | Path,
    *,
    vectors: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    manifest_extra: Mapping[str, Any] | None = None,
    reuse: bool = True,
    vector_index: str | None = None,
    index_params: Mapping[str, int] | None = None,
) -> Path:
    """Write at ``out`` (atomically; it may be the bundle itself) a bundle of ``bundle``'s models
    over ``corpus``.

    Args:
        bundle: a built bundle (faiss store), its folder or loaded; a loaded one is not modified.
        corpus: the documents, in the order the new bundle keeps.
        out: the new bundle's folder.
        vectors: per encoder name, doc id -> vector for documents not in ``bundle`` (e.g. upserted).
        manifest_extra: keys added to the new manifest.
        reuse: take the vectors of unchanged documents from ``bundle`` (False: encode every document).
        vector_index: another vector index kind (None: the bundle's; e.g. ``flat``, exact).
        index_params: that kind's parameters (None: the bundle's, or the new kind's defaults).

    Returns:
        ``out``.

    Raises:
        ValueError: a postgres-store bundle, or an empty ``corpus``."""
    src = bundle if isinstance(bundle, Bundle) else Bundle.load(bundle, result_cache=0, correct_queries=False)
    if not len(corpus):
        raise ValueError("a bundle needs at least one document")
    try:
        m = src.manifest
        if m.get("store", "faiss") != "faiss":
            raise ValueError(f"{src.path}: reindexing a {m['store']!r}-store bundle is not supported")
        fields = m.get("fields", "title+text")
        corpus = Corpus(corpus.ids, corpus.titles, corpus.texts, corpus.stored, m.get("schema"))
        old_texts = dict(zip(src.corpus.ids, src.corpus.joined(fields), strict=True))
        new_texts = corpus.joined(fields)
        known: dict[str, dict[str, np.ndarray]] = {}
        entries = m.get("models", [])
        for e in entries:
            r = src.semantic[e["name"]]
            mine: dict[str, np.ndarray] = {}
            if reuse:
                stored = r.vectors.stored_vectors()  # type: ignore[union-attr]  # faiss store
                at = src.corpus.index
                for d, t in zip(corpus.ids, new_texts, strict=True):
                    if old_texts.get(d) == t:
                        mine[d] = stored[at[d]]
            mine.update((vectors or {}).get(e["name"], {}))
            known[e["name"]] = mine
        lexical = src.lexical.with_params() if src.lexical is not None else None
        encoders = [src.semantic[e["name"]].encoder for e in entries]
        ranker = None
        if src.ranker is not None:
            import copy

            ranker = copy.copy(src.ranker)
            if hasattr(ranker, "models"):
                ranker.models = [f.with_params() for f in ranker.models]
            ranker.index(corpus.ids, new_texts)
        kind = entries[0].get("kind", "flat") if entries else "flat"
        params = dict(src.semantic[entries[0]["name"]].index_params) if entries else {}
        if vector_index is not None and vector_index != kind:
            kind, params = vector_index, {}
        if index_params is not None:
            params = dict(index_params)
        rs = m.get("rescorer") or {}
        options = BuildOptions(
            dataset=m.get("dataset") or "",
            fields=fields,
            vector_index=kind,
            index_params=params,
            spelling=m.get("spelling") is not None,
            rescore_depth=int(rs.get("depth", 10)),
            rescore_weight=float("inf") if rs.get("weight") is None else float(rs["weight"]),
        )
        return build_bundle(
            corpus,
            [x for x in [lexical, *encoders] if x is not None],  # type: ignore[misc]  # a bundle's encoders are Models
            out,
            options,
            ranker=ranker,
            rescorer=src.rescorer,
            known_vectors=known,
            manifest_extra=manifest_extra,
        )
    finally:
        if not isinstance(bundle, Bundle):
            src.close()


__all__ = ["reindex"]
