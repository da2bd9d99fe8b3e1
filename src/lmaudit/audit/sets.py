"""The feature sets a set-level audit compares (:mod:`lmaudit.audit.smi`): checked, scaled and standardised."""

from __future__ import annotations

import math

import numpy as np

from lmaudit.errors import LmauditError


def as_sets(named: dict[str, object], tops: list[float] | None = None) -> list[np.ndarray]:
    """The named arrays as validated 2-D float64 arrays; ``tops`` (if given) receives each one's largest |value|."""
    out: list[np.ndarray] = []
    tops = [] if tops is None else tops
    for name, x in named.items():
        try:
            a = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise LmauditError(f"{name} is not a numeric array ({e})") from None
        if a.ndim != 2 or a.shape[1] == 0:
            raise LmauditError(f"{name} must be a 2-D array (n_samples, n_features), got shape {a.shape}")
        if a.shape[0] < 2:
            raise LmauditError(f"{name} has {a.shape[0]} row(s); each set needs at least 2 rows")
        if out and a.shape[1] != out[0].shape[1]:
            first = next(iter(named))
            raise LmauditError(
                f"feature dimensions differ: {first} has {out[0].shape[1]} features, {name} has {a.shape[1]}",
                hint="all sets must come from the same feature extractor",
            )
        lo, hi = float(np.min(a)), float(np.max(a))  # NaN propagates: two passes, no temporary
        if not (math.isfinite(lo) and math.isfinite(hi)):
            bad = int(a.size - np.isfinite(a).sum())
            raise LmauditError(f"{name} contains {bad} NaN or infinite feature value(s)", hint="drop or impute them")
        out.append(a)
        tops.append(max(-lo, hi))
    return out


def unit_scale(sets: list[np.ndarray], tops: list[float] | None = None) -> list[np.ndarray]:
    """Features of extreme magnitude (beyond 1e±50) divided by the largest |value| of the reference sets.

    ρ is invariant to a common positive scale, and fourth powers of such features would
    overflow or underflow; ordinary features are left as they are (so ``details`` keep
    their units). ``tops``: the largest |value| of each set, when already known.
    """
    tops = tops or [float(np.max(np.abs(s))) for s in sets[:2]]
    top = max(tops[0], tops[1])
    if top > 0 and any(float(np.max(np.abs(s))) > 1e50 * top for s in sets[2:]):
        # e.g. references of size 1e-308 and a suspect set of size 1: fourth powers would overflow
        raise LmauditError("the suspect set's features are more than 1e50 times larger than the reference sets'",
                           hint="the sets must come from the same feature extractor; check their scales")
    return [s / top for s in sets] if top > 0 and not 1e-50 < top < 1e50 else sets


def standardise(members, nonmembers, *others) -> tuple[np.ndarray, ...]:
    """Z-score every set with the mean and (population) std of members ∪ non-members pooled.

    Parameters
    ----------
    members, nonmembers, *others : array_like, shape (n_m, d), (n_n, d), (n_k, d)
        Reference sets (they define the scaling) and further sets, e.g. the suspect set.

    Returns
    -------
    tuple of ndarray
        ``(members, nonmembers, *others)`` in float64; constant columns get std 1.
    """
    named = {"members": members, "nonmembers": nonmembers} | {f"others[{i}]": o for i, o in enumerate(others)}
    sets = as_sets(named)
    ref = np.vstack(sets[:2])
    mu, sd = ref.mean(axis=0), ref.std(axis=0)
    sd[sd <= 1e-12 * np.maximum(1.0, np.abs(mu))] = 1.0
    return tuple((s - mu) / sd for s in sets)
