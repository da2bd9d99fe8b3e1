"""Shared reductions of DLM masked-probe records (used by several DLM attacks)."""

from __future__ import annotations

import numpy as np

from lmaudit.errors import LmauditError
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.records import MaskedStats


def token_means(stats: MaskedStats, per_entry: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ``per_entry`` values over the patterns where each token was masked.

    Returns flat per-token values ordered by sample then text position, and their
    offsets. Tokens never masked are absent.
    """
    seg = stats.segment_ids
    key = seg.astype(np.int64) * (int(stats.n_positions.max()) + 1) + stats.position
    uniq, inverse = np.unique(key, return_inverse=True)
    sums = np.bincount(inverse, weights=per_entry.astype(np.float64))
    counts = np.bincount(inverse)
    tok_seg = uniq // (int(stats.n_positions.max()) + 1)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(tok_seg, minlength=stats.n_samples))]).astype(np.int64)
    if np.any(np.diff(offsets) == 0):
        raise LmauditError("a sample has no masked token in this probe")
    return sums / counts, offsets


def inverse_ratio_nll(stats: MaskedStats, logp: np.ndarray) -> np.ndarray:
    """Per-sample Σ_patterns (1/ratio)·Σ_masked NLL, over (patterns × L): the ELBO per token."""
    per_entry = -logp.astype(np.float64) / stats.ratio
    sums = np.add.reduceat(per_entry, stats.offsets[:-1])
    return sums / (stats.n_patterns * stats.n_positions)


def elbo_plan(params: dict, budget: int) -> MaskPlan:
    return MaskPlan("elbo", budget=budget)
