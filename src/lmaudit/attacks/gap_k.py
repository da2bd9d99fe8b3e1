"""Gap-K% (ACL 2026, arXiv 2601.19936): normalised top-1 gap, smoothed, bottom-k%.

See ``../shared/seeds/002_900b18c9036e7c45.txt``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.errors import LmauditError
from lmaudit.probes.records import ARStats
from lmaudit.probes.segments import bottom_k_mean, moving_average, shuffle_within
from lmaudit.settings import fraction, integer

SMOOTHING = ("none", "sequential", "shuffled")
# what a run checks of the attack's parameters before any probe (``smooth`` by its Literal); the AR and DLM forms
GAP_K_CHECKS = {"k": fraction(above_zero=True), "window": integer(1)}


def gap_k_scores(gaps: np.ndarray, offsets: np.ndarray, keys: np.ndarray, *, k: float, window: int,
                 smooth: str) -> np.ndarray:
    """Gap-K% aggregation of per-token gaps g_t ≤ 0 (shared by the AR and DLM attacks).

    ``smooth="sequential"``: moving average of width ``window`` in text order (valid
    mode; a sample with fewer than ``window`` tokens uses its plain mean);
    ``"shuffled"``: the same after a per-sample permutation seeded by the sample's
    content key (the paper's control ablation); ``"none"``: no smoothing. Then the
    mean of the lowest max(1, ⌊k·m⌋) of the m smoothed values.
    """
    if smooth not in SMOOTHING:
        raise LmauditError(f"gap_k: smooth must be one of {', '.join(SMOOTHING)}, got '{smooth}'")
    if smooth == "none":
        return bottom_k_mean(gaps, offsets, k)
    if smooth == "shuffled":
        gaps = shuffle_within(gaps, offsets, keys, seed=0)
    smoothed, sm_offsets = moving_average(gaps, offsets, window)
    return bottom_k_mean(smoothed, sm_offsets, k)


@register_attack("gap_k", kind="ar", access="distribution", checks=GAP_K_CHECKS)
def gap_k(stats: ARStats, *, k: float = 0.2, window: int = 3,
          smooth: Literal["none", "sequential", "shuffled"] = "sequential") -> np.ndarray:
    """Bottom-k% of the smoothed gap g_t = (log p(x_t) − max_v log p(v)) / σ_t.

    Shape (S,); higher = member.

    Scores lie in (−∞, 0]; closer to 0 means the true tokens stay near the model's
    top-1 prediction even in the hardest spans, as for training data.
    """
    return gap_k_scores(top1_gaps(stats), stats.offsets, stats.sample_keys, k=k, window=window, smooth=smooth)


def top1_gaps(stats: ARStats) -> np.ndarray:
    """The normalised top-1 gap of every scored token, g_t = (log p(x_t) − max_v log p(v)) / σ_t ≤ 0 (float rounding
    that puts the true token a hair above the top-1 is read as 0)."""
    return np.minimum((stats.logp.astype(np.float64) - stats.top1_logp) / stats.sigma, 0.0)


def large_gap_counts(stats: ARStats, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """Per text, how many of its scored tokens have a large top-1 gap, |g_t| > ``tau`` (the paper's τ = 3), and how
    many tokens it has: the token-level evidence Gap-K% rests on (non-training text should have more)."""
    large = (top1_gaps(stats) < -tau).astype(np.int64)
    return np.add.reduceat(large, stats.offsets[:-1]), np.diff(stats.offsets)
