"""ε lower bounds from one training run with canaries (Steinke, Nasr, Jagielski 2023).

"Privacy Auditing with One (1) Training Run" (NeurIPS 2023): m canaries are each put
into the training data independently with probability 1/2. After training, the auditor
scores every canary, guesses "in" for the k₊ highest scores and "out" for the k₋ lowest,
and abstains on the rest. For an (ε, δ)-DP algorithm the number W of correct guesses
among the r = k₊ + k₋ made satisfies (Theorem 5.2 of the paper, the form of its
Algorithm in the appendix)

    P[W ≥ v] ≤ P[X ≥ v] + 2mδ · max_{i = 1..v} P[v − i ≤ X < v] / i,   X ~ Binomial(r, e^ε / (1 + e^ε)),

so the ε lower bound at confidence c is the largest ε whose right-hand side is still
below 1 − c. With δ = 0 this is logit of the Clopper–Pearson lower bound of v/r.

The pair (k₊, k₋): the paper tries several and reports the best. Here a fixed grid of
pairs (k₊ and k₋ each from 0 and 1, 2, 5, 10, 20, 30, 50 % of m) is tried with a
Bonferroni correction: each pair's bound is taken at confidence 1 − (1 − c)/K for the K
pairs tried, so the best of them still holds at confidence c.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, logit
from scipy.stats import beta, binom

from lmaudit.errors import LmauditError
from lmaudit.privacy.bounds import check_level

GUESS_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
_EPS_MAX = 40.0  # e^40/(1+e^40) rounds to 1 in float64: nothing above can be resolved


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Upper bound on P[W ≥ v] for an (ε, δ)-DP algorithm: m canaries, r guesses, v correct (paper, Thm 5.2)."""
    q = float(expit(eps))  # accuracy of ε-DP randomized response
    tail = float(binom.sf(v - 1, r, q))  # P[X ≥ v]
    if delta > 0 and v > 0:
        below = binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[X = v−1], P[X = v−2], ..., P[X = 0]
        tail += 2 * m * delta * float(np.max(np.cumsum(below) / np.arange(1, v + 1)))
    return min(tail, 1.0)


def epsilon_one_run(m: int, r: int, v: int, *, delta: float, confidence: float) -> float:
    """The largest ε ≥ 0 that ``v`` correct guesses out of ``r`` (``m`` canaries) refute at ``confidence``.

    0 when even ε = 0 explains v (p-value ≥ 1 − confidence); at most 40 (float64 limit).
    """
    if not 0 <= v <= r <= m:
        raise LmauditError(f"need 0 ≤ correct ≤ guesses ≤ canaries, got {v}, {r}, {m}")
    alpha = 1.0 - confidence

    def gap(eps: float) -> float:  # < 0: ε refuted
        return p_value(m, r, v, eps, delta) - alpha

    if r == 0 or gap(0.0) >= 0:
        return 0.0
    if gap(_EPS_MAX) < 0:
        return _EPS_MAX
    return float(brentq(gap, 0.0, _EPS_MAX, xtol=1e-10, rtol=1e-12))


def guess_pairs(m: int) -> list[tuple[int, int]]:
    """The (k₊, k₋) pairs tried on m canaries: each from {0} ∪ {⌈f·m⌉ : f in GUESS_FRACTIONS}, r = k₊ + k₋ in [1, m]."""
    ks = sorted({0, *(max(1, math.ceil(f * m)) for f in GUESS_FRACTIONS)})
    return [(a, b) for a in ks for b in ks if 1 <= a + b <= m]


@dataclass(frozen=True)
class CanaryBound:
    """The one-run ε lower bound of one score over the canaries, and the guesses that gave it.

    ``k_plus`` canaries guessed in, ``k_minus`` guessed out, ``correct`` of those
    ``guesses`` right; ``pairs_tried`` is the Bonferroni factor.
    """

    epsilon: float
    k_plus: int
    k_minus: int
    guesses: int
    correct: int
    m: int
    n_included: int
    pairs_tried: int
    delta: float
    confidence: float
    method: str = "one run (Steinke et al. 2023), Bonferroni over (k+, k-)"

    def to_dict(self) -> dict:
        return asdict(self)


def canary_audit(scores, included, *, delta: float = 1e-5, confidence: float = 0.95) -> CanaryBound:
    """One-run ε lower bound from canary scores and the private inclusion list.

    Parameters
    ----------
    scores
        (m,) one score per canary, higher = more member-like (any attack's score).
    included
        (m,) bool: whether each canary was put into the training data (a fair coin each).
    delta, confidence
        The δ of the claim under test and the confidence of the bound, each in (0, 1).

    Returns
    -------
    CanaryBound
        The best bound over :func:`guess_pairs`, each pair at confidence 1 − (1 − c)/K.
        Ties in the scores are broken by canary order, which is independent of inclusion.
    """
    delta, confidence = check_level("delta", delta), check_level("confidence", confidence)
    scores = np.asarray(scores, dtype=np.float64)
    included = np.asarray(included, dtype=bool)
    if scores.ndim != 1 or scores.shape != included.shape:
        raise LmauditError(f"scores {scores.shape} and inclusion {included.shape} must be 1-D of equal length")
    if not np.isfinite(scores).all():
        raise LmauditError(f"{int((~np.isfinite(scores)).sum())} canary score(s) are NaN or infinite")
    m = len(scores)
    if m == 0:
        raise LmauditError("no canaries to audit")
    order = np.argsort(-scores, kind="stable")
    hit_in = np.r_[0, np.cumsum(included[order])]  # correct "in" guesses among the top k
    hit_out = np.r_[0, np.cumsum(~included[order[::-1]])]  # correct "out" guesses among the bottom k
    pairs = guess_pairs(m)
    each = 1.0 - (1.0 - confidence) / len(pairs)
    correct = np.array([hit_in[a] + hit_out[b] for a, b in pairs])
    r = np.array([a + b for a, b in pairs])
    # the δ = 0 bound, logit of the Clopper–Pearson lower bound of v/r, is never below the δ > 0 one:
    # visit pairs from the highest such ceiling and stop once no ceiling can beat the best bound found
    with np.errstate(divide="ignore"):
        ceiling = logit(np.where(correct > 0, beta.ppf(1.0 - each, np.maximum(correct, 1), r - correct + 1), 0.0))
    best = (0.0, *pairs[int(np.argmax(correct / r))], int(correct[int(np.argmax(correct / r))]))
    for j in np.argsort(-ceiling, kind="stable"):
        if ceiling[j] <= best[0]:
            break
        eps = epsilon_one_run(m, int(r[j]), int(correct[j]), delta=delta, confidence=each)
        if eps > best[0]:
            best = (eps, *pairs[j], int(correct[j]))
    eps, k_plus, k_minus, v = best
    return CanaryBound(epsilon=eps, k_plus=k_plus, k_minus=k_minus, guesses=k_plus + k_minus, correct=v, m=m,
                       n_included=int(included.sum()), pairs_tried=len(pairs), delta=delta, confidence=confidence)
