"""Ranking models: the protocol and registry (``base``) and one module per family."""

from .base import (Model, ModelDirError, create_model, load_model, model_names, rank, register,
                   resolve_model, top_k)
from .lexical import BM25, LexicalIndex, LexicalModel, RandomOrder, TfIdf, UnigramLM

__all__ = [
    "BM25", "LexicalIndex", "LexicalModel", "Model", "ModelDirError", "RandomOrder", "TfIdf",
    "UnigramLM", "create_model", "load_model", "model_names", "rank", "register", "resolve_model", "top_k",
]
