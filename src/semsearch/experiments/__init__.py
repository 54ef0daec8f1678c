"""Paper tables as declarative specs, and the runner behind ``semsearch reproduce``. The runner
and results load on first use, so checking a spec stays fast (no torch, no scipy)."""

from typing import Any

from .spec import ExperimentSpec, ModelSpec, SpecError, get_spec, load_spec, spec_paths

__all__ = [
    "Check",
    "ExperimentResult",
    "ExperimentSpec",
    "ModelSpec",
    "SpecError",
    "get_spec",
    "load_spec",
    "run_experiment",
    "spec_paths",
]


def __getattr__(name: str) -> Any:
    if name in ("Check", "ExperimentResult"):
        from . import result

        return getattr(result, name)
    if name == "run_experiment":
        from .runner import run_experiment

        return run_experiment
    raise AttributeError(name)
