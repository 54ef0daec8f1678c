"""Smoke test: benchmarks/train_speed.py runs end to end with --quick on a tiny generated homedepot."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
WORDS = "drill cordless bit saw blade wood screw inch steel light bulb led lamp pipe valve brass".split()


def _write_homedepot(folder: Path, n_docs: int, n_queries: int, rng: random.Random) -> None:
    """A tiny BEIR folder: titles only, graded 0-4 train judgments (grade >= 3 are positives)."""
    (folder / "qrels").mkdir(parents=True)
    text = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    with open(folder / "corpus.jsonl", "w") as f:
        for i in range(n_docs):
            f.write(json.dumps({"_id": f"d{i}", "title": text(rng.randint(0, 9)), "text": ""}) + "\n")
        f.write(json.dumps({"_id": "d_empty", "title": "", "text": ""}) + "\n")  # a title with no words
    with open(folder / "queries.jsonl", "w") as f:
        for i in range(n_queries):
            f.write(json.dumps({"_id": f"q{i}", "text": text(rng.randint(1, 4))}) + "\n")
    with open(folder / "qrels" / "train.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for i in range(n_queries):
            docs = rng.sample(range(n_docs), 5)
            for k, d in enumerate(docs):  # the first is a positive: every query has one
                f.write(f"q{i}\td{d}\t{4 if k == 0 else rng.randint(0, 4)}\n")


def test_train_speed_quick(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _write_homedepot(root / "homedepot", 120, 40, random.Random(0))
    out = tmp_path / "train.json"
    env = {**os.environ, "SEMSEARCH_DATA": str(root)}
    cmd = [sys.executable, str(BENCH / "train_speed.py"), "--quick", "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert set(r["training"]) == {"dssm J=4", "dssm J=50", "clsm J=4", "clsm J=50"}
    for t in r["training"].values():
        for side in ("ours", "ours_1thread", "ceiling", "ceiling_1thread", "ceiling_words", "ceiling_words_1thread"):
            assert t[side]["pairs_per_s"] > 0 and t[side]["steps"] >= 1
        assert set(t["ours"]["phases_ms"]) == {"assembly", "forward+loss", "backward", "optimizer"}
        sh = t["shapes"]  # the ceiling's sizes: batch 16 queries, 16 positives plus drawn negatives
        assert sh["q_texts"] == 16 and 16 < sh["d_texts"] <= 16 + 121 and sh["q_nnz"] > 0 and sh["d_nnz"] > 0
        assert t["ceiling"]["gflops"] > 0
    assert r["training"]["clsm J=4"]["shapes"]["d_positions"] >= r["training"]["clsm J=4"]["shapes"]["d_texts"]
    for key in ("clsm J=4", "clsm J=50"):  # the judged ceiling: the convolution at every position, the model's shapes
        t = r["training"][key]
        assert (
            t["shapes"]["d_pos_rows"] == t["shapes"]["d_positions"] and t["shapes"]["d_pos_nnz"] > t["shapes"]["d_nnz"]
        )
        assert t["ceiling"]["shapes"]["d_rows"] == t["shapes"]["d_pos_rows"]  # a row per word position
        assert t["ceiling_words"]["shapes"]["d_rows"] == t["shapes"]["d_rows"] < t["shapes"]["d_pos_rows"]  # per word
    for key in ("dssm J=4", "dssm J=50"):  # judged: a row per text; beside it, a row per distinct word
        t = r["training"][key]
        assert t["ceiling"]["shapes"]["d_rows"] == t["shapes"]["d_texts"]
        assert t["ceiling_words"]["shapes"]["d_rows"] == t["shapes"]["d_word_rows"]
    summary = {row["measure"].split(" (")[0]: row for row in r["summary"]}
    assert "model's shapes (the convolution at every word position" in summary["CLSM training J=4"]["peer"]
    assert "model's shapes (each text's trigram bag" in summary["DSSM training J=4"]["peer"]
    assert "convolution at every word position" in proc.stdout
    for name in ("dssm", "clsm"):
        e = r["encoding"][name]
        assert e["ours"]["titles"] == 121
        for k in (
            "full_titles_per_s",
            "words_warm_titles_per_s",
            "cold_titles_per_s",
            "featurise_titles_per_s",
            "featurise_cached_titles_per_s",
            "tower_titles_per_s",
            "tower_ceiling_titles_per_s",
        ):
            assert e["ours"][k] > 0, k
    assert r["profile"]["clsm J=4"]["top"] and r["profile"]["clsm J=4"]["backward_nodes"]
    assert r["train_encoder_check"]["dssm J=4"]["pairs_per_s"] > 0
    assert r["hardware"]["load_avg_1min"] is not None
    assert r["targets"]["fraction_of_ceiling"] == 0.5 and r["targets"]["train_pairs_per_s"]["dssm J=50"] == 10_000
    assert "fraction" in proc.stdout and "tower ceiling" in proc.stdout


def test_ceiling_multiplies_the_sampled_batches_own_matrices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ceiling's first layer is the real input of the batches the trainer would draw: for
    DSSM each text's merged trigram counts (the model's shapes), for CLSM (and DSSM per word)
    the batch's distinct words; its weight gradient covers the vocabulary rows a batch holds."""
    import importlib

    import numpy as np
    import scipy.sparse as sp

    from semsearch.data import TrainingData, open_dataset
    from semsearch.text import TrigramHasher
    from semsearch.training.trainer import Pairs

    root = tmp_path / "data"
    _write_homedepot(root / "homedepot", 120, 40, random.Random(1))
    monkeypatch.setenv("SEMSEARCH_DATA", str(root))
    monkeypatch.syspath_prepend(str(BENCH))
    ts = importlib.import_module("train_speed")
    data = TrainingData.from_dataset(open_dataset("homedepot"), "train")
    pairs = Pairs.build(data)
    hasher = TrigramHasher.fit(pairs.q_texts + [data.doc_texts[i] for i in np.unique(pairs.d_rows)], max_words=64)
    rows = ts.Batches(len(pairs.q_rows), 16, np.random.default_rng(ts.SEED + 1)).next()  # step_shapes' first batch
    q_texts = [pairs.q_texts[q] for q in pairs.q_rows[rows]]
    for name in ("dssm", "clsm"):
        ours = ts.Ours(name, 4, 16, hasher, data, pairs)
        shapes, mats = ts.step_shapes(ours, batches=2)
        assert len(mats["q"]) == len(mats["d"]) == 2 and mats["q"][0].shape[1] == len(hasher)
        q = mats["q"][0]
        if name == "dssm":  # one row per query: its trigram counts, as the table hashes the text
            ptr, ids = hasher.table.text_bags(q_texts)
            want = np.zeros((len(q_texts), len(hasher)), dtype=np.float32)
            for i in range(len(q_texts)):
                np.add.at(want[i], ids[ptr[i] : ptr[i + 1]], 1.0)
            assert np.array_equal(q.toarray(), want)
            assert len(mats["q_words"]) == 2 and shapes["q_word_nnz"] <= shapes["q_nnz"]
        else:  # one row per distinct word of the queries
            words = {w for t in q_texts for w in t.split()}
            assert q.shape[0] == len(words) and shapes["q_rows"] == round(np.mean([m.shape[0] for m in mats["q"]]))
        ceiling = ts.Ceiling(name, len(hasher), shapes, mats, 4)
        ceiling.step()
        ceiling.step()  # the second batch's matrices
        xs = ceiling.sides[0][0]
        assert [int(x.values().numel()) for x, _ in xs] == [m.nnz for m in mats["q"]]
        for (_x, xt), m in zip(xs, mats["q"]):  # Xᵀ keeps the vocabulary rows the batch holds, no others
            assert xt.shape[0] == len(np.unique(m.indices)) and int(xt.values().numel()) == m.nnz
    m = sp.csr_matrix(np.array([[0, 2, 0], [0, 0, 0], [1, 0, 3]], dtype=np.float32))
    assert np.array_equal(ts._touched(m).toarray(), [[0, 2, 0], [1, 0, 3]])


def test_clsm_position_ceiling_is_the_papers_convolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model-shapes ceiling's input for CLSM (``position_windows``): every position's window of
    trigram vectors side by side (and a padded slot's own column), so that times W_c it is the
    model's convolution at every position, and the benchmark reports it beside the per-word one."""
    import importlib

    import numpy as np
    import torch

    from semsearch.plugins import create_model
    from semsearch.text import TrigramHasher

    monkeypatch.syspath_prepend(str(BENCH))
    ts = importlib.import_module("train_speed")
    texts = ["red brick wall door", "", "door", "wall red red wall brick", "brick"]
    m = create_model("clsm", conv=6, out=4, window=3)
    hasher = TrigramHasher.fit(texts, max_words=64)
    m.build(hasher, 0)
    tower, v = m.net.d, len(hasher)
    x = m.features(texts).batch(np.arange(len(texts)))
    pos = ts.position_windows(x, v)
    assert pos.shape == (x.windows.shape[1], 3 * v + 3)
    w = tower.embed.weight.detach().view(v, 3, 6)  # slot j of trigram t: W_c's row j·V + t
    wc = torch.cat([w[:, j] for j in range(3)] + [tower.pad.detach().view(3, 6)])
    with torch.no_grad():
        want = tower.convolve(x) - tower.bias
    assert torch.allclose(torch.from_numpy(pos.toarray()) @ wc, want, atol=1e-5)
