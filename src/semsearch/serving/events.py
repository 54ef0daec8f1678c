"""The served search's event log (``semsearch serve --events DIR``): a search id on every answer,
an impression per answer and the clicks sent to ``POST /events``, written by ``clicks.log``.

**Search ids any worker can verify.** Several worker processes serve one port (``SO_REUSEPORT``),
so a click may reach another worker than the search it names, and the workers share nothing. A
search id carries what checking a click needs, signed::

    <nonce>.<issued>.<offset>.<shown>.<mac>

``nonce``: 16 hex digits (64 random bits); ``issued``: Unix seconds when the answer was made;
``offset``: the 0-based rank of the answer's first hit; ``shown``: how many hits it showed (the
click's position must be in ``offset + 1 .. offset + shown``); ``mac``: the first 16 bytes of
HMAC-SHA256(secret, ``nonce|issued|offset|shown``), base64url. A forged or altered id, one past its
time to live (``ID_TTL_S``, 24 h) or one issued under another secret is unknown (``/events``
answers 404). The secret is the service's, ``ServeOptions.event_secret``: the ``serve`` parent
process draws one per run (``secrets.token_hex(32)``; never on a command line, in the environment
or in a file) and hands it to its workers inside ``ServeOptions``, which keeps it out of its repr.
So a restart makes the ids issued before it unknown, like expired ones.

**Off the request path.** A search and a click only build a row (``impression_row``: a tuple,
checked) and put it in the worker's ``EventLogWriter`` buffer (one JSON line, a lock and a list
append: a few microseconds with the search id); the writer's own thread turns the buffer into
an atomic Parquet segment every ``flush_seconds`` (``--events-flush-seconds``). When
``MAX_PENDING_ROWS`` rows wait for the disk, records are dropped and counted
(``semsearch_events_total{outcome="dropped"}``) rather than making the event loop wait. Each worker
has its own writer, made in the worker when the service starts and flushed and closed when it
stops; segment names carry the process id and a random token, so workers never collide.

No client address is stored: ``client_id`` is whatever opaque key the client sends (the page: a
random id it keeps in localStorage, ``X-Client-Id`` on ``/search``, ``client_id`` in a click).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..clicks.log import EventLogWriter, Kind, event_row, impression_row

ID_TTL_S = 24 * 3600
"""How long a search id accepts clicks (seconds)."""
CLOCK_SKEW_S = 300
"""How far in the future an id's issue time may be (the workers of one machine share a clock)."""
FLUSH_ROWS = 10_000
"""A segment is written once a worker holds this many rows of a kind (or after flush_seconds)."""
MAX_PENDING_ROWS = 4 * FLUSH_ROWS
"""Rows a worker keeps waiting for the disk before it drops new records."""
CLIENT_ID = r"^[A-Za-z0-9_-]{1,64}$"
"""An opaque client key: 1-64 letters, digits, '-' or '_'."""
CLIENT_HEADER = "X-Client-Id"
_CLIENT = re.compile(CLIENT_ID)
_MAC_BYTES = 16
_NONCE = re.compile(r"^[0-9a-f]{16}$")
_ID = re.compile(r"^([0-9a-f]{16})\.([0-9]{1,12})\.([0-9]{1,6})\.([0-9]{1,6})\.([A-Za-z0-9_-]{22})$")
MAX_ID_CHARS = 80


class UnknownSearch(LookupError):
    """A click names no search this service issued (forged, altered, expired, or before a restart)."""


def new_secret() -> str:
    """A service's search-id secret (256 random bits, hex)."""
    return secrets.token_hex(32)


def new_nonce() -> str:
    """A search id's random part (64 bits, 16 hex digits), drawn before its answer is made when
    the answer depends on it (an interleaving seeded from the id: ``serving.compare``)."""
    return os.urandom(8).hex()


def nonce_of(search_id: str) -> str:
    """The nonce a search id starts with (what ``serving.compare`` seeds an interleaving with)."""
    return search_id.split(".", 1)[0]


def valid_client_id(value: str | None) -> bool:
    return value is None or bool(_CLIENT.match(value))


class SearchIds:
    """Issue and verify search ids under one secret (see the module docstring)."""

    def __init__(self, secret: str, *, ttl: float = ID_TTL_S, clock: Callable[[], float] = time.time) -> None:
        if len(secret) < 16:
            raise ValueError("a search-id secret needs at least 16 characters")
        self._key = secret.encode()
        self.ttl, self.clock = ttl, clock
        # HMAC-SHA256's keyed inner and outer hash states, made once (RFC 2104): a MAC is then two
        # copies and two short updates, less than half the time of hmac.digest, which keys anew
        block = hashlib.sha256(self._key).digest() if len(self._key) > 64 else self._key
        block = block.ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(x ^ 0x36 for x in block))
        self._outer = hashlib.sha256(bytes(x ^ 0x5C for x in block))

    def _mac(self, nonce: str, issued: str, offset: str, shown: str) -> str:
        """The first ``_MAC_BYTES`` of HMAC-SHA256(secret, ``nonce|issued|offset|shown``), base64url."""
        inner = self._inner.copy()
        inner.update(f"{nonce}|{issued}|{offset}|{shown}".encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return base64.urlsafe_b64encode(outer.digest()[:_MAC_BYTES]).rstrip(b"=").decode()

    def issue(self, offset: int, shown: int, nonce: str | None = None) -> str:
        """A new id for an answer whose hits are at ranks ``offset + 1 .. offset + shown``, with
        ``nonce`` (`new_nonce`, drawn before the answer was made; None: a new one)."""
        if nonce is None:
            nonce = new_nonce()
        elif not _NONCE.match(nonce):
            raise ValueError(f"a search id's nonce is 16 hex digits, got {nonce!r}")
        issued = str(int(self.clock()))
        return f"{nonce}.{issued}.{offset}.{shown}.{self._mac(nonce, issued, str(offset), str(shown))}"

    def verify(self, search_id: str) -> tuple[int, int]:
        """``(offset, shown)`` of a genuine, unexpired id; else ``UnknownSearch`` saying why."""
        m = _ID.match(search_id) if len(search_id) <= MAX_ID_CHARS else None
        if m is None:
            raise UnknownSearch(f"unknown search id {search_id[:MAX_ID_CHARS]!r}: not an id this service issues")
        nonce, issued, offset, shown, mac = m.groups()
        if not hmac.compare_digest(mac, self._mac(nonce, issued, offset, shown)):
            raise UnknownSearch(
                f"unknown search id {search_id!r}: not issued by this service (or issued before it restarted)"
            )
        age = self.clock() - int(issued)
        if age > self.ttl or age < -CLOCK_SKEW_S:
            raise UnknownSearch(f"search id {search_id!r} has expired (ids accept clicks for {self.ttl / 3600:g} h)")
        return int(offset), int(shown)


def bundle_identity(path: Path, manifest: dict) -> tuple[str, str]:
    """A bundle's name (its directory's) and version: the first 16 hex digits of the SHA-256 of
    its manifest (which holds every file's checksum and the build time), so every build differs."""
    version = hashlib.sha256(json.dumps(manifest, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return Path(path).name, version


class EventLog:
    """One worker's event recording: its search ids, its writer into ``directory`` and the served
    bundle's name and version. ``start`` (in the worker process: the writer's thread does not
    survive a fork) before ``impression`` / ``click``, ``close`` when it stops; ``count(kind,
    outcome)`` is called once per record (the service's metrics)."""

    def __init__(
        self,
        directory: str | Path,
        *,
        secret: str,
        flush_seconds: float = 5.0,
        bundle: str = "",
        bundle_version: str = "",
        ttl: float = ID_TTL_S,
        count: Callable[[str, str], None] | None = None,
    ) -> None:
        self.directory, self.flush_seconds = Path(directory), flush_seconds
        self.ids = SearchIds(secret, ttl=ttl)
        self.bundle, self.bundle_version = bundle, bundle_version
        self._count = count or (lambda kind, outcome: None)
        self._writer: EventLogWriter | None = None
        self._failed = False

    def start(self) -> None:
        if self._writer is None:
            self._writer = EventLogWriter(
                self.directory,
                flush_rows=FLUSH_ROWS,
                flush_seconds=self.flush_seconds,
                max_pending_rows=MAX_PENDING_ROWS,
            )

    def close(self) -> None:
        """Write what is buffered and stop the writer (the service's shutdown)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except RuntimeError as e:
                print(f"semsearch: event log: {e} ({e.__cause__})", file=sys.stderr, flush=True)

    def _append(self, kind: Kind, row: tuple) -> None:
        if self._writer is None:
            self._count(kind, "dropped")
            return
        try:
            ok = self._writer.append_row(kind, row, block=False)
        except RuntimeError as e:  # the writing thread failed (e.g. disk full): searches go on
            if not self._failed:
                self._failed = True
                print(f"semsearch: event log: {e} ({e.__cause__}); events are dropped", file=sys.stderr, flush=True)
            ok = False
        self._count(kind, "logged" if ok else "dropped")

    def impression(
        self,
        query: str,
        hit_ids: Sequence[str],
        hit_stages: Sequence[str],
        *,
        k: int,
        offset: int,
        client_id: str | None,
        arm: str | None = None,
        teams: Sequence[str] | None = None,
        nonce: str | None = None,
        served_by: tuple[str, str] | None = None,
    ) -> str:
        """Log one answer shown and return its new search id (with ``nonce`` when given). When two
        rankers are compared: ``arm`` the arm that answered, ``teams[i]`` the ranker ("A" or "B")
        that contributed hit i, ``served_by`` the (bundle, version) that answered when not the
        log's own."""
        search_id = self.ids.issue(offset, len(hit_ids), nonce)
        bundle, version = served_by or (self.bundle, self.bundle_version)
        self._append(  # a row (a tuple) rather than an Impression: cheaper to make, untracked by the GC
            "impressions",
            impression_row(
                search_id,
                query,
                hit_ids,
                hit_stages,
                bundle=bundle,
                bundle_version=version,
                k=k,
                offset=offset,
                client_id=client_id,
                arm=arm,
                hit_teams=teams,
            ),
        )
        return search_id

    def click(self, query_id: str, object_id: str, position: int, client_id: str | None) -> None:
        """Log a click after checking its search id (``UnknownSearch``) and that ``position`` was
        on that answer's page (``ValueError``)."""
        offset, shown = self.ids.verify(query_id)
        if not offset < position <= offset + shown:
            where = f"positions {offset + 1}-{offset + shown}" if shown else "no results"
            raise ValueError(f"position {position} was not shown by search {query_id!r} (it showed {where})")
        self._append("events", event_row(query_id, object_id, position, action_name="click", client_id=client_id))


__all__ = [
    "CLIENT_HEADER",
    "CLIENT_ID",
    "ID_TTL_S",
    "EventLog",
    "SearchIds",
    "UnknownSearch",
    "bundle_identity",
    "new_nonce",
    "new_secret",
    "nonce_of",
]
