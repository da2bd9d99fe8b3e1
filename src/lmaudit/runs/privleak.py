"""PrivLeak (MUSE, Shi et al., 2024): how far an unlearned model's membership AUC on the forget set lies from that of
a model retrained without it, relative to the retrained one's.

    PrivLeak = (AUC(unlearned) − AUC(retrained)) / AUC(retrained)

both AUCs of the same attack telling the forget set (members) from held-out texts (non-members). Near 0: the
unlearned model is as private as retraining; positive: it still remembers (under-unlearning); negative: it
treats the forget set as more foreign than a model that never saw it (over-unlearning, itself a tell). The two
runs score the same texts, so the interval is paired: every bootstrap resample draws the same members and
non-members for both models (:func:`~lmaudit.metrics.stratified_bootstrap`).

Sign: lmaudit's AUCs read "higher score = member", so a model that still remembers gives a positive PrivLeak.
Published MUSE tables report models that did not unlearn with large negative values, an AUC read the other way
round: negate these figures before comparing them with MUSE's.
"""

from __future__ import annotations

import numpy as np

from lmaudit.errors import DataError
from lmaudit.metrics import auc, stratified_bootstrap


def privleak(labels, unlearned: np.ndarray, retrained: np.ndarray, *, n_resamples: int = 1000,
             seed: int = 0) -> dict:
    """``{"privleak", "ci95", "auc_unlearned", "auc_retrained"}`` of one attack's scores under both models."""
    a_u, a_r = auc(labels, unlearned), auc(labels, retrained)
    out = {"privleak": (a_u - a_r) / a_r, "ci95": None, "auc_unlearned": a_u, "auc_retrained": a_r}
    if n_resamples:
        reps = stratified_bootstrap(labels, [unlearned, retrained], n_resamples=n_resamples, seed=seed)
        lo, hi = np.quantile((reps.auc[:, 0] - reps.auc[:, 1]) / reps.auc[:, 1], [0.025, 0.975])
        out["ci95"] = [float(lo), float(hi)]
    return out


def privleak_against(result, retrained, where: str = "the retrained run") -> dict:
    """PrivLeak of every attack both runs scored: ``result`` (an :class:`~lmaudit.runs.mia.MIAResult` of the
    unlearned model) against ``retrained`` (the retrained model's, on the same texts). The runs must hold the
    same records with the same labels, in any order."""
    if sorted(zip(retrained.ids, retrained.labels.tolist())) != sorted(zip(result.ids, result.labels.tolist())):
        raise DataError(f"{where} scores other texts than this run ({len(retrained.ids)} vs {len(result.ids)} "
                        "records, or other ids or labels)",
                        hint="score the retrained model on the same members (forget set) and non-members")
    order = {key: i for i, key in enumerate(zip(retrained.ids, retrained.labels.tolist()))}
    take = np.array([order[key] for key in zip(result.ids, result.labels.tolist())])
    shared = [n for n in result.attacks if n in retrained.scores]
    if not shared:
        raise DataError(f"{where} ran none of this run's attacks ({', '.join(result.attacks)})")
    return {"retrained": str(where), "attacks": {
        n: privleak(result.labels, result.scores[n], np.asarray(retrained.scores[n])[take],
                    n_resamples=result.config.n_bootstrap, seed=result.config.seed) for n in shared}}
