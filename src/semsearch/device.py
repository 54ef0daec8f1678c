"""One ``device`` setting for training and encoding: ``auto`` is CUDA when torch sees a GPU, else the
CPU. Weights move once, where the setting is applied; every input tensor is built on the device of
the weights it meets (``model_device``), so no other code moves tensors between devices."""

from __future__ import annotations

import torch


def resolve_device(name: str) -> torch.device:
    """The torch device a ``device`` setting names (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r}: torch sees no CUDA GPU on this machine (use 'auto' or 'cpu')")
    return dev


def model_device(net: torch.nn.Module) -> torch.device:
    """Where ``net``'s weights are: models build their input tensors there."""
    p = next(net.parameters(), None)
    return p.device if p is not None else torch.device("cpu")
