"""DLM baselines over masked-probe records (DESIGN.md, "DLM"; Q-Skew paper's baselines).

``loss``, ``min_k``, ``min_k_pp``, ``gap_k`` and ``calibration`` read the ``elbo``
plan: ``budget`` masked forwards with stratified mask ratios t ~ U(0, 1). Per-token
scores (log p, z, gap) are computed per masked occurrence, then averaged over the
patterns in which the token was masked.
"""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.dlm_common import elbo_plan, inverse_ratio_nll, token_means
from lmaudit.attacks.gap_k import gap_k_scores
from lmaudit.attacks.registry import register_attack
from lmaudit.probes.records import MaskedStats
from lmaudit.probes.segments import bottom_k_mean


@register_attack("loss", kind="dlm", probe=elbo_plan)
def dlm_loss(stats: MaskedStats) -> np.ndarray:
    """Negated ELBO estimate per token: −mean_j (1/t_j) Σ_{i∈M_j} NLL_i / L.

    Shape (S,); higher = member.
    """
    return -inverse_ratio_nll(stats, stats.logp)


@register_attack("min_k", kind="dlm", probe=elbo_plan)
def dlm_min_k(stats: MaskedStats, *, k: float = 0.2) -> np.ndarray:
    """Mean of the lowest k% per-token masked log p (averaged over patterns).

    Shape (S,); higher = member.
    """
    values, offsets = token_means(stats, stats.logp)
    return bottom_k_mean(values, offsets, k)


@register_attack("min_k_pp", kind="dlm", probe=elbo_plan)
def dlm_min_k_pp(stats: MaskedStats, *, k: float = 0.2) -> np.ndarray:
    """Min-K%++ on masked tokens: lowest k% of z = (log p − μ)/σ averaged per token.

    Shape (S,); higher = member.
    """
    z = (stats.logp.astype(np.float64) - stats.mu) / stats.sigma
    values, offsets = token_means(stats, z)
    return bottom_k_mean(values, offsets, k)


@register_attack("gap_k", kind="dlm", probe=elbo_plan)
def dlm_gap_k(stats: MaskedStats, *, k: float = 0.2, window: int = 3, smooth: str = "sequential") -> np.ndarray:
    """Gap-K% on masked tokens: per-token top-1 gap averaged over patterns, smoothed in text order.

    Shape (S,); higher = member. Tokens that no pattern masked are absent, so a
    window may join the tokens on either side of such a gap (rare with 16 masks).
    """
    gaps = np.minimum((stats.logp.astype(np.float64) - stats.top1_logp) / stats.sigma, 0.0)
    values, offsets = token_means(stats, gaps)
    return gap_k_scores(values, offsets, stats.sample_keys, k=k, window=window, smooth=smooth)


@register_attack("calibration", kind="dlm", needs_reference=True, probe=elbo_plan)
def calibration(stats: MaskedStats) -> np.ndarray:
    """Reference ELBO NLL − target ELBO NLL on identical masks (Watson et al., 2022).

    Shape (S,); higher = member.
    """
    return inverse_ratio_nll(stats, stats.ref_logp) - inverse_ratio_nll(stats, stats.logp)
