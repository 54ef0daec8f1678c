"""Typed training arguments: how a model learns, apart from what it is (its ``Params``).

``TrainArgs`` holds what the one epoch loop reads; each trainer's own subclass adds its settings
and its defaults (the papers'). They are validated when built (``params.Params``), so a misspelt
or out-of-range setting fails at the edge — CLI ``--param``, a spec's row, a Python call — before
any data is read."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ..params import ParamError, Params, param

_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?|mps)$")
_METRIC = re.compile(r"^(ndcg|recall|p|mrr|map)(@\d+)?$")


@dataclass(frozen=True)
class TrainArgs(Params):
    """What every gradient trainer takes (``training.loop.epoch_loop``)."""

    kind = "training"

    epochs: int = param(20, ge=1)
    batch_size: int = param(1024, ge=1)
    lr: float = param(0.5, gt=0)
    optimizer: Literal["sgd", "adam"] = "sgd"
    patience: int = param(3, ge=1)  # epochs without a better dev score before stopping
    min_delta: float = param(0.0, ge=0)  # how much the dev score must rise to count as better
    dev_metric: str = "ndcg@10"
    seed: int = 0
    device: str = "auto"  # "auto" (CUDA when torch sees a GPU, else CPU), "cpu", "cuda", "cuda:N"

    def check(self) -> None:
        if not _DEVICE.match(self.device):
            raise ParamError(f"{self._label('device')} must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {self.device!r}")
        if not _METRIC.match(self.dev_metric):
            raise ParamError(f"{self._label('dev_metric')} must be a metric like 'ndcg@10', 'recall@100', 'mrr', got {self.dev_metric!r}")

