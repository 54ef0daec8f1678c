"""The typed parameters of the torch families (DSSM/CLSM, K-NRM/MatchPyramid, MT-DNN, BERT(rep)/
BERT(rel)): what each model is, kept apart from their torch code so that a spec or a ``--param``
list is checked without loading torch. Each model class names its own (``Params = DSSMParams``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from ..params import ParamError, Params, param

PAPER_DOMAINS = ["Restaurants", "Hotels", "Flights", "Events"]  # MT-DNN's query-classification tasks (§3.1)


# ------------------------------------------------------------------------------------ neural
@dataclass(frozen=True)
class EncoderParams(Params):
    """What a trigram encoder is. ``max_trigrams`` caps its trigram vocabulary (most frequent
    first): the vocabulary is fitted on the training texts, but it is the model's input layer —
    its size is the first weight matrix's and it is saved with the model — so the cap is a model
    parameter like ``max_words``, not a training argument."""

    out: int = param(128, ge=1)  # the semantic layer (DSSM's 128, CLSM's L)
    shared: bool = False  # one tower for queries and documents
    max_words: int = param(64, ge=1)  # texts are cut to their first words
    max_trigrams: int | None = param(None, ge=1)


@dataclass(frozen=True)
class DSSMParams(EncoderParams):
    kind = "dssm"
    hidden: list[int] = param([300, 300])  # DSSM §3.1: 300 → 300 → 128


@dataclass(frozen=True)
class CLSMParams(EncoderParams):
    kind = "clsm"
    window: int = param(3, ge=1)  # words per convolution window (CLSM §3.2)
    conv: int = param(300, ge=1)  # K, the convolution's units

    def check(self) -> None:
        if self.window % 2 == 0:
            raise ParamError(f"{self._label('window')} must be odd, got {self.window}")


# ------------------------------------------------------------------------------------ interaction
@dataclass(frozen=True)
class InteractionParams(Params):
    """What an interaction model is. Its word vocabulary (``min_count``, ``max_vocab``) is fitted
    on the training texts but is the embedding table, saved with the model: model parameters."""

    dim: int = param(300, ge=1)  # word embedding width
    max_words: int = param(64, ge=1)  # texts are cut to their first words
    min_count: int = param(2, ge=1)  # vocabulary: words seen at least this often in the training texts
    max_vocab: int = param(50000, ge=1)
    init: Literal["random", "minilm"] = "random"  # embeddings' start; "minilm" needs dim = 384

    def check(self) -> None:
        if self.init == "minilm" and self.dim != 384:
            raise ParamError(f"{self.kind}: init = 'minilm' needs dim = 384 (MiniLM's width), got {self.dim}")


@dataclass(frozen=True)
class KNRMParams(InteractionParams):
    kind = "knrm"
    kernels: int = param(11, ge=2)  # RBF kernels: the exact-match one and kernels − 1 soft ones


@dataclass(frozen=True)
class MatchPyramidParams(InteractionParams):
    kind = "matchpyramid"
    channels: int = param(8, ge=1)  # convolution kernels
    kernel: list[int] = param([3, 3])  # convolution size (query, document)
    pool: list[int] = param([3, 5])  # dynamic max-pooling grid
    hidden: int = param(128, ge=1)  # the MLP's hidden layer
    query_words: int = param(10, ge=1)  # the matching matrix is query_words × doc_words
    doc_words: int = param(30, ge=1)

    def check(self) -> None:
        super().check()
        for name in ("kernel", "pool"):
            v = getattr(self, name)
            if len(v) != 2 or min(v) < 1:
                raise ParamError(f"{self._label(name)} must be two positive whole numbers, got {v!r}")


# ------------------------------------------------------------------------------------ mtdnn
@dataclass(frozen=True)
class MTDNNParams(Params):
    """MT-DNN's network (Figure 1 / 3) and its tasks; ``out``, ``max_words`` and ``max_trigrams``
    as DSSM's (``EncoderParams``)."""

    kind = "mt-dnn"
    l2: int = param(300, ge=1)  # the shared semantic layer
    out: int = param(128, ge=1)
    max_words: int = param(64, ge=1)
    max_trigrams: int | None = param(None, ge=1)
    share: Literal["all", "query"] = "all"  # Figure 1, or Figure 3 (only the query side shared)
    domain_set: str = "sgd"
    domains: list[str] = param(PAPER_DOMAINS)
    ranking: bool = True

    def check(self) -> None:
        if "rank" in self.domains:
            raise ParamError("mt-dnn: 'rank' names the ranking task; rename that domain")
        if len(set(self.domains)) != len(self.domains):
            raise ParamError(f"mt-dnn: duplicate domains in {self.domains}")
        if not self.domains and not self.ranking:
            raise ParamError("mt-dnn needs at least one task: a classification domain or ranking")


# ------------------------------------------------------------------------------------ transformer
@dataclass(frozen=True)
class TransformerParams(Params):
    """What the bi- and cross-encoder share: the starting BERT folder and the token limits."""

    base: str | None = None  # a Hugging Face BERT folder (None: all-MiniLM-L6-v2, offline)
    max_query_length: int = param(32, ge=1)
    max_doc_length: int = param(256, ge=1)
    batch_encode: int = param(128, ge=1)  # texts per forward pass when encoding


@dataclass(frozen=True)
class BiEncoderParams(TransformerParams):
    kind = "bert-rep"
    pooling: str = "mean"  # "mean", "cls", "layer:K" or "attention" (§4.7)
    normalize: bool = False  # unit vectors: the dot product becomes a cosine

    def check(self) -> None:
        if not re.fullmatch(r"mean|cls|attention|layer:\d+", self.pooling):
            raise ParamError(
                f"{self._label('pooling')} must be 'mean', 'cls', 'layer:K' or 'attention', got {self.pooling!r}"
            )


@dataclass(frozen=True)
class CrossEncoderParams(TransformerParams):
    kind = "bert-rel"
    max_length: int = param(256, ge=1)  # tokens of a (query, document) pair
    batch_pairs: int = param(64, ge=1)  # pairs per forward pass when scoring
    # a graded head: P(grade | q, d) over these grade levels (increasing), the score being the
    # expected gain Σ P(g)·gain(g); empty: Eq. 2's one logit
    grades: list[float] = param([])
    gain: Literal["exp", "linear"] = "exp"  # a graded head's gain(g): 2^g − 1 (NDCG's exp gain) or g

    def check(self) -> None:
        g = self.grades
        if g and (len(g) < 2 or any(b <= a for a, b in pairwise(g))):
            raise ParamError(
                f"{self._label('grades')} must be two or more increasing grade levels (or empty: one logit), got {g!r}"
            )
