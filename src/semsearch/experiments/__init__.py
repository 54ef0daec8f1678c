"""Paper tables as declarative specs, and the runner behind ``semsearch reproduce``."""

from .result import Check, ExperimentResult
from .runner import run_experiment
from .spec import ExperimentSpec, ModelSpec, SpecError, get_spec, load_spec, spec_paths

__all__ = [
    "Check", "ExperimentResult", "ExperimentSpec", "ModelSpec", "SpecError", "get_spec", "load_spec",
    "run_experiment", "spec_paths",
]
