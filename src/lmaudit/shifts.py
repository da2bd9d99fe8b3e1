"""How far one sample's values sit from another's, with bootstrap intervals: medians of two independent samples,
and pooled shares of two sets of texts (resampling whole texts)."""

from __future__ import annotations

import numpy as np

from lmaudit.errors import LmauditError
from lmaudit.metrics import PairedDiff, check_bootstrap, percentile_interval


def median_shift(a, b, *, n_resamples: int = 2000, level: float = 0.95, seed: int = 0) -> PairedDiff:
    """median(a) − median(b) of two independent samples (their finite values), with a percentile bootstrap interval
    that resamples each sample on its own: an interval above 0 says a's values sit higher than b's."""
    a, b = (np.asarray(x, dtype=np.float64) for x in (a, b))
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) < 2 or len(b) < 2:
        raise LmauditError(f"a median shift needs 2 finite values on each side, got {len(a)} and {len(b)}")
    check_bootstrap(n_resamples, level)
    rng = np.random.default_rng(seed)
    reps = (np.median(a[rng.integers(0, len(a), (n_resamples, len(a)))], axis=1)
            - np.median(b[rng.integers(0, len(b), (n_resamples, len(b)))], axis=1))
    lo, hi = percentile_interval(reps, level)
    return PairedDiff(float(np.median(a) - np.median(b)), float(lo), float(hi))


def share_shift(counts_a, totals_a, counts_b, totals_b, *, n_resamples: int = 2000, level: float = 0.95,
                seed: int = 0) -> PairedDiff:
    """Σcounts_a / Σtotals_a − Σcounts_b / Σtotals_b: the pooled share of one set of texts (say, of its tokens with
    some property: ``counts`` of them out of ``totals``, one entry per text) minus another set's, with a percentile
    bootstrap interval that resamples whole texts within each set, since the tokens of one text are not independent
    draws."""
    sides = []
    for name, counts, totals in (("a", counts_a, totals_a), ("b", counts_b, totals_b)):
        c, t = np.asarray(counts, dtype=np.float64), np.asarray(totals, dtype=np.float64)
        if c.shape != t.shape or c.ndim != 1 or len(c) < 2:
            raise LmauditError(f"share_shift: set {name} needs counts and totals of the same length, 2 texts at least, "
                               f"got {c.shape} and {t.shape}")
        if np.any(t <= 0) or np.any(c < 0) or np.any(c > t):
            raise LmauditError(f"share_shift: set {name} needs 0 <= count <= total and total > 0 for every text")
        sides.append((c, t))
    check_bootstrap(n_resamples, level)
    rng = np.random.default_rng(seed)
    (ca, ta), (cb, tb) = sides
    reps = np.empty(n_resamples)
    chunk = max(1, 1_000_000 // (len(ca) + len(cb)))
    for s in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - s)
        ia, ib = rng.integers(0, len(ca), (b, len(ca))), rng.integers(0, len(cb), (b, len(cb)))
        reps[s : s + b] = ca[ia].sum(1) / ta[ia].sum(1) - cb[ib].sum(1) / tb[ib].sum(1)
    lo, hi = percentile_interval(reps, level)
    return PairedDiff(float(ca.sum() / ta.sum() - cb.sum() / tb.sum()), float(lo), float(hi))
