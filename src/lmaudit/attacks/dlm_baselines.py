"""DLM baselines over masked-probe records (DESIGN.md, "DLM"; Q-Skew paper's baselines).

``loss``, ``min_k``, ``min_k_pp``, ``gap_k`` and ``calibration`` read the ``elbo``
plan: ``budget`` masked forwards with stratified mask ratios t ~ U(0, 1). Per-token
scores (log p, z, gap) are computed per masked occurrence, then averaged over the
patterns in which the token was masked.

``variant`` selects the way the Q-Skew authors ran a baseline where it differs from
its published definition (DESIGN.md, "Published definition vs the authors' code"):
``loss.variant=sum`` (Bernoulli masks, not length-normalised) and
``calibration.variant=unmasked_ratio`` (clean text, AR-shifted logits, a ratio).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from lmaudit.attacks.dlm_common import elbo_plan, inverse_ratio_nll, token_means
from lmaudit.attacks.gap_k import GAP_K_CHECKS, gap_k_scores
from lmaudit.attacks.registry import register_attack
from lmaudit.errors import LmauditError
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.records import MaskedStats
from lmaudit.probes.segments import bottom_k_mean
from lmaudit.settings import fraction


def _loss_plan(params: dict, budget: int) -> MaskPlan:
    if params.get("variant") == "sum":
        return MaskPlan("bernoulli", budget=budget)
    return elbo_plan(params, budget)


def _per_sample_sum(stats: MaskedStats, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Σ of ``values`` over each sample's entries, number of entries), (S,) each; a sample may have none."""
    seg = stats.segment_ids
    return (np.bincount(seg, weights=values.astype(np.float64), minlength=stats.n_samples),
            np.bincount(seg, minlength=stats.n_samples))


@register_attack("loss", kind="dlm", probe=_loss_plan)
def dlm_loss(stats: MaskedStats, *, variant: Literal["per_token", "sum"] = "per_token") -> np.ndarray:
    """Negated ELBO estimate of the text's NLL from masked forwards, per token (``variant=sum``: summed).

    Shape (S,); higher = member. ``per_token`` (the published definition, default):
    −mean_j (1/t_j) Σ_{i∈M_j} NLL_i / L over the ``elbo`` plan's masks of |M_j| =
    round(t_j·L) positions. ``sum`` (the Q-Skew authors' code, as a DLM is trained):
    −mean_j (1/t_j) Σ_{i∈M_j} NLL_i, not divided by L, where every position is masked
    independently with probability t_j (``bernoulli`` plan, stratified t_j ∈ [10⁻³, 1]);
    a draw that masked nothing adds 0. Long texts thus score lower under ``sum``.
    """
    if variant == "sum":
        sums, _ = _per_sample_sum(stats, -stats.logp.astype(np.float64) / stats.ratio)
        return -sums / stats.n_patterns
    return -inverse_ratio_nll(stats, stats.logp)


@register_attack("min_k", kind="dlm", probe=elbo_plan, checks={"k": fraction(above_zero=True)})
def dlm_min_k(stats: MaskedStats, *, k: float = 0.2) -> np.ndarray:
    """Mean of the lowest k% per-token masked log p (averaged over patterns).

    Shape (S,); higher = member.
    """
    values, offsets = token_means(stats, stats.logp)
    return bottom_k_mean(values, offsets, k)


@register_attack("min_k_pp", kind="dlm", probe=elbo_plan, checks={"k": fraction(above_zero=True)})
def dlm_min_k_pp(stats: MaskedStats, *, k: float = 0.2) -> np.ndarray:
    """Min-K%++ on masked tokens: lowest k% of z = (log p − μ)/σ averaged per token.

    Shape (S,); higher = member.
    """
    z = (stats.logp.astype(np.float64) - stats.mu) / stats.sigma
    values, offsets = token_means(stats, z)
    return bottom_k_mean(values, offsets, k)


@register_attack("gap_k", kind="dlm", probe=elbo_plan, checks=GAP_K_CHECKS)
def dlm_gap_k(stats: MaskedStats, *, k: float = 0.2, window: int = 3,
              smooth: Literal["none", "sequential", "shuffled"] = "sequential") -> np.ndarray:
    """Gap-K% on masked tokens: per-token top-1 gap averaged over patterns, smoothed in text order.

    Shape (S,); higher = member. Tokens that no pattern masked are absent, so a
    window may join the tokens on either side of such a gap (rare with 16 masks).
    """
    gaps = np.minimum((stats.logp.astype(np.float64) - stats.top1_logp) / stats.sigma, 0.0)
    values, offsets = token_means(stats, gaps)
    return gap_k_scores(values, offsets, stats.sample_keys, k=k, window=window, smooth=smooth)


def _calibration_plan(params: dict, budget: int) -> MaskPlan:
    if params.get("variant") == "unmasked_ratio":
        return MaskPlan("unmasked", budget=1)  # one clean forward per model, whatever the budget
    return elbo_plan(params, budget)


@register_attack("calibration", kind="dlm", needs_reference=True, probe=_calibration_plan)
def calibration(stats: MaskedStats, *, variant: Literal["masked_elbo", "unmasked_ratio"] = "masked_elbo") -> np.ndarray:
    """Reference ELBO NLL − target ELBO NLL on identical masks (Watson et al., 2022).

    Shape (S,); higher = member. ``masked_elbo`` (default): the difference of the two
    per-token ELBO estimates on the ``elbo`` plan's masks. ``unmasked_ratio`` (the
    Q-Skew authors' code, from SAMA's code base): both models read the clean text
    with no mask, their raw logits with an AR shift (row t scores token t + 1, the
    ``unmasked`` plan); L = mean NLL over the text's tokens after the first; score
    −L_tar / L_ref.
    """
    if variant == "unmasked_ratio":
        tar, count = _per_sample_sum(stats, -stats.logp)
        ref, _ = _per_sample_sum(stats, -stats.ref_logp)
        if (count == 0).any():
            raise LmauditError(f"calibration (unmasked_ratio): {int((count == 0).sum())} text(s) have no token after "
                               "their first, so no token to score with an AR shift")
        return -(tar / count) / (ref / count)
    return inverse_ratio_nll(stats, stats.ref_logp) - inverse_ratio_nll(stats, stats.logp)
