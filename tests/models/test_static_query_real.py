"""The static query encoder distilled from MiniLM (models.static_query) on real Home Depot data:
trained on 1,500 train queries and 5,000 titles (a minute on a shared 2-core machine), its query
vectors point near MiniLM's on unseen dev queries, and it retrieves from those titles with MiniLM's
document vectors about as well as MiniLM's own queries. Full-size figures: README (served latency)."""

from __future__ import annotations

import numpy as np
import pytest

from semsearch.data import open_dataset
from semsearch.evaluation import evaluate
from semsearch.models.static_query import StaticQueryEncoder
from semsearch.plugins import create_model
from semsearch.training.args import DistillArgs
from semsearch.training.distill import fit_student, teacher_vectors, title_spans

pytestmark = pytest.mark.integration


def test_student_follows_minilm(shared_data, one_torch_thread):
    ds = open_dataset(shared_data / "homedepot")
    corpus, queries = ds.corpus(), ds.queries()
    train, dev = ds.qrels("train"), ds.qrels("dev")
    rng = np.random.default_rng(0)
    dev_q = sorted(dev)[:300]
    keep = sorted({d for q in dev_q for d in dev[q]} | set(rng.choice(corpus.ids, 5000, replace=False).tolist()))
    pos = {d: i for i, d in enumerate(corpus.ids)}
    titles = [corpus.titles[pos[d]] for d in keep]
    train_texts = sorted({queries[q] for q in sorted(train)[:1500] if queries[q].strip()})
    teacher = create_model("bert-rep")
    texts = list(dict.fromkeys(train_texts + titles + title_spans(titles, 1)))
    targets = teacher_vectors(teacher, texts)
    dev_texts = [queries[q] for q in dev_q]
    dev_t = teacher_vectors(teacher, dev_texts)
    student = StaticQueryEncoder(teacher)
    log = fit_student(
        student, texts, targets, DistillArgs(epochs=4), dev_texts=dev_texts, dev_targets=dev_t, progress=False
    )
    assert log["best_dev"] > 0.75, log  # mean cosine to MiniLM on unseen dev queries (full size: 0.886)
    at = {t: i for i, t in enumerate(texts)}
    D = targets[[at[t] for t in titles]]  # MiniLM's title vectors (unit), encoded above with the targets

    def run(Q: np.ndarray) -> dict:
        S = Q @ D.T
        return {q: {keep[j]: float(S[i, j]) for j in np.argsort(-S[i])[:100]} for i, q in enumerate(dev_q)}

    sub = {q: dev[q] for q in dev_q}
    s = evaluate(run(student.encode_queries(dev_texts)), sub, ["ndcg@10"]).mean["ndcg@10"]
    t = evaluate(run(dev_t), sub, ["ndcg@10"]).mean["ndcg@10"]
    assert s > t - 0.05, (s, t)
