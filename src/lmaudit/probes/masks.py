"""Mask-pattern plans for DLM probes.

A plan turns a sample's L scorable positions and a stable per-sample seed into a
list of patterns (arrays of positions in 0..L−1 to mask, one masked forward each).
Every plan fits a forward budget per sample and model.

- ``cyclic`` (Q-Skew): rounds; each round draws a permutation of the L positions
  and splits it into ⌈1/ρ⌉ disjoint chunks of ≈ρL, so every position is masked
  exactly once per round. ⌊budget / ⌈1/ρ⌉⌋ whole rounds, then the first
  budget mod ⌈1/ρ⌉ chunks of one more round, so Q-Skew spends the same number of
  forwards as the other plans (16 at ρ = 0.35: five rounds of 3 and one chunk).
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

Plan kinds are a registry (:func:`plan_kind`): a kind maps to how it draws its patterns, how many it draws
and what it checks of its settings. A new plan kind is one registered function and its test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from lmaudit.errors import SettingError
from lmaudit.settings import check_settings, fraction, integer, one_of, setting

BERNOULLI_EPS = 1e-3  # the smallest masking probability of a Bernoulli draw (as in DLM training)


@dataclass(frozen=True)
class PlanKind:
    """How one plan kind draws: ``draw(plan, L, rng)`` → (patterns, ratios); ``count(plan)`` patterns per sample;
    ``masks``: whether its forwards hide tokens; ``check(plan)`` raises on settings the kind cannot use."""

    draw: Callable
    count: Callable = lambda plan: plan.budget
    masks: bool = True
    check: Callable | None = None
    version: int = 1  # bumped when a kind's draws change, so cached probes of the old draws are not read


PLAN_KINDS: dict[str, PlanKind] = {}


def plan_kind(name: str, **how):
    """Register the decorated ``draw(plan, L, rng)`` as plan kind ``name`` (``how``: the other :class:`PlanKind`
    fields)."""
    def register(draw: Callable) -> Callable:
        PLAN_KINDS[name] = PlanKind(draw, **how)
        return draw
    return register


def _size(L: int, r: float) -> int:
    return min(L, max(1, round(r * L)))


def _ratios(pats: list[np.ndarray], L: int) -> np.ndarray:
    return np.array([len(p) / L for p in pats], dtype=np.float64)


def _chunks(plan) -> int:
    return math.ceil(1 / plan.rho)


def _check_cyclic(plan) -> None:
    if plan.budget < _chunks(plan):
        raise SettingError("budget", f"a cyclic round needs {_chunks(plan)} forwards; the {{name}} is {plan.budget}",
                           hint="raise the budget, or the ratio rho")


@plan_kind("cyclic", check=_check_cyclic, version=2)  # 2: a last partial round spends the whole budget
def _cyclic(plan, L: int, rng):
    pats = []
    rounds, extra = divmod(plan.budget, _chunks(plan))
    for r in range(rounds + (extra > 0)):
        chunks = np.array_split(rng.permutation(L), _chunks(plan))
        pats.extend(c for c in chunks[: extra if r == rounds else None] if len(c))
    return pats, _ratios(pats, L)


@plan_kind("random")
def _random(plan, L: int, rng):
    pats = [rng.choice(L, size=_size(L, plan.rho), replace=False) for _ in range(plan.budget)]
    return pats, _ratios(pats, L)


@plan_kind("elbo")
def _elbo(plan, L: int, rng):
    ratios = (np.arange(plan.budget) + rng.random(plan.budget)) / plan.budget
    pats = [rng.choice(L, size=_size(L, r), replace=False) for r in ratios]
    return pats, _ratios(pats, L)


@plan_kind("nested")
def _nested(plan, L: int, rng):
    perm = rng.permutation(L)
    pats = [perm[: _size(L, r)] for r in np.linspace(plan.r_start, plan.r_end, plan.budget)]
    return pats, _ratios(pats, L)


@plan_kind("bernoulli")
def _bernoulli(plan, L: int, rng):
    t = BERNOULLI_EPS + (1 - BERNOULLI_EPS) * (np.arange(plan.budget) + rng.random(plan.budget)) / plan.budget
    return [np.flatnonzero(rng.random(L) < tj) for tj in t], t


@plan_kind("unmasked", count=lambda plan: 1, masks=False)
def _unmasked(plan, L: int, rng):
    return [np.arange(L)], np.zeros(1)


KINDS = tuple(PLAN_KINDS)


@dataclass(frozen=True)
class MaskPlan:
    """A plan kind and its settings, each checked on construction (then what the kind needs of them)."""

    kind: str = setting(check=one_of(PLAN_KINDS, noun="mask plan"))
    budget: int = setting(16, check=integer(1))  # masked forwards per sample and model
    rho: float = setting(0.35, check=fraction(above_zero=True))  # the masked share of a cyclic or random pattern
    r_start: float = setting(0.05, check=fraction(above_zero=True))  # nested: the first and last masked shares
    r_end: float = setting(0.5, check=fraction(above_zero=True))

    def __post_init__(self) -> None:
        check_settings(self)
        if PLAN_KINDS[self.kind].check is not None:
            PLAN_KINDS[self.kind].check(self)
        if self.r_start > self.r_end:
            raise SettingError("r_start", f"nested ratios need {{name}} ≤ {{r_end}}, got {self.r_start}, {self.r_end}",
                               also={"r_end": ("r_end", "--r-end")})

    @property
    def n_patterns(self) -> int:
        return PLAN_KINDS[self.kind].count(self)

    @property
    def masks(self) -> bool:
        """False for the ``unmasked`` plan: its forward feeds the clean text."""
        return PLAN_KINDS[self.kind].masks

    def key(self) -> dict:
        """The plan's settings (they seed its draws)."""
        return asdict(self)

    def cache_key(self) -> dict:
        """:meth:`key` and, once a kind's draws have changed, its version: cached probes of old draws are not read."""
        version = PLAN_KINDS[self.kind].version
        return self.key() | ({"version": version} if version > 1 else {})

    def patterns(self, L: int, seed: int) -> list[np.ndarray]:
        """The plan's patterns for a sample with ``L`` scorable positions."""
        return self.draw(L, seed)[0]

    def draw(self, L: int, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
        """(patterns, ratios): the plan's patterns for a sample with ``L`` scorable positions and each one's ratio.

        The ratio is |M|/L, except for ``bernoulli`` (the probability t_j each position
        was masked with) and ``unmasked`` (0: nothing is masked).
        """
        return PLAN_KINDS[self.kind].draw(self, L, np.random.default_rng(seed))
