"""Dataset inference (Maini et al., 2024, "LLM Dataset Inference: Did you train on my dataset?"): a p-value for
"the model was trained on this set", from many membership scores at once.

A suspect set S and a validation set V (drawn like S, known never to have been trained on) are scored by every
applicable attack: one feature per attack and text. Each seeded split halves both sets. On one half, features
are standardised by V's mean and spread and a linear model (L2-regularised logistic regression of "suspect") is
fitted to combine them; on the other half a one-sided Welch t-test asks whether the suspect texts score higher
than the validation texts. Held-out scores come from a model that never saw their labels, so each split's test is
valid under the null (S and V drawn alike, S never trained on).

One text can score far from the rest (six standard deviations on a tiny model) and dominate a t-test on a few
dozen texts, so by default (``outliers="clip"``) each feature is clipped to the 2.5th–97.5th percentiles of the
fitting halves of both sets before the linear model: the bounds come from the fitting halves only, so the
held-out test stays valid. ``outliers="none"`` is the procedure without it.

The split's p-values are dependent; their median is reported with its spread, and the decision reads
``p_combined = min(1, 2 × median)``, which is a valid p-value for any dependence between them (twice the median
of p-values; Rüschendorf 1982, Meng 1994). A false-positive control runs the same procedure on V alone, split into
two halves that play suspect and validation: its p-value should be large.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.stats import ttest_ind
from sklearn.linear_model import LogisticRegression

from lmaudit.errors import DataError
from lmaudit.progress import progress

MIN_TEXTS = 8  # per set: each half must hold two texts of each set, and the control halves V again
LEVELS = (0.01, 0.05)
OUTLIERS = ("clip", "none")
PROGRESS_FROM = 200  # splits from which the loop shows its progress (a few seconds of fits and more)
CLIP = 0.025  # clipped share at each end of every feature, from the fitting halves


def _split(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    order = rng.permutation(n)
    return order[: n // 2], order[n // 2:]


def one_split(suspect: np.ndarray, validation: np.ndarray, rng: np.random.Generator, outliers: str = "clip") -> float:
    """The held-out one-sided Welch p-value of one seeded split (see the module)."""
    s_fit, s_test = _split(len(suspect), rng)
    v_fit, v_test = _split(len(validation), rng)
    fitting = np.vstack([suspect[s_fit], validation[v_fit]])
    low, high = (np.quantile(fitting, [CLIP, 1 - CLIP], axis=0) if outliers == "clip"
                 else (np.full(fitting.shape[1], -np.inf), np.full(fitting.shape[1], np.inf)))
    reference = np.clip(validation[v_fit], low, high)
    mean = reference.mean(axis=0)
    spread = reference.std(axis=0, ddof=1)
    spread[~(spread > 0)] = 1.0  # a feature constant on the validation half: centred, not scaled

    def z(x: np.ndarray) -> np.ndarray:
        return (np.clip(x, low, high) - mean) / spread

    x = np.vstack([z(suspect[s_fit]), z(validation[v_fit])])
    y = np.r_[np.ones(len(s_fit)), np.zeros(len(v_fit))]
    model = LogisticRegression(C=1.0, max_iter=1000).fit(x, y)
    a, b = model.decision_function(z(suspect[s_test])), model.decision_function(z(validation[v_test]))
    if np.ptp(np.r_[a, b]) == 0:  # the combination is constant: nothing tells the halves apart
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a constant half: the t statistic is ±inf or nan
        p = float(ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)
    return 1.0 if not np.isfinite(p) else p


def _check(features: np.ndarray, name: str, columns: list[str]) -> np.ndarray:
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != len(columns):
        raise DataError(f"{name}: expected one column per feature ({len(columns)}), got shape {x.shape}")
    if len(x) < MIN_TEXTS:
        raise DataError(f"the {name} set has {len(x)} texts; dataset inference needs at least {MIN_TEXTS} in each "
                        "set (each split halves both, and the false-positive control halves the validation set "
                        "again)")
    bad = ~np.isfinite(x)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise DataError(f"{name}: {int(bad.sum())} non-finite score(s), e.g. {columns[col]} of text {row + 1}",
                        hint="an attack that cannot score a text (empty after tokenisation?) cannot be a feature")
    return x


def _summary(ps: list[float]) -> dict:
    ps = np.asarray(ps)
    median = float(np.median(ps))
    return {"p_median": median, "p_combined": min(1.0, 2 * median),
            "p_spread": [float(np.quantile(ps, 0.1)), float(np.quantile(ps, 0.9))],
            "p_values": [float(p) for p in ps]}


def dataset_inference(suspect, validation, columns: list[str], *, splits: int = 20, seed: int = 0,
                      outliers: str = "clip") -> dict:
    """The test of the module on (n_s, k) suspect and (n_v, k) validation features, one column per feature.

    Returns ``{"test": {...}, "control": {...}, "decision": {"0.01": bool, "0.05": bool}, "splits", "seed",
    "columns"}`` where each of ``test`` and ``control`` holds ``p_median``, ``p_combined`` (2 × median),
    ``p_spread`` (10th–90th percentile over the splits) and every split's ``p_values``; the decision at a level
    is ``test.p_combined ≤ level``.
    """
    if outliers not in OUTLIERS:
        raise DataError(f"unknown outliers '{outliers}'", hint=f"use one of {', '.join(OUTLIERS)}")
    s = _check(suspect, "suspect", columns)
    v = _check(validation, "validation", columns)
    rng = np.random.default_rng(seed)
    test, control = [], []
    with progress("dataset inference: splits" if splits >= PROGRESS_FROM else None, total=2 * splits) as bar:
        for _ in range(splits):
            test.append(one_split(s, v, rng, outliers))
            bar.advance()
        for _ in range(splits):  # V alone: one half plays the suspect set
            first, second = _split(len(v), rng)
            control.append(one_split(v[first], v[second], rng, outliers))
            bar.advance()
    out = {"test": _summary(test), "control": _summary(control), "splits": splits, "seed": seed, "outliers": outliers,
           "columns": list(columns)}
    out["decision"] = {str(level): bool(out["test"]["p_combined"] <= level) for level in LEVELS}
    return out
