"""The PostgreSQL side of a bundle: the server a postgres store uses, the collections a build
creates, and the clean-up of those a killed build or a replaced bundle left behind."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from ...data.files import pid_alive
from ...models.base import ModelDirError
from ..semantic import SemanticRetriever, encoder_id
from .manifest import MANIFEST, STORES

PG_DSN_ENV = "SEMSEARCH_PG_DSN"
"""DSN of the PostgreSQL server holding a postgres-store bundle's vectors (never written into the
manifest: it may carry a password). Without it, an embedded server runs on the data directory
the manifest names."""


SERVERS: dict[str, Any] = {}
"""The embedded PostgreSQL servers this process runs, by resolved data directory (``pg_dsn``)."""
_SERVERS_LOCK = threading.Lock()


def pg_dsn(data: str | Path | None, dsn: str | None = None) -> str:
    """The DSN for a postgres store: ``dsn``, else $SEMSEARCH_PG_DSN, else an embedded PostgreSQL
    + pgvector server on ``data`` (started once per process, stopped at exit)."""
    dsn = dsn or os.environ.get(PG_DSN_ENV)
    if dsn:
        return dsn
    if data is None:
        raise ValueError(f"no PostgreSQL server: give a DSN (--pg-dsn or ${PG_DSN_ENV}) or a data directory")
    from ..pgstore import EmbeddedPostgres

    key = str(Path(data).resolve())
    with _SERVERS_LOCK:
        if key not in SERVERS:
            Path(key).parent.mkdir(parents=True, exist_ok=True)
            SERVERS[key] = EmbeddedPostgres(key)
        return str(SERVERS[key].dsn)


def collection_prefix(out: Path) -> str:
    """``semsearch_<hash of the bundle path>``: the PostgreSQL collections of builds of ``out``
    are named ``<prefix>_<pid>_<tag>_<i>``, so the next build knows which are its own."""
    return "semsearch_" + hashlib.sha1(str(Path(out).resolve()).encode()).hexdigest()[:8]


def drop_orphans(dsn: str, out: Path, prefix: str) -> list[str]:
    """Drop the collections a killed build of ``out`` created but never swapped in: named by this
    bundle path's prefix, their build's process gone, and listed by neither the bundle at ``out``
    nor its ``.old`` backup. Returns their names."""
    from ..pgstore import connect, drop_collection, list_collections

    keep: set[str | None] = set()
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


def drop_collections(manifest: dict[str, Any] | None, dsn: str | None) -> None:
    """Best effort: drop the postgres collections of a bundle that has just been replaced."""
    if not manifest or manifest.get("store") != "postgres" or dsn is None:
        return
    try:
        from ..pgstore import connect, drop_collection

        conn = connect(dsn)
        try:
            with conn.transaction():
                for m in manifest.get("models", []):
                    if m.get("collection"):
                        drop_collection(conn, m["collection"])
        finally:
            conn.close()
    except Exception:  # noqa: BLE001  # a stale collection costs disk, never correctness
        pass


def open_store(
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
    from ..pgstore import PgVectorStore

    dsn = pg_dsn((manifest.get("postgres") or {}).get("data"))
    try:
        retriever.vectors = PgVectorStore.open(
            dsn, entry["collection"], expect_model=encoder_id(retriever.encoder), expect_dim=int(entry["dim"])
        )  # type: ignore[assignment]  # duck-typed
    except KeyError:
        raise ModelDirError(f"{path}: postgres collection {entry['collection']!r} is missing from the server") from None
