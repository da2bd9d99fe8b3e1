"""The report's "privacy guarantee check": the ε a model claims (if it was trained with DP) against the ε lower
bound that the strongest attack of the run proves (:func:`lmaudit.privacy.bounds.epsilon_lower_bound`)."""

from __future__ import annotations

import numpy as np

from lmaudit.errors import LmauditError
from lmaudit.privacy.bounds import epsilon_lower_bound
from lmaudit.report.document import Section

DEFAULT_DELTA = 1e-5
CONFIDENCE = 0.95


def privacy_section(labels: np.ndarray, score: np.ndarray, attack: str, target: dict, *, prefix: str = "") -> Section:
    """Claimed ε (the target's ``dp`` record, if any), the ε lower bound of ``attack`` and one plain sentence."""
    dp = target.get("dp") or {}
    claimed, delta = dp.get("epsilon"), dp.get("delta", DEFAULT_DELTA)
    title = f"{prefix}Privacy guarantee check"
    try:
        bound = epsilon_lower_bound(labels, score, delta=delta, confidence=CONFIDENCE, seed=0)
    except LmauditError as exc:  # e.g. too few samples for any bound
        return Section(title, f"No ε lower bound from this run: {exc.message}.")
    rows = [["claimed ε (DP training)",
             "none (not trained with DP)" if claimed is None else f"{claimed:.3g} at δ = {delta:.2g}"],
            [f"ε lower bound ({100 * CONFIDENCE:.0f}% confidence)", f"{bound.epsilon:.3g} at δ = {delta:.2g}"],
            ["from", f"{attack}, threshold {bound.threshold:.4g} ({bound.direction}); TPR ≥ {bound.tpr_lo:.3f}, "
                     f"FPR ≤ {bound.fpr_hi:.3f} on {bound.n_members} + {bound.n_nonmembers} held-out texts"],
            ["method", bound.method]]
    if claimed is None:
        text = ("The model claims no differential-privacy guarantee. The attacks prove that no "
                f"(ε, δ = {delta:.2g})-DP claim below ε = {bound.epsilon:.2f} could be true of it.")
    elif bound.epsilon > claimed:
        text = (f"The attacks contradict the claim: they prove ε ≥ {bound.epsilon:.2f} at {100 * CONFIDENCE:.0f}% "
                f"confidence, above the claimed ε = {claimed:.2f}. Either the DP training or its accounting is wrong.")
    else:
        text = (f"Consistent with the claim: the attacks prove only ε ≥ {bound.epsilon:.2f}, below the claimed "
                f"ε = {claimed:.2f}. This does not prove the claim (a lower bound cannot); it finds no violation.")
    return Section(title, text + " The bound treats each text as an independent trial of the test.",
                   table=(["", "value"], rows))
