"""The report of a dataset-inference run (``lmaudit dataset-inference``): the decision, the splits' p-values and
the control, each attack alone, and SMI's ρ beside them when members were given."""

from __future__ import annotations

import json
from pathlib import Path

from lmaudit.report import plots
from lmaudit.report.document import Figure, Report, Section, Summary
from lmaudit.report.summary import overlap_note
from lmaudit.report.validity import near_copy_note


def _p(x: float) -> str:
    return f"{x:.2g}" if x >= 1e-4 else f"{x:.1e}"


def inference_summary(res: dict) -> Summary:
    """"Dataset inference: trained on the suspect set (p = 3.1e-05)" or "not shown (p = 0.41)", with the control
    and, when it ran, SMI's ρ."""
    test, control = res["test"], res["control"]
    levels = sorted(res["decision"], key=float)
    found = [lv for lv in levels if res["decision"][lv]]
    head = ("trained on the suspect set" if found else "training on the suspect set not shown")
    lo, hi = test["p_spread"]
    rejected = [lv for lv in levels if res["decision"][lv]]
    kept = [lv for lv in levels if not res["decision"][lv]]
    said = " and ".join(part for part in (f"rejected at α = {', '.join(rejected)}" if rejected else "",
                                          f"not rejected at α = {', '.join(kept)}" if kept else "") if part)
    points = [f"That the {res['n_suspect']:,} suspect texts score like the {res['n_validation']:,} validation texts "
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
    points.append("Reading: a small p says the model treats the suspect set as it treats training data, compared "
                  "with texts drawn alike that it never saw. It assumes the validation set is drawn like the "
                  "suspect set: texts that differ in source, era or format make the test fire without training.")
    return Summary(f"Dataset inference: {head} (p = {_p(test['p_combined'])})",
                   "severe" if "0.01" in found else ("moderate" if found else None), points,
                   "Decision at each α: p (twice the median split p-value) ≤ α.")


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
    facts = {"model": f"{res['model']} ({res['kind']}, fingerprint {res['fingerprint']})",
             "reference": str(res.get("reference")), "configuration": json.dumps(res["config"])}
    return Report("lmaudit dataset inference", f"Run folder: {where or run}", facts, sections,
                  summary=inference_summary(res))
