"""Running the service: one listening socket, bound here, served by uvicorn in one or several
worker processes.

Why not ``uvicorn.run(..., workers=N)``: its supervisor binds the socket with ``proto`` 0, the
accepted connections inherit that, and asyncio turns Nagle's algorithm off (``TCP_NODELAY``) only
on sockets that report ``IPPROTO_TCP`` (uvicorn issue #3149). With Nagle on, a response written
in two parts (headers, body) waits for the client's delayed ACK on every keep-alive request.
Binding the socket here with ``IPPROTO_TCP`` (and ``TCP_NODELAY`` on the listener, which Linux
copies to accepted sockets) gives every worker's connections ``TCP_NODELAY``, whichever loop.

Why each worker has its own socket (``SO_REUSEPORT``): with one socket shared by the workers,
whichever worker wakes first accepts a burst of connections, and keep-alive clients stay where
they landed, so one worker can be saturated while another idles. With a listening socket per
worker bound with ``SO_REUSEPORT`` the kernel spreads new connections over them by a hash of
their addresses (as nginx's ``reuseport`` and gunicorn's ``--reuse-port``). The parent first
checks the port is free with a plain bind, then holds it with a ``SO_REUSEPORT`` socket that
never listens (so it gets no connections), until exit."""

from __future__ import annotations

import dataclasses
import functools
import http.client
import ipaddress
import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from .events import new_secret
from .telemetry import MULTIPROC_ENV

if TYPE_CHECKING:
    from .options import ServeOptions

GRACEFUL_SHUTDOWN_S = 5
READY_POLL_S = 0.05
"""How often ``announce_when_ready`` asks the starting service whether it is ready."""


def listen(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening: the server calls ``listen`` with
    its backlog), ``TCP_NODELAY`` on, ``SO_REUSEADDR`` as uvicorn binds (a port left in TIME_WAIT
    counts as free), inheritable by worker processes; ``reuse_port``: ``SO_REUSEPORT`` too (one
    of several workers' sockets on the port). Raises ``ValueError`` naming the port when it
    cannot be bound (e.g. another server is there)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    except OSError as e:
        raise ValueError(f"cannot listen on {host} port {port}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ValueError(
            f"cannot listen on {host} port {port}: {e.strerror or e} (is another server running there?)"
        ) from None
    sock.set_inheritable(True)
    return sock


def reserve(host: str, port: int) -> socket.socket:
    """The port for several workers: checked free by a plain bind (which fails, naming the port, if
    any server listens there, ``SO_REUSEPORT`` or not), then held by a ``SO_REUSEPORT`` socket that
    never listens, so that each worker binds its own listening socket to it (``WorkerSocket``)."""
    listen(host, port).close()
    return listen(host, port, reuse_port=True)


class WorkerSocket:
    """A worker's own listening socket as uvicorn's supervisor hands sockets to the worker
    processes it spawns: pickled in the parent, it is unpickled in the worker as a new
    ``SO_REUSEPORT`` socket bound to ``host:port`` (``listen``)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port

    def __reduce__(self) -> tuple[Any, tuple[str, int]]:
        return (_worker_socket, (self.host, self.port))


def _worker_socket(host: str, port: int) -> socket.socket:
    return listen(host, port, reuse_port=True)


def run(app: Any, sock: socket.socket, *, workers: int = 1, loop: str = "asyncio", factory: bool = False) -> None:
    """Serve ``app`` (an ASGI app, or with ``workers`` > 1 an import string or a picklable
    callable, with ``factory`` a function returning the app) on ``sock`` until interrupted: in
    this process (``sock`` from ``listen``), or in ``workers`` processes with a socket each on
    ``sock``'s port (``sock`` from ``reserve``; uvicorn's supervisor restarts a worker that dies)."""
    config = uvicorn.Config(
        app,
        workers=workers,
        factory=factory,
        log_level="warning",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        loop=loop,
    )
    try:
        if workers > 1:
            host, port = sock.getsockname()[:2]
            Multiprocess(config, sockets=[WorkerSocket(host, port)]).run()  # type: ignore[list-item]  # pickled
        else:
            server = uvicorn.Server(config)
            server.run(sockets=[sock])
            if not server.started:  # startup failed (uvicorn.run exits so too)
                raise SystemExit(STARTUP_FAILURE)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()


def _probe_host(host: str) -> str:
    """The address a client on this machine reaches a server listening on ``host`` at (the
    wildcard addresses: loopback)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    return ("::1" if ip.version == 6 else "127.0.0.1") if ip.is_unspecified else host


def _ask(host: str, port: int, path: str) -> tuple[int, dict[str, object]]:
    """One GET on a new connection: (status, JSON body); (0, {}) when nothing answers yet."""
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    except (OSError, ValueError, http.client.HTTPException):
        return 0, {}
    finally:
        conn.close()


def announce_when_ready(
    host: str, port: int, workers: int, announce: Callable[[], None], stop: threading.Event
) -> threading.Thread:
    """Call ``announce`` (once) when the service on ``host:port`` is ready in each of its
    ``workers`` processes: ``/ready`` answers 200 and ``/health`` has named ``workers`` distinct
    pids (each request is a new connection, which the kernel hands to one of the workers'
    ``SO_REUSEPORT`` sockets by a hash of its addresses, so every listening worker is reached in a
    few tries). A thread polling until then, or until ``stop`` is set (the server stopped)."""

    def poll() -> None:
        target = _probe_host(host)
        pids: set[object] = set()
        while not stop.wait(READY_POLL_S):
            status, body = _ask(target, port, "/health")
            if status == 200:
                pids.add(body.get("pid"))
            if len(pids) >= workers and _ask(target, port, "/ready")[0] == 200:
                if not stop.is_set():
                    announce()
                return

    thread = threading.Thread(target=poll, name="semsearch-announce", daemon=True)
    thread.start()
    return thread


def serve(options: ServeOptions, announce: Callable[[], None] | None = None) -> None:
    """Serve ``options.bundle`` until interrupted: the bundle is loaded and verified first, then the
    port is bound (a busy port fails here, naming it); ``announce`` is called once the service
    answers ``/ready`` with 200 in every worker (``announce_when_ready``), so that an address
    announced is one that serves. With several
    workers each process loads its own copy from the same ``ServeOptions``, which uvicorn's
    supervisor hands it when it spawns it (pickled through the process's start-up pipe: no
    environment variable, file or command line carries the options, the API key or the event
    secret, which is drawn here when events are on)."""
    from .app import app_from_options

    if options.events is not None:
        try:  # a log the workers cannot write fails here, before any of them starts
            for kind in ("impressions", "events"):
                (Path(options.events) / kind).mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=Path(options.events) / "events"):
                pass
        except OSError as e:
            raise ValueError(f"--events {options.events}: cannot write there ({e.strerror or e})") from None
    if options.events is not None and options.event_secret is None:
        # one secret for every worker of this run: a click may reach another worker than its search
        options = dataclasses.replace(options, event_secret=new_secret())
    if options.cluster is not None:  # Ray Serve runs the replicas and the HTTP proxy
        from .cluster import serve_until_interrupted

        serve_until_interrupted(options, announce)
        return
    app = app_from_options(options)
    sock = (listen if options.workers == 1 else reserve)(options.host, options.port)
    single = app if options.workers == 1 else None  # several workers: each loads its own, not this one
    del app
    stop = threading.Event()
    if announce is not None:
        host, port = sock.getsockname()[:2]  # the port bound (--port 0: the one the system chose)
        announce_when_ready(options.host, port, options.workers, announce, stop)
    try:
        _serve(options, single, sock)
    finally:
        stop.set()


def _serve(options: ServeOptions, app: Any, sock: socket.socket) -> None:
    """``serve``'s serving part: ``app`` in this process, or (``app`` None) ``options.workers`` processes."""
    from .app import app_from_options

    if app is not None:
        run(app, sock, loop=options.loop)
        return
    # /metrics of any worker adds up all workers: prometheus_client's multiprocess mode, in a
    # fresh directory (old numbers never leak in) removed at exit
    os.environ[MULTIPROC_ENV] = metrics_dir = tempfile.mkdtemp(prefix="semsearch-metrics-")
    # each worker's threads (torch, ONNX Runtime, faiss, LightGBM through OpenMP; the lexical
    # kernel's numba threads) share the cores with the other workers, not each take them all
    per_worker = str(max(1, (os.cpu_count() or 1) // options.workers))
    os.environ.setdefault("OMP_NUM_THREADS", per_worker)
    os.environ.setdefault("NUMBA_NUM_THREADS", per_worker)
    try:
        run(
            functools.partial(app_from_options, options), sock, workers=options.workers, loop=options.loop, factory=True
        )
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
