"""Parity with PyClick (markovi/PyClick, the reference implementation of Chuklin, Markov & de
Rijke's "Click Models for Web Search"): on a simulated log in the Yandex format, semsearch's PBM and
UBM with PyClick's settings (every parameter starting at 1/2, a Beta(1, 1) prior, a fixed number
of EM iterations) give PyClick's parameters. PyClick is not on the package index, so its figures
are a fixture made by ``tests/fixtures/pyclick/make_reference.py`` (which says how)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from semsearch.clicks.formats import read_yandex
from semsearch.clicks.models import PBM, UBM

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pyclick"


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads((FIXTURE / "reference.json").read_text())


@pytest.mark.parametrize("name", ["pbm", "ubm"])
def test_pbm_and_ubm_equal_pyclicks_with_matched_settings(reference: dict, name: str) -> None:
    sessions = read_yandex(FIXTURE / "sim.tsv").sessions(top_n=10)
    assert len(sessions) == reference["sessions"] and (sessions.docs >= 0).all()
    model = (PBM if name == "pbm" else UBM)(
        max_iter=reference["iterations"], tol=None, prior=(1, 1), init_examination=0.5, init_attractiveness=0.5
    ).fit(sessions)
    want = reference[name]
    table = model.attractiveness()
    got = dict(
        zip(
            (f"{q}\t{d}" for q, d in zip(table["query"].to_pylist(), table["doc"].to_pylist(), strict=True)),
            table["attractiveness"].to_pylist(),
            strict=True,
        )
    )
    assert got.keys() == want["attractiveness"].keys()
    diff = max(abs(got[k] - v) for k, v in want["attractiveness"].items())
    assert diff < 1e-12  # measured 1.3e-15 (PBM), 8.9e-16 (UBM)
    if name == "pbm":
        assert np.allclose(model.examination, want["examination"], rtol=0, atol=1e-12)
    else:
        # PyClick's UBM: exam[r][p], p the 0-based rank of the click above, 9 (M - 1) for none;
        # semsearch's: examination[r, r'], r' the 1-based rank of the click above, 0 for none
        py = np.asarray(want["examination"])
        for r in range(10):
            assert model.examination[r, 0] == pytest.approx(py[r][9], abs=1e-12)
            for p in range(r):
                assert model.examination[r, p + 1] == pytest.approx(py[r][p], abs=1e-12)
