"""A release gate over results folders: every leakage figure of every run under its threshold, or a list of what is not.

A threshold is compared with the **upper end of the figure's 95% interval**, never with the point estimate: the
leakage could be as high as that bound, so a run passes only when the bound is at or under the threshold. The checks:

- ``max_auc``: every attack's AUC (``auc_ci95``) of every membership-inference run;
- ``max_tpr_at``: {FPR: max TPR}, at an FPR the runs store (10%, 1% or 0.1%: ``tpr@1%fpr_ci95`` ...). A TPR the run
  could not measure (fewer non-members than 1/FPR: the result says "unresolved") fails, with that reason, unless
  ``allow_unresolved``; then it is a note, and a run none of whose figures could be checked still fails;
- ``max_exposure``: canary exposure in bits, for runs whose ``results.json`` carries ``exposure``:
  ``{canary: {"exposure": bits, "exposure_ci95": [lo, hi]}}`` (if none of the runs does, the threshold is an error);
- the sets' validity: a run whose set check finds that the members and non-members differ without the model (a blind
  baseline tells them apart) or to the reference alone fails unless ``allow_set_differences``: its AUCs would say
  nothing about the model. A run whose set check did not run gets a note.

Each run is gated on its own (runs of different models or sets may be given together), and once however its path is
spelled. The gate verifies what it compares (:func:`~lmaudit.runs.gate_inputs.read_run`): a folder whose files changed
since the run wrote them, or without its manifest (unless ``trust_edited``), is refused; every AUC, TPR and 95%
interval a threshold is compared with is computed again from the run's stored scores (its bootstrap is seeded) and a
folder that states other figures is refused. A folder no threshold applies to (a set audit, an extraction without
exposure) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lmaudit.errors import LmauditError
from lmaudit.runs.gate_inputs import GatedRun, GateThresholds, fpr_label, read_runs, read_thresholds
from lmaudit.utils import provenance, write_json_atomic

RULE = ("each threshold is compared with the upper end of the figure's 95% interval (the leakage could be as high "
        "as that)")


def _num(x: float, other: float | None = None) -> str:
    """``x`` with 3 decimals, or more when ``other`` would read the same (never "0.684 > 0.684")."""
    for digits in range(3, 9):
        text = f"{x:.{digits}f}"
        if other is None or text != f"{other:.{digits}f}":
            return text
    return repr(x)


@dataclass
class Check:
    """One check of one run: ``status`` is ``pass``, ``fail``, ``skipped`` (allowed to be unmeasured) or ``allowed``
    (sets that differ, accepted); ``text`` says what was compared (or why it could not be)."""

    run: str
    subject: str  # the attack, the canary, "sets" or "run"
    statistic: str  # AUC, TPR@1%FPR, exposure, set check, checks
    status: str
    text: str
    value: float | None = None
    ci95: list | None = None
    threshold: float | None = None
    threshold_name: str | None = None

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    def line(self) -> str:
        """The line the command prints: ``FAIL run: text`` (``note run: text`` for a skipped or allowed check)."""
        return f"{'FAIL' if self.failed else 'note' if self.status != 'pass' else 'pass'} {self.run}: {self.text}"

    def to_json(self) -> dict:
        bound = None if self.ci95 is None else self.ci95[1]
        return {"run": self.run, "subject": self.subject, "statistic": self.statistic, "status": self.status,
                "value": self.value, "ci95": self.ci95, "upper_bound": bound, "threshold": self.threshold,
                "threshold_name": self.threshold_name, "text": self.text}


def bound_check(run: str, subject: str, statistic: str, value, ci95, threshold: float, name: str, *,
                limit: str, unit: str = "") -> Check:
    """``statistic`` of ``subject`` against ``threshold`` (``limit``: how the line names it, e.g. "max-auc 0.6"):
    passes when the upper end of its 95% interval is at most the threshold."""
    fields_ = dict(run=run, subject=subject, statistic=statistic, value=value, ci95=ci95, threshold=threshold,
                   threshold_name=name)
    shown = f"{subject} {statistic} {_num(value)}{unit}"
    if ci95 is None:
        return Check(**fields_, status="fail", text=f"{shown} has no 95% interval (the run drew no bootstrap "
                                                    f"resamples) to compare with {limit}")
    hi = ci95[1]
    interval = f"95% interval [{_num(ci95[0])}, {_num(hi)}]"
    if hi > threshold:
        return Check(**fields_, status="fail",
                     text=f"{shown} ({interval}): upper bound {_num(hi, threshold)}{unit} > {limit}")
    return Check(**fields_, status="pass", text=f"{shown} ({interval}): upper bound ≤ {limit}")


def _tpr_checks(run: GatedRun, key: str, threshold: float, allow: bool) -> list[Check]:
    """The TPR at ``key``'s FPR of every attack; those the run could not measure as one check."""
    label, limit = key.upper(), f"max-tpr-at {fpr_label(key)}={threshold:g}"
    out, unresolved = [], {}
    for attack, m in run.result.attacks.items():
        if m.get(key) is None:
            unresolved[attack] = (m.get("unresolved") or {}).get(key, "not measured")
            continue
        out.append(bound_check(run.name, attack, label, m[key], m.get(f"{key}_ci95"), threshold,
                               f"max_tpr_at.{fpr_label(key)}", limit=limit))
    if unresolved:
        who = "every attack" if len(unresolved) == len(run.result.attacks) else ", ".join(unresolved)
        why = sorted(set(unresolved.values()))
        text = (f"{who} {label} unresolved: {'; '.join(why)}, {run.result.n_nonmembers:,} here; {limit} "
                "cannot be checked" + (" (skipped: allow unresolved)" if allow else " (--allow-unresolved skips it)"))
        out.append(Check(run.name, who, label, "skipped" if allow else "fail", text, threshold=threshold,
                         threshold_name=f"max_tpr_at.{fpr_label(key)}"))
    return out


def _set_checks(run: GatedRun, allow: bool) -> list[Check]:
    """The sets' validity: do members and non-members differ without the model, or to the reference alone?"""
    found = run.result.set_check or {}
    out = []
    status = "allowed" if allow else "fail"
    tail = ("accepted (allow set differences)" if allow else
            "the attacks' AUCs are not evidence about the model (--allow-set-differences accepts the run)")
    if found.get("differ"):
        ci = found.get("auc_ci95")
        out.append(Check(run.name, found["best"], "set check", status,
                         f"members and non-members differ without the model: blind baseline {found['best']} AUC "
                         f"{_num(found['auc'])}" + (f" (95% interval [{_num(ci[0])}, {_num(ci[1])}])" if ci else "")
                         + f", held-out p {found['p_adjusted']:.2g} ≤ {found['alpha']:g}; {tail}",
                         value=found["auc"], ci95=ci))
    elif found.get("differ") is False:
        out.append(Check(run.name, found["best"], "set check", "pass", f"members and non-members do not differ "
                         f"without the model: blind baseline {found['best']} AUC {_num(found['auc'])}, held-out p "
                         f"{found['p_adjusted']:.2g} > {found['alpha']:g}", value=found["auc"],
                         ci95=found.get("auc_ci95")))
    elif run.is_mia:
        why = found.get("skipped") or "not recorded"
        out.append(Check(run.name, "sets", "set check", "skipped", f"the blind set check did not run ({why}): "
                         "nothing says whether the sets differ without the model"))
    prior = found.get("reference") or {}
    if prior.get("differ"):
        ci = prior.get("auc_ci95")
        out.append(Check(run.name, prior["best"], "reference set check", status,
                         f"members and non-members differ to the reference model, which never saw the members: its "
                         f"{prior['best']} AUC {_num(prior['auc'])}"
                         + (f" (95% interval [{_num(ci[0])}, {_num(ci[1])}])" if ci else "")
                         + f", p {prior['p_adjusted']:.2g} ≤ {prior['alpha']:g}; {tail}", value=prior["auc"], ci95=ci))
    return out


def run_checks(run: GatedRun, limits: GateThresholds) -> list[Check]:
    """Every check of one run; a run none of whose figures could be checked fails."""
    checks = []
    if run.is_mia:
        checks += _set_checks(run, bool(limits.allow_set_differences))
        if limits.max_auc is not None:
            checks += [bound_check(run.name, attack, "AUC", m["auc"], m.get("auc_ci95"), limits.max_auc, "max_auc",
                                   limit=f"max-auc {limits.max_auc:g}") for attack, m in run.result.attacks.items()]
        for key, threshold in limits.max_tpr_at.items():
            checks += _tpr_checks(run, key, threshold, bool(limits.allow_unresolved))
    if limits.max_exposure is not None:
        checks += [bound_check(run.name, f"canary {name}", "exposure", e["exposure"], e.get("exposure_ci95"),
                               limits.max_exposure, "max_exposure", limit=f"max-exposure {limits.max_exposure:g} bits",
                               unit=" bits")
                   for name, e in run.exposure().items()]
    measured = [c for c in checks if c.threshold is not None and c.status in ("pass", "fail")]
    if not measured:
        checks.append(Check(run.name, "run", "checks", "fail", "no threshold could be checked on this run's figures "
                            "(a gate that checks nothing passes nothing)"))
    return checks


@dataclass
class GateResult:
    """What the gate found: ``passed``, every check (``checks``; ``failures`` those that failed), the thresholds and
    the runs. ``lines()`` are the lines the command prints, ``to_json()`` / ``write_json(path)`` the summary."""

    thresholds: GateThresholds
    runs: list[dict]
    checks: list[Check] = field(default_factory=list)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.failed]

    @property
    def passed(self) -> bool:
        return not self.failures

    def lines(self) -> list[str]:
        """One line per failed check, then one per note (skipped or allowed checks)."""
        notes = [c for c in self.checks if c.status in ("skipped", "allowed")]
        return [c.line() for c in self.failures] + [c.line() for c in notes]

    def summary(self) -> str:
        n, runs = len(self.checks), f"{len(self.runs)} run{'s' if len(self.runs) != 1 else ''}"
        if self.passed:
            return f"gate passed: {n} checks over {runs}; {RULE}"
        return f"gate FAILED: {len(self.failures)} of {n} checks over {runs}; {RULE}"

    def to_json(self) -> dict:
        return {**provenance(), "type": "gate", "passed": self.passed, "rule": RULE,
                "thresholds": self.thresholds.to_json(), "runs": self.runs, "failed": len(self.failures),
                "checks": [c.to_json() for c in self.checks]}

    def write_json(self, path: str | Path) -> Path:
        """Write the summary (JSON) to ``path`` whole; return it."""
        write_json_atomic(path, self.to_json())
        return Path(path)

    def __repr__(self) -> str:
        return f"<GateResult {self.summary().split(';')[0]}>"


def _run_facts(run: GatedRun, checks: list[Check]) -> dict:
    target = run.raw.get("target") if isinstance(run.raw.get("target"), dict) else {}
    return {"folder": run.name, "type": run.raw.get("type") or "mia", "target": target.get("path"),
            "fingerprint": target.get("fingerprint"), "passed": not any(c.failed for c in checks)}


def gate(runs, *, max_auc: float | None = None, max_tpr_at: dict | None = None, max_exposure: float | None = None,
         thresholds: str | Path | None = None, allow_set_differences: bool | None = None,
         allow_unresolved: bool | None = None, trust_edited: bool = False) -> GateResult:
    """Gate results folders: every figure's 95% upper bound at or under its threshold (see :mod:`lmaudit.runs.gate`).

    ``runs``: a folder or a list of them; ``max_tpr_at``: {FPR ("1%" or 0.01): largest TPR}; ``thresholds``: a
    TOML file with the same keys (these arguments win over it). ``trust_edited``: read a folder without its manifest
    (its figures are still checked against its scores). Returns a :class:`GateResult`; ``passed`` says whether every
    check passed. Errors (a missing or altered folder, a bad file, no threshold) are raised.

    Example::

        found = lmaudit.gate("runs/mia", max_auc=0.6, max_tpr_at={"1%": 0.05})
        if not found.passed:
            print("\\n".join(found.lines()))
    """
    given = GateThresholds(max_auc=max_auc, max_tpr_at=max_tpr_at or {}, max_exposure=max_exposure,
                           allow_set_differences=allow_set_differences, allow_unresolved=allow_unresolved)
    limits = given.over(read_thresholds(thresholds)) if thresholds is not None else given
    if not limits.given():
        raise LmauditError("no threshold given: a gate without one checks nothing",
                           hint="give {max_auc}, {max_tpr_at}, {max_exposure} or a {thresholds} file",
                           options=("max_auc", "max_tpr_at", "max_exposure", "thresholds"))
    read = read_runs(runs, trust_edited=trust_edited)
    if limits.max_exposure is not None and not any(r.exposure() for r in read):
        raise LmauditError("{max_exposure}: none of the runs carries a canary exposure",
                           hint="give runs that measured canary exposure, or drop {max_exposure}",
                           options=("max_exposure",))
    result = GateResult(limits, [])
    for run in read:
        checks = run_checks(run, limits)
        result.checks += checks
        result.runs.append(_run_facts(run, checks))
    return result
