"""Crash injection for document changes (issue 50 item 3): a real ``semsearch serve
--allow-writes --workers 2`` takes upserts and deletes from several clients and is killed with
SIGKILL (the whole process group, workers included) at a random point of the stream, three times
over the same change log. After each kill every change that was acknowledged (HTTP 200) is in
what a restarted service serves, in the order acknowledged, and the log reads without error (a
torn last line of a killed append is dropped, then cut off by the next append)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from semsearch.index.bundle import Bundle
from semsearch.index.live import LiveIndex
from waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 3


def _start(bundle: Path, changes: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "SEMSEARCH_PROGRESS": "0"}
    cmd = [sys.executable, "-m", "semsearch.cli", "serve", str(bundle), "--port", str(port), "--workers", "2"]
    said = changes.parent / "serve.log"
    with open(said, "wb") as err:
        server = subprocess.Popen(
            [*cmd, "--allow-writes", "--changes", str(changes)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # its own process group: the kill takes the workers too
        )

    def announced() -> bool:  # "serving BUNDLE on http://HOST:PORT/ (2 workers…)": both workers ready
        assert server.poll() is None, said.read_text(errors="replace")[-3000:]
        return f":{port}/ (" in said.read_text(errors="replace")

    wait_until(announced, lambda: f"semsearch serve to announce port {port}: {said.read_text()[-3000:]}")
    return server, f"http://127.0.0.1:{port}"


def test_sigkill_mid_stream_loses_no_acknowledged_change(make_bundle, tmp_path):
    bundle = make_bundle(tmp_path / "b")
    changes = tmp_path / "changes"
    rnd = random.Random(50)
    acked: list[tuple[int, str, str]] = []  # (seq, op, id)
    tried: set[str] = set()  # ids a delete was sent for
    lock = threading.Lock()
    for rnd_no in range(ROUNDS):
        server, base = _start(bundle, changes)
        stop, acked_before = threading.Event(), len(acked)

        def client(c: int, rnd_no: int = rnd_no, base: str = base, stop: threading.Event = stop) -> None:
            with httpx.Client(base_url=base, timeout=60) as http:
                i = 0
                while not stop.is_set():
                    i += 1
                    doc_id = f"r{rnd_no}c{c}n{i}"
                    try:
                        r = http.post("/documents", json={"documents": [{"id": doc_id, "title": f"zorb {doc_id}"}]})
                        if r.status_code == 200:
                            with lock:
                                acked.append((r.json()["seq"], "upsert", doc_id))
                        if i % 3 == 0:
                            with lock:
                                tried.add(doc_id)  # (sent: may be applied without its answer)
                            r = http.delete(f"/documents/{doc_id}")
                            if r.status_code == 200:
                                with lock:
                                    acked.append((r.json()["seq"], "delete", doc_id))
                    except httpx.TransportError:
                        return  # the server is gone

        threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda n=acked_before: len(acked) > n, "a change acknowledged in this round")
            time.sleep(rnd.uniform(1.0, 3.0))  # the kill at a random point of the stream
        finally:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            stop.set()
            for t in threads:
                t.join()
        assert acked, "no change was acknowledged before the kill"
        # what a restarted service serves: the bundle with the log replayed
        live = LiveIndex(Bundle.load(bundle), changes, writes=True)
        try:
            seqs = [s for s, _, _ in acked]
            assert len(set(seqs)) == len(seqs)  # one sequence number per acknowledged change
            assert live.state.seq >= max(seqs)
            deleted = {d for _, o, d in acked if o == "delete"}
            for _, _op, doc_id in acked:
                if doc_id in deleted:
                    assert not live.state.has(doc_id), doc_id
                elif doc_id not in tried:
                    assert live.state.has(doc_id), doc_id
        finally:
            live.close()
    # and the service restarts over that log and answers with the changes
    server, base = _start(bundle, changes)
    try:
        kept = [d for _, op, d in acked if op == "upsert" and d not in tried]
        r = httpx.get(base + "/search", params={"q": f"zorb {kept[-1]}", "k": 5}, timeout=60)
        assert kept[-1] in [h["doc_id"] for h in r.json()["hits"]]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
