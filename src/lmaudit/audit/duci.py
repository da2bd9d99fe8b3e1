"""DUCI: the proportion of a suspect set a model was trained on (Tong, Ye, Zarifzadeh & Shokri, ICLR 2025).

One membership attack scores every suspect record on the target (``s_i``, higher = member) and on reference models
whose training sets are known. A record is called a member when its score exceeds a threshold τ: ``m̂_i = 1[s_i >
τ]``. On the references, pooled over every (record, reference model) pair of known membership, TPR is the share of
IN pairs called members and FPR the share of OUT pairs. A record used in training with probability ``p_i`` has
``E[m̂_i] = p_i·TPR + (1 − p_i)·FPR`` when the target errs as the references do, so ``p̂_i = (m̂_i − FPR) / (TPR −
FPR)`` is unbiased and the used proportion is ``p̂ = mean_i p̂_i = (share − FPR) / (TPR − FPR)``, ``share`` the raw
proportion of records called members (the naive estimate, biased towards ``FPR`` and away from ``TPR``).

τ maximises ``TPR − FPR`` (Youden's J) on the pooled reference pairs, as ML Privacy Meter's implementation chooses
it; the candidates are the midpoints between consecutive distinct pooled scores (a number given instead fixes τ).
The estimate is undefined when the attack does not separate the references (``TPR ≤ FPR``): that is refused.

Interval: the suspect records are the calibration records (row ``i`` of the reference arrays is record ``i``), so a
bootstrap resample draws records with replacement and takes each one's target decision with its row of reference
scores and memberships; τ, TPR and FPR are chosen and measured again on every resample, so the interval holds the
uncertainty of the rates as well as of the decisions. Percentile intervals (2.5–97.5 and 5–95) of the unclipped
estimate and of the estimate clipped to [0, 1]; a resample on which the attack does not separate is left out and
counted (``details["undefined"]``).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from lmaudit.errors import LmauditError

THRESHOLDS = ("youden",)
_CHUNK = 1 << 21  # pair weights per bootstrap chunk


@dataclass(frozen=True)
class DuciEstimate:
    """One DUCI estimate. ``proportion`` is the share of the suspect set USED in training (SMI's ρ is the unused
    share: compare ``proportion`` with ``1 − ρ``)."""

    proportion: float  # p̂ clipped to [0, 1]
    proportion_unclipped: float
    ci95: tuple[float, float]  # 2.5th and 97.5th bootstrap percentiles of the clipped estimate
    ci95_unclipped: tuple[float, float]
    ci90: tuple[float, float]  # 5th and 95th percentiles (as SMI's intervals)
    ci90_unclipped: tuple[float, float]
    tpr: float  # on the reference pairs, at the threshold
    fpr: float
    threshold: float  # member: score > threshold
    decided_share: float  # share of suspect records called members (the naive, uncorrected estimate)
    n_suspect: int
    n_reference_models: int
    n_in: int  # (record, reference model) pairs of known membership: IN ...
    n_out: int  # ... and OUT
    anomaly: bool  # proportion_unclipped outside [-anomaly_tol, 1 + anomaly_tol]
    details: dict
    timings_ms: dict
    method: str = "duci"

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (a NaN interval, from ``bootstrap=0``, becomes ``None``)."""
        out = asdict(self)
        for name in ("ci95", "ci95_unclipped", "ci90", "ci90_unclipped"):
            out[name] = [None if math.isnan(x) else x for x in getattr(self, name)]
        return out


def _checked(target, scores, membership) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t, s = np.asarray(target, dtype=np.float64), np.asarray(scores, dtype=np.float64)
    m = np.asarray(membership)
    if t.ndim != 1 or len(t) < 2:
        raise LmauditError(f"target_scores must be a 1-D array of at least 2 scores, got shape {t.shape}")
    if s.ndim != 2 or s.shape[0] != len(t) or s.shape[1] < 1:
        raise LmauditError(f"reference_scores must have shape (n_records, n_reference_models) = ({len(t)}, K), "
                           f"got {s.shape}", hint="row i holds suspect record i's score under each reference model")
    if m.shape != s.shape or not (m.dtype == bool or np.isin(m, (0, 1)).all()):
        raise LmauditError(f"reference_membership must be a boolean array of shape {s.shape}, got {m.dtype} "
                           f"{m.shape}", hint="True where the reference model was trained on the record")
    for name, x in (("target_scores", t), ("reference_scores", s)):
        if not np.isfinite(x).all():
            raise LmauditError(f"{name} holds {int(x.size - np.isfinite(x).sum())} NaN or infinite value(s)")
    m = m.astype(bool)
    for j in range(m.shape[1]):
        for what, count in (("members", int(m[:, j].sum())), ("non-members", int((~m[:, j]).sum()))):
            if count == 0:
                raise LmauditError(f"reference model {j} has no known {what} among the {len(t)} records: its TPR "
                                   "and FPR cannot both be measured",
                                   hint="train each reference model on a random part of the suspect records (e.g. "
                                        "shadow models on complementary halves of a pool that holds them)")
    return t, s, m


def _fit(target: np.ndarray, scores: np.ndarray, membership: np.ndarray, threshold):
    """``replicate(W)``: record count weights (k, n) -> (p̂ unclipped, τ, TPR, FPR, share), each (k,); NaN p̂ where
    the attack does not separate the weighted references."""
    n, k = scores.shape
    flat = scores.ravel()
    order = np.argsort(-flat, kind="stable")  # descending; pair q of the sorted list is record order[q] // k
    srt, rec, is_in = flat[order], order // k, membership.ravel()[order]
    cut = np.flatnonzero(srt[:-1] > srt[1:])  # a cut after position q: the pairs up to q score above τ
    taus = (srt[cut] + srt[cut + 1]) / 2

    def replicate(W: np.ndarray):
        Wp = W[:, rec]
        w_in, w_out = Wp * is_in, Wp * ~is_in
        tot_in, tot_out = w_in.sum(axis=1), w_out.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            if threshold == "youden":  # at least one cut: the caller refuses pooled scores that are all equal
                tprs = np.cumsum(w_in, axis=1)[:, cut] / tot_in[:, None]
                fprs = np.cumsum(w_out, axis=1)[:, cut] / tot_out[:, None]
                best = np.argmax(np.nan_to_num(tprs - fprs, nan=-np.inf), axis=1)
                tau, tpr, fpr = taus[best], *(r[np.arange(len(W)), best] for r in (tprs, fprs))
            else:
                tau = np.full(len(W), float(threshold))
                above = srt > threshold
                tpr, fpr = (w_in * above).sum(axis=1) / tot_in, (w_out * above).sum(axis=1) / tot_out
            share = (W * (target[None, :] > tau[:, None])).sum(axis=1) / W.sum(axis=1)
            gap = tpr - fpr
            p = np.where(gap > 0, (share - fpr) / np.where(gap > 0, gap, 1.0), np.nan)
        return p, tau, tpr, fpr, share

    return replicate


def _percentiles(values: np.ndarray, lo: float, hi: float) -> tuple[float, float]:
    v = values[np.isfinite(values)]  # undefined resamples left out
    return (float(np.percentile(v, lo)), float(np.percentile(v, hi))) if v.size else (math.nan, math.nan)


def duci(target_scores, reference_scores, reference_membership, *, bootstrap: int = 200, seed: int = 0,
         threshold="youden", anomaly_tol: float = 0.1) -> DuciEstimate:
    """The proportion of the suspect records the target was trained on, debiased by the attack's TPR and FPR on
    reference models of known membership (see the module docstring for the definitions).

    Parameters
    ----------
    target_scores : array_like, shape (n,)
        The attack's score of each suspect record on the target, higher = member.
    reference_scores : array_like, shape (n, K)
        The same attack's score of each suspect record on each of K reference models.
    reference_membership : array_like of bool, shape (n, K)
        True where reference model j was trained on record i. Every reference model needs at least one member and
        one non-member among the records.
    bootstrap : int
        Resamples of the records (with their reference rows) for the intervals; 0 skips them.
    seed : int
        Seed of ``numpy.random.default_rng`` for the resamples.
    threshold : "youden" or float
        "youden": τ maximising TPR − FPR on the pooled reference pairs, chosen again on every resample; a number:
        that fixed τ.
    anomaly_tol : float
        ``anomaly`` is set when ``proportion_unclipped`` is outside ``[-tol, 1 + tol]``.

    Returns
    -------
    DuciEstimate
        ``proportion``: the share of the suspect set used in training (1: all of it).
    """
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, (int, np.integer)) or bootstrap < 0:
        raise LmauditError(f"bootstrap must be a non-negative integer, got {bootstrap!r}")
    if not (isinstance(anomaly_tol, (int, float)) and anomaly_tol >= 0):
        raise LmauditError(f"anomaly_tol must be >= 0, got {anomaly_tol!r}")
    fixed = isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and math.isfinite(threshold)
    if threshold not in THRESHOLDS and not fixed:
        raise LmauditError(f"unknown threshold {threshold!r}", hint="use \"youden\" or a finite number")
    t, s, m = _checked(target_scores, reference_scores, reference_membership)
    n, k = s.shape
    t0 = time.perf_counter()
    replicate = _fit(t, s, m, threshold)
    same = not fixed and np.ptp(s) == 0  # every reference score equal: no threshold tells anything apart
    (p,), (tau,), (tpr,), (fpr,), (share,) = replicate(np.ones((1, n))) if not same else ([np.nan],) + ([0.0],) * 4
    if not tpr > fpr:
        raise LmauditError(
            f"the attack does not separate members from non-members on the {k} reference model(s): TPR {tpr:.3f} ≤ "
            f"FPR {fpr:.3f} at {f'threshold {threshold:g}' if fixed else 'the best threshold'}, so DUCI's correction "
            "(m̂ − FPR)/(TPR − FPR) is undefined",
            hint="use a stronger attack (e.g. reference, with a reference model), or reference models trained as the "
                 "target was")
    t1, rng = time.perf_counter(), np.random.default_rng(seed)
    step, boot = max(1, _CHUNK // (n * k)), []
    for start in range(0, bootstrap, step):
        idx = rng.integers(0, n, size=(min(step, bootstrap - start), n))
        flat = (idx + n * np.arange(len(idx))[:, None]).ravel()
        boot.append(replicate(np.bincount(flat, minlength=idx.size).reshape(idx.shape).astype(np.float64))[0])
    reps = np.concatenate(boot) if boot else np.empty(0)
    clipped = np.clip(reps, 0.0, 1.0)  # NaN stays NaN
    t2 = time.perf_counter()
    return DuciEstimate(
        proportion=float(np.clip(p, 0.0, 1.0)), proportion_unclipped=float(p),
        ci95=_percentiles(clipped, 2.5, 97.5), ci95_unclipped=_percentiles(reps, 2.5, 97.5),
        ci90=_percentiles(clipped, 5, 95), ci90_unclipped=_percentiles(reps, 5, 95),
        tpr=float(tpr), fpr=float(fpr), threshold=float(tau), decided_share=float(share), n_suspect=n,
        n_reference_models=k, n_in=int(m.sum()), n_out=int((~m).sum()),
        anomaly=bool(p < -anomaly_tol or p > 1 + anomaly_tol),
        details={"threshold": "youden" if not fixed else "fixed", "bootstrap": int(bootstrap), "seed": seed,
                 "undefined": int(np.isnan(reps).sum()), "anomaly_tol": anomaly_tol,
                 "resampling": "records, each with its row of reference scores"},
        timings_ms={"fit": (t1 - t0) * 1e3, "bootstrap": (t2 - t1) * 1e3})
