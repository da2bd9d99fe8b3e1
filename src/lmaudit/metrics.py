"""Membership-inference metrics on the full ROC curve.

Shaped like scikit-learn's but each returns one type. ``y_true`` is 1 for
members, 0 for non-members; ``y_score`` is higher for members.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from lmaudit.errors import LmauditError


def _validate(y_true, y_score) -> tuple[np.ndarray, np.ndarray]:
    y_true = np.asarray(y_true)
    try:
        y_score = np.asarray(y_score, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise LmauditError(f"scores must be numbers ({exc})") from None
    if y_true.shape != y_score.shape or y_true.ndim != 1:
        raise LmauditError(f"y_true {y_true.shape} and y_score {y_score.shape} must be 1-D of equal length")
    if not np.isin(y_true, (0, 1)).all():
        raise LmauditError("labels must be 0 (non-member) or 1 (member)")
    n_pos = int(y_true.sum())
    if n_pos == 0 or n_pos == len(y_true):
        raise LmauditError(
            f"labels contain a single class ({'members' if n_pos else 'non-members'} only)",
            hint="membership metrics need both members and non-members",
        )
    if not np.isfinite(y_score).all():
        raise LmauditError(f"{int((~np.isfinite(y_score)).sum())} score(s) are NaN or infinite")
    return y_true.astype(np.int64), y_score


def _is_real(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float, np.integer, np.floating))


def roc_curve(y_true, y_score) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Full ROC curve: ``(fpr, tpr, thresholds)``, one point per distinct score plus (0, 0).

    No intermediate threshold is dropped, so low-FPR operating points are exact.
    """
    y_true, y_score = _validate(y_true, y_score)
    order = np.argsort(-y_score, kind="mergesort")
    s, y = y_score[order], y_true[order]
    last = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]  # last index of each distinct score
    tps = np.cumsum(y)[last]
    fps = (last + 1) - tps
    tpr = np.r_[0.0, tps / y.sum()]
    fpr = np.r_[0.0, fps / (len(y) - y.sum())]
    return fpr, tpr, np.r_[np.inf, s[last]]


def auc(y_true, y_score) -> float:
    """Area under the ROC curve (ties count one half), via the Mann–Whitney U statistic."""
    y_true, y_score = _validate(y_true, y_score)
    return float(_auc_ranks(rankdata(y_score), y_true))


def _auc_ranks(ranks: np.ndarray, y_true: np.ndarray) -> np.ndarray:
    n_pos = y_true.sum(axis=-1)
    n_neg = y_true.shape[-1] - n_pos
    return ((ranks * y_true).sum(axis=-1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def tpr_at_fpr(y_true, y_score, *, fpr: float = 0.01) -> float:
    """Largest TPR among ROC points whose FPR is at most ``fpr``.

    With n non-members the finest attainable FPR step is 1/n; below it the value
    is the TPR at zero false positives.
    """
    if not _is_real(fpr) or not 0.0 <= fpr <= 1.0:
        raise LmauditError(f"fpr must be a number in [0, 1], got {fpr!r}")
    f, t, _ = roc_curve(y_true, y_score)
    return float(t[f <= fpr + 1e-12].max())


def auc_bootstrap_ci(y_true, y_score, *, n_resamples: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the AUC.

    Members and non-members are resampled separately (stratified), so each replicate
    keeps both classes and the class sizes; seeded and deterministic.
    """
    y_true, y_score = _validate(y_true, y_score)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise LmauditError(f"n_resamples must be an integer >= 1, got {n_resamples!r}")
    if not _is_real(level) or not 0.0 < level < 1.0:
        raise LmauditError(f"level must be a number in (0, 1), got {level!r}")
    rng = np.random.default_rng(seed)
    pos, neg = y_score[y_true == 1], y_score[y_true == 0]
    labels = np.r_[np.ones(len(pos), dtype=np.int64), np.zeros(len(neg), dtype=np.int64)]
    aucs = np.empty(n_resamples)
    chunk = max(1, 2_000_000 // len(labels))
    for s in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - s)
        sample = np.concatenate(
            [pos[rng.integers(0, len(pos), (b, len(pos)))], neg[rng.integers(0, len(neg), (b, len(neg)))]], axis=1
        )  # (b, n)
        aucs[s : s + b] = _auc_ranks(rankdata(sample, axis=1), labels)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(aucs, [alpha, 1 - alpha])
    return float(lo), float(hi)


TPR_POINTS = {"tpr@10%fpr": 0.1, "tpr@1%fpr": 0.01, "tpr@0.1%fpr": 0.001}


def summarize(y_true, y_score, *, n_resamples: int = 1000, seed: int = 0) -> dict[str, object]:
    """AUC with its 95% bootstrap CI and TPR at 10%, 1% and 0.1% FPR.

    A TPR at an FPR finer than 1/n_nonmembers cannot be measured (it would be the TPR
    at zero false positives): its value is None and ``unresolved`` maps its key to the
    reason, e.g. ``"n/a (needs ≥ 1000 non-members)"``.
    """
    out: dict[str, object] = {
        "auc": auc(y_true, y_score),
        "auc_ci95": list(auc_bootstrap_ci(y_true, y_score, n_resamples=n_resamples, seed=seed)),
    }
    n_neg = int((np.asarray(y_true) == 0).sum())
    for key, fpr in TPR_POINTS.items():
        if fpr * n_neg < 1 - 1e-9:  # the finest FPR step of n non-members is 1/n
            out[key] = None
            out.setdefault("unresolved", {})[key] = f"n/a (needs ≥ {round(1 / fpr):,} non-members)"
        else:
            out[key] = tpr_at_fpr(y_true, y_score, fpr=fpr)
    return out


def tpr_text(metrics: dict, key: str) -> str:
    """A TPR of :func:`summarize`'s output as a percentage, or the reason it cannot be measured."""
    value = metrics.get(key)
    return metrics.get("unresolved", {}).get(key, "n/a") if value is None else f"{100 * value:.1f}%"
