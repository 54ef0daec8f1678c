"""A new stage-2 ranker for a built bundle, without indexing or encoding again: the ranker learns
from the bundle's own stage 1 (its lexical index ∪ its first vector index), and the new bundle
shares every other file with the old one (hard links where the file system allows, else copies).
What a click log teaches (``index retrain --clicks``) reaches the service in the time a ranker
trains, not a build's. This module only swaps a trained ranker into a bundle: the ranker itself is
``ranking.lambdamart``'s, its training ``training.ranker``'s (handed in as ``train_ranker``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ...data.files import TMP_SUFFIX, fsync_tree, replace_dir, tmp_dir, write_json
from ...models import Model
from ...models.base import sha256_file as _sha256
from ..hybrid import HybridRetriever
from .build import StageSearch, stage1_searcher
from .manifest import MANIFEST
from .search import Bundle


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed: a copy
        shutil.copy2(src, dst)


def retrain_ranker(
    bundle: str | Path,
    out: str | Path,
    train_ranker: Callable[[StageSearch], tuple[Model, dict[str, Any]]],
    *,
    note: dict[str, Any] | None = None,
) -> Path:
    """Write at ``out`` the bundle ``bundle`` with a stage-2 ranker trained by ``train_ranker`` on
    its stage 1, replacing ``out`` atomically (``out`` may be ``bundle`` itself: the running
    service keeps the old files it has open; the next load reads the new bundle).

    Every file but the ranker's is the old bundle's, byte for byte, except a vector index whose
    HNSW efSearch the training chose anew on dev (``search_effort``), which is saved with it.

    Args:
        bundle: a built bundle (faiss store) with a lexical index, a vector index or both.
        out: the new bundle's folder (its name may not end in ``.tmp-<number>``).
        train_ranker: called with the bundle's stage 1 (``StageSearch``), returns the ranker and its log.
        note: extra keys for the manifest's ``retrained`` entry (e.g. what the ranker learnt from).

    Returns:
        The new bundle's folder, ``out``.

    Raises:
        ModelDirError: ``bundle`` is not a bundle or fails its checksums.
        ValueError: a postgres-store bundle, a ranker over other documents, or a temporary name as ``out``."""
    src, out = Path(bundle), Path(out)
    if TMP_SUFFIX.search(out.name):
        raise ValueError(
            f"{out}: a bundle name may not end in .tmp-<number> (kept for the temporary folders of builds)"
        )
    b = Bundle.load(src, result_cache=0, correct_queries=False)
    try:
        manifest = dict(b.manifest)
        if manifest.get("store", "faiss") != "faiss":
            raise ValueError(f"{src}: retraining the ranker of a {manifest['store']!r}-store bundle is not supported")
        entries = manifest.get("models", [])
        semantic = b.semantic[entries[0]["name"]] if entries else None
        kind = entries[0].get("kind", "flat") if entries else "flat"
        own_ef = semantic.vectors.params.get("efSearch") if semantic is not None and semantic.vectors else None
        stage1 = HybridRetriever(b.lexical, semantic, scorer="union", complete=True)
        try:
            ranker, log = train_ranker(stage1_searcher(stage1, semantic, "faiss", kind))
        finally:
            stage1.close()
        if list(ranker.doc_ids) != b.corpus.ids:
            raise ValueError(f"the new ranker's feature models index other documents than the bundle {src}")
        effort = (log or {}).get("search_effort")
        resave = None
        if effort and semantic is not None and own_ef is not None and int(effort["chosen"]) != int(own_ef):
            semantic.set_search_params(efSearch=int(effort["chosen"]))
            resave = entries[0]["path"]
        tmp = tmp_dir(out)
        try:
            for rel in manifest["files"]:
                parts = Path(rel).parts
                if parts[0] == "ranker" or (resave is not None and rel.startswith(resave + "/")):
                    continue
                _link_or_copy(src / rel, tmp / rel)
            if resave is not None:
                semantic.save(tmp / resave)  # type: ignore[union-attr]  # resave implies a semantic stage
            ranker.save(tmp / "ranker")
            write_json(tmp / "ranker" / "training.json", log)
            manifest["ranker"] = {"name": ranker.name, "path": "ranker"}
            manifest["retrained"] = {
                "from": str(src.resolve()),
                "created": manifest.get("created"),
                **(note or {}),
            }
            manifest["created"] = datetime.now(UTC).isoformat(timespec="seconds")
            manifest["files"] = {
                p.relative_to(tmp).as_posix(): _sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()
            }
            write_json(tmp / MANIFEST, manifest)
            fsync_tree(tmp)
            replace_dir(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        b.close()
    return out
