"""(n, p)-discoverable extraction arithmetic and the Gaussian model of relaxed extraction.

A record whose single query succeeds with probability p̂ is extracted at least once
in n independent queries with probability 1 − (1 − p̂)^n. It is
(n, p)-discoverable when that reaches p (DESIGN.md, "Extraction").
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from lmaudit.errors import LmauditError


def _check_p(p_hat) -> np.ndarray:
    try:
        p_hat = np.asarray(p_hat, dtype=np.float64)
    except (TypeError, ValueError):
        raise LmauditError(f"single-query probabilities must be numbers, got {p_hat!r}") from None
    if np.isnan(p_hat).any() or (p_hat < 0).any() or (p_hat > 1).any():
        raise LmauditError("single-query probabilities must lie in [0, 1]")
    return p_hat


def _check_n(n) -> np.ndarray:
    try:
        n = np.asarray(n, dtype=np.float64)
    except (TypeError, ValueError):
        raise LmauditError(f"the query budget n must be a number, got {n!r}") from None
    if np.isnan(n).any() or (n < 1).any():
        raise LmauditError("the query budget n must be at least 1")
    return n


def success_within(p_hat, n) -> np.ndarray:
    """Pr(at least one exact reproduction in ``n`` queries) = 1 − (1 − p̂)^n, stable for tiny p̂.

    Parameters
    ----------
    p_hat : array of single-query success probabilities in [0, 1].
    n : number of queries (≥ 1), scalar or broadcastable array.
    """
    p_hat = _check_p(p_hat)
    n = _check_n(n)
    with np.errstate(divide="ignore", invalid="ignore"):  # p̂ = 0 with n = inf: 0·inf, answered below
        q = -np.expm1(n * np.log1p(-np.minimum(p_hat, 1.0)))
    return np.where(p_hat >= 1.0, 1.0, np.where(p_hat <= 0.0, 0.0, q))


def queries_needed(p_hat, p: float) -> np.ndarray:
    """Smallest n with 1 − (1 − p̂)^n ≥ p; ``inf`` where p̂ = 0, 1 where p̂ = 1."""
    p_hat = _check_p(p_hat)
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) or not 0.0 < p < 1.0:
        raise LmauditError(f"target probability p must be in (0, 1), got {p!r}")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a tiny p̂ needs more than 1e308 queries: inf
        n = np.ceil(np.log1p(-p) / np.log1p(-np.minimum(p_hat, 1.0)) - 1e-12)
    n = np.where(p_hat <= 0.0, np.inf, n)
    return np.where(p_hat >= 1.0, 1.0, np.maximum(n, 1.0))


def discoverable(p_hat, *, n: int, p: float) -> np.ndarray:
    """Boolean mask of (n, p)-discoverable records: 1 − (1 − p̂)^n ≥ p."""
    return queries_needed(p_hat, p) <= _check_n(n)


def gaussian_relaxed_rate(distances, eps) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Relaxed extraction Pr(d ≤ ε): Gaussian prediction and empirical rate.

    Parameters
    ----------
    distances : (G,) Hamming distances of G sampled generations to the target.
    eps : (E,) tolerances.

    Returns
    -------
    (predicted (E,), empirical (E,), mu, sigma): predicted = Φ((ε + 0.5 − μ)/σ) with
    μ, σ the sample mean and standard deviation (σ floored at 1e-6, so a constant
    distance predicts a step at that value).
    """
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 1 or len(d) < 2:
        raise LmauditError("relaxed extraction needs at least 2 sampled generations")
    eps = np.atleast_1d(np.asarray(eps, dtype=np.float64))
    if not np.isfinite(d).all() or not np.isfinite(eps).all():
        raise LmauditError("relaxed extraction: distances and tolerances must be finite numbers (found NaN or inf)")
    mu, sigma = float(d.mean()), float(max(d.std(ddof=1), 1e-6))
    predicted = norm.cdf((eps + 0.5 - mu) / sigma)
    empirical = (d[None, :] <= eps[:, None]).mean(axis=1)
    return predicted, empirical, mu, sigma
