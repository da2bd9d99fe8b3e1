"""Min-K%++ (Zhang et al., 2025): Min-K% over log-probabilities normalised per position."""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.probes.records import ARStats
from lmaudit.probes.segments import bottom_k_mean
from lmaudit.settings import fraction


@register_attack("min_k_pp", kind="ar", access="distribution", checks={"k": fraction(above_zero=True)})
def min_k_pp(stats: ARStats, *, k: float = 0.2) -> np.ndarray:
    """Mean of the lowest max(1, ⌊k·n⌋) z_t = (log p − μ_t)/σ_t.

    Shape (S,); higher = member."""
    z = (stats.logp.astype(np.float64) - stats.mu) / stats.sigma
    return bottom_k_mean(z, stats.offsets, k)
