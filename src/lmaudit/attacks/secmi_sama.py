"""Diffusion-model MIAs adapted to DLMs: SecMI-DLM (Duan et al., 2023) and SAMA (Chen et al., 2026).

Both read a ``nested`` plan: one fixed permutation per sample, pattern j masking
its first round(r_j·L) positions, so masks grow step by step.
"""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.dlm_common import inverse_ratio_nll
from lmaudit.attacks.registry import register_attack
from lmaudit.errors import check_int
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.records import MaskedStats
from lmaudit.probes.segments import splitmix64

N_SUBSETS = 128
SUBSET_SIZE = 10
SAMA_FIRST, SAMA_SPAN = 0.05, 0.45  # step s of S masks 0.05 + 0.45·(s+1)/(S+1) of the tokens


def _secmi_plan(params: dict, budget: int) -> MaskPlan:
    return MaskPlan("nested", budget=budget, r_start=0.1, r_end=0.8)


def sama_ratios(steps: int) -> np.ndarray:
    """SAMA's mask ratio at each of ``steps`` progressive steps: 0.05 + 0.45·(s+1)/(S+1), s = 0..S−1."""
    return SAMA_FIRST + SAMA_SPAN * np.arange(1, steps + 1) / (steps + 1)


def _sama_plan(params: dict, budget: int) -> MaskPlan:
    # the nested plan's ratios are linspace(r_start, r_end, budget): evenly spaced, so its ends fix them all
    first, last = sama_ratios(budget)[[0, -1]]
    return MaskPlan("nested", budget=budget, r_start=float(first), r_end=float(last))


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


def draw_subsets(seeds: np.ndarray, size: np.ndarray, *, n_subsets: int, subset_size: int):
    """Uniform random subsets of min(``subset_size``, m) distinct indices of 0..m−1, for each group's m = ``size``.

    Floyd's algorithm, vectorised over groups and subsets: for j = m−k .. m−1 draw
    t ~ U{0..j}; keep t, or j if t was already taken. Randomness comes from hashes of
    (``seeds[g]``, subset, draw) only. Returns ``(chosen, active)``: (G, R, l) int64
    indices and the (G, 1, l) mask of the draws in use (the first k of each subset).
    """
    m = np.asarray(size, dtype=np.int64)
    k = np.minimum(subset_size, m)
    counter = ((np.arange(n_subsets, dtype=np.uint64)[:, None] << np.uint64(32))
               | np.arange(subset_size, dtype=np.uint64))
    with np.errstate(over="ignore"):
        h = splitmix64(np.asarray(seeds, dtype=np.uint64)[:, None, None] ^ splitmix64(counter)[None])  # (G, R, l)
    chosen = np.zeros((len(m), n_subsets, subset_size), dtype=np.int64)  # (G, R, l)
    for it in range(subset_size):
        j = np.maximum(m - k + it, 0)[:, None]  # (G, 1); only draws it < k are used
        t = (h[:, :, it] % (j + 1).astype(np.uint64)).astype(np.int64)  # (G, R)
        taken = (chosen[:, :, :it] == t[..., None]).any(axis=-1)  # (G, R)
        chosen[:, :, it] = np.where(taken, j, t)
    return chosen, np.arange(subset_size)[None, None, :] < k[:, None, None]


def subset_votes(values: np.ndarray, start: np.ndarray, size: np.ndarray, seeds: np.ndarray, *,
                 n_subsets: int = N_SUBSETS, subset_size: int = SUBSET_SIZE) -> np.ndarray:
    """Per group g, the share of ``n_subsets`` random subsets of ``values[start_g : start_g + size_g]`` with sum > 0.

    Each subset holds min(``subset_size``, size_g) distinct values (:func:`draw_subsets`
    seeded with ``seeds[g]``): a group's votes depend on its own seed and values only.
    A group of at most ``subset_size`` values has one subset, all of them (its vote is
    0 or 1); an empty group votes 0. Work and memory grow with groups × subsets ×
    ``subset_size``, not with the group sizes; groups go in chunks of ≈4M draws.
    Returns (G,) float64.
    """
    votes = np.zeros(len(start))
    chunk = max(1, 4_000_000 // (n_subsets * subset_size))
    for c in range(0, len(start), chunk):
        g = np.arange(c, min(c + chunk, len(start)))
        chosen, active = draw_subsets(seeds[g], size[g], n_subsets=n_subsets, subset_size=subset_size)
        idx = np.where(active, start[g, None, None] + chosen, 0)  # (G, R, l)
        sums = np.where(active, values[idx] if len(values) else 0.0, 0.0).sum(axis=-1)  # (G, R)
        votes[g] = (sums > 0).mean(axis=1)
    return votes


@register_attack("sama", kind="dlm", needs_reference=True, probe=_sama_plan)
def sama(stats: MaskedStats, *, n_subsets: int = N_SUBSETS, subset_size: int = SUBSET_SIZE) -> np.ndarray:
    """SAMA: subset votes on ref NLL > target NLL over all tokens masked so far, under progressive masks.

    Shape (S,); higher = member. SAMA as published (Chen et al., 2026; DESIGN.md): S =
    budget nested steps, step s masking 0.05 + 0.45·(s+1)/(S+1) of the scorable tokens
    (one fixed permutation, growing prefixes). Each token keeps d = log p_tar − log
    p_ref (= ref NLL − target NLL) of the step at which it was FIRST masked. The vote
    at step s runs over ALL tokens masked so far (cumulative): ``n_subsets`` random
    subsets of ``subset_size`` of them (all of them when fewer), each voting 1 when
    Σ ref NLL > Σ target NLL over the subset (Σ d > 0; a tie votes 0); the step's
    vote is the share of 1s. Score = Σ_s w_s·vote_s with w_s ∝ 1/(s+1), normalised,
    so in [0, 1]. Subsets are drawn from a hash of the sample's content key and the
    step, so scores do not depend on sample order or on the other samples.
    """
    check_int("sama: n_subsets", n_subsets, low=1)
    check_int("sama: subset_size", subset_size, low=1)
    first = _newly_masked(stats)
    d = (stats.logp.astype(np.float64) - stats.ref_logp)[first]  # ordered by sample, first step, position
    seg = stats.segment_ids[first]
    n, steps = stats.n_samples, int(stats.n_patterns.max())
    new = np.bincount(seg * steps + stats.pattern[first], minlength=n * steps).reshape(n, steps)  # (S, P)
    so_far = np.cumsum(new, axis=1)  # (S, P): tokens masked at steps ≤ s
    start = np.concatenate([[0], np.cumsum(new.sum(axis=1))])[:-1]  # (S,): each sample's first token in d
    sample, step = np.nonzero(np.arange(steps)[None, :] < stats.n_patterns[:, None])  # every step of every sample
    seeds = splitmix64(stats.sample_keys[sample].astype(np.uint64) ^ splitmix64(step))
    votes = subset_votes(d, start[sample], so_far[sample, step], seeds, n_subsets=n_subsets, subset_size=subset_size)
    weight = 1.0 / (step + 1)
    return (np.bincount(sample, weights=weight * votes, minlength=n)
            / np.bincount(sample, weights=weight, minlength=n))
