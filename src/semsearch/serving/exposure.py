"""What the service accepts from the network: an API key, request size and rate bounds.

Loopback is the default and needs none of this. Serving on any other address needs ``serve
--expose`` and an API key (``$SEMSEARCH_API_KEY`` or ``--api-key-file``; never a command-line
value, which every local user sees in ``ps``). With a key, the search API (``/search``,
``/explain``, ``POST /events``) and ``/metrics`` require it in the ``X-API-Key`` header, compared
in constant time (``hmac.compare_digest``); ``/health`` and ``/ready`` stay open for probes, and
the page and its assets stay open (the page asks for the key and sends it). The only write the key
allows is appending clicks to the event log (when it is on). Document changes (``POST
/documents``, ``DELETE /documents/{id}``, only with ``serve --allow-writes``) need the separate
write key in the ``X-Write-Key`` header when one is set (``$SEMSEARCH_WRITE_KEY`` or
``--write-key-file``; an exposed service taking writes must have one, unlike its read key).

Every request's URL is bounded (414) and so is a request body (413, by its Content-Length here and
as it is read, for a chunked body, by Starlette's body limit); with
a rate limit, each client address gets a token bucket of ``rate`` requests a second and a burst
of twice that, per worker process (429 with ``Retry-After``). Checked in a pure ASGI middleware:
a header compare and a dictionary lookup per request.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import socket
import time
from dataclasses import dataclass, field

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

API_KEY_ENV = "SEMSEARCH_API_KEY"
"""Where ``semsearch serve`` reads the API key (its command line never carries one)."""
KEY_HEADER = "X-API-Key"
WRITE_KEY_ENV = "SEMSEARCH_WRITE_KEY"
"""Where ``semsearch serve --allow-writes`` reads the write key."""
WRITE_KEY_HEADER = "X-Write-Key"
WRITES = "/documents"  # the path (and prefix) of the write endpoints
PROTECTED = frozenset({"/search", "/explain", "/events", "/metrics"})
UNLIMITED = frozenset({"/health", "/ready"})  # probes are neither keyed nor rate limited
MAX_URL = 8192  # bytes of path + query string
MAX_BODY = 65536  # bytes; POST /events reads one (a click: about 200 bytes)
MAX_WRITE_BODY = 4 << 20  # bytes of a POST /documents batch (at most 1000 documents)
MIN_KEY_CHARS = 16
MAX_CLIENTS = 10_000  # token buckets kept before idle ones are dropped


def body_limit(path: str) -> int:
    """The largest request body ``path`` takes: ``MAX_WRITE_BODY`` for the writes, else ``MAX_BODY``."""
    return MAX_WRITE_BODY if path == WRITES or path.startswith(WRITES + "/") else MAX_BODY


class BodyLimit:
    """Cuts off a body (chunked too: counted as it is read) at ``body_limit`` of its path (413),
    through Starlette's ``RequestBodyLimitMiddleware``, one per limit."""

    def __init__(self, app: ASGIApp) -> None:
        from starlette.middleware.body_limit import RequestBodyLimitMiddleware

        self.small = RequestBodyLimitMiddleware(app, max_body_size=MAX_BODY)
        self.large = RequestBodyLimitMiddleware(app, max_body_size=MAX_WRITE_BODY)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        large = scope["type"] == "http" and body_limit(scope["path"]) == MAX_WRITE_BODY
        await (self.large if large else self.small)(scope, receive, send)


class ExposureError(ValueError):
    """A serve configuration that would expose the service without its guards."""


@dataclass(frozen=True)
class Exposure:
    """The guards of one service: ``api_key`` (None: no key), ``rate`` per client (0: none)."""

    api_key: str | None = field(default=None, repr=False)  # a secret: kept out of logs and reprs
    rate: float = 0.0
    write_key: str | None = field(default=None, repr=False)

    @property
    def burst(self) -> float:
        return max(1.0, 2.0 * self.rate)


def check_key(key: str, where: str) -> str:
    """An API key of at least ``MIN_KEY_CHARS`` visible ASCII characters (it travels in a header)."""
    key = key.strip()
    if len(key) < MIN_KEY_CHARS or not key.isascii() or not key.isprintable() or " " in key:
        raise ExposureError(
            f"{where}: an API key must be at least {MIN_KEY_CHARS} printable ASCII characters "
            "without spaces (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return key


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (``localhost``, 127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def read_key_file(path: str, flag: str = "--api-key-file") -> str:
    try:
        text = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        raise ExposureError(f"{flag} {path}: cannot read it ({e})") from None
    return check_key(text, f"{flag} {path}")


def _answer(status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None) -> tuple[dict, dict]:
    body = orjson.dumps({"error": message})
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *(headers or []),
        ],
    }
    return start, {"type": "http.response.body", "body": body}


class Guard:
    """Pure ASGI middleware enforcing an ``Exposure`` (see the module docstring)."""

    def __init__(self, app: ASGIApp, exposure: Exposure) -> None:
        self.app = app
        self.key = exposure.api_key.encode() if exposure.api_key else None
        self.write_key = exposure.write_key.encode() if exposure.write_key else None
        self.rate, self.burst = exposure.rate, exposure.burst
        self.buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, time)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refuse(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        start, body = refusal
        await send(start)
        await send(body)

    def _refuse(self, scope: Scope) -> tuple[dict, dict] | None:
        path = scope["path"]
        if len(scope.get("raw_path") or path.encode()) + len(scope.get("query_string", b"")) > MAX_URL:
            return _answer(414, f"the URL is longer than {MAX_URL} bytes")
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        limit = body_limit(path)
        if length is not None and (not length.isdigit() or int(length) > limit):
            return _answer(413, f"the request body is larger than {limit} bytes")
        if self.key is not None and path in PROTECTED:
            given = headers.get(KEY_HEADER.lower().encode(), b"")
            if not hmac.compare_digest(given, self.key):
                return _answer(
                    401,
                    f"missing or wrong API key: send it in the {KEY_HEADER} header",
                    [(b"www-authenticate", f'ApiKey header="{KEY_HEADER}"'.encode())],
                )
        if self.write_key is not None and (path == WRITES or path.startswith(WRITES + "/")):
            given = headers.get(WRITE_KEY_HEADER.lower().encode(), b"")
            if not hmac.compare_digest(given, self.write_key):
                return _answer(
                    401,
                    f"missing or wrong write key: send it in the {WRITE_KEY_HEADER} header",
                    [(b"www-authenticate", f'ApiKey header="{WRITE_KEY_HEADER}"'.encode())],
                )
        if self.rate > 0 and path not in UNLIMITED:
            wait = self._take((scope.get("client") or ("?", 0))[0])
            if wait > 0:
                return _answer(
                    429,
                    f"more than {self.rate:g} requests a second from this address; retry in {wait} s",
                    [(b"retry-after", str(wait).encode())],
                )
        return None

    def _take(self, client: str) -> int:
        """Take one token from ``client``'s bucket: 0 if there was one, else seconds to wait."""
        now = time.monotonic()
        tokens, last = self.buckets.get(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self.buckets[client] = (tokens, now)
            return max(1, math.ceil((1.0 - tokens) / self.rate))
        if len(self.buckets) >= MAX_CLIENTS and client not in self.buckets:
            # drop the buckets that have refilled: those clients start full again anyway
            self.buckets = {
                c: (t, s)
                for c, (t, s) in self.buckets.items()
                if min(self.burst, t + (now - s) * self.rate) < self.burst
            }
        self.buckets[client] = (tokens - 1.0, now)
        return 0
