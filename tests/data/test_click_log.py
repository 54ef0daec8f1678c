"""Click logs into training pairs (issue 20 item 4): streamed, the positives kept compactly, the
same pairs as the list-of-tuples reading."""

from __future__ import annotations

import numpy as np
import pytest

from semsearch.data import iter_clicks, write_clicks
from semsearch.data.beir import Corpus
from semsearch.data.training import PairList, TrainingData


def _reference(rows, corpus, min_clicks):
    """The former reading: a Python list of (query id, doc id) tuples, one per click (cap 10)."""
    queries: dict[str, str] = {}
    positives = []
    for q, d, clicks in rows:
        qid = queries.setdefault(q, f"q{len(queries)}")
        if clicks >= min_clicks:
            positives += [(qid, d)] * min(clicks, 10)
    return {v: k for k, v in queries.items()}, positives


@pytest.mark.parametrize("min_clicks", [0, 1, 3])
def test_click_log_pairs_equal_the_list_reading(tmp_path, min_clicks):
    rng = np.random.default_rng(5)
    corpus = Corpus([f"d{i}" for i in range(50)], [f"title {i}" for i in range(50)], [""] * 50)
    rows = [(f"query {rng.integers(0, 30)}", f"d{rng.integers(0, 50)}", int(rng.integers(0, 14))) for _ in range(400)]
    write_clicks(rows, tmp_path / "clicks.tsv")
    data = TrainingData.from_clicks(iter_clicks(tmp_path / "clicks.tsv"), corpus, min_clicks=min_clicks)
    queries, positives = _reference(rows, corpus, min_clicks)
    assert isinstance(data.positives, PairList)
    assert data.queries == queries
    assert list(data.positives) == positives and data.positives == positives and len(data.positives) == len(positives)
    assert data.positives[3] == positives[3] and data.positives[5:40:3] == positives[5:40:3]
    assert data.pair_texts()[0][:7] == [queries[q] for q, _ in positives[:7]]


def test_click_log_errors():
    corpus = Corpus(["d0"], ["t"], [""])
    with pytest.raises(ValueError, match="'d9' that is not in the corpus"):
        TrainingData.from_clicks([("q", "d0", 1), ("q", "d9", 1)], corpus)
    with pytest.raises(ValueError, match="no positive pairs"):
        TrainingData.from_clicks([("q", "d0", 0)], corpus)
    with pytest.raises(ValueError, match="positions"):
        PairList(["q0"], ["d0"], np.zeros(2), np.zeros(1))


def test_a_trainer_reads_the_compact_pairs():
    """The DSSM trainer takes a PairList as it takes a list (one epoch on a tiny log)."""
    from semsearch.plugins import create_model
    from semsearch.training.args import EncoderArgs
    from semsearch.training.trainer import train_encoder

    titles = ["red brick", "blue door", "oak table", "steel pipe", "white paint", "lamp shade"] * 3
    corpus = Corpus([f"d{i}" for i in range(len(titles))], titles, [""] * len(titles))
    rows = [(t.split()[0] + " thing", f"d{i}", 1 + i % 3) for i, t in enumerate(titles)]
    data = TrainingData.from_clicks(rows, corpus)
    m = create_model("dssm", hidden=[8], out=4)
    m.build(m.vocabulary(data.doc_texts))
    log = train_encoder(m, data, None, args=EncoderArgs(epochs=1, batch_size=8, negatives=2), progress=False)
    assert log and np.isfinite(m.encode_queries(["red thing"])).all()
