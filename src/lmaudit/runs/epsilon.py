"""ε lower bounds of a membership-inference run folder, as a job: the bounds of :mod:`lmaudit.privacy.audit` and
the result that writes ``epsilon.json`` into a folder."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lmaudit.privacy.audit import canary_bounds, epsilon_payload, mia_bounds, write_epsilon
from lmaudit.runs.common import PROVENANCE_KEYS, Job, RunResult, register_job


class EpsilonResult(RunResult):
    """ε lower bounds: ``to_frame()`` has one row per attack; ``write(folder)`` writes ``folder/epsilon.json``."""

    def __init__(self, payload: dict, source: Path | None = None, written: dict | None = None):
        super().__init__({k: v for k, v in payload.items() if k not in PROVENANCE_KEYS}, source)
        self._written = payload if written is None else written  # epsilon.json as the run made it, provenance too

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"attack": name, **bound} for name, bound in self.payload["attacks"].items()])

    def headline(self) -> str:
        name, best = max(self.payload["attacks"].items(), key=lambda kv: kv[1]["epsilon"])
        return (f"largest ε_lb {best['epsilon']:.3f} ({name}) at δ = {self.payload['delta']:g}, "
                f"{self.payload['confidence']:g} confidence per attack")

    def _write(self, out: Path, report: bool) -> Path:
        return write_epsilon(out, {**self._written, **self.payload})


def run_epsilon(run_dir: str | Path, *, delta: float, confidence: float, attack: str | None, seed: int,
                canaries: str | Path | None) -> EpsilonResult:
    """The bounds of ``run_dir``: per attack from the run's scores, or the one-run bound over ``canaries``."""
    if canaries is None:
        bounds = mia_bounds(run_dir, attack=attack, delta=delta, confidence=confidence, seed=seed)
    else:
        bounds = canary_bounds(run_dir, canaries, attack=attack, delta=delta, confidence=confidence)
    return EpsilonResult(epsilon_payload(run_dir, bounds, delta=delta, confidence=confidence,
                                         seed=seed if canaries is None else None, canaries=canaries))


JOB = register_job(Job("epsilon", "epsilon-lower-bound", "epsilon", EpsilonResult, run_epsilon))
