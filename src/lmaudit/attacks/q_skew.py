"""Q-Skew: quantile-weighted skewness of per-token loss gaps under cyclic masking.

Membership inference for fine-tuned diffusion LMs (``../shared/seeds/000_2df85bf46af18b26.txt``).
A member's tokens gain memorisation in proportion to the inverse of the mask ratio
at which they were trained, so their reference−target loss gaps are right-skewed;
a non-member's are near symmetric.
"""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.errors import LmauditError
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.records import MaskedStats
from lmaudit.probes.segments import segment_mean, segment_median, segment_ranks, segment_std
from lmaudit.settings import fraction, one_of, positive

QUANTILES = (0.15, 0.85)


def weighted_skew(values: np.ndarray, offsets: np.ndarray, *, h: float = 0.1,
                  weighting: str = "quantile") -> np.ndarray:
    """Pearson median skewness 3·(m_W − median)/std per segment, with quantile weights.

    ``m_W = Σ W(s)·s / Σ W(s)`` with ``W(s) = φ((F(s) − 0.15)/h) + φ((F(s) − 0.85)/h)``,
    F the segment's empirical CDF at mid-ranks ((rank − ½)/n, ties averaged, so that
    mirroring the values mirrors the weights) and φ the Gaussian bump;
    ``weighting="none"`` uses W = 1 (plain Pearson's second coefficient). A segment
    with zero spread scores 0. Invariant to adding a constant and to positive scaling.
    """
    if weighting not in ("quantile", "none"):
        raise LmauditError(f"q_skew: weighting must be 'quantile' or 'none', got '{weighting}'")
    if isinstance(h, bool) or not isinstance(h, (int, float, np.integer, np.floating)) or not 0 < h < np.inf:
        raise LmauditError(f"q_skew: bandwidth h must be a finite number > 0, got {h!r}")
    lengths = np.diff(offsets)
    v = np.asarray(values, dtype=np.float64)
    if not np.isfinite(v).all():
        raise LmauditError(f"q_skew: {int((~np.isfinite(v)).sum())} loss gap(s) are NaN or infinite",
                           hint="the probe records hold non-finite log-probabilities; re-run the probe")
    if weighting == "quantile":
        F = (segment_ranks(v, offsets) - 0.5) / np.repeat(lengths, lengths)  # mid-rank CDF: mirror-symmetric
        # log of the summed bumps, shifted by each segment's maximum: a narrow h cannot underflow all weights to 0
        with np.errstate(over="ignore"):
            logw = np.logaddexp(*(-0.5 * ((F - q) / h) ** 2 for q in QUANTILES))
        logw = np.maximum(logw, np.finfo(np.float64).min)
        w = np.exp(logw - np.repeat(np.maximum.reduceat(logw, offsets[:-1]), lengths))
        wmean = np.add.reduceat(w * v, offsets[:-1]) / np.add.reduceat(w, offsets[:-1])
    else:
        wmean = segment_mean(v, offsets)
    std = segment_std(v, offsets)
    spread = std > 1e-12 * np.maximum(1.0, np.abs(wmean))
    out = np.zeros(len(lengths))
    out[spread] = 3.0 * (wmean - segment_median(v, offsets))[spread] / std[spread]
    return out


def _plan(params: dict, budget: int) -> MaskPlan:
    rho = params.get("rho", 0.35)
    cyclic = MaskPlan("cyclic", budget=budget, rho=rho)
    if params.get("sampling", "cyclic") == "cyclic":
        return cyclic
    return MaskPlan("random", budget=cyclic.n_patterns, rho=rho)  # same number of forwards


def _deltas(stats: MaskedStats) -> np.ndarray:
    """Per-token gaps Δ = log p_target − log p_reference under cyclic masks"""
    return stats.logp.astype(np.float64) - stats.ref_logp


@register_attack("q_skew", kind="dlm", needs_reference=True, probe=_plan, example=_deltas,
                 checks={"rho": fraction(above_zero=True), "h": positive(),
                         "sampling": one_of(("cyclic", "random"), listed=True),
                         "statistic": one_of(("skew", "mean"), listed=True),
                         "weighting": one_of(("quantile", "none"), listed=True)})
def q_skew(
    stats: MaskedStats,
    *,
    rho: float = 0.35,
    h: float = 0.1,
    sampling: str = "cyclic",
    statistic: str = "skew",
    weighting: str = "quantile",
) -> np.ndarray:
    """Quantile-weighted skewness of Δ = log p_tar − log p_ref over all masked tokens.

    Shape (S,); higher = member. ``S_x`` holds one Δ per token per cyclic round
    (ρ=0.35 of the tokens masked per forward). Ablations: ``sampling="random"``
    (independent random masks, same number of forwards), ``statistic="mean"`` (mean
    Δ instead of its skewness), ``weighting="none"`` (unweighted skewness). ``rho``
    and ``sampling`` select the probe; they are recorded here for provenance.
    """
    delta = stats.logp.astype(np.float64) - stats.ref_logp
    if statistic == "mean":
        return segment_mean(delta, stats.offsets)
    return weighted_skew(delta, stats.offsets, h=h, weighting=weighting)
