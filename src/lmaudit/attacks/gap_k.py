"""Gap-K% (ACL 2026, arXiv 2601.19936): normalised top-1 gap, smoothed, bottom-k%.

See ``../shared/seeds/002_900b18c9036e7c45.txt``.
"""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.errors import LmauditError
from lmaudit.probes.records import ARStats
from lmaudit.probes.segments import bottom_k_mean, moving_average, shuffle_within

SMOOTHING = ("none", "sequential", "shuffled")


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


@register_attack("gap_k", kind="ar", access="distribution")
def gap_k(stats: ARStats, *, k: float = 0.2, window: int = 3, smooth: str = "sequential") -> np.ndarray:
    """Bottom-k% of the smoothed gap g_t = (log p(x_t) − max_v log p(v)) / σ_t.

    Shape (S,); higher = member.

    Scores lie in (−∞, 0]; closer to 0 means the true tokens stay near the model's
    top-1 prediction even in the hardest spans, as for training data.
    """
    gaps = (stats.logp.astype(np.float64) - stats.top1_logp) / stats.sigma
    return gap_k_scores(np.minimum(gaps, 0.0), stats.offsets, stats.sample_keys, k=k, window=window, smooth=smooth)
