"""Diffusion-model MIAs adapted to DLMs: SecMI-DLM (Duan et al., 2023) and SAMA (Chen et al., 2026).

Both read a ``nested`` plan: one fixed permutation per sample, pattern j masking
its first round(r_j·L) positions, so masks grow step by step.
"""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.dlm_common import inverse_ratio_nll
from lmaudit.attacks.registry import register_attack
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.records import MaskedStats
from lmaudit.probes.segments import splitmix64

N_SUBSETS = 128
SUBSET_SIZE = 8


def _secmi_plan(params: dict, budget: int) -> MaskPlan:
    return MaskPlan("nested", budget=budget, r_start=0.1, r_end=0.8)


def _sama_plan(params: dict, budget: int) -> MaskPlan:
    return MaskPlan("nested", budget=budget, r_start=0.05, r_end=0.5)


@register_attack("secmi_dlm", kind="dlm", probe=_secmi_plan)
def secmi_dlm(stats: MaskedStats) -> np.ndarray:
    """Negated inverse-ratio-weighted masked NLL over fixed nested masks at ratios linspace(0.1, 0.8).

    Shape (S,); higher = member. The mask ratio plays SecMI's timestep; the masks of
    a sample are fixed (one permutation, growing prefixes), as SecMI's deterministic
    noising is, so the score measures the denoising error at each "timestep".
    """
    return -inverse_ratio_nll(stats, stats.logp)


def _newly_masked(stats: MaskedStats) -> np.ndarray:
    """True for entries whose position is masked for the first time at their pattern."""
    width = int(stats.n_positions.max()) + 1
    key = stats.segment_ids.astype(np.int64) * width + stats.position
    first = np.full(int(key.max()) + 1, np.iinfo(np.int32).max, dtype=np.int64)
    np.minimum.at(first, key, stats.pattern)
    return stats.pattern == first[key]


@register_attack("sama", kind="dlm", needs_reference=True, probe=_sama_plan)
def sama(stats: MaskedStats, *, n_subsets: int = N_SUBSETS, subset_size: int = SUBSET_SIZE) -> np.ndarray:
    """Subset voting on ref NLL > target NLL at newly masked tokens of progressive masks (5%→50%).

    Shape (S,); higher = member. At step j the tokens first masked at that step give
    d = ref NLL − target NLL; ``n_subsets`` random subsets of min(``subset_size``, m)
    of them each vote 1 if their mean d > 0. The sample's score is the vote share
    averaged over steps with weights 1/(j+1). Subsets are drawn from a hash of the
    sample's content key, so scores do not depend on sample order.
    """
    new = _newly_masked(stats)
    d = (stats.logp.astype(np.float64) - stats.ref_logp)[new]
    seg = stats.segment_ids[new]
    step = stats.pattern[new].astype(np.int64)
    n_steps = int(stats.pattern.max()) + 1
    group = seg * n_steps + step  # entries are ordered by sample, then pattern
    uniq, start, size = np.unique(group, return_index=True, return_counts=True)
    m_max = int(size.max())
    votes = np.empty(len(uniq))
    chunk = max(1, 4_000_000 // (n_subsets * m_max))
    slot = np.arange(m_max)
    for c in range(0, len(uniq), chunk):
        g = np.arange(c, min(c + chunk, len(uniq)))
        valid = slot[None, :] < size[g, None]  # (G, M)
        vals = np.where(valid, d[np.minimum(start[g, None] + slot[None, :], len(d) - 1)], 0.0)  # (G, M)
        seed = stats.sample_keys[uniq[g] // n_steps].astype(np.uint64) ^ splitmix64(uniq[g] % n_steps)
        # a fixed stride (not the set's largest group) keeps each sample's subsets independent of the others
        counter = (np.arange(n_subsets, dtype=np.uint64)[:, None] << np.uint64(32)) | slot.astype(np.uint64)[None, :]
        with np.errstate(over="ignore"):
            keys = splitmix64(seed[:, None, None] ^ splitmix64(counter)[None])  # (G, n_subsets, M)
        keys = np.where(valid[:, None, :], keys, np.iinfo(np.uint64).max)
        rank = np.argsort(np.argsort(keys, axis=-1), axis=-1)  # (G, n_subsets, M)
        k = np.minimum(subset_size, size[g])[:, None, None]
        chosen = rank < k
        means = (chosen * vals[:, None, :]).sum(-1) / k[..., 0]  # (G, n_subsets)
        votes[g] = (means > 0).mean(axis=1)
    sample = uniq // n_steps
    weight = 1.0 / (uniq % n_steps + 1)
    num = np.bincount(sample, weights=weight * votes, minlength=stats.n_samples)
    den = np.bincount(sample, weights=weight, minlength=stats.n_samples)
    return num / den
