"""Trainer versions: one integer per trainable kind, part of every saved model's cache key.

Bump a kind's version when a change alters what training produces (the loss, the sampling of
negatives, the optimiser, early stopping, default hyper-parameters, the text features a model
learns from, ...): models cached under the old version are then trained anew. Refactoring that
leaves the trained model the same needs no bump, and cached models stay valid.

A leaf module: it imports nothing of the project.
"""

from __future__ import annotations

TRAINER_VERSIONS: dict[str, int] = {
    # neural encoders (training.trainer) and MT-DNN (training.mtdnn)
    "dssm": 1,
    "clsm": 1,
    "mt-dnn": 1,
    # interaction models (training.pairwise)
    "knrm": 1,
    "matchpyramid": 1,
    # transformers (training.transformer)
    "bert-rep": 1,
    "bert-rel": 1,
    # projection models (models.projection: their own fit)
    "s2net": 1,
    "lsa": 1,
    "cl-lsa": 1,
    "opca": 1,
    # topic models (models.topic)
    "plsa": 1,
    "lda": 1,
    "bltm": 1,
    # translation models (models.translation)
    "wtm": 1,
    "ptm": 1,
    # learning to rank (ranking.lambdamart)
    "lambdamart": 1,
    # query encoders distilled from a bi-encoder (training.distill)
    "static-query": 1,
}


def trainer_version(kind: str) -> int:
    """The trainer version of a registered model kind; 0 for a kind that is not trained."""
    return TRAINER_VERSIONS.get(kind, 0)
