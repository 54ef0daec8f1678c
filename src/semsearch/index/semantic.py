"""Semantic retrieval: any encoder paired with a vector index (the BERT paper's "semantic index",
Sec. 2.2 and 4.4: embed every title once, k-NN search each query's embedding).

``SemanticRetriever`` is a ``Model`` (so ``rank``, experiment specs and the search service can use
it like any other) whose ``retrieve`` goes through a ``VectorIndex`` instead of scoring every
document. The encoder is anything with ``encode_queries(texts)`` / ``encode_documents(texts)``
returning float32 matrices (DSSM, CLSM, a bi-encoder). It is not in the model registry: it wraps
a model rather than being one; ``save``/``load`` write the encoder (if it is a ``Model``) beside
the index."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..data.files import cached_array
from ..models.base import Model, ModelDirError
from ..plugins import load_model
from ..progress import Reporter
from .vector import META, Hits, IndexMismatchError, VectorIndex

PROBES = ("cordless drill", "how long is a marathon", "stainless steel kitchen sink 33 inch")
"""Fixed texts whose document vectors are saved with an index, to check on load that the encoder
is the one that built it (a model name alone does not tell two trainings apart)."""
RETRIEVER = "retriever.json"


class Encoder(Protocol):
    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray: ...


def encoder_id(encoder: Any) -> str:
    """A short name for the encoder: its registered model name, else its class name."""
    return getattr(encoder, "name", "") or type(encoder).__name__


class SemanticRetriever(Model):
    """Top-k retrieval through a vector index over ``encoder``'s document embeddings."""

    name = "semantic"

    def __init__(
        self,
        encoder: Encoder,
        kind: str = "flat",
        metric: str = "cosine",
        *,
        batch_size: int = 1024,
        threads: int | None = None,
        cache: str | Path | None = None,
        **index_params: int,
    ):
        """A retriever over ``encoder``; ``index`` or ``load`` fills it.

        Args:
            encoder: encodes queries and documents.
            kind: the vector index kind (``VectorIndex``).
            metric: "cosine", "ip" or "l2".
            batch_size: texts encoded at a time.
            threads: faiss threads (None: faiss's default).
            cache: a folder for document embeddings (None: none kept).
            **index_params: the index kind's parameters."""
        self.encoder = encoder
        self.kind, self.metric, self.batch_size, self.threads = kind, metric, batch_size, threads
        self.cache = Path(cache) if cache is not None else None
        self.index_params = index_params
        self.vectors: VectorIndex | None = None
        self.query_cache = 0  # recent distinct query embeddings kept (0: none); see encode_queries
        self._query_vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._probes = np.zeros((0, 0), dtype=np.float32)

    def encode_documents(self, texts: Sequence[str], progress: str | None = None) -> np.ndarray:
        """Document embeddings in batches of ``batch_size`` (with a progress bar if named)."""
        starts = range(0, len(texts), self.batch_size)
        rep = Reporter(progress or "", len(starts), unit="documents", show=bool(progress))
        parts = []
        try:
            for s in starts:
                batch = list(texts[s : s + self.batch_size])
                parts.append(np.asarray(self.encoder.encode_documents(batch), dtype=np.float32))
                rep.advance(1, len(batch))
        finally:
            rep.close()
        if not parts:
            raise ValueError("cannot index an empty collection")
        return np.concatenate(parts)

    def embed(self, doc_ids: Sequence[str], texts: Sequence[str], progress: str | None = None) -> np.ndarray:
        """Document embeddings, read from / written to ``cache`` (a directory) when one is set:
        keyed by the document encoder's name (an encoder's ``document_encoder`` when it has one:
        a distilled query encoder shares its teacher's documents), its probe embeddings (so its
        weights) and the ids and texts, so a transformer encodes a collection once across runs."""
        if self.cache is None:
            return self.encode_documents(texts, progress)
        h = hashlib.sha1(encoder_id(getattr(self.encoder, "document_encoder", self.encoder)).encode())
        h.update(self._probe_vectors().tobytes())
        for d, t in zip(doc_ids, texts):
            h.update(f"{d}\t{t}\n".encode())
        enc = encoder_id(getattr(self.encoder, "document_encoder", self.encoder))
        f = self.cache / f"embeddings-{enc}-{h.hexdigest()[:16]}.npy"
        return cached_array(f, lambda: self.encode_documents(texts, progress), rows=len(texts))

    def index(self, doc_ids: Sequence[str], texts: Sequence[str], progress: str | None = "encoding documents") -> None:
        """Embed ``texts`` and build the vector index (replacing any earlier one)."""
        if len(doc_ids) != len(texts):
            raise ValueError(f"{len(doc_ids)} doc ids but {len(texts)} texts")
        self.index_vectors(doc_ids, self.embed(doc_ids, texts, progress))

    def index_vectors(self, doc_ids: Sequence[str], vecs: np.ndarray) -> None:
        """Build the vector index over document embeddings computed earlier (by ``embed``)."""
        self.vectors = VectorIndex.build(
            doc_ids,
            vecs,
            self.kind,
            self.metric,
            model=encoder_id(self.encoder),
            threads=self.threads,
            **self.index_params,
        )
        self._probes = self._probe_vectors()

    def segment(self, doc_ids: Sequence[str], vecs: np.ndarray) -> SemanticRetriever:
        """A retriever with this one's encoder and metric over other documents' embeddings in an
        exact (flat) index, without probing the encoder again (a served bundle's delta segment)."""
        seg = SemanticRetriever(self.encoder, "flat", self.metric)
        model = self.vectors.model if self.vectors is not None else encoder_id(self.encoder)
        seg.vectors = VectorIndex.build(doc_ids, vecs, "flat", self.metric, model=model)
        seg._probes = self._probes
        return seg

    @property
    def dim(self) -> int:
        """The encoder's vector width (0 before ``index``)."""
        return int(self._probes.shape[1])

    def _probe_vectors(self) -> np.ndarray:
        return np.asarray(self.encoder.encode_documents(list(PROBES)), dtype=np.float32)

    def _require(self) -> VectorIndex:
        if self.vectors is None:
            raise RuntimeError("semantic retriever: no index; call index() or load()")
        return self.vectors

    @property
    def doc_ids(self) -> Sequence[str]:
        return self._require().doc_ids

    def set_search_params(self, **params: int) -> None:
        """The index's search-time parameters (``VectorIndex.set_search_params``), also as this
        retriever's own settings, so that a saved retriever and its index agree."""
        self._require().set_search_params(**params)
        self.index_params.update({k: int(v) for k, v in params.items()})

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Query embeddings; an empty or blank query is an error (it has no meaning to embed).
        With ``query_cache`` > 0 the embeddings of that many recent distinct queries are kept (a
        service answers repeated queries without running a transformer again)."""
        blank = [i for i, q in enumerate(queries) if not q.strip()]
        if blank:
            raise ValueError(f"empty query text at position {blank[0]}")
        if self.query_cache <= 0:
            return np.asarray(self.encoder.encode_queries(list(queries)), dtype=np.float32)
        cache = self._query_vectors
        missing = [q for q in dict.fromkeys(queries) if q not in cache]
        if missing:
            for q, v in zip(missing, np.asarray(self.encoder.encode_queries(missing), dtype=np.float32)):
                cache[q] = v
        out = np.stack([cache[q] for q in queries])
        for q in queries:
            cache.move_to_end(q)
        while len(cache) > self.query_cache:
            cache.popitem(last=False)
        return out

    def retrieve(self, queries: Sequence[str], k: int) -> list[Hits]:
        """Top-``k`` of the collection per query via the vector index (k past the collection
        size returns all of it)."""
        return self.search(queries, k)[0]

    def search(self, queries: Sequence[str], k: int) -> tuple[list[Hits], np.ndarray]:
        """``retrieve`` and the query embeddings it searched with (a stage-2 ranker scores other
        candidates against them: ``similarity``)."""
        ix = self._require()
        if not queries:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        q = self.encode_queries(queries)
        return ix.search(q, k), q

    def search_positions(
        self, queries: Sequence[str], k: int, allowed: np.ndarray | None = None
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
        """``search`` with each query's hits as (positions in the index, scores) arrays
        (``VectorIndex.search_positions``; a faiss index only); ``allowed`` (bool per indexed
        document; None: all) keeps the search inside the documents it marks True."""
        ix = self._require()
        if not queries:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        q = self.encode_queries(queries)
        return ix.search_positions(q, k, allowed=allowed), q

    def similarity_positions(self, query_vector: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """``similarity`` of the documents at ``positions`` in the index."""
        return self._require().similarity_positions(query_vector, positions)

    def similarity(self, query_vector: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray:
        """The index's score (cosine for a cosine index) of one query embedding with each of
        ``doc_ids``, from the stored document vectors (no document is encoded again)."""
        return self._require().similarity(query_vector, doc_ids)

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Scores of given candidates by the encoder's own ``score`` (it must be a ``Model``: the
        index keeps vectors, not texts to encode)."""
        if isinstance(self.encoder, Model):
            return self.encoder.score(queries, candidates)
        raise TypeError("semantic retriever: re-ranking candidates needs an encoder that is a Model")

    def params(self) -> dict[str, Any]:
        return {"kind": self.kind, "metric": self.metric, **self.index_params}

    # -- persistence ----------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """``encoder/`` (a saved Model), ``index/`` (the vector index) and ``retriever.json``
        (settings and the probe vectors that tie the index to this encoder)."""
        ix = self._require()
        if not isinstance(self.encoder, Model):
            raise TypeError("semantic retriever: only an encoder that is a Model can be saved with its index")
        d = Path(path)
        self.encoder.save(d / "encoder")
        ix.save(d / "index")
        cfg = {
            "encoder": encoder_id(self.encoder),
            "kind": self.kind,
            "metric": self.metric,
            "batch_size": self.batch_size,
            "index_params": self.index_params,
            "probes": self._probes.tolist(),
        }
        (d / RETRIEVER).write_text(json.dumps(cfg) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path, encoder: Encoder | None = None, threads: int | None = None) -> SemanticRetriever:
        """Read a saved retriever; with ``encoder`` given, use it instead of the saved one — it
        must be the same model (name, dimension and probe embeddings are checked)."""
        d = Path(path)
        try:
            cfg = json.loads((d / RETRIEVER).read_text(encoding="utf-8"))
            if not isinstance(cfg, dict):
                raise TypeError(f"expected a JSON object, got {type(cfg).__name__}")
            probes = np.asarray(cfg["probes"], dtype=np.float32)
            kind, metric, batch_size, index_params = cfg["kind"], cfg["metric"], cfg["batch_size"], cfg["index_params"]
            if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
                raise ValueError(f"'batch_size' must be a positive integer, got {batch_size!r}")
            if not isinstance(index_params, dict):
                raise TypeError(f"'index_params' must be a table, got {index_params!r}")
        except FileNotFoundError:
            raise ModelDirError(f"{d}: not a semantic retriever (no {RETRIEVER})") from None
        except KeyError as e:
            raise ModelDirError(f"{d / RETRIEVER}: missing {e}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError, TypeError, OverflowError) as e:
            raise ModelDirError(f"{d}: unreadable {RETRIEVER} ({e})") from None
        enc = encoder if encoder is not None else load_model(d / "encoder")
        if cfg.get("encoder", encoder_id(enc)) != encoder_id(enc):
            raise IndexMismatchError(
                f"{d / RETRIEVER}: 'encoder' says {cfg['encoder']!r}, the encoder is {encoder_id(enc)!r}"
            )
        r = cls(enc, kind, metric, batch_size=batch_size, threads=threads, **index_params)  # type: ignore[arg-type]  # a saved encoder
        now = r._probe_vectors()
        r.vectors = ix = VectorIndex.load(
            d / "index", expect_model=encoder_id(enc), expect_dim=now.shape[1], threads=threads
        )
        for key, saved, found in (
            ("kind", kind, ix.kind),
            ("metric", metric, ix.metric),
            *((f"index_params.{k}", v, ix.params.get(k)) for k, v in index_params.items()),
        ):
            if saved != found:
                raise IndexMismatchError(f"{d / RETRIEVER}: {key!r} says {saved!r}, index/{META} says {found!r}")
        if now.shape != probes.shape or not np.allclose(now, probes, atol=1e-3):
            raise IndexMismatchError(
                f"{d}: the encoder embeds differently from the one that built this index "
                f"(same name {encoder_id(enc)!r}, other weights?)"
            )
        r._probes = now
        return r
