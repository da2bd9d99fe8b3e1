"""PrivLeak (MUSE, Shi et al., 2024): how far an unlearned model's membership AUC on the forget set lies from that of
a model retrained without it, relative to the retrained one's.

    PrivLeak = (AUC(unlearned) − AUC(retrained)) / AUC(retrained)

both AUCs of the same attack telling the forget set (members) from held-out texts (non-members). Near 0: the
unlearned model is as private as retraining; positive: it still remembers (under-unlearning); negative: it
treats the forget set as more foreign than a model that never saw it (over-unlearning, itself a tell). The two
runs score the same texts, so the interval is paired: every bootstrap resample draws the same members and
non-members for both models (:func:`~lmaudit.metrics.stratified_bootstrap`).

Two runs are compared only when the figure means what it says: the same texts (per-text content digests, not
ids), labelled alike; the same attack parameters, token limit, long-text mode, budget and chat template (for a
DLM also the seed, which draws the masks); the same model kind; and two different models (fingerprints).
A retrained AUC of 0 (or NaN) leaves the ratio undefined: the attack's entry says so, with no figure.

Sign: lmaudit's AUCs read "higher score = member", so a model that still remembers gives a positive PrivLeak.
Published MUSE tables report models that did not unlearn with large negative values, an AUC read the other way
round: negate these figures before comparing them with MUSE's.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np

from lmaudit.errors import DataError, warn
from lmaudit.metrics import auc, stratified_bootstrap
from lmaudit.report.build import verify_run
from lmaudit.runs.mia_result import MIAResult, text_digests

# settings of a run that change its scores, compared between the two runs: (config key, what to call it)
_SETTINGS = (("max_length", "--max-tokens"), ("long_texts", "--long-texts"), ("budget", "--budget"))


def privleak(labels, unlearned: np.ndarray, retrained: np.ndarray, *, n_resamples: int = 1000,
             seed: int = 0) -> dict:
    """``{"privleak", "ci95", "auc_unlearned", "auc_retrained"}`` of one attack's scores under both models.

    A retrained AUC of 0 or NaN leaves PrivLeak undefined: ``privleak`` and ``ci95`` are then None and
    ``undefined`` says why; when some bootstrap resamples give the retrained model an AUC of 0, the interval is
    unbounded and ``ci95`` is None (with ``ci_note``).
    """
    a_u, a_r = auc(labels, unlearned), auc(labels, retrained)
    if not np.isfinite(a_r) or a_r <= 0:
        what = "NaN" if not np.isfinite(a_r) else "0"
        return {"privleak": None, "ci95": None, "auc_unlearned": _finite(a_u), "auc_retrained": _finite(a_r),
                "undefined": f"the retrained model's AUC is {what}: PrivLeak divides by it, so it is undefined"}
    out = {"privleak": (a_u - a_r) / a_r, "ci95": None, "auc_unlearned": a_u, "auc_retrained": a_r}
    if n_resamples:
        reps = stratified_bootstrap(labels, [unlearned, retrained], n_resamples=n_resamples, seed=seed)
        if np.any(reps.auc[:, 1] <= 0) or not np.all(np.isfinite(reps.auc)):
            out["ci_note"] = "some resamples give the retrained model an AUC of 0: the interval is unbounded"
        else:
            lo, hi = np.quantile((reps.auc[:, 0] - reps.auc[:, 1]) / reps.auc[:, 1], [0.025, 0.975])
            out["ci95"] = [float(lo), float(hi)]
    return out


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _differences(result, retrained, shared: list[str]) -> list[str]:
    """What differs between the two runs' settings, as "--max-tokens 64 here, None there" phrases."""
    mine, theirs = vars(result.config), vars(retrained.config)
    found = [f"{flag} {mine.get(key)!r} here, {theirs.get(key)!r} there" for key, flag in _SETTINGS
             if mine.get(key) != theirs.get(key)]
    limits = [(run.long_texts or {}).get("limit") for run in (result, retrained)]
    if None not in limits and limits[0] != limits[1] and mine.get("max_length") == theirs.get("max_length"):
        found.append(f"token limit {limits[0]} here, {limits[1]} there")
    if bool(result.chat_template) != bool(retrained.chat_template):
        found.append(f"chat template {'on' if result.chat_template else 'off'} here, "
                     f"{'on' if retrained.chat_template else 'off'} there")
    if result.target.get("kind") == "dlm" and mine.get("seed") != theirs.get("seed"):
        found.append(f"seed {mine.get('seed')!r} here, {theirs.get('seed')!r} there (it draws the DLM masks)")
    refs = [(run.reference or {}).get("fingerprint") for run in (result, retrained)]
    if None not in refs and refs[0] != refs[1]:
        found.append(f"reference model {refs[0]} here, {refs[1]} there")
    for name in shared:
        here, there = result.attacks[name].get("params"), retrained.attacks[name].get("params")
        if here != there:
            found.append(f"{name} parameters {here} here, {there} there")
    return found


def check_comparable(result, retrained, where: str = "the retrained run") -> list[str]:
    """Refuse (:class:`DataError`, naming ``where``) a retrained run whose PrivLeak against ``result`` would not
    mean what it says; return the attacks both runs scored."""
    check_texts(result, retrained, where)
    _check_model(result, retrained, where)
    shared = [n for n in result.attacks if n in retrained.scores]
    if not shared:
        raise DataError(f"{where} ran none of this run's attacks ({', '.join(result.attacks)})",
                        hint="run the retrained model with the same --attacks")
    differ = _differences(result, retrained, shared)
    if differ:
        raise DataError(f"{where} ran with other settings than this run: {'; '.join(differ)}",
                        hint="run both models with the same attacks, parameters and limits")
    return shared


def check_texts(result, retrained, where: str = "the retrained run", *, texts: bool = True) -> None:
    """The part of :func:`check_comparable` that needs neither a model nor scores, so that it runs before the model
    loads: both runs hold per-text digests and (unless ``texts=False``, for a run whose attacks hold some texts out)
    the same texts with the same labels; ``result`` needs only ``digests`` and ``labels``."""
    if not retrained.digests or not result.digests:
        which = where if not retrained.digests else "this run"
        raise DataError(f"{which} holds no per-text digests (no 'digest' column in its scores.parquet: written by "
                        "an older lmaudit), so its texts cannot be checked to be this run's",
                        hint="re-run lmaudit mia on the retrained model with this version of lmaudit")
    mine, theirs = (Counter(zip(run.digests, np.asarray(run.labels).astype(int).tolist()))
                    for run in (result, retrained))
    if texts and mine != theirs:
        raise DataError(f"{where} scores other texts than this run ({len(retrained.digests)} vs "
                        f"{len(result.digests)} records, compared by content and label, not by id)",
                        hint="score the retrained model on the same members (forget set) and non-members")


def _check_model(result, retrained, where: str) -> None:
    """The two runs audit models of one kind, and two different models (fingerprints)."""
    kinds = result.target.get("kind", "ar"), retrained.target.get("kind", "ar")
    if kinds[0] != kinds[1]:
        raise DataError(f"{where} audits a {kinds[1].upper()} model and this run a {kinds[0].upper()} one",
                        hint="compare a model with a retrained model of the same kind")
    fingerprint = result.target.get("fingerprint")
    if fingerprint is not None and fingerprint == retrained.target.get("fingerprint"):
        raise DataError(f"{where} audits the same model as this run (fingerprint {fingerprint}), not a model "
                        "retrained without the members", hint="pass the mia run folder of the retrained model")


def read_retrained(retrained) -> tuple[MIAResult, str]:
    """(the retrained run, what to call it): a result as it is, a folder checked as ``lmaudit report`` checks one
    (:func:`~lmaudit.report.build.verify_run`: files changed since the run wrote them are refused) and loaded."""
    if isinstance(retrained, MIAResult):
        return retrained, "retrained"
    verify_run(retrained)
    return MIAResult.load(retrained), str(retrained)


def check_planned(retrained, where: str, members, nonmembers, config) -> None:
    """:func:`check_texts` of the run about to be made (its two text sets and configuration), before any model
    loads: the texts are left to the full check when ReCaLL holds some out. What needs the run's model (its kind and
    fingerprint) and scores is checked with PrivLeak, after the run (:func:`privleak_against`)."""
    planned = SimpleNamespace(digests=text_digests(members, nonmembers),
                              labels=np.r_[np.ones(len(members)), np.zeros(len(nonmembers))])
    check_texts(planned, retrained, where, texts="recall" not in {*(config.attacks or ()), *config.params})


def privleak_against(result, retrained, where: str = "the retrained run") -> dict:
    """PrivLeak of every attack both runs scored: ``result`` (an :class:`~lmaudit.runs.mia.MIAResult` of the
    unlearned model) against ``retrained`` (the retrained model's, on the same texts), once
    :func:`check_comparable` accepts them. Records are paired by content and label, in any order."""
    shared = check_comparable(result, retrained, where)
    order: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(retrained.digests, retrained.labels.tolist())):
        order.setdefault(key, []).append(i)
    take = np.array([order[key].pop() for key in zip(result.digests, result.labels.tolist())])
    found = {n: privleak(result.labels, result.scores[n], np.asarray(retrained.scores[n])[take],
                         n_resamples=result.config.n_bootstrap, seed=result.config.seed) for n in shared}
    for name, m in found.items():
        if m.get("undefined"):
            warn(f"PrivLeak of {name}: {m['undefined']}")
    return {"retrained": str(where), "attacks": found}
