"""Attacks calibrated by shadow models: offline LiRA and offline RMIA (AR models).

Shadow models are fine-tuned from the same base on random halves of a population
pool (``lmaudit shadows``). For every scored sample, the shadows that did not train
on it ("OUT" shadows) describe how a model scores it when it is not a member.
The per-sample statistic is φ = mean token log-probability under a model.
"""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.probes.records import ARStats, ShadowStats
from lmaudit.probes.segments import segment_mean
from lmaudit.settings import fraction, positive


def _out_moments(shadows: ShadowStats, n: int, fix_variance: bool) -> tuple[np.ndarray, np.ndarray]:
    out = shadows.out_mask(n)
    k = out.sum(axis=0)  # (S,)
    mu = np.where(out, shadows.phi, 0.0).sum(axis=0) / k
    resid = np.where(out, shadows.phi - mu[None, :], 0.0)
    if fix_variance:  # one pooled variance: stable with few OUT shadows per sample
        sd = np.full(n, np.sqrt((resid**2).sum() / max(int(k.sum()) - n, 1)))
    else:
        sd = np.sqrt((resid**2).sum(axis=0) / np.maximum(k - 1, 1))
    return mu, np.maximum(sd, 1e-6)


@register_attack("lira", kind="ar", needs_shadows=True, per_sample=False)  # σ pooled over the set
def lira(stats: ARStats, *, fix_variance: bool = True) -> np.ndarray:
    """Offline LiRA: (φ_target − μ_OUT) / σ_OUT of the mean token log-probability.

    Shape (S,); higher = member (Carlini et al., 2022, offline variant: a one-sided
    Gaussian test against the OUT shadows; ``fix_variance`` pools σ over samples).
    The shadows' statistics are ``stats.shadows``.
    """
    phi = segment_mean(stats.logp, stats.offsets)
    mu, sd = _out_moments(stats.shadows, len(phi), fix_variance)
    return (phi - mu) / sd


@register_attack("rmia", kind="ar", needs_shadows=True, per_sample=False,
                 checks={"a": fraction(), "gamma": positive()})
def rmia(stats: ARStats, *, a: float = 0.3, gamma: float = 1.0) -> np.ndarray:
    """Offline RMIA: share of population samples z with LR(x) / LR(z) ≥ γ.

    Shape (S,); higher = member (Zarifzadeh et al., 2024). LR(x) = p(x|θ) / Pr(x) with
    p = exp(φ) and the offline estimate Pr(x) = ½((1+a)·mean_OUT p(x|θ_k) + 1 − a).
    The population is the scored samples themselves (their labels are never used).
    """
    phi = segment_mean(stats.logp, stats.offsets)
    shadows = stats.shadows
    out = shadows.out_mask(len(phi))
    p_out = np.where(out, np.exp(shadows.phi), 0.0).sum(axis=0) / out.sum(axis=0)
    log_lr = phi - np.log(0.5 * ((1 + a) * p_out + (1 - a)))
    ranked = np.sort(log_lr)
    return np.searchsorted(ranked, log_lr - np.log(gamma), side="right") / len(log_lr)
