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


def exposure_summary(res: dict) -> Summary:
    """The verdict: the largest exposure, and the median exposure of each insertion count."""
    exposure, top = res["exposure"], res["reference"]["max_exposure"]
    worst = max(exposure, key=lambda c: exposure[c]["exposure"])
    e = exposure[worst]
    points = [f"{k} insertion(s): median {g['median']:.2f} bits over {g['n']} canaries, "
              f"interval of the median {_interval(g['median_ci95'])}" for k, g in res["by_insertions"].items()]
    return Summary(f"Largest exposure {e['exposure']:.2f} of at most {top:.2f} bits ({worst}, {e['insertions']} "
                   "insertions)", None, points, RULE)


def exposure_report(run: Path, res: dict, *, where: Path | None = None, show_pii: bool = False) -> Report:
    """Per insertion count and per canary: exposure, its 95% interval and which estimate gave it."""
    ref = res["reference"]
    how = ("every never-inserted filling was scored: the ranks are exact" if ref["enumerated"] else
           f"{ref['candidates']:,} of the {ref['pool']:,} never-inserted fillings were scored")
    text = (f"{res['n_canaries']} canaries of the format '{res['format']}' (|R| = 2^{res['space_log2']:.2f}); {how}. "
            f"A canary's exposure is at most {ref['max_exposure']:.2f} bits; a canary the model never saw has about "
            "1.4 bits on average.")
    groups = [[k, str(g["n"]), f"{g['median']:.2f}", _interval(g["median_ci95"]), f"{g['median_ci_coverage']:.2f}",
               f"{g['mean']:.2f}", f"{g['min']:.2f} – {g['max']:.2f}"] for k, g in res["by_insertions"].items()]
    rows = [[cid, str(e["insertions"]), f"{e['log_perplexity_bits']:.2f}", f"{e['exposure']:.2f}",
             _interval(e["exposure_ci95"]), str(e["beaten_by"]), e["estimate"]]
            for cid, e in sorted(res["exposure"].items(), key=lambda kv: -kv[1]["exposure"])]
    sections = [Section("Exposure by insertion count", text,
                        table=(["insertions", "canaries", "median (bits)", "interval of the median", "its coverage",
                                "mean", "range"], groups)),
                Section("Exposure per canary", "Log-perplexity in bits (lower: the model finds the text more "
                                               "likely); 'beaten by': scored candidates at or under the canary.",
                        table=(["canary", "insertions", "log-perplexity", "exposure", "95% interval", "beaten by",
                                "estimate"], rows))]
    facts = {"model": str(res.get("model")), "canaries": str(res.get("canaries")), "format": res["format"],
             "configuration": json.dumps(res["config"]), "run time": f"{res['runtime_s']:.1f} s",
             **facts_common(res)}
    return Report("lmaudit canary exposure report", f"Run folder: {where or run}", facts, sections,
                  summary=exposure_summary(res))
