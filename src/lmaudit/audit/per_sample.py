"""Per-sample audit baselines: a thresholded MIA turned into a forgetting rate comparable to ρ."""

from __future__ import annotations

import numpy as np

from lmaudit.errors import LmauditError
from lmaudit.metrics import check_bootstrap, percentile_interval


def threshold_forgetting(member_scores, nonmember_scores, suspect_scores, *, fpr: float = 0.1) -> dict:
    """Fraction of the suspect set a thresholded MIA calls non-member, raw and corrected for its errors.

    The threshold τ is set on the reference sets so that a fraction ``fpr`` of the
    non-members score ≥ τ (called members); TPR is measured on the members. With r
    the share of suspect samples scoring < τ, the mixture F_u = (1−ρ)F_m + ρF_n gives
    E[r] = (1−ρ)(1−TPR) + ρ(1−FPR), so ρ̂ = (r − (1−TPR)) / (TPR − FPR) (clipped to
    [0, 1]; undefined when the attack does not separate the sets, TPR ≤ FPR).

    Parameters
    ----------
    member_scores, nonmember_scores, suspect_scores : 1-D arrays, higher = member.
    fpr : the false-positive rate at which the threshold is set.
    """
    m, n, u = (np.asarray(x, dtype=np.float64) for x in (member_scores, nonmember_scores, suspect_scores))
    if not 0 < fpr < 1:
        raise LmauditError(f"fpr must be in (0, 1), got {fpr}")
    for name, x in (("members", m), ("non-members", n), ("suspect", u)):
        if x.ndim != 1 or len(x) == 0 or not np.isfinite(x).all():
            raise LmauditError(f"{name}: scores must be a non-empty 1-D array of finite values")
    tau = float(np.quantile(n, 1 - fpr, method="higher"))
    fpr_hat, tpr = float((n >= tau).mean()), float((m >= tau).mean())
    rate = float((u < tau).mean())
    gap = tpr - fpr_hat
    rho = (rate - (1 - tpr)) / gap if gap > 0 else float("nan")
    return {"threshold": tau, "fpr": fpr_hat, "tpr": tpr, "forgetting_rate": rate, "rho_unclipped": rho,
            "rho": float(np.clip(rho, 0, 1)) if np.isfinite(rho) else float("nan")}


def threshold_forgetting_interval(member_scores, nonmember_scores, suspect_scores, *, fpr: float = 0.1,
                                  level: float = 0.9, n_resamples: int = 1000, seed: int = 0) -> list[float | None]:
    """Percentile bootstrap interval of :func:`threshold_forgetting`'s clipped ρ̂: the three sets resampled apart (the
    threshold, the TPR and the suspect rate are all estimates), seeded. ``[None, None]`` where more than half of the
    resamples leave ρ undefined (the attack does not separate the resampled reference sets)."""
    check_bootstrap(n_resamples, level)
    m, n, u = (np.asarray(x, dtype=np.float64) for x in (member_scores, nonmember_scores, suspect_scores))
    threshold_forgetting(m, n, u, fpr=fpr)  # the inputs checked once, as the estimate checks them
    rng = np.random.default_rng(seed)
    reps = np.array([threshold_forgetting(rng.choice(m, len(m)), rng.choice(n, len(n)), rng.choice(u, len(u)),
                                          fpr=fpr)["rho"] for _ in range(n_resamples)])
    defined = reps[np.isfinite(reps)]
    if len(defined) * 2 < n_resamples:
        return [None, None]
    lo, hi = percentile_interval(defined, level)
    return [float(lo), float(hi)]
