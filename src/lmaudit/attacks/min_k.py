"""Min-K% Prob (Shi et al., 2024): mean of the lowest k% token log-probabilities."""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.probes.records import ARStats
from lmaudit.probes.segments import bottom_k_mean
from lmaudit.settings import fraction


@register_attack("min_k", kind="ar", checks={"k": fraction(above_zero=True)})
def min_k(stats: ARStats, *, k: float = 0.2) -> np.ndarray:
    """Mean of the lowest max(1, ⌊k·n⌋) token log p.

    Shape (S,); higher = member."""
    return bottom_k_mean(stats.logp, stats.offsets, k)
