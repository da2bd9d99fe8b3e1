"""Markdown tables and figures of the unlearning-audit experiment (table.md and the HTML report)."""

from __future__ import annotations

import numpy as np

from lmaudit.report import plots

TYPES = ("unlearning-audit",)


def _split(key: str) -> tuple[str, str, str]:
    frac, method, audit = key.split(" / ")
    return frac, method, audit


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    table = record["unlearning"]
    fracs = list(dict.fromkeys(_split(k)[0] for k in table))
    methods = list(dict.fromkeys(_split(k)[1] for k in table))
    audits = list(dict.fromkeys(_split(k)[2] for k in table))
    out = []
    for frac in fracs:
        rows = []
        for method in methods:
            rows.append([method] + [f"{table[f'{frac} / {method} / {a}']['mean']:.2f} ± "
                                    f"{table[f'{frac} / {method} / {a}']['std']:.2f}" for a in audits])
        gold = {a: table[f"{frac} / retrain / {a}"]["mean"] for a in audits} if "retrain" in methods else None
        caption = (f"Forget {100 * float(frac):g}% of the training set: estimated ρ (fraction of the forget set that "
                   "looks unseen; mean ± std over seeds). 'none' should read 0 and 'retrain' (the gold standard) 1.")
        if gold:
            caption += " Retrain as measured by each audit: " + ", ".join(f"{a} {v:.2f}" for a, v in gold.items()) + "."
        out.append((caption, ["method"] + audits, rows))
    cost = record["cost_s"]
    audit_s = lambda m: (cost["features"] or 0) + (cost[m] or 0)  # noqa: E731
    cost_rows = [["SMI (hidden features + estimate)", f"{audit_s('smi'):.2f}"],
                 ["SMI-M (hidden features + estimate)", f"{audit_s('smi-m'):.2f}"],
                 ["SMI / SMI-M on score features (estimate only; the scores come with the probes)",
                  f"{cost.get('smi-scores') or 0:.3f} / {cost.get('smi-m-scores') or 0:.3f}"],
                 ["LiRA: shadow training (once per seed)", f"{cost['lira_shadow_training']:.1f}"],
                 ["LiRA: target + shadow probes (per model audited)", f"{cost['lira_probes']:.2f}"]]
    out.append(("Cost per audit in seconds (mean over runs; shadow training from the model cache is near 0 on "
                "a re-run — the first run's figure is in the note).", ["audit", "seconds"], cost_rows))
    return out


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """ρ by method for each audit (largest forget fraction), as grouped bars."""
    plt = plots._plt()
    table = record["unlearning"]
    frac = sorted({_split(k)[0] for k in table}, key=float)[-1]
    methods = list(dict.fromkeys(_split(k)[1] for k in table))
    audits = list(dict.fromkeys(_split(k)[2] for k in table))
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    width = 0.8 / len(audits)
    for i, a in enumerate(audits):
        means = [table[f"{frac} / {m} / {a}"]["mean"] for m in methods]
        stds = [table[f"{frac} / {m} / {a}"]["std"] for m in methods]
        ax.bar(np.arange(len(methods)) + i * width, means, width, yerr=stds, label=a,
               color=plots._PALETTE[i % len(plots._PALETTE)], capsize=2)
    ax.set_xticks(np.arange(len(methods)) + 0.4 - width / 2, methods)
    ax.set(ylabel="estimated ρ (forget set looks unseen)", ylim=(0, 1.05),
           title=f"Unlearning audit, forget {100 * float(frac):g}%")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    return [("rho_by_method", "Estimated ρ per unlearning method and audit", plots._png(fig))]
