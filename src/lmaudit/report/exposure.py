"""The report of a canary exposure audit (``lmaudit canaries audit``): exposure per insertion count and per canary.
The canaries' secrets are never in a results folder, so none is shown."""

from __future__ import annotations

import json
from pathlib import Path

from lmaudit.report.document import Report, Section, Summary
from lmaudit.report.tables import facts_common

RULE = ("exposure = log2|R_c| − log2 rank among the canary and the never-inserted fillings of its format (Carlini "
        "et al., 2019); the rank estimated from sampled candidates (95% Clopper–Pearson interval), or from a "
        "skew-normal fitted to them where none scores under the canary (95% bootstrap interval)")


def _interval(pair) -> str:
    return f"[{pair[0]:.2f}, {pair[1]:.2f}]"


def _versus_points(versus: dict | None) -> list[str]:
    """Each insertion count against the controls (never trained on), and the controls against chance."""
    if not versus:
        return []
    chance, controls = versus["chance"], versus["controls"]
    if controls is None:
        return [f"no controls (canaries inserted 0 times): chance is the only baseline, a never-trained canary "
                f"being above e bits with probability 2^-e (median {chance['median']:.2f} bits)"]
    test = ("" if controls.get("candidates_p") is None else
            f", scored like the never-inserted fillings (Mann–Whitney p = {controls['candidates_p']:.2g})"
            if controls["like_chance"] else
            f", NOT scored like the never-inserted fillings (Mann–Whitney p = {controls['candidates_p']:.2g})")
    points = [f"controls: median {controls['median']:.2f} bits over {controls['n']}, interval "
              f"{_interval(controls['median_ci95'])} (chance {chance['median']:.2f}){test}"]
    points += [f"{k} insertion(s) against the controls: shift {g['shift']:+.2f} bits, 95% interval "
               f"[{g['ci'][0]:+.2f}, {g['ci'][1]:+.2f}] (coverage {g['coverage']:.2f}): {g['verdict']}"
               for k, g in versus["groups"].items()]
    return points


def exposure_summary(res: dict) -> Summary:
    """The verdict: the largest exposure, the median exposure of each insertion count, and each count against the
    controls."""
    exposure, top = res["exposure"], res["reference"]["max_exposure"]
    worst = max(exposure, key=lambda c: exposure[c]["exposure"])
    e = exposure[worst]
    points = [f"{k} insertion(s): median {g['median']:.2f} bits over {g['n']} canaries, "
              f"interval of the median {_interval(g['median_ci95'])}" for k, g in res["by_insertions"].items()]
    points += _versus_points(res.get("versus_controls"))
    return Summary(f"Largest exposure {e['exposure']:.2f} of at most {top:.2f} bits ({worst}, {e['insertions']} "
                   "insertions)", None, points, RULE)


def exposure_report(run: Path, res: dict, *, where: Path | None = None, show_pii: bool = False) -> Report:
    """Per insertion count and per canary: exposure, its 95% interval and which estimate gave it."""
    ref = res["reference"]
    how = ("every never-inserted filling was scored: the ranks are exact" if ref["enumerated"] else
           f"{ref['candidates']:,} of the {ref['pool']:,} never-inserted fillings were scored")
    text = (f"{res['n_canaries']} canaries of the format '{res['format']}' (|R| = 2^{res['space_log2']:.2f}); {how}. "
            f"A canary's exposure is at most {ref['max_exposure']:.2f} bits. A canary the model never saw has a "
            "random exposure, above e bits with probability 2^-e (median 1 bit, mean 1.44): compare canaries with "
            "the controls, not one canary's interval with a chance value.")
    groups = [[k, str(g["n"]), f"{g['median']:.2f}", _interval(g["median_ci95"]), f"{g['median_ci_coverage']:.2f}",
               f"{g['mean']:.2f}", f"{g['min']:.2f} – {g['max']:.2f}"] for k, g in res["by_insertions"].items()]
    rows = [[cid, str(e["insertions"]), f"{e['log_perplexity_bits']:.2f}", f"{e['exposure']:.2f}",
             _interval(e["exposure_ci95"]), f"{2 ** -e['exposure']:.2g}", str(e["beaten_by"]), e["estimate"]]
            for cid, e in sorted(res["exposure"].items(), key=lambda kv: -kv[1]["exposure"])]
    sections = [Section("Exposure by insertion count", text,
                        table=(["insertions", "canaries", "median (bits)", "interval of the median", "its coverage",
                                "mean", "range"], groups)),
                Section("Exposure per canary", "Log-perplexity in bits (lower: the model finds the text more "
                                               "likely); the interval locates the canary's rank among the fillings; "
                                               "'chance p' = 2^-exposure, how often a never-trained canary scores as "
                                               "high; 'beaten by': scored candidates at or under the canary.",
                        table=(["canary", "insertions", "log-perplexity", "exposure", "95% interval", "chance p",
                                "beaten by", "estimate"], rows))]
    versus = res.get("versus_controls")
    if versus and versus["controls"] is not None and versus["groups"]:
        shifts = [[k, str(g["n"]), f"{g['shift']:+.2f}", f"[{g['ci'][0]:+.2f}, {g['ci'][1]:+.2f}]",
                   f"{g['coverage']:.2f}", g["verdict"]] for k, g in versus["groups"].items()]
        sections.insert(1, Section("Against the controls (never trained on)",
                                   "Shift of each insertion count's exposures over the controls' (Hodges–Lehmann: the "
                                   "median of every canary–control difference), with its distribution-free interval; "
                                   "'above': exposed more than canaries never trained on.",
                                   table=(["insertions", "canaries", "shift (bits)", "interval", "its coverage",
                                           "verdict"], shifts)))
    facts = {"model": str(res.get("model")), "canaries": str(res.get("canaries")), "format": res["format"],
             "configuration": json.dumps(res["config"]), "run time": f"{res['runtime_s']:.1f} s",
             **facts_common(res)}
    return Report("lmaudit canary exposure report", f"Run folder: {where or run}", facts, sections,
                  summary=exposure_summary(res))
