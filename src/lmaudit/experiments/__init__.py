"""Experiments that reproduce the papers' claims at small scale (``lmaudit run FILE.toml``)."""

from lmaudit.experiments.config import ExperimentConfig, load_experiment
from lmaudit.experiments.runner import run_experiment

__all__ = ["ExperimentConfig", "load_experiment", "run_experiment"]
