"""The service's listening sockets (``serving.server``): every accepted connection has Nagle's
algorithm off (``TCP_NODELAY``), in this process and in spawned worker processes as uvicorn's
supervisor starts them (each with its own ``SO_REUSEPORT`` socket, over which the kernel spreads
connections), and a busy port is refused by name, whoever holds it."""

from __future__ import annotations

import asyncio
import multiprocessing
import socket

import pytest

from semsearch.serving.server import WorkerSocket, listen, reserve
from waiting import WAIT_S


def _accepted_nodelay(sock: socket.socket) -> tuple[int, int]:
    """Serve ``sock`` with an asyncio server (as uvicorn does with a socket it is handed), connect
    once, and return the accepted socket's (proto, TCP_NODELAY) as asyncio left them."""

    async def main() -> tuple[int, int]:
        seen: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                s = transport.get_extra_info("socket")
                seen.set_result((s.proto, s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        host, port = sock.getsockname()[:2]
        _, writer = await asyncio.open_connection(host, port)
        try:
            return await asyncio.wait_for(seen, WAIT_S)
        finally:
            writer.close()
            server.close()

    return asyncio.run(main())


def _child(sock: socket.socket, out: multiprocessing.Queue[tuple[int, int]]) -> None:
    out.put(_accepted_nodelay(sock))


def test_accepted_connections_have_nodelay():
    sock = listen("127.0.0.1", 0)
    assert sock.proto == socket.IPPROTO_TCP
    proto, nodelay = _accepted_nodelay(sock)
    assert proto == socket.IPPROTO_TCP and nodelay != 0


def test_a_spawned_worker_keeps_nodelay():
    """``serve --workers N``: the socket travels to spawned processes (uvicorn's supervisor);
    their connections must have TCP_NODELAY too (uvicorn's own socket loses it: uvicorn #3149)."""
    sock = listen("127.0.0.1", 0)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_child, args=(sock, out))
    p.start()
    try:
        proto, nodelay = out.get(timeout=WAIT_S)  # (a spawned process imports the package first)
    finally:
        p.join(WAIT_S)
        sock.close()
    assert p.exitcode == 0
    assert proto == socket.IPPROTO_TCP and nodelay != 0


def test_busy_port_is_named():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port}"):
            listen("127.0.0.1", port)


def _worker(sock: socket.socket, out: multiprocessing.Queue[tuple[int, int, int]]) -> None:
    """A spawned worker: its socket arrived as a ``WorkerSocket``; report its options and the
    accepted connection's."""
    reuse = sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
    out.put((reuse, *_accepted_nodelay(sock)))


def test_each_spawned_worker_binds_its_own_reuseport_socket():
    held = reserve("127.0.0.1", 0)
    port = held.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_worker, args=(WorkerSocket("127.0.0.1", port), out))
    p.start()
    try:
        reuse, proto, nodelay = out.get(timeout=60)
    finally:
        p.join(30)
        held.close()
    assert p.exitcode == 0
    assert reuse != 0 and proto == socket.IPPROTO_TCP and nodelay != 0


def test_worker_sockets_share_the_connections():
    """Two workers' listening sockets on one port: the kernel hands each some of 64 connections
    (the shared socket they replace let one worker take them all: 50 / 0 in a load test)."""
    held = reserve("127.0.0.1", 0)
    port = held.getsockname()[1]
    workers = [listen("127.0.0.1", port, reuse_port=True) for _ in range(2)]
    clients = []
    try:
        for w in workers:
            w.listen(128)
            w.setblocking(False)
        for _ in range(64):
            c = socket.create_connection(("127.0.0.1", port), timeout=5)
            clients.append(c)
        counts = []
        for w in workers:
            n = 0
            while True:
                try:
                    conn, _ = w.accept()
                except BlockingIOError:
                    break
                conn.close()
                n += 1
            counts.append(n)
        assert sum(counts) == 64 and min(counts) > 0, counts
    finally:
        for c in clients:
            c.close()
        for w in workers:
            w.close()
        held.close()


def test_a_port_held_by_another_service_is_refused_for_workers():
    with socket.socket() as busy:  # any listener: a plain one ...
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port}"):
            reserve("127.0.0.1", port)
    first = reserve("127.0.0.1", 0)  # ... or another semsearch serve --workers N (SO_REUSEPORT)
    port = first.getsockname()[1]
    worker = listen("127.0.0.1", port, reuse_port=True)
    worker.listen()
    try:
        with pytest.raises(ValueError, match=f"port {port}"):
            reserve("127.0.0.1", port)
    finally:
        worker.close()
        first.close()
