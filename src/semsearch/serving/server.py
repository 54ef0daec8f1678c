"""Running the service: one listening socket, bound here, served by uvicorn in one or several
worker processes.

Why not ``uvicorn.run(..., workers=N)``: its supervisor binds the socket with ``proto`` 0, the
accepted connections inherit that, and asyncio turns Nagle's algorithm off (``TCP_NODELAY``) only
on sockets that report ``IPPROTO_TCP`` (uvicorn issue #3149). With Nagle on, a response written
in two parts (headers, body) waits for the client's delayed ACK: about 40 ms per keep-alive
request on Linux. Measured here (wrk, 50 connections, an endpoint that does nothing, 2 workers,
asyncio): 1,136 requests/s at a 44 ms mean through ``uvicorn.run``, 23 requests/s for one client.
Binding the socket here with ``IPPROTO_TCP`` (and ``TCP_NODELAY`` on the listener, which Linux
copies to accepted sockets) gives every worker's connections ``TCP_NODELAY``, whichever loop."""

from __future__ import annotations

import socket
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

GRACEFUL_SHUTDOWN_S = 5


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening: the server calls ``listen`` with
    its backlog), ``TCP_NODELAY`` on, ``SO_REUSEADDR`` as uvicorn binds (a port left in TIME_WAIT
    counts as free), inheritable by worker processes. Raises ``ValueError`` naming the port when
    it cannot be bound (e.g. another server is there)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    except OSError as e:
        raise ValueError(f"cannot listen on {host} port {port}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {host} port {port}: {e.strerror or e} (is another server running there?)") from None
    sock.set_inheritable(True)
    return sock


def run(app: Any, sock: socket.socket, *, workers: int = 1, loop: str = "asyncio", factory: bool = False) -> None:
    """Serve ``app`` (an ASGI app, or with ``workers`` > 1 an import string, with ``factory`` a
    function returning the app) on ``sock`` (from ``listen``) until interrupted: in this process,
    or in ``workers`` processes that share the socket (uvicorn's supervisor restarts a worker that
    dies)."""
    config = uvicorn.Config(app, workers=workers, factory=factory, log_level="warning",
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, loop=loop)
    try:
        if workers > 1:
            Multiprocess(config, sockets=[sock]).run()
        else:
            server = uvicorn.Server(config)
            server.run(sockets=[sock])
            if not server.started:  # startup failed (uvicorn.run exits so too)
                raise SystemExit(STARTUP_FAILURE)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
