"""The report of a dataset-inference run (``lmaudit dataset-inference``): the decision, the splits' p-values and
the control, each attack alone, and SMI's ρ beside them when members were given. When the suspect and validation
sets differ without the model (a blind baseline, or the reference model, tells them apart), the verdict is "cannot
tell" and opens with what tells them apart."""

from __future__ import annotations

import json
from pathlib import Path

from lmaudit.data.overlap import FORMS
from lmaudit.report import plots
from lmaudit.report.document import Figure, Report, Section, Summary
from lmaudit.report.summary import overlap_note
from lmaudit.report.validity import near_copy_note


def _p(x: float) -> str:
    return f"{x:.2g}" if x >= 1e-4 else f"{x:.1e}"


CANNOT_TELL = "cannot tell: the sets differ without the model"


def _interval(check: dict) -> str:
    ci = check.get("auc_ci95")
    return f" (95% interval {ci[0]:.3f}–{ci[1]:.3f})" if ci and ci[0] is not None else ""


def differ_sentences(check: dict | None) -> list[str]:
    """What tells the suspect set from the validation set without the model: the blind baseline's sentence, the
    reference's, or both (empty when neither fires)."""
    check = check or {}
    out = []
    if check.get("differ"):
        out.append(f"The suspect and validation sets differ without the model: the blind baseline {check['best']} "
                   f"tells them apart with AUC {check['auc']:.3f}{_interval(check)}, held-out test p = "
                   f"{_p(check['p_adjusted'])} over its {len(check['baselines'])} baselines, from their text alone.")
    prior = check.get("reference") or {}
    if prior.get("differ"):
        out.append(f"The reference model, which never saw either set, already tells them apart: its own "
                   f"{prior['best']} gives AUC {prior['auc']:.3f}{_interval(prior)}, Mann–Whitney p = "
                   f"{_p(prior['p_adjusted'])} over its {len(prior['attacks'])} attacks.")
    formats = check.get("formats") or {}
    if formats.get("differ"):
        out.append(f"The suspect set is {FORMS[formats['suspect']]} and the validation set "
                   f"{FORMS[formats['validation']]}: the format alone tells them apart.")
    if out:
        out.append("The test below then measures how the sets differ (source, era, format), not whether the model "
                   "was trained on the suspect set: it cannot tell. Draw the validation set like the suspect set "
                   "(the same source, era and format) to test training.")
    return out


def inference_summary(res: dict) -> Summary:
    """"Dataset inference: trained on the suspect set (p = 3.1e-05)", "not shown (p = 0.41)" or "cannot tell: the
    sets differ without the model (p = …)", with the set checks, the control and, when it ran, SMI's ρ."""
    test, control = res["test"], res["control"]
    levels = sorted(res["decision"], key=float)
    found = [lv for lv in levels if res["decision"][lv]]
    opening = differ_sentences(res.get("set_check"))
    head = ("trained on the suspect set" if found else "training on the suspect set not shown")
    if opening:  # the sets differ without the model: no reading of the test is confident
        head, found = CANNOT_TELL, []
    lo, hi = test["p_spread"]
    rejected = [lv for lv in levels if res["decision"][lv]]
    kept = [lv for lv in levels if not res["decision"][lv]]
    said = " and ".join(part for part in (f"rejected at α = {', '.join(rejected)}" if rejected else "",
                                          f"not rejected at α = {', '.join(kept)}" if kept else "") if part)
    points = opening + [
        f"That the {res['n_suspect']:,} suspect texts score like the {res['n_validation']:,} validation texts "
        f"is {said}: p = {_p(test['p_combined'])}, twice the median of {res['splits']} seeded splits (valid "
        f"whatever their dependence; median {_p(test['p_median'])}, 10th–90th percentile {_p(lo)}–{_p(hi)})."]
    clo, chi = control["p_spread"]
    calm = control["p_combined"] > float(levels[-1])
    points.append(f"Control: the same test on two halves of the validation set gives p = {_p(control['p_combined'])} "
                  f"({_p(clo)}–{_p(chi)} over the splits)"
                  + (": it finds nothing where there is nothing, as it should." if calm else
                     ": it finds a difference inside the validation set itself, so the validation texts are not "
                     "drawn alike and the test above cannot be trusted."))
    smi = res.get("smi")
    if smi:
        est = smi.get("smi-m") or smi["smi"]
        name = "SMI-M" if "smi-m" in smi else "SMI"
        points.append(f"{name} on the same scores: ρ = {est['rho']:.2f} (90% interval {est['ci90'][0]:.2f}–"
                      f"{est['ci90'][1]:.2f}), about {100 * (1 - est['rho']):.0f}% of the suspect set behaves like "
                      "the known members.")
    for note in (overlap_note(res.get("overlap")), near_copy_note(res.get("overlap"))):
        if note:
            points.append(note.replace("Non-members'", "Validation texts'").replace("the members", "the suspect set"))
    points += [f"Caveat: {note}" for note in (res.get("overlap") or {}).get("notes", [])]
    points.append("Reading: a small p says the model treats the suspect set as it treats training data, compared "
                  "with texts drawn alike that it never saw. It assumes the validation set is drawn like the "
                  "suspect set: texts that differ in source, era or format make the test fire without training.")
    return Summary(f"Dataset inference: {head} (p = {_p(test['p_combined'])})",
                   "severe" if "0.01" in found else ("moderate" if found else None), points,
                   "Decision at each α: p (twice the median split p-value) ≤ α; \"cannot tell\" instead when a blind "
                   "baseline (a held-out test at 0.05) or the reference model's own scores (Mann–Whitney at 0.05) "
                   "tell the suspect set from the validation set.")


def _check_rows(check: dict) -> list[list[str]]:
    rows = [[name, f"{m['auc']:.3f}", _p(m["held_out_p"]), ""] for name, m in (check.get("baselines") or {}).items()]
    if rows:
        rows[0][3] = f"{'yes' if check['differ'] else 'no'} (p = {_p(check['p_adjusted'])}, both)"
    prior = check.get("reference") or {}
    rows += [[f"reference: {name}", f"{m['auc']:.3f}", _p(m["p"]), ""] for name, m in prior.get("attacks", {}).items()]
    if prior.get("attacks"):
        rows[-len(prior["attacks"])][3] = f"{'yes' if prior['differ'] else 'no'} (p = {_p(prior['p_adjusted'])}, all)"
    return rows


def inference_report(run: Path, res: dict, *, where: Path | None = None, show_pii: bool = False) -> Report:
    """Sections: each attack alone (its shift and AUC), the splits' p-values beside the control's."""
    rows = [[name, f"{m['shift_sd']:+.2f}", f"{m['auc']:.3f}"]
            for name, m in sorted(res["attacks"].items(), key=lambda kv: -abs(kv[1]["auc"] - 0.5))]
    sections = [
        Section("Dataset inference", f"{res['n_suspect']:,} suspect texts ({res['data']['suspect']}) against "
                f"{res['n_validation']:,} validation texts ({res['data']['validation']}); every attack's score is a "
                f"feature, standardised on the validation half of each of {res['splits']} seeded splits, combined "
                "by a logistic regression fitted on one half of both sets and tested on the other (one-sided Welch "
                "t-test).",
                figures=[Figure("p_values", "p-values over the splits",
                                plots.split_p_values(res["test"]["p_values"], res["control"]["p_values"],
                                                     tuple(float(lv) for lv in res["decision"])))]),
        Section("Each attack alone", "Shift: the suspect texts' mean score minus the validation texts', in "
                "validation standard deviations; AUC: suspect texts as positives.",
                table=(["attack", "shift (sd)", "AUC"], rows)),
    ]
    checks = _check_rows(res.get("set_check") or {})
    if checks:
        sections.append(Section("Do the sets differ without the model?", "Suspect texts (positives) against "
                                "validation texts, scored without the audited model: the blind baselines (classifiers "
                                "of the texts alone, out of fold) and the reference model's own scores. AUC near 0.5 "
                                "is what sets drawn alike give.", table=(["scored by", "AUC", "p", "differ"], checks)))
    facts = {"model": f"{res['model']} ({res['kind']}, fingerprint {res['fingerprint']})",
             "reference": str(res.get("reference")), "configuration": json.dumps(res["config"])}
    return Report("lmaudit dataset inference", f"Run folder: {where or run}", facts, sections,
                  summary=inference_summary(res))
