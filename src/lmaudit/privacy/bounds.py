"""ε lower bounds from membership-inference scores (Clopper–Pearson, held-out threshold).

An (ε, δ)-DP training algorithm limits every membership test: at any threshold,
with TPR and FPR the test's true rates,

    TPR ≤ e^ε · FPR + δ        and        1 − FPR ≤ e^ε · (1 − TPR) + δ,

so a test whose rates break both inequalities for some ε shows the algorithm is not
(ε, δ)-DP. With one-sided Clopper–Pearson bounds (TPR from below, FPR from above) the
largest ε the test refutes is

    ε_lb = max( log((TPR_lo − δ) / FPR_hi),  log((1 − FPR_hi − δ) / (1 − TPR_lo)) ),

clipped at 0 (Jagielski, Ullman, Oprea 2020; Nasr et al. 2021).

Validity: the threshold is *chosen on a held-out half* of the scores and the bound is
computed on the other half with that single threshold. The split is seeded and
stratified (half of the members and half of the non-members, rounded down, choose the
threshold). Given the threshold, the member half and the non-member half are
independent, so each one-sided bound is taken at confidence √c; both hold together
with probability at least c, and on that event both log ratios above are valid, so
their maximum is too. No multiple-comparison correction is needed (one threshold is
tested), which on continuous scores, where every distinct score is a candidate
threshold, keeps far tighter bounds than a Bonferroni correction over thousands of
thresholds, at the price of half the samples.

What the bound means: each sample's score is treated as one independent trial of the
test (a member drawn from the member distribution, a non-member from the non-member
one). That is exact for a mechanism that answers per sample, such as randomized
response, and the usual reading of a single model's membership-inference run; a
guarantee that holds for one training run with no such assumption is the canary audit
of :mod:`lmaudit.privacy.one_run`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import beta

from lmaudit.errors import LmauditError
from lmaudit.metrics import check_labels_scores, roc_curve

METHOD = "held-out split"


def check_level(name: str, value) -> float:
    """``value`` must be a real number strictly between 0 and 1 (a δ or a confidence level)."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0.0 < value < 1.0:
        raise LmauditError(f"{name} must be a number strictly between 0 and 1, got {value!r}",
                           hint="e.g. --delta 1e-5 --confidence 0.95")
    return float(value)


def clopper_pearson(k, n, *, confidence: float, side: str) -> np.ndarray:
    """One-sided Clopper–Pearson bound of a binomial proportion from ``k`` successes in ``n`` trials.

    ``side="lower"``: the largest p with P[Binomial(n, p) ≥ k] ≤ 1 − confidence, i.e. the
    (1 − confidence) quantile of Beta(k, n − k + 1) (0 when k = 0). ``side="upper"``: the
    confidence quantile of Beta(k + 1, n − k) (1 when k = n). Broadcasts over ``k`` and ``n``.
    """
    k, n = np.broadcast_arrays(np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64))
    if side == "lower":
        with np.errstate(invalid="ignore"):
            q = beta.ppf(1.0 - confidence, k, n - k + 1)
        return np.where(k > 0, q, 0.0)
    if side == "upper":
        with np.errstate(invalid="ignore"):
            q = beta.ppf(confidence, k + 1, n - k)
        return np.where(k < n, q, 1.0)
    raise ValueError(f"side must be 'lower' or 'upper', got {side!r}")


def epsilon_from_counts(tp, n_members: int, fp, n_nonmembers: int, *, delta: float,
                        confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The two-direction ε bound of a test that flags ``tp`` of ``n_members`` members and ``fp`` of the non-members.

    ``confidence`` is the level of the joint event (both one-sided bounds hold); each
    bound is taken at √confidence, valid because members and non-members are independent.
    Returns ``(eps, tpr_lo, fpr_hi, direction)``: ``eps`` unclipped (−inf where neither
    ratio is positive), ``direction`` 0 where ``log((TPR_lo − δ)/FPR_hi)`` is the larger
    term, 1 where ``log((1 − FPR_hi − δ)/(1 − TPR_lo))`` is.
    """
    each = math.sqrt(confidence)
    tpr_lo = clopper_pearson(tp, n_members, confidence=each, side="lower")
    fpr_hi = clopper_pearson(fp, n_nonmembers, confidence=each, side="upper")
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(tpr_lo > delta, np.log(np.maximum(tpr_lo - delta, 1e-300) / fpr_hi), -np.inf)
        down = np.where(1.0 - fpr_hi > delta, np.log(np.maximum(1.0 - fpr_hi - delta, 1e-300) / (1.0 - tpr_lo)),
                        -np.inf)
    return np.maximum(up, down), tpr_lo, fpr_hi, (down > up).astype(np.int64)


def min_per_class(*, delta: float, confidence: float) -> int:
    """The fewest samples per class (members and non-members alike) for which ε_lb can exceed 0.

    The best a half of n scores can show is every member flagged and no non-member:
    TPR_lo = a^(1/n) and FPR_hi = 1 − a^(1/n) with a = 1 − √confidence, and either
    ratio exceeds 1 only when 2·a^(1/n) > 1 + δ. The bound uses ⌈N/2⌉ samples of a class
    of N, hence N = 2·n_min − 1.
    """
    a = 1.0 - math.sqrt(confidence)
    n_min = math.floor(math.log(a) / math.log((1.0 + delta) / 2.0)) + 1
    return 2 * n_min - 1


@dataclass(frozen=True)
class EpsilonBound:
    """An ε lower bound of one membership test, and the operating point that gave it.

    ``tpr_lo``/``fpr_hi`` are the Clopper–Pearson bounds (each at √confidence) on the
    held-out half; ``tpr``/``fpr`` the rates observed there; ``n_members`` and
    ``n_nonmembers`` the held-out samples the bound uses (the rest chose the threshold).
    ``direction`` names the inequality that gave ε: ``tpr/fpr`` or ``tnr/fnr``.
    """

    epsilon: float
    threshold: float
    direction: str
    tpr_lo: float
    fpr_hi: float
    tpr: float
    fpr: float
    n_members: int
    n_nonmembers: int
    n_selection: int
    delta: float
    confidence: float
    seed: int
    method: str = METHOD

    def to_dict(self) -> dict:
        return asdict(self)


def _split(labels: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded stratified halves: (selection indices, bound indices); the selection half is rounded down."""
    rng = np.random.default_rng(seed)
    select, bound = [], []
    for cls in (1, 0):
        idx = rng.permutation(np.flatnonzero(labels == cls))
        select.append(idx[: len(idx) // 2])
        bound.append(idx[len(idx) // 2:])
    return np.concatenate(select), np.concatenate(bound)


def epsilon_lower_bound(labels, scores, *, delta: float = 1e-5, confidence: float = 0.95,
                        seed: int = 0) -> EpsilonBound:
    """ε lower bound of the membership test "member when score ≥ t", valid at ``confidence``.

    Parameters
    ----------
    labels
        (n,) 1 for members, 0 for non-members.
    scores
        (n,) higher = more member-like (any attack's score).
    delta
        The δ of the (ε, δ)-DP claim under test, in (0, 1).
    confidence
        Probability, in (0, 1), that the returned ε does not exceed the algorithm's true ε.
    seed
        Seed of the stratified split into the threshold-selection half and the bound half.

    Returns
    -------
    EpsilonBound
        ``epsilon`` ≥ 0 with the threshold, the Clopper–Pearson bounds and the held-out
        counts that gave it.

    Notes
    -----
    The threshold t (and nothing else) is chosen on one half: the t that maximises the
    same bound computed on that half. The other half gives the bound at that single t
    (see the module docstring for why this keeps the confidence level exact).

    Raises
    ------
    LmauditError
        For a δ or confidence outside (0, 1), malformed labels or scores, or too few
        samples per class for any bound above 0 (the message says how many are needed).
    """
    delta, confidence = check_level("delta", delta), check_level("confidence", confidence)
    labels, scores = check_labels_scores(labels, scores)
    n1, n0 = int(labels.sum()), int((1 - labels).sum())
    need = min_per_class(delta=delta, confidence=confidence)
    if n1 == 0 or n0 == 0:
        raise LmauditError(f"labels contain a single class ({'members' if n1 else 'non-members'} only)",
                           hint="an ε lower bound needs both members and non-members")
    a = 1.0 - math.sqrt(confidence)
    if min(n1, n0) < 2 or a ** (1.0 / math.ceil(n1 / 2)) + a ** (1.0 / math.ceil(n0 / 2)) <= 1.0 + delta:
        raise LmauditError(f"too few samples for an ε lower bound: {n1} members and {n0} non-members",
                           hint=f"at δ = {delta:g} and {confidence:g} confidence the bound is 0 unless each class "
                                f"has at least {need} samples (half choose the threshold, half give the bound)")
    select, held = _split(labels, seed)

    # choose t on the selection half: every distinct score is a candidate ("member when score ≥ t")
    fpr_s, tpr_s, thr_s = roc_curve(labels[select], scores[select])
    ns1, ns0 = int(labels[select].sum()), len(select) - int(labels[select].sum())
    eps_s, *_ = epsilon_from_counts(np.rint(tpr_s * ns1), ns1, np.rint(fpr_s * ns0), ns0,
                                    delta=delta, confidence=confidence)
    eps_s[~np.isfinite(thr_s)] = -np.inf  # t = +inf flags nobody: no test
    t = float(thr_s[int(np.argmax(eps_s))]) if np.isfinite(eps_s).any() else float(np.median(scores[select]))

    # the bound on the held-out half, at that single t
    y, s = labels[held], scores[held]
    m1, m0 = int(y.sum()), int((1 - y).sum())
    tp, fp = int(((s >= t) & (y == 1)).sum()), int(((s >= t) & (y == 0)).sum())
    eps, tpr_lo, fpr_hi, direction = epsilon_from_counts(tp, m1, fp, m0, delta=delta, confidence=confidence)
    return EpsilonBound(epsilon=max(0.0, float(eps)), threshold=t, direction=("tpr/fpr", "tnr/fnr")[int(direction)],
                        tpr_lo=float(tpr_lo), fpr_hi=float(fpr_hi), tpr=tp / m1, fpr=fp / m0, n_members=m1,
                        n_nonmembers=m0, n_selection=len(select), delta=delta, confidence=confidence, seed=seed)
