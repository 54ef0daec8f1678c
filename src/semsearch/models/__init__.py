"""Ranking models: the protocol (``base``) and one module per family; the registry that names them
is ``semsearch.plugins``."""

from .base import Model, ModelDirError, rank, top_k
from .lexical import BM25, LexicalIndex, LexicalModel, RandomOrder, TfIdf, UnigramLM

__all__ = [
    "BM25",
    "LexicalIndex",
    "LexicalModel",
    "Model",
    "ModelDirError",
    "RandomOrder",
    "TfIdf",
    "UnigramLM",
    "rank",
    "top_k",
]
