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

Every pattern masks at least one position and at most L.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from lmaudit.errors import LmauditError

KINDS = ("cyclic", "random", "elbo", "nested")


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
        return self.budget

    def key(self) -> dict:
        return asdict(self)

    def patterns(self, L: int, seed: int) -> list[np.ndarray]:
        """The plan's patterns for a sample with ``L`` scorable positions."""
        rng = np.random.default_rng(seed)
        size = lambda r: min(L, max(1, round(r * L)))  # noqa: E731
        if self.kind == "cyclic":
            chunks = math.ceil(1 / self.rho)
            out = []
            for _ in range(self.budget // chunks):
                out.extend(c for c in np.array_split(rng.permutation(L), chunks) if len(c))
            return out
        if self.kind == "random":
            return [rng.choice(L, size=size(self.rho), replace=False) for _ in range(self.budget)]
        if self.kind == "elbo":
            ratios = (np.arange(self.budget) + rng.random(self.budget)) / self.budget
            return [rng.choice(L, size=size(r), replace=False) for r in ratios]
        perm = rng.permutation(L)
        return [perm[: size(r)] for r in np.linspace(self.r_start, self.r_end, self.budget)]
