"""Spec rows for the BERT paper's Table 3: per-row depth, vector-index rows, hybrid (union) rows."""

from __future__ import annotations

import numpy as np
import pytest

from semsearch.data import ranked
from semsearch.experiments import SpecError, load_spec, run_experiment
from semsearch.models.base import Model, read_config, write_config
from semsearch.plugins import register


@register("test-bag-encoder")
class BagEncoder(Model):
    """A toy encoder: hashed bag of words, so texts sharing words are close."""

    dim = 64

    def _enc(self, texts):  # type: ignore[no-untyped-def]
        out = np.full((len(texts), self.dim), 1e-3, dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i, sum(map(ord, w)) * 7 % self.dim] += 1.0
        return out

    encode_queries = encode_documents = _enc

    def index(self, doc_ids, texts):  # type: ignore[no-untyped-def]
        raise AssertionError("a vector-index row must not index the encoder itself")

    @property
    def doc_ids(self):  # type: ignore[no-untyped-def]
        return []

    def score(self, queries, candidates):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def save(self, path):  # type: ignore[no-untyped-def]
        write_config(path, {"model": self.name})

    @classmethod
    def load(cls, path):  # type: ignore[no-untyped-def]
        read_config(path, expect=cls.name)
        return cls()


SPEC = """
name = "tiny-hybrid"
title = "Hybrid rows"
source = "test"
dataset = "tiny"
split = "test"
candidates = "{candidates}"
metrics = ["recall@30"]
tune = "none"

[[models]]
label = "Lexical"
model = "bm25"
depth = 3

[[models]]
label = "Semantic"
model = "test-bag-encoder"
depth = 2
index = {{ kind = "hnsw", M = 8 }}

[[models]]
label = "Semantic + Lexical"
model = "hybrid"
combine = ["Lexical", "Semantic"]
"""


def test_depth_index_and_hybrid_rows(tiny_data, tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "h.toml"
    p.write_text(SPEC.format(candidates="full:10"))
    result = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    lex, sem, hyb = (result.runs[k] for k in ("Lexical", "Semantic", "Semantic + Lexical"))
    assert max(map(len, lex.values())) == 3 and max(map(len, sem.values())) == 2
    for q in hyb:
        assert set(hyb[q]) == set(lex.get(q, {})) | set(sem.get(q, {}))
    recall = {k: r.result.mean["recall@30"] for k, r in result.table.rows.items()}
    assert recall["Semantic + Lexical"] >= max(recall["Lexical"], recall["Semantic"])
    assert recall["Semantic + Lexical"] > 0
    assert list((tmp_path / "models" / "embeddings").glob("embeddings-test-bag-encoder-*.npy"))


def test_union_hybrid_row(tiny_data, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """scorer = "union", the service's default: the lexical row's order, then the semantic-only hits."""
    p = tmp_path / "h.toml"
    p.write_text(SPEC.format(candidates="full:10") + 'hybrid = { scorer = "union" }\n')
    result = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    lex, sem, hyb = (result.runs[k] for k in ("Lexical", "Semantic", "Semantic + Lexical"))
    assert hyb
    for q in hyb:
        want = [d for d, _ in ranked(lex.get(q, {}))]
        assert [d for d, _ in ranked(hyb[q])] == want + [d for d, _ in ranked(sem.get(q, {})) if d not in want]


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda s: s.replace('candidates = "full:10"', 'candidates = "judged"'), "need candidates = 'full:K'"),
        (lambda s: s.replace('combine = ["Lexical", "Semantic"]', 'combine = ["Lexical"]'), "must combine"),
        (lambda s: s + 'hybrid = { scorer = "rrf", depth = 3 }\n', "unknown keys"),
        (lambda s: s.replace("depth = 3", "depth = 0"), "at least 1"),
    ],
)
def test_hybrid_spec_validation(tmp_path, change, message) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "h.toml"
    p.write_text(change(SPEC.format(candidates="full:10")))
    with pytest.raises(SpecError, match=message):
        load_spec(p)


def test_index_row_needs_an_encoder(tiny_data, tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "h.toml"
    p.write_text(SPEC.format(candidates="full:10").replace('model = "test-bag-encoder"', 'model = "bm25"'))
    with pytest.raises(ValueError, match="needs an encoder model"):
        run_experiment(load_spec(p), progress=False)
