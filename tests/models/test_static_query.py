"""The static query encoder distilled from a bi-encoder (models.static_query, training.distill),
on a tiny generated collection with a stand-in teacher (a fixed random bag-of-words encoder)."""

from __future__ import annotations

import numpy as np
import pytest

from semsearch.models.static_query import StaticQueryEncoder
from semsearch.text.normalize import tokenize
from semsearch.training.args import DistillArgs
from semsearch.training.distill import fit_student, teacher_vectors, title_spans

WORDS = ["drill", "cordless", "saw", "blade", "sink", "steel", "kitchen", "faucet", "lamp", "led", "bulb", "white"]


class BagTeacher:
    """A stand-in bi-encoder: each word a fixed random 16-d vector, a text their sum."""

    def __init__(self, dim: int = 16):
        rng = np.random.default_rng(7)
        self.table = {w: rng.normal(size=dim).astype(np.float32) for w in WORDS}
        self.dim = dim
        self.calls = 0

    def encode_queries(self, texts):
        self.calls += 1
        return np.stack(
            [
                sum(
                    (self.table.get(w, np.zeros(self.dim, np.float32)) for w in tokenize(t)),
                    np.full(self.dim, 0.01, np.float32),
                )
                for t in texts
            ]
        ).astype(np.float32)

    encode_documents = encode_queries


def _titles(n: int = 200, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 6)))) for _ in range(n)]


def test_vocabulary_rows_and_bags() -> None:
    m = StaticQueryEncoder(BagTeacher(), bigram_min_count=1)
    n = m.build_vocabulary(["cordless drill", "drill bit"])
    assert n == 1 + 3 + 2 + len(m.hasher)  # bias, words, bigrams, trigrams
    ids, off = m.bags(["cordless drill", "unseenword"])
    assert off.tolist()[0] == 0 and len(off) == 3
    first = ids[off[0] : off[1]].tolist()
    assert first[0] == 0 and m.words["cordless"] in first and m.bigrams["cordless drill"] in first
    unseen = ids[off[1] : off[2]].tolist()
    assert unseen[0] == 0 and all(i > len(m.words) + len(m.bigrams) for i in unseen[1:])  # bias + known trigrams only


def test_spans_are_runs_of_title_words() -> None:
    spans = title_spans(["a b c d e", "x"], per_title=5, seed=1)
    assert spans and all(1 <= len(s.split()) <= 4 and s in "a b c d e" for s in spans)


def test_student_learns_the_teacher_and_round_trips(tmp_path) -> None:
    teacher = BagTeacher()
    titles = _titles()
    texts = list(dict.fromkeys(titles + title_spans(titles, 2)))
    targets = teacher_vectors(teacher, texts)
    dev = _titles(40, seed=1)
    dev_t = teacher_vectors(teacher, dev)
    m = StaticQueryEncoder(teacher)
    log = fit_student(
        m,
        texts,
        targets,
        DistillArgs(epochs=15, batch_size=32, lr=0.05),
        dev_texts=dev,
        dev_targets=dev_t,
        progress=False,
    )
    assert log["best_dev"] > 0.95  # unseen texts of the same words
    q = m.encode_queries(["cordless drill", "led bulb"])
    assert q.shape == (2, 16) and q.dtype == np.float32
    assert np.allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(m.encode_documents(["sink"]), teacher.encode_documents(["sink"]))
    with pytest.raises(ValueError, match="empty"):
        m.encode_queries(["  "])


def test_teacher_vectors_cached(tmp_path) -> None:
    teacher = BagTeacher()
    a = teacher_vectors(teacher, ["saw blade", "lamp"], tmp_path)
    calls = teacher.calls
    b = teacher_vectors(teacher, ["saw blade", "lamp"], tmp_path)
    assert np.array_equal(a, b) and teacher.calls == calls + 1  # only the probe that keys the cache


def test_saved_and_loaded(tmp_path, monkeypatch) -> None:

    class SavedTeacher(BagTeacher):
        name = "bag"

        def save(self, path):
            path.mkdir(parents=True)

    teacher = SavedTeacher()
    m = StaticQueryEncoder(teacher)
    titles = _titles(50)
    fit_student(m, titles, teacher_vectors(teacher, titles), DistillArgs(epochs=1), progress=False)
    m.save(tmp_path / "sq")
    from semsearch.models import static_query
    from semsearch.plugins import load_model

    monkeypatch.setattr(static_query, "load_teacher", lambda p: teacher)  # the stand-in has no loader
    back = load_model(tmp_path / "sq")
    assert np.array_equal(back.encode_queries(["led lamp", "saw"]), m.encode_queries(["led lamp", "saw"]))
    assert back.words == m.words and back.bigrams == m.bigrams


def test_trainer_uses_train_queries_titles_and_spans(tmp_path) -> None:
    from semsearch.data import EvalSet, TrainingData
    from semsearch.training import fit

    titles = _titles(120)
    ids = [f"d{i}" for i in range(len(titles))]
    queries = {"q1": "cordless drill", "q2": "led bulb", "q9": "kitchen sink"}
    data = TrainingData(
        queries={"q1": queries["q1"], "q2": queries["q2"]},
        doc_ids=ids,
        doc_texts=titles,
        positives=[("q1", "d0"), ("q2", "d1")],
        qrels={"q1": {"d0": 3}, "q2": {"d1": 3}},
        threshold=3,
    )
    dev = EvalSet({"q9": queries["q9"]}, {"q9": ["d2"]}, {"q9": {"d2": 3}})
    m = StaticQueryEncoder(BagTeacher())
    log = fit(
        m, data, dev, progress=False, args=DistillArgs(epochs=3, batch_size=32, lr=0.05, spans=1, cache=str(tmp_path))
    )
    assert log["train_queries"] == 2 and log["titles"] == len(titles) and log["best_dev"] > 0.5
    assert "kitchen sink" not in set(m.bigrams) or "kitchen sink" in " ".join(titles)  # dev text never trained on
    assert list(tmp_path.glob("embeddings-*.npy"))  # the collection's vectors, shared with index build --vector-cache
    assert "teacher_held_out" not in log
    # a teacher trained with `train --hold-out` (its training.json says so): the student's log carries
    # the fold, which `index build --train-ranker` checks against train_fold
    import json

    from semsearch.training import held_out

    tdir = tmp_path / "teacher"
    tdir.mkdir()
    fold = {"split": "train", "fold": "1/2", "queries": 1}
    (tdir / "training.json").write_text(json.dumps({"held_out": fold}))
    m = StaticQueryEncoder(BagTeacher(), teacher=str(tdir))
    log = fit(m, data, dev, progress=False, args=DistillArgs(epochs=1, spans=1, cache=str(tmp_path)))
    assert log["teacher_held_out"] == fold and held_out(tdir) == fold
    (tmp_path / "student").mkdir()
    (tmp_path / "student" / "training.json").write_text(json.dumps(log))
    assert held_out(tmp_path / "student") == fold
    (tdir / "training.json").write_text("[1, 2]")  # not a log: nothing recorded
    assert held_out(tdir) is None and held_out(tmp_path / "nowhere") is None


def test_score_is_the_student_query_against_the_teachers_documents(tiny_bert) -> None:
    """``score``: the cosine of the student's query vector with the teacher's vector of each
    candidate (a bi-encoder teacher indexing the collection); an unknown candidate is refused."""
    from semsearch.models.transformer import BiEncoder

    teacher = BiEncoder(base=tiny_bert)
    titles = _titles(40)
    ids = [f"d{i}" for i in range(len(titles))]
    m = StaticQueryEncoder(teacher)
    fit_student(m, titles, teacher_vectors(teacher, titles), DistillArgs(epochs=1), progress=False)
    m.index(ids, titles)
    queries, cands = ["cordless drill", "led lamp"], [["d3", "d0", "d7"], ["d5"]]
    docs = teacher.encode_documents(titles)
    docs = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    q = m.encode_queries(queries)
    got = m.score(queries, cands)
    for i, c in enumerate(cands):
        assert np.allclose(got[i], docs[[ids.index(d) for d in c]] @ q[i], atol=1e-5)
    with pytest.raises(ValueError, match="not in the indexed collection"):
        m.score(["saw"], [["nope"]])
    # retrieve: the same cosine over the whole collection, top k best first (ties by doc id), as
    # scoring every document would rank them
    full = m.score(queries, [ids] * len(queries))
    for q_hits, s in zip(m.retrieve(queries, 5), full):
        assert [d for d, _ in q_hits] == [ids[j] for j in sorted(range(len(ids)), key=lambda j: (-s[j], ids[j]))[:5]]
        assert np.allclose([v for _, v in q_hits], sorted(s, reverse=True)[:5], atol=1e-5)
    with pytest.raises(ValueError, match="k must be at least 1"):
        m.retrieve(queries, 0)
