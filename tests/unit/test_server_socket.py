"""The service's listening socket (``serving.server.listen``): every accepted connection has
Nagle's algorithm off (``TCP_NODELAY``), in this process and in a spawned worker process as
uvicorn's supervisor starts them, and a busy port is refused by name."""

from __future__ import annotations

import asyncio
import multiprocessing
import socket

import pytest

from semsearch.serving.server import listen


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
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
            server.close()

    return asyncio.run(main())


def _child(sock: socket.socket, out: "multiprocessing.Queue[tuple[int, int]]") -> None:
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
        proto, nodelay = out.get(timeout=60)
    finally:
        p.join(30)
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
