"""Membership-inference metrics on the full ROC curve.

Shaped like scikit-learn's but each returns one type. ``y_true`` is 1 for
members, 0 for non-members; ``y_score`` is higher for members.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.stats import rankdata

from lmaudit.errors import LmauditError


def check_labels_scores(y_true, y_score) -> tuple[np.ndarray, np.ndarray]:
    """Labels (0 non-member, 1 member) and finite scores of equal 1-D shape, as int64 and float64; else a
    one-line error."""
    y_true = np.asarray(y_true)
    try:
        y_score = np.asarray(y_score, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise LmauditError(f"scores must be numbers ({exc})") from None
    if y_true.shape != y_score.shape or y_true.ndim != 1:
        raise LmauditError(f"labels {y_true.shape} and scores {y_score.shape} must be 1-D of equal length")
    if not np.isin(y_true, (0, 1)).all():
        raise LmauditError("labels must be 0 (non-member) or 1 (member)")
    if not np.isfinite(y_score).all():
        raise LmauditError(f"{int((~np.isfinite(y_score)).sum())} score(s) are NaN or infinite")
    return y_true.astype(np.int64), y_score


def _validate(y_true, y_score) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_labels_scores`, and both classes present."""
    y_true, y_score = check_labels_scores(y_true, y_score)
    n_pos = int(y_true.sum())
    if n_pos == 0 or n_pos == len(y_true):
        raise LmauditError(
            f"labels contain a single class ({'members' if n_pos else 'non-members'} only)",
            hint="membership metrics need both members and non-members",
        )
    return y_true, y_score


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
    """Largest TPR among ROC vertices whose FPR is at most ``fpr`` (the conservative reading).

    A threshold cannot split a block of tied scores, so only the vertices of
    :func:`roc_curve` are operating points an attack can take: the TPR at a target FPR
    is the highest vertex at or left of it, never a point interpolated on the segment
    across a tied block (which only a randomised threshold reaches). This is the
    convention of Carlini et al. (2022)'s low-FPR TPR, and a lower bound on the
    interpolated value; the report draws ROC curves as the matching staircase.
    With n non-members the finest attainable FPR step is 1/n; below it the value
    is the TPR at zero false positives.
    """
    if not _is_real(fpr) or not 0.0 <= fpr <= 1.0:
        raise LmauditError(f"fpr must be a number in [0, 1], got {fpr!r}")
    f, t, _ = roc_curve(y_true, y_score)
    return float(t[f <= fpr + 1e-12].max())


def _allowed_false_positives(fpr: float, n_neg: int) -> int:
    """Most non-members a threshold may pass at ``fpr``: the same comparison :func:`tpr_at_fpr` makes."""
    k = np.arange(n_neg + 1)
    return int(k[k / n_neg <= fpr + 1e-12].max())


def _tpr_rows(pos: np.ndarray, neg: np.ndarray, allowed: list[int]) -> np.ndarray:
    """Conservative TPR of each row of (b, n_pos) member and (b, n_neg) non-member scores, for each allowed count.

    The best threshold passes every member above the (j+1)-th highest non-member score
    (j allowed false positives): a member tied with it cannot be passed without it.
    """
    n_neg = neg.shape[1]
    out = np.ones((len(pos), len(allowed)))
    keep = [i for i, j in enumerate(allowed) if j < n_neg]
    if keep:
        kth = [n_neg - 1 - allowed[i] for i in keep]
        cut = np.partition(neg, kth, axis=1)[:, kth]  # (b, f): the (j+1)-th highest non-member score
        out[:, keep] = (pos[:, :, None] > cut[:, None, :]).sum(axis=1) / pos.shape[1]
    return out


def check_bootstrap(n_resamples, level, *, low: int = 1) -> None:
    """Refuse a resample count below ``low`` (or not an integer) and a level outside (0, 1)."""
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < low:
        raise LmauditError(f"n_resamples must be an integer >= {low}, got {n_resamples!r}")
    if not _is_real(level) or not 0.0 < level < 1.0:
        raise LmauditError(f"level must be a number in (0, 1), got {level!r}")


class Replicates(NamedTuple):
    """Bootstrap replicates of several attacks on shared resamples."""

    auc: np.ndarray  # (B, k): AUC of attack a on resample b
    tpr: np.ndarray  # (B, k, f): conservative TPR at each requested FPR


def stratified_bootstrap(y_true, scores, *, n_resamples: int = 1000, seed: int = 0, fprs=()) -> Replicates:
    """AUC and TPR@FPR of every attack on the SAME stratified bootstrap resamples.

    Parameters
    ----------
    y_true : (n,) array of 0/1
    scores : (k, n) array, or a sequence of k (n,) arrays; higher = more likely a member.
    n_resamples : int
        B, the number of resamples.
    seed : int
    fprs : sequence of float
        FPRs at which to read the TPR of each replicate (conservative rule of :func:`tpr_at_fpr`).

    Each resample draws n_members indices among the members and n_nonmembers among
    the non-members (with replacement, members first, in chunks of resamples), so
    every replicate keeps both classes and their sizes; one draw of indices serves
    every attack, which makes differences between attacks paired. With one attack
    the replicates are those :func:`auc_bootstrap_ci` always drew for the same seed.
    """
    checked = [_validate(y_true, r) for r in scores]
    if not checked:
        raise LmauditError("no scores to bootstrap")
    y_true, rows = checked[0][0], np.stack([s for _, s in checked])  # (k, n)
    check_bootstrap(n_resamples, 0.95)
    is_pos = y_true == 1
    pos, neg = rows[:, is_pos], rows[:, ~is_pos]  # (k, n_pos), (k, n_neg)
    n_pos, n_neg = pos.shape[1], neg.shape[1]
    labels = np.r_[np.ones(n_pos, dtype=np.int64), np.zeros(n_neg, dtype=np.int64)]
    allowed = [_allowed_false_positives(float(f), n_neg) for f in fprs]
    aucs, tprs = np.empty((n_resamples, len(rows))), np.empty((n_resamples, len(rows), len(allowed)))
    rng = np.random.default_rng(seed)
    chunk = max(1, 2_000_000 // len(labels))  # as auc_bootstrap_ci always chunked: the same index stream
    for s in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - s)
        ip, ineg = rng.integers(0, n_pos, (b, n_pos)), rng.integers(0, n_neg, (b, n_neg))
        for a in range(len(rows)):  # every attack on the same indices
            p, q = pos[a][ip], neg[a][ineg]  # (b, n_pos), (b, n_neg)
            aucs[s : s + b, a] = _auc_ranks(rankdata(np.concatenate([p, q], axis=1), axis=1), labels)
            if allowed:
                tprs[s : s + b, a] = _tpr_rows(p, q, allowed)
    return Replicates(aucs, tprs)


def percentile_interval(values: np.ndarray, level: float) -> np.ndarray:
    """Percentile interval along the first axis: (2, ...)."""
    alpha = (1 - level) / 2
    return np.quantile(values, [alpha, 1 - alpha], axis=0)


def auc_bootstrap_ci(y_true, y_score, *, n_resamples: int = 1000, level: float = 0.95,
                     seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the AUC.

    Members and non-members are resampled separately (stratified), so each replicate
    keeps both classes and the class sizes; seeded and deterministic
    (:func:`stratified_bootstrap`).
    """
    y_true, y_score = _validate(y_true, y_score)
    check_bootstrap(n_resamples, level)
    reps = stratified_bootstrap(y_true, [y_score], n_resamples=n_resamples, seed=seed).auc[:, 0]
    lo, hi = percentile_interval(reps, level)
    return float(lo), float(hi)


class PairedDiff(NamedTuple):
    """AUC(a) − AUC(b) and its paired bootstrap interval."""

    diff: float
    lo: float
    hi: float


def paired_auc_diff(y_true, score_a, score_b, *, n_resamples: int = 1000, level: float = 0.95,
                    seed: int = 0) -> PairedDiff:
    """AUC(a) − AUC(b) of two attacks on the same samples, with a paired stratified bootstrap interval.

    Both AUCs of a replicate come from the same resample (:func:`stratified_bootstrap`),
    so the interval reflects how differently the two attacks rank the same texts, not
    the sampling noise each AUC carries alone. An interval that contains 0 means the
    data cannot tell the two attacks apart. Identical scores give exactly (0, 0, 0).
    """
    y_true, score_a = _validate(y_true, score_a)
    _, score_b = _validate(y_true, score_b)
    check_bootstrap(n_resamples, level)
    reps = stratified_bootstrap(y_true, [score_a, score_b], n_resamples=n_resamples, seed=seed).auc
    lo, hi = percentile_interval(reps[:, 0] - reps[:, 1], level)
    return PairedDiff(auc(y_true, score_a) - auc(y_true, score_b), float(lo), float(hi))


LOW_FPRS = {"tpr@1%fpr": 0.01, "tpr@5%fpr": 0.05}  # where paired TPR differences are stored beside the AUC's


def paired_tpr_diffs(y_true, score_a, score_b, *, fprs: dict[str, float] = LOW_FPRS, n_resamples: int = 1000,
                     level: float = 0.95, seed: int = 0) -> dict[str, dict]:
    """TPR(a) − TPR(b) at each FPR of ``fprs`` ({key: fpr}) with its paired interval, ``{key: {"diff", "ci95"}}``
    (None where fewer than 1 / fpr non-members cannot resolve it), on :func:`paired_auc_diff`'s resamples for the
    same seed; TPRs by the conservative rule of :func:`tpr_at_fpr`."""
    y_true, score_a = _validate(y_true, score_a)
    _, score_b = _validate(y_true, score_b)
    check_bootstrap(n_resamples, level)
    n_neg = int((y_true == 0).sum())
    keys = [k for k, f in fprs.items() if f * n_neg >= 1 - 1e-9]
    reps = stratified_bootstrap(y_true, [score_a, score_b], n_resamples=n_resamples, seed=seed,
                                fprs=[fprs[k] for k in keys]).tpr
    out: dict[str, dict | None] = {k: None for k in fprs}
    for i, key in enumerate(keys):
        lo, hi = percentile_interval(reps[:, 0, i] - reps[:, 1, i], level)
        diff = tpr_at_fpr(y_true, score_a, fpr=fprs[key]) - tpr_at_fpr(y_true, score_b, fpr=fprs[key])
        out[key] = {"diff": float(diff), "ci95": [float(lo), float(hi)]}
    return out


TPR_POINTS = {"tpr@10%fpr": 0.1, "tpr@1%fpr": 0.01, "tpr@0.1%fpr": 0.001}


def summarize(y_true, y_score, *, n_resamples: int = 1000, seed: int = 0) -> dict[str, object]:
    """AUC and TPR at 10%, 1% and 0.1% FPR of one attack, each with its 95% bootstrap interval.

    The one-attack case of :func:`summarize_attacks` (without ``vs_best``).
    """
    out = summarize_attacks(y_true, {"attack": y_score}, n_resamples=n_resamples, seed=seed)["attack"]
    del out["vs_best"]
    return out


def summarize_attacks(y_true, scores: dict[str, np.ndarray], *, n_resamples: int = 1000,
                      seed: int = 0, model_free: tuple[str, ...] = (),
                      priors: dict[str, str] | None = None) -> dict[str, dict[str, object]]:
    """Per attack: AUC, TPRs and their 95% intervals, and the paired comparison with the best attack.

    Every interval comes from the same stratified resamples (:func:`stratified_bootstrap`),
    shared by all attacks. Per attack:

    - ``auc``, ``auc_ci95`` ([lo, hi]);
    - ``tpr@10%fpr``, ``tpr@1%fpr``, ``tpr@0.1%fpr`` (conservative rule of :func:`tpr_at_fpr`)
      and ``<key>_ci95``. A TPR at an FPR finer than 1/n_nonmembers cannot be measured (it
      would be the TPR at zero false positives): it and its interval are None and
      ``unresolved`` maps its key to the reason, e.g. ``"n/a (needs ≥ 1,000 non-members)"``;
    - ``vs_best``: ``{"best": name, "diff": AUC(best) − AUC(attack), "ci95": [lo, hi],
      "tied": lo ≤ 0 ≤ hi}``, the paired interval of the difference; the best attack (highest
      AUC, the first listed on equal AUCs) has diff 0, interval [0, 0] and tied True.

    ``model_free`` names scores that never queried the model (blind baselines): the best attack is
    chosen among the others, and each of the others also gets ``vs_blind``: ``{"blind": name,
    "diff": AUC(attack) − AUC(best blind), "ci95": [lo, hi], "beyond": lo > 0}``, the paired
    interval of what the attack adds beyond the best blind baseline.

    ``priors`` maps an attack to the scores of the same attack on a model that never saw the members
    (the reference: its prior): those scores are not attacks either, and the attack gets ``vs_prior``:
    ``{"prior": name, "diff": AUC(attack) − AUC(prior), "ci95": [lo, hi], "beyond": lo > 0}``.

    ``n_resamples=0`` computes no interval: every ``*_ci95``, ``tied`` and ``beyond`` is None.
    """
    priors = priors or {}
    check_bootstrap(n_resamples, 0.95, low=0)
    names = list(scores)
    if not names:
        raise LmauditError("no attack scores to summarize")
    checked = {n: _validate(y_true, scores[n]) for n in names}
    y = checked[names[0]][0]
    n_neg = int((y == 0).sum())
    resolved = {k: f for k, f in TPR_POINTS.items() if f * n_neg >= 1 - 1e-9}  # the finest FPR step is 1/n_neg
    reps = None
    if n_resamples:
        reps = stratified_bootstrap(y, [checked[n][1] for n in names], n_resamples=n_resamples, seed=seed,
                                    fprs=list(resolved.values()))
    out: dict[str, dict[str, object]] = {}
    for a, name in enumerate(names):
        s = checked[name][1]
        m: dict[str, object] = {"auc": auc(y, s), "auc_ci95": None if reps is None else _pair(reps.auc[:, a])}
        for key, fpr in TPR_POINTS.items():
            if key in resolved:
                m[key] = tpr_at_fpr(y, s, fpr=fpr)
                m[f"{key}_ci95"] = None if reps is None else _pair(reps.tpr[:, a, list(resolved).index(key)])
            else:
                m[key] = m[f"{key}_ci95"] = None
                m.setdefault("unresolved", {})[key] = f"n/a (needs ≥ {round(1 / fpr):,} non-members)"
        out[name] = m
    attacks = [n for n in names if n not in model_free and n not in priors.values()] or names
    best = max(attacks, key=lambda n: out[n]["auc"])  # the first of equal AUCs
    b = names.index(best)
    for a, name in enumerate(names):
        ci = None if reps is None else _pair(reps.auc[:, b] - reps.auc[:, a])
        out[name]["vs_best"] = {"best": best, "diff": out[best]["auc"] - out[name]["auc"], "ci95": ci,
                                "tied": None if ci is None else bool(ci[0] <= 0.0 <= ci[1])}
    blind = [n for n in names if n in model_free]
    if blind and attacks is not names:
        top = max(blind, key=lambda n: out[n]["auc"])
        t = names.index(top)
        for name in attacks:
            a = names.index(name)
            ci = None if reps is None else _pair(reps.auc[:, a] - reps.auc[:, t])
            out[name]["vs_blind"] = {"blind": top, "diff": out[name]["auc"] - out[top]["auc"], "ci95": ci,
                                     "beyond": None if ci is None else bool(ci[0] > 0.0)}
    for name, prior in priors.items():
        a, p = names.index(name), names.index(prior)
        ci = None if reps is None else _pair(reps.auc[:, a] - reps.auc[:, p])
        out[name]["vs_prior"] = {"prior": prior, "diff": out[name]["auc"] - out[prior]["auc"], "ci95": ci,
                                 "beyond": None if ci is None else bool(ci[0] > 0.0)}
    return out


def _pair(values: np.ndarray) -> list[float]:
    """95% percentile interval of bootstrap replicates, as stored in results.json."""
    lo, hi = percentile_interval(values, 0.95)
    return [float(lo), float(hi)]


TIE_SHARE = 0.01  # a block of identical scores above this share of the samples is reported


def largest_tie(y_score) -> tuple[float, int]:
    """The score value shared by the most samples (the lowest such value) and how many share it."""
    values, counts = np.unique(np.asarray(y_score, dtype=np.float64), return_counts=True)
    i = int(np.argmax(counts))
    return float(values[i]), int(counts[i])


def tie_note(y_score) -> str | None:
    """A note when more than :data:`TIE_SHARE` of the scores (members and non-members together) share one value.

    A threshold cannot split such a block, so the TPRs read only the ROC's vertices
    (:func:`tpr_at_fpr`) and the AUC counts each tied member/non-member pair as one half.
    None when no block of two or more identical scores is that large.
    """
    n = len(y_score)
    value, count = largest_tie(y_score)
    if count < 2 or count <= TIE_SHARE * n:
        return None
    return (f"{count} of {n} scores ({100 * count / n:.1f}%) are tied at {value:.6g}: a threshold cannot split them, "
            "so the TPRs read only the ROC's vertices (conservative) and the AUC counts each tied member/non-member "
            "pair as one half")
