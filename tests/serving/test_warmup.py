"""Warm before ready (issue 60 item 5): when ``/ready`` first answers 200, every compiled (numba)
kernel the service's searches and changes run is compiled already, so the first search of each
kind is no slower than the next. Asserted on a structural fact rather than on time: in a fresh
interpreter (this file run as a script, so no other test has compiled anything), the numba
dispatchers of semsearch's modules gain no compiled signature from the first searches after
/ready — unfiltered and filtered, an upsert, the searches of the delta it makes, a delete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from semsearch.cli import app as cli

ROWS = [
    ("A1", "Cordless drill 18V", "Brushless motor and two batteries", "DEWALT", "99.5", "yellow"),
    ("A2", "Cordless drill 12V compact", "Light drill for small jobs", "RYOBI", "59", "green"),
    ("A3", "Hammer drill", "Drills masonry and concrete", "DEWALT", "149", "yellow"),
    ("A4", "Drill bit set", "Twenty bits for wood and metal", "BOSCH", "19.99", "blue"),
    ("A5", "Garden hose 50 ft", "Kink-free hose", "RYOBI", "", "green"),
    ("A6", "Drill press stand", "Turns a drill into a drill press", "BOSCH", "210", "blue"),
]


def compiled() -> dict[str, list[str]]:
    """Each numba dispatcher of semsearch's loaded modules and the signatures it has compiled."""
    from numba.core.dispatcher import Dispatcher

    out: dict[str, list[str]] = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("semsearch"):
            for attr, value in list(vars(module).items()):
                if isinstance(value, Dispatcher):
                    out[f"{name}.{attr}"] = sorted(map(str, value.signatures))
    return out


def first_requests(bundle: str, changes: str, row: dict[str, Any], filters: list[str]) -> dict[str, Any]:
    """Serve ``bundle`` with writes, and once /ready answers 200 search it (with each of
    ``filters`` too), upsert ``row``, search again and delete it: what each took (ms), the kernels
    compiled at /ready and those compiled after it."""
    from fastapi.testclient import TestClient

    from semsearch.serving import create_app

    app = create_app(bundle, allow_writes=True, changes=changes)
    ms: dict[str, float] = {}
    with TestClient(app) as c:
        assert c.get("/ready").status_code == 200
        at_ready = compiled()

        def timed(name: str, method: str, path: str, **kw: Any) -> None:
            t = time.perf_counter()
            r = c.request(method, path, **kw)
            ms[name] = round(1000 * (time.perf_counter() - t), 1)
            assert r.status_code == 200, (name, r.text)

        timed("first", "GET", "/search", params={"q": "cordless drill"})
        timed("second", "GET", "/search", params={"q": "compact hammer"})
        for i, f in enumerate(filters):
            timed(f"filtered {i + 1}", "GET", "/search", params=[("q", "drill"), ("filter", f)])
        timed("upsert", "POST", "/documents", params={"wait": "true"}, json={"documents": [row]})
        timed("first after upsert", "GET", "/search", params={"q": "zorblax drill"})
        for i, f in enumerate(filters):
            timed(f"filtered after upsert {i + 1}", "GET", "/search", params=[("q", "zorblax"), ("filter", f)])
        doc_id = next(iter(row.values()))
        timed("delete", "DELETE", f"/documents/{doc_id}", params={"wait": "true"})
        timed("after delete", "GET", "/search", params={"q": "drill bits"})
        after = compiled()
    new = {k: sorted(set(v) - set(at_ready.get(k, []))) for k, v in after.items()}
    return {
        "ms": ms,
        "warm_searches": app.state.warm_searches,
        "at_ready": {k: v for k, v in at_ready.items() if v},
        "new": {k: v for k, v in new.items() if v},
    }


def _in_fresh_process(bundle: Path, tmp: Path, row: dict[str, Any], filters: list[str]) -> dict[str, Any]:
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    args = [str(bundle), str(tmp / "changes"), json.dumps(row), json.dumps(filters)]
    r = subprocess.run(
        [sys.executable, __file__, *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    lines = ["sku,name,description,brand,price,color"] + [",".join(r) for r in ROWS]
    (tmp_path / "catalog.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["--id", "sku", "--fields", "name,description", "--facets", "brand", "--numeric", "price"]
    out = tmp_path / "b"
    r = CliRunner().invoke(cli, ["index", "build", "--data", str(tmp_path / "catalog.csv"), "--out", str(out), *args])
    assert r.exit_code == 0, r.output
    return out


def test_a_catalog_bundle_compiles_nothing_after_ready(catalog: Path, tmp_path: Path) -> None:
    row = {"sku": "Z1", "name": "Zorblax drill", "description": "new", "brand": "ACME", "price": 5, "color": "red"}
    got = _in_fresh_process(catalog, tmp_path, row, ["brand:DEWALT", "price:[10,100]"])
    print(got["ms"])
    assert got["new"] == {}, got["new"]  # the first searches, filtered or not, and the change compiled nothing
    # the lexical kernels were compiled (or loaded from numba's cache) before /ready: with and
    # without a filter, on the bundle and on a delta
    assert any(k.startswith("semsearch.models.postings.") for k in got["at_ready"]), got["at_ready"]
    assert got["warm_searches"] == 4  # unfiltered and filtered, on the bundle and on a scratch delta


def test_a_two_stage_bundle_compiles_nothing_after_ready(two_stage: Path, tmp_path: Path) -> None:
    row = {"id": "z1", "title": "zorblax drill", "text": "a new drill"}
    got = _in_fresh_process(two_stage, tmp_path, row, [])
    print(got["ms"])
    assert got["new"] == {}, got["new"]  # lexical, vector search, the ranker's trees, the delta's
    assert any(k.startswith("semsearch.ranking.trees.") for k in got["at_ready"]), got["at_ready"]
    assert got["warm_searches"] == 2  # unfiltered, on the bundle and on a scratch delta


if __name__ == "__main__":  # the fresh process of ``_in_fresh_process``
    bundle_, changes_, row_, filters_ = sys.argv[1:5]
    print(json.dumps(first_requests(bundle_, changes_, json.loads(row_), json.loads(filters_))))
