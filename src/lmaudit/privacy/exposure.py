"""Canary exposure (the secret sharer, Carlini et al., 2019): how far a model ranks a planted secret ahead of the
fillings it never saw, in bits.

Definitions (log-perplexity Px in bits; lower = the model finds the text more likely):

- A canary c is ranked among its **reference space** R_c: itself and the N fillings of its format that are no
  canary's secret (the other canaries are left out, so that planting several does not lower each one's exposure;
  with one canary R_c is the whole space R). rank(c) = 1 + #{r ∈ R_c \\ {c} : Px(r) ≤ Px(c)} (a tie counts
  against the canary).
- **exposure** = log₂|R_c| − log₂ rank(c): log₂|R_c| when the canary ranks first, 0 when it ranks last.
- **rank estimate**: K candidates drawn uniformly without replacement from the N never-inserted fillings, k of them
  at or under Px(c): rank ≈ 1 + N·k/K. With K = N (every filling scored) it is the exact rank. Its 95% interval
  comes from the Clopper–Pearson interval of the fraction k/K (a finite pool sampled without replacement varies
  less than that: the interval is conservative); an exact rank has no interval width.
- **extrapolated** (k = 0 while sampling: no candidate beats the canary, so k/K says only "under about 1/K"): a
  skew-normal is fitted (maximum likelihood) to the candidates' Px and its CDF F at Px(c) is the fraction of the
  pool under the canary, rank ≈ 1 + N·F. For F ≫ 1/N this is −log₂ F, the paper's extrapolation; written through
  the rank it never exceeds log₂|R_c|, and it is kept at or above the lower end of the rank estimate's interval for
  0 of K (a fit claiming less than the sample shows is overruled by the sample). Its 95% interval: the 2.5th and
  97.5th percentiles of the same estimate over a seeded bootstrap of the candidates (each resample refitted),
  widened to hold the point.

- **chance**: a canary the model never saw ranks uniformly among R_c, so its exposure is a draw, above e bits with
  probability 2^−e (median 1 bit, mean 1/ln 2 ≈ 1.44 for a large R_c): one canary's interval says where that canary
  ranks, not where chance lies. The canaries of each insertion count are read against the controls (inserted 0 times)
  by the shift of their exposures, with a distribution-free interval (:func:`versus_controls`).

Everything is computed in log space, so a space of any size (26^64 and beyond) stays finite.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

from lmaudit.errors import LmauditError

LEVEL = 0.95  # the exposure intervals are 95% ones (results.json calls them exposure_ci95)


def exposure_bits(log2_rank, space_size: int) -> np.ndarray:
    """log₂|R| − log₂ rank (``log2_rank`` an array or a number; ``space_size`` |R|, any size)."""
    return math.log2(space_size) - np.asarray(log2_rank, dtype=np.float64)


def log2_rank_of_fraction(log2_fraction, pool_size: int) -> np.ndarray:
    """log₂(1 + N·f) for f given as log₂ f (−inf for f = 0), without forming N·f."""
    with np.errstate(divide="ignore"):
        return np.logaddexp2(0.0, math.log2(pool_size) + np.asarray(log2_fraction, dtype=np.float64))


def clopper_pearson(k: np.ndarray, n: int, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The exact (Clopper–Pearson) two-sided ``level`` interval of a binomial fraction k/n, per k."""
    k = np.asarray(k, dtype=np.float64)
    alpha = 1.0 - level
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
        hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lo, hi


def _log2(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log2(np.asarray(x, dtype=np.float64))


def rank_estimate(values, candidates, *, pool_size: int, level: float = LEVEL) -> dict[str, np.ndarray]:
    """The rank estimate of each canary from sampled candidates (module docstring).

    Parameters
    ----------
    values : (C,) the canaries' log-perplexities.
    candidates : (K,) the log-perplexities of K distinct never-inserted fillings (K = ``pool_size``: all of them).
    pool_size : N, how many never-inserted fillings there are (|R_c| = N + 1).

    Returns
    -------
    {"exposure", "lo", "hi", "log2_rank", "beaten", "exact"}: (C,) arrays (``beaten``: candidates at or under the
    canary; ``exact``: whether the rank is exact), exposure in bits, [lo, hi] its ``level`` interval.
    """
    values, cand = np.asarray(values, dtype=np.float64), np.sort(np.asarray(candidates, dtype=np.float64))
    n_cand = len(cand)
    if n_cand < 1 or n_cand > pool_size:
        raise LmauditError(f"{n_cand} candidates for a pool of {pool_size:,} never-inserted fillings: need 1 to "
                           f"{pool_size:,}")
    beaten = np.searchsorted(cand, values, side="right")  # (C,)
    space, exact = pool_size + 1, n_cand == pool_size
    if exact:  # every never-inserted filling scored: the rank itself
        log2_rank = np.log2(1.0 + beaten)
        point = exposure_bits(log2_rank, space)
        lo, hi = point, point
    else:
        f_lo, f_hi = clopper_pearson(beaten, n_cand, level)
        log2_rank = log2_rank_of_fraction(_log2(beaten / n_cand), pool_size)
        point = exposure_bits(log2_rank, space)
        lo = np.minimum(exposure_bits(log2_rank_of_fraction(_log2(f_hi), pool_size), space), point)
        hi = np.maximum(exposure_bits(log2_rank_of_fraction(_log2(f_lo), pool_size), space), point)
    return {"exposure": point, "lo": lo, "hi": hi, "log2_rank": log2_rank, "beaten": beaten,
            "exact": np.full(len(values), exact)}


def fit_skewnorm(candidates, start: tuple | None = None) -> tuple[float, float, float] | None:
    """(shape, loc, scale) of a skew-normal fitted to ``candidates`` by maximum likelihood (``start`` a first guess),
    or None when no fit exists (constant values) or it does not converge to finite numbers."""
    x = np.asarray(candidates, dtype=np.float64)
    if len(x) < 3 or not np.ptp(x) > 0:
        return None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            params = (stats.skewnorm.fit(x) if start is None
                      else stats.skewnorm.fit(x, start[0], loc=start[1], scale=start[2]))
        except (ValueError, RuntimeError, FloatingPointError):
            return None
    return tuple(float(p) for p in params) if np.all(np.isfinite(params)) and params[2] > 0 else None


def _extrapolated_bits(values: np.ndarray, params, pool_size: int) -> np.ndarray:
    with np.errstate(all="ignore"):
        log2_f = stats.skewnorm.logcdf(values, *params) / math.log(2)
    return exposure_bits(log2_rank_of_fraction(log2_f, pool_size), pool_size + 1)


def extrapolated_estimate(values, candidates, *, pool_size: int, bootstrap: int = 50, seed: int = 0,
                          level: float = LEVEL) -> dict | None:
    """The skew-normal extrapolation of each canary's exposure (module docstring) and its bootstrap interval:
    {"exposure", "lo", "hi", "log2_fraction", "params"} ((C,) arrays, ``params`` the fit on all candidates), or None
    when the candidates admit no fit. Resample b draws with a generator seeded by (``seed``, b).

    Meant for canaries no candidate beats: each estimate (the point and every resample's) is kept at or above the
    lower end of the rank estimate's interval for 0 of K, the least the sample itself shows at ``level`` (a fit
    whose left tail is heavier than the candidates allow would otherwise claim less than they do).
    """
    values, cand = np.asarray(values, dtype=np.float64), np.asarray(candidates, dtype=np.float64)
    params = fit_skewnorm(cand)
    if params is None:
        return None
    _, f_hi = clopper_pearson(np.zeros(1), len(cand), level)
    floor = float(exposure_bits(log2_rank_of_fraction(_log2(f_hi), pool_size), pool_size + 1)[0])
    point = np.maximum(_extrapolated_bits(values, params, pool_size), floor)
    draws = []
    for b in range(bootstrap):
        rng = np.random.default_rng([seed, b])
        refit = fit_skewnorm(cand[rng.integers(0, len(cand), len(cand))], start=params)
        if refit is not None:
            draws.append(np.maximum(_extrapolated_bits(values, refit, pool_size), floor))
    alpha = 1.0 - level
    if draws:
        lo, hi = np.percentile(np.stack(draws), [100 * alpha / 2, 100 * (1 - alpha / 2)], axis=0)
    else:
        lo, hi = point, point
    with np.errstate(all="ignore"):
        log2_f = stats.skewnorm.logcdf(values, *params) / math.log(2)
    return {"exposure": point, "lo": np.minimum(lo, point), "hi": np.maximum(hi, point), "log2_fraction": log2_f,
            "params": {"shape": params[0], "loc": params[1], "scale": params[2], "resamples": len(draws),
                       "floor": floor}}


def canary_exposure(values, candidates, *, pool_size: int, bootstrap: int = 50, seed: int = 0,
                    level: float = LEVEL) -> dict:
    """Each canary's exposure: the rank estimate, or the extrapolation where sampling found no candidate at or
    under it (module docstring). Returns the arrays of :func:`rank_estimate` plus ``estimate`` ("rank" or
    "extrapolated" per canary), ``log2_fraction`` (the fitted tail, NaN where not extrapolated) and ``fit`` (the
    skew-normal's parameters, or None when nothing was extrapolated or no fit exists)."""
    values = np.asarray(values, dtype=np.float64)
    out = rank_estimate(values, candidates, pool_size=pool_size, level=level)
    out["estimate"] = np.array(["rank"] * len(values), dtype=object)
    out["log2_fraction"] = np.full(len(values), np.nan)
    out["fit"] = None
    beyond = (out["beaten"] == 0) & ~out["exact"]
    if beyond.any():
        ext = extrapolated_estimate(values[beyond], candidates, pool_size=pool_size, bootstrap=bootstrap, seed=seed,
                                    level=level)
        if ext is not None:
            for key in ("exposure", "lo", "hi", "log2_fraction"):
                out[key] = out[key].copy()
                out[key][beyond] = ext[key]
            out["estimate"][beyond] = "extrapolated"
            out["log2_rank"] = np.where(beyond, math.log2(pool_size + 1) - out["exposure"], out["log2_rank"])
            out["fit"] = ext["params"]
    return out


def median_interval(values, level: float = LEVEL) -> tuple[float, float, float]:
    """(lo, hi, coverage): the distribution-free interval [x_(r), x_(n−r+1)] of the median (order statistics of the
    sorted values), r the largest with coverage 1 − 2·P(Bin(n, ½) ≤ r − 1) ≥ ``level``; too few values for that
    give [min, max] and the coverage they have."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    r = 1
    while r + 1 <= (n + 1) // 2 and 1 - 2 * stats.binom.cdf(r, n, 0.5) >= level:
        r += 1
    return float(x[r - 1]), float(x[n - r]), float(1 - 2 * stats.binom.cdf(r - 1, n, 0.5))


def by_insertions(exposure, insertions) -> dict[str, dict]:
    """{insertion count: {n, median, median_ci95, median_ci_coverage, mean, min, max}} of the canaries' exposures,
    counts in increasing order."""
    exposure, insertions = np.asarray(exposure, dtype=np.float64), np.asarray(insertions)
    out = {}
    for k in sorted(set(insertions.tolist())):
        x = exposure[insertions == k]
        lo, hi, coverage = median_interval(x)
        out[str(k)] = {"n": len(x), "median": float(np.median(x)), "median_ci95": [lo, hi],
                       "median_ci_coverage": coverage, "mean": float(x.mean()), "min": float(x.min()),
                       "max": float(x.max())}
    return out


# --- chance, and the trained canaries against the controls -------------------------------------------------------

def chance_exposure(space_size: int) -> dict[str, float]:
    """The exposure of a canary the model never saw, among |R_c| = ``space_size`` fillings: its rank is uniform on
    1..M, so P(exposure ≥ e) = 2^−e (at the exposures M allows), and over many such canaries the mean is
    log₂ M − log₂(M!)/M (→ 1/ln 2 ≈ 1.44 bits) and the median log₂ M − log₂((M + 1)/2) (→ 1 bit).
    ``{"mean", "median"}`` in bits."""
    m = int(space_size)
    if m < 1:
        raise LmauditError(f"a reference space needs at least one filling, got {m}")
    if m < 10**12:
        mean = math.log2(m) - math.lgamma(m + 1) / (m * math.log(2))
    else:  # Stirling: log2(M!)/M = log2 M − log2 e + log2(2πM)/(2M), to well under 1e-10 bits here
        mean = math.log2(math.e) - math.log2(2 * math.pi * m) / (2 * m)
    return {"mean": float(mean), "median": float(math.log2(m) - math.log2((m + 1) / 2))}


def chance_p(exposure) -> np.ndarray:
    """2^−exposure: how often a canary the model never saw has at least this exposure (rank/|R_c| for an exact
    rank)."""
    return np.exp2(-np.asarray(exposure, dtype=np.float64))


def mann_whitney_cdf(m: int, n: int) -> np.ndarray:
    """(m·n + 1,) P(U ≤ u), u = 0..m·n, of the Mann–Whitney count U of two independent samples of sizes m and n drawn
    from one continuous distribution: exact (the coefficients of the Gaussian binomial ∏ᵢ (1 − q^(n+i))/(1 − q^i),
    i = 1..m, over C(m+n, m)) while m + n ≤ 1000, a normal approximation with continuity correction beyond."""
    m, n = sorted((int(m), int(n)))
    size = m * n + 1
    if m + n > 1000:
        u = np.arange(size)
        return stats.norm.cdf((u + 0.5 - m * n / 2) / math.sqrt(m * n * (m + n + 1) / 12))
    poly = np.zeros(size)
    poly[0] = 1.0
    for i in range(1, m + 1):  # each step leaves the Gaussian binomial [n+i, i]: non-negative, of degree n·i
        shift = n + i
        if shift < size:
            poly[shift:] = poly[shift:] - poly[:-shift]  # × (1 − q^(n+i)), as power series cut at degree m·n
        pad = (-size) % i
        poly = np.cumsum(np.concatenate([poly, np.zeros(pad)]).reshape(-1, i), axis=0).ravel()[:size]  # ÷ (1 − q^i)
    return np.minimum(np.cumsum(poly) / math.comb(m + n, m), 1.0)


_MAX_PER_SIDE = 2000  # a group larger than this is thinned to a seeded sample of it (m·n differences are formed)


def shift_interval(a, b, *, level: float = LEVEL, seed: int = 0) -> dict:
    """How far the values ``a`` sit above ``b`` (two independent samples): the Hodges–Lehmann shift, the median of
    the m·n differences aᵢ − bⱼ, and its distribution-free interval [d_(c), d_(mn+1−c)] (Bauer, 1972), c the largest
    with coverage 1 − 2·P(U ≤ c − 1) ≥ ``level`` (:func:`mann_whitney_cdf`); samples too small for that give
    [min, max] of the differences and the coverage they have. Under "a and b come from one distribution" the
    interval excludes 0 at most 1 − ``level`` of the time, whatever that distribution.
    ``{"shift", "ci", "coverage", "n", "n_baseline"}``; a side of more than 2,000 values is thinned to a seeded 2,000.
    """
    sides = []
    for i, x in enumerate((a, b)):
        x = np.asarray(x, dtype=np.float64)
        x = x[np.isfinite(x)]
        if len(x) > _MAX_PER_SIDE:
            x = np.random.default_rng([seed, i]).choice(x, _MAX_PER_SIDE, replace=False)
        sides.append(x)
    a, b = sides
    if len(a) < 1 or len(b) < 1:
        raise LmauditError(f"a shift needs a value on each side, got {len(a)} and {len(b)}")
    d = np.sort((a[:, None] - b[None, :]).ravel())  # (m·n,)
    cdf = mann_whitney_cdf(len(a), len(b))
    c = int(np.searchsorted(cdf, (1 - level) / 2, side="right"))  # how many u have P(U ≤ u) ≤ (1 − level)/2
    c = min(max(c, 1), (len(d) + 1) // 2)
    return {"shift": float(np.median(d)), "ci": [float(d[c - 1]), float(d[len(d) - c])],
            "coverage": float(1 - 2 * cdf[c - 1]), "n": int(len(a)), "n_baseline": int(len(b))}


def versus_controls(exposure, insertions, *, space_size: int, values=None, candidates=None, level: float = LEVEL,
                    seed: int = 0) -> dict:
    """The canaries of each insertion count against the controls (the canaries inserted 0 times, never trained on).

    Returns ``{"chance", "controls", "groups"}``: ``chance`` the exposure of a never-trained canary
    (:func:`chance_exposure` of ``space_size``, |R_c|); ``controls`` their number, median and its distribution-free
    interval (:func:`median_interval`), and, given the canaries' log-perplexities ``values`` (C,) and the candidates'
    ``candidates`` (K,), ``candidates_p``: the two-sided Mann–Whitney p-value of "the controls are scored like the
    never-inserted fillings", exact in law whatever the candidates' number (the controls' exposures share one sample
    of candidates, so their median can sit off chance's by that sample's error: the test does not), and
    ``like_chance`` (p ≥ 1 − ``level``); None without controls. ``groups`` per insertion count above 0:
    :func:`shift_interval` of its exposures over the controls' and ``"verdict"`` ("above", "below" or "tied": the
    interval above 0, under it, or holding it), or None per count without controls.
    """
    exposure, insertions = np.asarray(exposure, dtype=np.float64), np.asarray(insertions)
    chance = chance_exposure(space_size)
    base = exposure[insertions == 0]
    controls = None
    if len(base):
        lo, hi, coverage = median_interval(base, level)
        controls = {"n": int(len(base)), "median": float(np.median(base)), "median_ci95": [lo, hi],
                    "median_ci_coverage": coverage, "candidates_p": None, "like_chance": None}
        if values is not None and candidates is not None and len(candidates):
            mine = np.asarray(values, dtype=np.float64)[insertions == 0]
            p = float(stats.mannwhitneyu(mine, np.asarray(candidates, dtype=np.float64)).pvalue)
            controls.update(candidates_p=p, like_chance=bool(p >= 1 - level))
    groups = {}
    for k in sorted(set(insertions.tolist()) - {0}):
        if controls is None:
            groups[str(k)] = None
            continue
        found = shift_interval(exposure[insertions == k], base, level=level, seed=seed)
        lo, hi = found["ci"]
        found["verdict"] = "above" if lo > 0 else "below" if hi < 0 else "tied"
        groups[str(k)] = found
    return {"chance": chance, "controls": controls, "groups": groups}
