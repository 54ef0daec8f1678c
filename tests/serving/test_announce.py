"""``semsearch serve`` announces its address ("serving … on http://…") only once the service is
ready: the moment the line is printed, ``/ready`` answers 200, and with ``--workers 2`` both
worker processes answer (``serving.server.announce_when_ready``). The real command, in a
subprocess, its stderr read as it is written."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from waiting import WAIT_S

REPO = Path(__file__).resolve().parents[2]
START_S = WAIT_S


@pytest.fixture
def served_bundle(make_bundle, tmp_path):
    return make_bundle(tmp_path / "b")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_address_is_announced_only_once_ready(served_bundle, workers):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "semsearch.cli", "serve", str(served_bundle), "--port", str(port)]
    cmd += ["--workers", str(workers), "--events", "off"]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    lines: queue.Queue[tuple[str, str]] = queue.Queue()
    for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        threading.Thread(target=lambda n=name, s=stream: [lines.put((n, x)) for x in s], daemon=True).start()
    base, seen = f"http://127.0.0.1:{port}", ""
    try:
        deadline = time.time() + START_S
        while f"http://127.0.0.1:{port}/" not in seen:
            assert proc.poll() is None and time.time() < deadline, f"not announced:\n{seen}"
            try:
                seen += lines.get(timeout=0.5)[1]
            except queue.Empty:
                continue
        # announced: ready now, at the first request, in every worker (new connections spread over them)
        r = httpx.get(base + "/ready", timeout=5)
        assert r.status_code == 200 and r.json()["status"] == "ready"
        pids = set()
        for _ in range(40):
            with httpx.Client(timeout=5) as c:
                pids.add(c.get(base + "/health").json()["pid"])
            if len(pids) == workers:
                break
        assert len(pids) == workers
        assert "serving" in seen and f"({workers} worker" in seen
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_nothing_is_announced_before_the_server_answers():
    """A stand-in for a slow start: the announcing thread asks the port, which nothing serves yet,
    and stays silent until the service answers ready."""
    from semsearch.serving.server import announce_when_ready

    port, said, stop = _free_port(), threading.Event(), threading.Event()
    thread = announce_when_ready("127.0.0.1", port, 1, said.set, stop)
    time.sleep(0.5)
    assert not said.is_set() and thread.is_alive()  # nothing listens: no announcement
    stop.set()
    thread.join(WAIT_S)  # (returns as soon as the thread ends)
    assert not thread.is_alive() and not said.is_set()
