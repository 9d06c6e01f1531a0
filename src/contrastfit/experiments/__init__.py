"""Experiments: configs, the runner, results and reports."""

from .config import ExperimentConfig, MultiTaskExperimentConfig, load_config, parse_config
from .runner import run_experiment

__all__ = ["ExperimentConfig", "MultiTaskExperimentConfig", "load_config", "parse_config", "run_experiment"]
