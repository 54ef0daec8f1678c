"""The model protocol, saved-model configs, and ``rank`` (queries -> run); the registry that names
models is ``semsearch.plugins``.

Every model ranks documents of a collection it has indexed: ``index`` prepares the collection
(term statistics, or document embeddings), ``score`` scores given candidates per query (re-ranking
a run or a query's judged documents), ``retrieve`` returns the top-k of the whole collection.
Models save to a directory — a ``config.json`` naming the model's kind plus npz/safetensors
weights — and never use pickle."""

from __future__ import annotations

import hashlib
import json
import zipfile
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence, Sized
from itertools import repeat
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..data import ranked
from ..data.files import write_json
from ..params import Params
from ..progress import track
from ..types import Run

CONFIG = "config.json"
RETRIEVE_PAIRS = 2_000_000  # (query, document) pairs one ``score`` call of the default ``retrieve`` is given


class ModelDirError(ValueError):
    """A model directory that is missing, corrupt, or holds a different model than expected."""


class Model(ABC):
    """A ranking model over an indexed collection (see module docstring)."""

    name: ClassVar[str] = ""

    @abstractmethod
    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Prepare the collection to rank: ``doc_ids[i]`` has text ``texts[i]``."""

    @property
    @abstractmethod
    def doc_ids(self) -> Sequence[str]:
        """The indexed collection's ids, in index order."""

    @abstractmethod
    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """For each query text, float scores of its candidate doc ids (higher = more relevant)."""

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """Top-``k`` (doc id, score) of the whole collection per query, best first.
        The default scores every document, a block of queries at a time so that a block asks
        ``score`` for at most ``RETRIEVE_PAIRS`` (query, document) pairs (whatever the model
        builds per pair stays bounded); models with an index override it."""
        ids = list(self.doc_ids)
        ranks = id_ranks(ids)
        block = max(1, RETRIEVE_PAIRS // max(len(ids), 1))
        blocks = (queries[start : start + block] for start in range(0, len(queries), block))
        return [
            [(ids[i], float(scores[i])) for i in best_k(scores, ranks, k)]
            for qs in blocks
            for scores in self.score(qs, [ids] * len(qs))
        ]

    def params(self) -> dict[str, Any]:
        """Hyper-parameters (JSON-serialisable) that ``with_params`` accepts."""
        return {}

    def with_params(self, **params: Any) -> Model:
        """A copy with other hyper-parameters, sharing whatever does not depend on them."""
        if params:
            raise ValueError(f"{self.name} has no parameters {sorted(params)}")
        return self

    @abstractmethod
    def save(self, path: str | Path) -> None:
        """Write the model (and its indexed collection, if any) to directory ``path``."""

    @classmethod
    @abstractmethod
    def load(cls, path: str | Path) -> Model:
        """Read a model written by ``save``."""


def similarity_of(encoder: Any) -> str:
    """How ``encoder``'s query and document vectors are compared, by ``semsearch run`` and by a
    bundle's vector index alike: a bi-encoder says so (``BiEncoder.similarity``: cosine when trained
    normalised or when it is an off-the-shelf sentence-transformers model that scores by cosine);
    any other encoder (DSSM, CLSM, a static query encoder) is compared by cosine."""
    sim = getattr(encoder, "similarity", "cosine")
    return sim if sim in ("cosine", "dot") else "cosine"


class TrainedModel(Model):
    """A model whose hyper-parameters are fixed once it is trained: a typed ``Params`` class
        (``params.Params``) validates the constructor's keywords into ``self.p``; ``params`` returns
        them and ``with_params`` refuses to change them (train another model instead). The torch
    families keep their network in ``self.net``: ``to``, ``trained`` and ``_require`` act on it."""

    Params: ClassVar[type[Params]]
    p: Any
    net: Any  # the torch network (torch families), None until built or loaded

    def __init__(self, **params: Any):
        self.p = self.Params.from_mapping(params, where=self.name)

    @classmethod
    def saved_params(cls, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The known names of a saved ``params`` mapping: model directories written before the
        training arguments left the model's parameters (lr, epochs, negatives, ...) still load."""
        return {k: v for k, v in raw.items() if k in cls.Params.names()}

    def params(self) -> dict[str, Any]:
        return self.p.as_dict()

    def with_params(self, **params: Any) -> TrainedModel:
        now = self.params()
        changed = sorted(k for k, v in params.items() if k not in now or now[k] != v)
        if changed:
            raise ValueError(f"{self.name}: {changed} are fixed at training time; train another model")
        return self

    def to(self, device: str) -> TrainedModel:
        """Put the weights on ``device`` (a ``device`` setting: 'cpu', 'cuda', 'auto', ...) to score there."""
        from ..device import resolve_device  # torch only here: checking a spec imports this module

        self._require().to(resolve_device(device))
        return self

    @property
    def trained(self) -> bool:
        return self.net is not None

    def _require(self) -> Any:
        """The torch network ``self.net``, or RuntimeError before the model is trained or loaded."""
        if self.net is None:
            raise RuntimeError(f"{self.name}: not trained; train it or load a saved model")
        return self.net


SAVED_DATA_ERRORS = (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile, EOFError)
"""What reading a model's saved npz + JSON files raises when they are corrupt, cut short or from
another model (a truncated npz is a BadZipFile, which is none of the others): each loader turns
these into a ModelDirError naming its directory."""


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


TRAINING_LOG, RECIPE = "training.json", "recipe.json"
SIDECARS = (TRAINING_LOG, RECIPE)
"""Files callers write beside a saved model after ``save`` (the CLI's and the experiment cache's
training log, the cache's recipe): not part of the model, never sealed."""


def seal(path: str | Path) -> None:
    """Record in ``config.json`` the sha256 of each file beside it (``files``; sub-directories,
    e.g. a ranker's feature models, seal their own; ``SIDECARS`` are left out). Called last by
    every ``save``, so loading (``read_config`` with ``expect``) refuses weights or an index cut
    short, removed, or swapped in from another model, and a ``config.json`` swapped in from
    another model."""
    d = Path(path)
    config = json.loads((d / CONFIG).read_text(encoding="utf-8"))
    config["files"] = {
        p.name: sha256_file(p)
        for p in sorted(d.iterdir())
        if p.is_file() and p.name != CONFIG and p.name not in SIDECARS
    }
    write_json(d / CONFIG, config, ensure_ascii=False)


def _verify_files(d: Path, files: Any) -> None:
    """The files ``config.json`` lists (``seal``) are there with their sha256 (directories
    saved before sealing list none and are not checked)."""
    f = d / CONFIG
    if not isinstance(files, dict):
        raise ModelDirError(f"{f}: 'files' must be a table of file -> sha256, got {files!r}")
    for name, digest in files.items():
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
            raise ModelDirError(f"{f}: 'files' names {name!r}, not a file of this directory")
        if not isinstance(digest, str):
            raise ModelDirError(f"{f}: 'files.{name}' must be a sha256 digest, got {digest!r}")
        if not (d / name).is_file():
            raise ModelDirError(f"{d}: missing file {name} (listed in {CONFIG} 'files')")
        found = sha256_file(d / name)
        if found != digest:
            raise ModelDirError(
                f"{d / name}: sha256 {found[:12]}…, but {CONFIG} 'files.{name}' says {digest[:12]}… "
                "(the file was changed, cut short, or comes from another model)"
            )


def write_config(path: str | Path, config: dict[str, Any]) -> None:
    """Write ``config.json`` into model directory ``path`` (created if needed)."""
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    write_json(d / CONFIG, config, ensure_ascii=False)


def config_params(cfg: Mapping[str, Any], params: type[Params], older: str) -> dict[str, Any]:
    """The parameters a saved ``config.json`` holds for a kind taking ``params``: configs written
    before typed parameters hold the analyzer apart (``"paper"`` when absent) and the training
    settings under ``older`` ("settings", "train"); newer ones hold all of them under "params".
    Known names only, so the old training settings the parameters no longer take still load."""
    raw = {"analyzer": cfg.get("analyzer", "paper"), **cfg.get(older, {}), **cfg.get("params", {})}
    return {k: v for k, v in raw.items() if k in params.names()}


_TABLES = ("params", "settings", "train", "vocabulary")
"""Keys of a saved config that hold a table (parameters, older configs' training settings)."""


def read_config(path: str | Path, expect: str | None = None) -> dict[str, Any]:
    """Read ``config.json`` of a model directory; ``expect`` (each kind's ``load`` gives it) checks
    the registered model name and the sha256 of the files ``seal`` listed. The shape is checked
    here (``model`` a name, ``params`` and the like tables); each kind's ``load`` checks the
    values, and ``plugins.load_model`` names the directory in any error."""
    f = Path(path) / CONFIG
    try:
        config = json.loads(f.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelDirError(f"{path}: not a model directory (no {CONFIG})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelDirError(f"{f}: unreadable model config ({e})") from None
    if not isinstance(config, dict) or "model" not in config:
        raise ModelDirError(f"{f}: model config has no 'model' field")
    if not isinstance(config["model"], str):
        raise ModelDirError(f"{f}: 'model' must be a model name, got {config['model']!r}")
    for key in _TABLES:
        if key in config and not isinstance(config[key], dict):
            raise ModelDirError(f"{f}: {key!r} must be a table, got {config[key]!r}")
    if "analyzer" in config and not isinstance(config["analyzer"], (str, dict)):
        raise ModelDirError(f"{f}: 'analyzer' must be a name or a table, got {config['analyzer']!r}")
    if expect is not None and config["model"] != expect:
        raise ModelDirError(f"{path}: holds a {config['model']!r} model, not {expect!r}")
    if expect is not None and "files" in config:  # the kind's own load: its files, once
        _verify_files(Path(path), config["files"])
    return config


def rank(
    model: Model,
    queries: Mapping[str, str],
    candidates: Mapping[str, Sequence[str]] | None = None,
    *,
    k: int | None = None,
    batch_size: int = 1024,
    progress: str | None = None,
) -> Run:
    """Rank ``queries`` (id -> text) into a run: re-rank ``candidates`` (query id -> doc ids) when
    given — queries without candidates get an empty ranking — else retrieve the collection's top-k.

    Args:
        model: the model that scores or retrieves.
        queries: query id -> text.
        candidates: query id -> doc ids to re-rank (None: retrieve).
        k: documents per query (None: every candidate; retrieval needs it).
        batch_size: queries per call.
        progress: a progress bar's title (None: no bar).

    Returns:
        The run."""
    if candidates is None and k is None:
        raise ValueError("full-collection retrieval needs k")
    qids = list(queries)
    run: Run = {}
    batches = range(0, len(qids), batch_size)
    for start in track(batches, progress or f"ranking with {model.name}", total=len(batches)) if progress else batches:
        chunk = qids[start : start + batch_size]
        texts = [queries[q] for q in chunk]
        if candidates is None:
            for q, hits in zip(chunk, model.retrieve(texts, k)):  # type: ignore[arg-type]  # a retriever
                run[q] = dict(hits)
        else:
            cands = [list(candidates.get(q, ())) for q in chunk]
            for q, docs, scores in zip(chunk, cands, model.score(texts, cands)):
                run[q] = {d: float(s) for d, s in zip(docs, scores)}
                if k is not None and len(docs) > k:
                    run[q] = dict(top_k(run[q], k))
    return run


def top_k(scores: Mapping[str, float], k: int) -> list[tuple[str, float]]:
    """The ``k`` best (doc id, score), ties broken by doc id ascending (the project's convention)."""
    return ranked(scores)[:k]


def id_ranks(doc_ids: Sequence[str]) -> np.ndarray:
    """Rank of each document id in sorted order: the array ``best_k`` breaks ties with."""
    ranks = np.empty(len(doc_ids), dtype=np.int64)
    ranks[np.argsort(np.array(doc_ids, dtype=object), kind="stable")] = np.arange(len(doc_ids))
    return ranks


def best_k(scores: np.ndarray, ranks: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest ``scores``, best first, ties by ``ranks`` (doc id ascending).
    Partitions first, so a large array costs O(n), and keeps every tie at the cut-off score."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    cand = np.flatnonzero(scores >= np.partition(scores, len(scores) - k)[len(scores) - k])
    return cand[np.lexsort((ranks[cand], -scores[cand]))][:k]


def dense_top_k(
    q: np.ndarray, docs: np.ndarray, ids: Sequence[str], ranks: np.ndarray, k: int
) -> list[list[tuple[str, float]]]:
    """Exact top-``k`` (doc id, score) per query vector (rows of ``q``) by dot product with the
    document vectors (rows of ``docs``), ties by ``ranks`` (``id_ranks``); 256 queries at a time.

    Args:
        q: (queries, dim) query vectors.
        docs: (documents, dim) document vectors.
        ids: the documents' ids.
        ranks: each document's id rank, for ties.
        k: hits per query.

    Returns:
        Per query its (doc id, score) hits, best first."""
    out = []
    for start in range(0, len(q), 256):
        for row in q[start : start + 256] @ docs.T:
            out.append([(ids[j], float(row[j])) for j in best_k(row, ranks, k)])
    return out


def same_length(a: Sized, b: Sized, what_a: str, what_b: str) -> None:
    """ValueError unless ``a`` and ``b`` (say, doc ids and texts) align one to one."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} {what_a} but {len(b)} {what_b}")


def positions(position: Mapping[str, int], docs: Sequence[str]) -> np.ndarray:
    """Positions (``position``: doc id -> row) of candidate ``docs``; ValueError for a document
    that is not in the indexed collection. A mapping with ``positions_of`` (``DocIds.position``)
    looks them up at once."""
    if hasattr(position, "positions_of"):
        pos = position.positions_of(docs)
    else:  # dict.get mapped in C: no Python frame per candidate (the served ranker's hot path)
        pos = np.fromiter(map(position.get, docs, repeat(-1, len(docs))), dtype=np.int64, count=len(docs))
    if (pos < 0).any():
        raise ValueError(f"candidate document {docs[int(np.argmax(pos < 0))]!r} is not in the indexed collection")
    return pos
