"""Do the sets explain the result? The blind baselines of a membership-inference run and what they mean for its verdict.

:func:`blind_baseline_scores` scores members and non-members with the model-free classifiers of
:mod:`lmaudit.audit.blind` (out of fold); the run summarises them with the attacks, on the same
bootstrap resamples, so every attack gets the paired difference of its AUC to the best blind
baseline (``vs_blind``). :func:`set_check` is what ``results.json`` keeps: the baselines' figures,
the best of them, and ``differ``, true when a held-out test finds a baseline above chance — the sets
differ without the model, and only what an attack adds beyond the baseline is evidence of memorisation.
:func:`two_set_check` runs both checks (and the reference's, :func:`prior_check`) on any two sets: dataset inference
reads its suspect and validation sets with it.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.stats import mannwhitneyu

from lmaudit.audit.blind import BASELINES, fold_count, scores_and_p
from lmaudit.data.loaders import TextSet
from lmaudit.errors import DataError, warn
from lmaudit.metrics import summarize_attacks


def blind_baseline_scores(members: TextSet, nonmembers: TextSet, labels: np.ndarray, *, seed: int = 0,
                          timings: dict | None = None) -> tuple[dict[str, np.ndarray], dict[str, float], str | None]:
    """({baseline: out-of-fold scores}, {baseline: held-out p-value}, None), or ({}, {}, why) when the sets are too
    small to cross-fit (also warned)."""
    try:
        fold_count(labels)
    except DataError as exc:
        warn(f"blind baselines left out: {exc}")
        return {}, {}, str(exc)
    t0 = time.perf_counter()
    texts = members.texts + nonmembers.texts  # as given (prompt and response together for pairs)
    both = {name: scores_and_p(texts, labels, name, seed=seed) for name in BASELINES}
    if timings is not None:
        timings["blind_baselines"] = time.perf_counter() - t0
    return {n: s for n, (s, _) in both.items()}, {n: p for n, (_, p) in both.items()}, None


ALPHA = 0.05  # the level of the check, over both baselines (Bonferroni)


def set_check(summary: dict[str, dict], p_values: dict[str, float], skipped: str | None = None) -> dict:
    """``results.json``'s ``set_check``: each baseline's AUC, TPRs and intervals, the best one, and ``differ``.

    The sets differ without the model when a held-out test (:func:`~lmaudit.audit.blind.held_out_p`) finds a
    baseline that tells them apart: the smallest of ``p_values`` (one per baseline), multiplied by their number
    (Bonferroni), is at most :data:`ALPHA`. Each baseline's p-value is kept beside its figures.
    """
    if not p_values:
        return {"baselines": {}, "best": None, "differ": None, "skipped": skipped}
    entries = {n: {**{k: v for k, v in summary[n].items() if k != "vs_best"}, "held_out_p": p}
               for n, p in p_values.items()}
    best = max(entries, key=lambda n: entries[n]["auc"])
    adjusted = min(1.0, len(entries) * min(p_values.values()))
    return {"baselines": entries, "best": best, "auc": entries[best]["auc"], "auc_ci95": entries[best].get("auc_ci95"),
            "p_adjusted": adjusted, "alpha": ALPHA, "differ": bool(adjusted <= ALPHA), "skipped": None}


PRIOR = "reference:"  # prefix of a reference's own scores among a run's summarised scores


def prior_check(summary: dict[str, dict], prior_scores: dict[str, np.ndarray], labels: np.ndarray,
                calibrated: list[str]) -> dict:
    """``set_check``'s ``reference`` block: the reference model's own reference-free scores on the same sets.

    The reference never saw the members (that is what makes it a reference), so each of its AUCs should be near
    0.5; far from it, the sets differ in a way a model that never saw them already sees. Per attack: the
    reference's AUC and interval (from the run's shared resamples) and a two-sided Mann–Whitney p-value (the
    reference's scores are not fitted to the labels, so the test is exact); ``differ`` when the smallest p-value,
    multiplied by the number of attacks (Bonferroni), is at most :data:`ALPHA`. ``calibrated`` names the attacks
    calibrated per text by models that never saw it (the reference, or shadow models): their scores already
    subtract what such a model sees.
    """
    y = np.asarray(labels)
    entries = {}
    for name, s in prior_scores.items():
        m = summary[PRIOR + name]
        p = float(mannwhitneyu(s[y == 1], s[y == 0], alternative="two-sided").pvalue)
        entries[name] = {"auc": m["auc"], "auc_ci95": m.get("auc_ci95"), "p": p}
    best = max(entries, key=lambda n: abs(entries[n]["auc"] - 0.5))
    adjusted = min(1.0, len(entries) * min(e["p"] for e in entries.values()))
    return {"attacks": entries, "best": best, "auc": entries[best]["auc"], "auc_ci95": entries[best]["auc_ci95"],
            "p_adjusted": adjusted, "alpha": ALPHA, "differ": bool(adjusted <= ALPHA), "calibrated": calibrated}


def two_set_check(first: TextSet, second: TextSet, scores: dict[str, np.ndarray], *,
                  prior: dict[str, np.ndarray] | None = None, calibrated: list[str] = (), blind: bool = True,
                  n_resamples: int = 200, seed: int = 0,
                  timings: dict | None = None) -> tuple[dict, dict[str, dict], dict[str, np.ndarray]]:
    """The set checks of ``first`` (label 1) against ``second`` (label 0), as ``mia`` runs them on its members and
    non-members: (``set_check`` with its ``reference`` block when ``prior`` is given, the summary of every score,
    the blind baselines' out-of-fold scores).

    ``scores`` are the attacks' scores of the texts of both sets (first, then second), ``prior`` the reference's own
    scores under the reference-free ones among them, ``calibrated`` the attacks calibrated by the reference.
    Each attack's summary gets its ``vs_blind`` and ``vs_prior``: what it adds beyond the sets' own differences.
    """
    labels = np.r_[np.ones(len(first), dtype=np.int64), np.zeros(len(second), dtype=np.int64)]
    prior = prior or {}
    blind_s, blind_p, skipped = (blind_baseline_scores(first, second, labels, seed=seed, timings=timings)
                                 if blind else ({}, {}, "blind = False"))
    summary = summarize_attacks(labels, {**scores, **blind_s, **{PRIOR + n: v for n, v in prior.items()}},
                                n_resamples=n_resamples, seed=seed, model_free=tuple(blind_s),
                                priors={n: PRIOR + n for n in prior})
    check = set_check(summary, blind_p, skipped)
    if prior:
        check["reference"] = prior_check(summary, prior, labels, list(calibrated))
    return check, summary, blind_s
