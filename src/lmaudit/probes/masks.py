"""Mask-pattern plans for DLM probes.

A plan turns a sample's L scorable positions and a stable per-sample seed into a
list of patterns (arrays of positions in 0..L−1 to mask, one masked forward each).
Every plan fits a forward budget per sample and model.

- ``cyclic`` (Q-Skew): R rounds; each round draws a permutation of the L positions
  and splits it into ⌈1/ρ⌉ disjoint chunks of ≈ρL, so every position is masked
  exactly once per round. R = ⌊budget / ⌈1/ρ⌉⌋.
- ``random``: ``budget`` independent subsets of round(ρL) positions (Q-Skew's
  non-cyclic ablation).
- ``elbo``: ``budget`` independent subsets, pattern j masking round(t_j·L)
  positions with stratified ratios t_j = (j + u_j)/budget (the ELBO's t ~ U(0, 1)).
- ``nested``: one fixed permutation π per sample; pattern j masks the first
  round(r_j·L) positions of π, with r_j = linspace(r_start, r_end, budget). Masks
  grow step by step (SAMA's progressive masking, SecMI-DLM's fixed masks).
- ``bernoulli``: ``budget`` draws with stratified ratios t_j = ε + (1 − ε)(j + u_j)/budget
  (ε = 10⁻³); each position is masked independently with probability t_j, as a DLM
  is trained (the authors' way of running the DLM Loss baseline). A pattern may be
  empty (it costs no forward); its recorded ratio is t_j, not |M|/L.
- ``unmasked``: one forward of the clean text, no mask token (the authors' way of
  running DLM Calibration); its single pattern lists the positions the probe reads,
  with an AR shift (see :mod:`lmaudit.probes.masked`).

Every pattern of the other plans masks at least one position and at most L.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from lmaudit.errors import LmauditError

KINDS = ("cyclic", "random", "elbo", "nested", "bernoulli", "unmasked")
BERNOULLI_EPS = 1e-3  # the smallest masking probability of a Bernoulli draw (as in DLM training)


@dataclass(frozen=True)
class MaskPlan:
    kind: str
    budget: int = 16
    rho: float = 0.35
    r_start: float = 0.05
    r_end: float = 0.5

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise LmauditError(f"unknown mask plan '{self.kind}'", hint=f"one of {', '.join(KINDS)}")
        if self.budget < 1:
            raise LmauditError(f"the forward budget must be ≥ 1, got {self.budget}")
        if not 0.0 < self.rho <= 1.0:
            raise LmauditError(f"rho must be in (0, 1], got {self.rho}")
        if self.kind == "cyclic" and self.budget < math.ceil(1 / self.rho):
            raise LmauditError(f"a cyclic round needs {math.ceil(1 / self.rho)} forwards; the budget is {self.budget}")
        if not 0.0 < self.r_start <= self.r_end <= 1.0:
            raise LmauditError(f"nested ratios need 0 < r_start ≤ r_end ≤ 1, got {self.r_start}, {self.r_end}")

    @property
    def n_patterns(self) -> int:
        if self.kind == "cyclic":
            chunks = math.ceil(1 / self.rho)
            return (self.budget // chunks) * chunks
        if self.kind == "unmasked":
            return 1
        return self.budget

    @property
    def masks(self) -> bool:
        """False for the ``unmasked`` plan: its forward feeds the clean text."""
        return self.kind != "unmasked"

    def key(self) -> dict:
        return asdict(self)

    def patterns(self, L: int, seed: int) -> list[np.ndarray]:
        """The plan's patterns for a sample with ``L`` scorable positions."""
        return self.draw(L, seed)[0]

    def draw(self, L: int, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
        """(patterns, ratios): the plan's patterns for a sample with ``L`` scorable positions and each one's ratio.

        The ratio is |M|/L, except for ``bernoulli`` (the probability t_j each position
        was masked with) and ``unmasked`` (0: nothing is masked).
        """
        rng = np.random.default_rng(seed)
        size = lambda r: min(L, max(1, round(r * L)))  # noqa: E731
        if self.kind == "cyclic":
            chunks = math.ceil(1 / self.rho)
            pats = []
            for _ in range(self.budget // chunks):
                pats.extend(c for c in np.array_split(rng.permutation(L), chunks) if len(c))
        elif self.kind == "random":
            pats = [rng.choice(L, size=size(self.rho), replace=False) for _ in range(self.budget)]
        elif self.kind == "elbo":
            ratios = (np.arange(self.budget) + rng.random(self.budget)) / self.budget
            pats = [rng.choice(L, size=size(r), replace=False) for r in ratios]
        elif self.kind == "bernoulli":
            t = BERNOULLI_EPS + (1 - BERNOULLI_EPS) * (np.arange(self.budget) + rng.random(self.budget)) / self.budget
            return [np.flatnonzero(rng.random(L) < tj) for tj in t], t
        elif self.kind == "unmasked":
            return [np.arange(L)], np.zeros(1)
        else:
            perm = rng.permutation(L)
            pats = [perm[: size(r)] for r in np.linspace(self.r_start, self.r_end, self.budget)]
        return pats, np.array([len(p) / L for p in pats], dtype=np.float64)
