"""Markdown tables and figures of the extraction experiments (shared by table.md and the HTML report)."""

from __future__ import annotations

import sys

import numpy as np

from lmaudit.report import extraction_plots as xplots
from lmaudit.report import unlearning_tables

TYPES = ("extraction-steps", "pii-extraction", "extraction-relaxed", "pii-reconstruction")
BUDGET_POINTS = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)


def _md(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """(caption, header, rows) of each table of an extraction experiment."""
    kind = record["experiment"]["type"]
    if kind == "pii-reconstruction":
        fields = list(record["fields"])
        pm = lambda v: f"{np.mean(v):.1f} ± {np.std(v):.1f}"  # noqa: E731
        rows = [[signal] + [pm(by_field[f]) for f in fields] for signal, by_field in record["asr"].items()]
        info = [[label] + [pm(record["fields"][f][key]) for f in fields]
                for label, key in (("true value among candidates (%)", "coverage"), ("fitted α", "alpha"),
                                   ("distinct candidates per record", "mean_candidates"),
                                   ("seconds per record", "seconds_per_record"))]
        caption = (f"Top-1 attack success rate (%) on {record['n_targets']} redacted training messages per field "
                   f"(mean ± std over seeds); α fitted on {record['n_calibration']} further known messages.")
        return [(caption, ["signal"] + fields, rows), ("Candidates, α and cost.", [""] + fields, info)]
    if kind == "extraction-steps":
        one = len(record["experiment"]["seeds"]) == 1
        pm = lambda v: f"{v[0]:+.2f}" if one else f"{v[0]:+.2f} ± {v[1]:.2f}"  # noqa: E731
        rows = [[lb, pm(s["median_delta_log_p"]),
                 f"{s['median_log_p_hat'][0]:.2f}", f"{s['forwards_per_record']:.1f}"]
                for lb, s in record["steps"].items()]
        mono = record["monotone_fraction"]
        caption = (f"Median Δ log p̂ = median over records of log(p̂_N / p̂_1) (nats{'' if one else '; mean ± std over seeds'}); "
                   f"masks of {record['n_masked']['median']:g} tokens (median). The medians "
                   f"{'rise' if record['median_delta_monotone'] else 'do not rise'} monotonically with N; per record, "
                   f"log p̂ never fell as N grew on {100 * mono[0]:.0f}%{'' if one else f' ± {100 * mono[1]:.0f}%'} "
                   "of masks.")
        return [(caption, ["steps N", "median Δ log p̂", "median log p̂", "forwards/record"], rows)]
    if kind == "pii-extraction":
        first = next(iter(record["pii_rows"].values()))[0]
        ps = [k.split("=")[1] for k in first if k.startswith("discoverable")]
        header = (["field / model"] + [f"train @p={p}" for p in ps] + [f"unseen @p={p}" for p in ps]
                  + ["median log p̂ train", "median log p̂ unseen"])
        rows = []
        for key, entries in record["pii_rows"].items():
            mean = lambda f: np.mean([f(e) for e in entries])  # noqa: E731
            rows.append([key] + [f"{mean(lambda e: e[f'discoverable@p={p}']):.1f}" for p in ps]
                        + [f"{mean(lambda e: e['unseen_discoverable'][f'discoverable@p={p}']):.1f}" for p in ps]
                        + [f"{mean(lambda e: e['median_log_p_train']):.2f}",
                           f"{mean(lambda e: e['median_log_p_unseen']):.2f}"])
        n = record["experiment"]["extract"].get("n", 10_000)
        caption = (f"(n, p)-discoverable records at n = {n:,} queries among {record['n_train']} training and "
                   f"{record['n_unseen']} unseen messages (mean over seeds); each value is extracted from its left "
                   "context only, for both model kinds.")
        return [(caption, header, rows)]
    eps = record["relaxed"]["DLM"]["eps"]
    rows = [[str(e)] + [f"{record['relaxed'][m][k][i]:.3f}" for m in ("DLM", "AR") for k in ("predicted", "empirical")]
            for i, e in enumerate(eps)]
    relaxed = ("Relaxed extraction: mean over records of Pr(d ≤ ε), Gaussian fit vs empirical, "
               f"{record['experiment']['extract'].get('samples', 128)} generations per record. Mean |error|: DLM "
               f"{record['relaxed']['DLM']['mean_abs_error']:.3f}, AR {record['relaxed']['AR']['mean_abs_error']:.3f}.",
               ["ε", "DLM Gaussian", "DLM empirical", "AR Gaussian", "AR empirical"], rows)
    ns = np.asarray(record["budget"]["n"])
    cols = [int(np.flatnonzero(ns == n)[0]) for n in BUDGET_POINTS if n in ns]
    budget = (f"Extractable records (%) with probability ≥ {record['budget']['p']:g} within n queries: mask "
              f"{record['budget'].get('mask', '?')} of {record['budget'].get('n_records', '?')} training messages, "
              "left context only.",
              ["model"] + [f"n={ns[i]:,}" for i in cols],
              [[name] + [f"{100 * frac[i]:.1f}" for i in cols] for name, frac in record["budget"]["fractions"].items()])
    return [relaxed, budget]


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """(file stem, caption, PNG) of each figure of an extraction experiment."""
    kind = record["experiment"]["type"]
    if kind == "pii-reconstruction":
        return []
    if kind == "extraction-steps":
        cols = {lb: np.asarray(v, dtype=float) for lb, v in record["log_p_columns"].items()}
        return [("log_p_by_steps", "log10 p̂ per mask by step count (first seed)", xplots.log_p_by_steps(cols))]
    if kind == "pii-extraction":
        out = []
        for key, lp in record["likelihood_shift"].items():
            stem = "shift_" + key.replace(" / ", "_").replace(" ", "_").replace("-", "_").lower()
            out.append((stem, f"Training vs unseen log10 p̂: {key}",
                        xplots.likelihood_shift(np.asarray(lp["train"], float), np.asarray(lp["unseen"], float),
                                                title=key)))
        return out
    out = [(f"relaxed_{m.lower()}", f"Relaxed extraction, {m}: Gaussian vs empirical",
            xplots.relaxed_rates(r["eps"], r["predicted"], r["empirical"], label=m))
           for m, r in record["relaxed"].items()]
    out.append(("budget", "Extractable fraction vs query budget",
                xplots.budget_curves(np.asarray(record["budget"]["n"]), record["budget"]["fractions"],
                                     p=record["budget"]["p"])))
    return out


def module_for(exp_type: str):
    """The table/figure module of an experiment type outside the membership-inference family, else None."""

    for mod in (sys.modules[__name__], unlearning_tables):
        if exp_type in mod.TYPES:
            return mod
    return None


def markdown(record: dict) -> tuple[str, list[tuple[str, bytes]]]:
    """(Markdown body, [(png file name, bytes)]) for table.md, for any type :func:`module_for` knows."""
    mod = module_for(record["experiment"]["type"])
    parts = [f"{caption}\n\n{_md(header, rows)}" for caption, header, rows in mod.tables(record)]
    pngs = []
    for stem, caption, png in mod.figures(record):
        pngs.append((f"{stem}.png", png))
        parts.append(f"![{caption}]({stem}.png)")
    return "\n\n".join(parts), pngs
