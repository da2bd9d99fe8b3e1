"""Intervals a judge computes from what a record stores where the experiment stored none of the compared quantity:
AUC differences from per-seed AUCs and the member / non-member counts (Hanley and McNeil's standard error), and 95%
intervals from the 90% bootstrap intervals the unlearning audits store. Each says how it is built; the rule that reads
them is :mod:`lmaudit.claims.verdicts`."""

from __future__ import annotations

import math

import numpy as np

Z95, Z90 = 1.959964, 1.644854


def auc_se(auc: float, n1: int, n0: int) -> float:
    """Hanley and McNeil's (1982) standard error of an AUC from ``n1`` positives and ``n0`` negatives."""
    a = min(max(float(auc), 0.0), 1.0)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n0 - 1) * (q2 - a * a)) / (n1 * n0)
    return math.sqrt(max(var, 0.0))


def counts(rec: dict) -> tuple[int, int]:
    """(members, non-members) of a membership record, from its stored settings."""
    e = rec["experiment"]
    return int(e["n_members"]), int(e["n_nonmembers"])


UNPAIRED = ("unpaired: Hanley and McNeil's standard error of each AUC from the member and non-member counts, the two "
            "taken as independent, which for two signals read on the same texts is wider than the paired interval "
            "the experiment does not store")


def auc_diffs(a: list[float], b: list[float], n_a: tuple[int, int], n_b: tuple[int, int] | None = None
              ) -> list[dict]:
    """Per seed: a − b of two AUCs with a normal 95% interval from their Hanley–McNeil standard errors taken as
    independent (``n_a``, ``n_b``: their (members, non-members); ``n_b`` defaults to ``n_a``)."""
    n_b = n_b or n_a
    out = []
    for x, y in zip(a, b):
        se = math.hypot(auc_se(x, *n_a), auc_se(y, *n_b))
        d = float(x) - float(y)
        out.append({"diff": d, "ci95": [d - Z95 * se, d + Z95 * se]})
    return out


def row_diffs(rec: dict, a: str, b: str, metric: str = "auc", other: dict | None = None) -> list[dict]:
    """Per seed: row ``a`` − row ``b`` of a record's AUCs (``b`` from ``other`` where given: another experiment, so
    independent models) with the unpaired interval of :func:`auc_diffs`."""
    other = other or rec
    xs = [s[metric] for s in rec["rows"][a]["per_seed"]]
    ys = [s[metric] for s in other["rows"][b]["per_seed"]]
    return auc_diffs(xs, ys, counts(rec), counts(other))


def widened(lo: float, hi: float, level: float = 0.90) -> tuple[float, float]:
    """A stored ``level`` interval widened about its midpoint to 95% under a normal approximation."""
    z = {0.90: Z90, 0.95: Z95}[level]
    mid, half = (lo + hi) / 2, (hi - lo) / 2 * Z95 / z
    return mid - half, mid + half


def rho_interval(rec: dict, key: str, seed: int, *, unclipped: bool = False) -> tuple[float, float] | None:
    """The 95% interval (widened from the stored 90% bootstrap interval) of one audit's ρ on one seed: a set-level
    audit's from ``intervals``, a thresholded MIA's from ``threshold_intervals``; None where the record stores none."""
    stored = (rec.get("intervals_unclipped" if unclipped else "intervals") or {}).get(key)
    if stored is None and not unclipped:
        stored = (rec.get("threshold_intervals") or {}).get(key)
    if not stored or seed >= len(stored) or stored[seed] is None:
        return None
    lo, hi = stored[seed]
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    return widened(float(lo), float(hi))


def difference(a: tuple[float, float], b: tuple[float, float], da: float, db: float) -> dict:
    """da − db with a 95% interval combining the two intervals' half-widths as independent (normal)."""
    half = math.hypot((a[1] - a[0]) / 2, (b[1] - b[0]) / 2)
    d = float(da) - float(db)
    return {"diff": d, "ci95": [d - half, d + half]}


def bootstrap_mean(values, *, block: int = 1, n_resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The mean of ``values`` with a percentile bootstrap 95% interval; ``block`` > 1 resamples consecutive blocks of
    that many values (values stored text by text, the block about one text: a stand-in for resampling texts)."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    rng = np.random.default_rng(seed)
    if block <= 1:
        reps = x[rng.integers(0, len(x), (n_resamples, len(x)))].mean(axis=1)
    else:
        n_blocks = max(1, len(x) // block)
        starts = rng.integers(0, len(x) - block + 1, (n_resamples, n_blocks))
        reps = x[starts[..., None] + np.arange(block)].reshape(n_resamples, -1).mean(axis=1)
    return float(x.mean()), float(np.quantile(reps, 0.025)), float(np.quantile(reps, 0.975))
