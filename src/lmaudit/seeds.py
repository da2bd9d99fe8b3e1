"""Statistics across seeds: the spread of per-seed values, and one interval from the seeds' paired intervals."""

from __future__ import annotations

import numpy as np


def seed_std(values) -> float:
    """The sample standard deviation (ddof = 1) of per-seed values; 0 for one seed."""
    values = np.asarray(values, dtype=np.float64)
    return float(values.std(ddof=1)) if values.size > 1 else 0.0


def pool_paired(per_seed) -> list[float]:
    """One interval of the mean of per-seed paired differences ``[diff, lo, hi]`` (95% bootstrap intervals).

    One seed: its own interval. Several: the mean difference ± 1.96 × the standard error of a mean of independent
    estimates, each seed's standard error read from its interval's width (hi − lo) / (2 × 1.96): a normal
    approximation, stated so (averaging the bounds would be an interval of nothing).
    """
    rows = np.asarray(per_seed, dtype=np.float64).reshape(-1, 3)
    if len(rows) == 1:
        return rows[0].tolist()
    diff = float(rows[:, 0].mean())
    se = float(np.sqrt(np.sum(((rows[:, 2] - rows[:, 1]) / (2 * 1.96)) ** 2)) / len(rows))
    return [diff, diff - 1.96 * se, diff + 1.96 * se]
