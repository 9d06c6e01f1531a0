"""Experiments: configs, the runner, results and reports."""

import importlib

_EXPORTS = {"ExperimentConfig": "config", "MultiTaskExperimentConfig": "config", "load_config": "config",
            "parse_config": "config", "run_experiment": "runner"}


def __getattr__(name: str):
    """The public names, imported on first use (PEP 562): ``import contrastfit.experiments.store``
    loads the store alone (standard library only), not the runner and torch."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value

__all__ = ["ExperimentConfig", "MultiTaskExperimentConfig", "load_config", "parse_config", "run_experiment"]
