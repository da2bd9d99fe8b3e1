"""How membership results read in a table: the cells (an interval, a TPR, a paired difference) and the notes
printed under the tables of the terminal and the report."""

from __future__ import annotations

from lmaudit.metrics import TPR_POINTS

READING_NOTE = ("Δ vs best = AUC(best) − AUC(attack) with a paired 95% interval on the same bootstrap resamples; "
                "'≈ best' marks an attack whose interval contains 0, which the data cannot tell from the best: "
                "claims that one attack beats another are read from these intervals, not from the AUCs alone. "
                "TPR@FPR is read conservatively, at ROC vertices only (a threshold cannot split tied scores), "
                "the staircase the ROC plots draw; the AUC counts a tied member/non-member pair as one half.")
BLIND_NOTE = ("Rows marked (no model) are blind baselines: classifiers of the texts alone (n-grams, simple features), "
              "each text scored by one fitted without it (out of fold). Δ vs blind = AUC(attack) − AUC(best blind "
              "baseline) with a paired 95% interval; 'beyond' marks an attack whose interval lies above 0, the part "
              "of its AUC the sets' own differences do not explain.")
PRIOR_NOTE = ("Rows marked (reference's own) score the sets with the reference model as if it were the target: it "
              "never saw the members, so their AUC should be near 0.5. Δ vs prior = AUC(attack) − AUC(the same "
              "attack on the reference), paired; 'beyond' marks what the target adds to what a model that never saw "
              "the members already sees.")


def ci_text(ci, *, percent: bool = False) -> str:
    """``[lo, hi]`` of an interval (as percentages with ``percent``), or "-" when none was computed."""
    if ci is None:
        return "-"
    lo, hi = (100 * v for v in ci) if percent else ci
    return f"[{lo:.1f}, {hi:.1f}]" if percent else f"[{lo:.3f}, {hi:.3f}]"


def tpr_text(metrics: dict, key: str, *, ci: bool = False) -> str:
    """A TPR of :func:`~lmaudit.metrics.summarize`'s output as a percentage (with ``ci``, its interval too), or the
    reason it cannot be measured."""
    value = metrics.get(key)
    if value is None:
        return metrics.get("unresolved", {}).get(key, "n/a")
    interval = metrics.get(f"{key}_ci95") if ci else None
    return f"{100 * value:.1f}%" + (f" {ci_text(interval, percent=True)}" if interval is not None else "")


def vs_best_text(name: str, metrics: dict) -> str:
    """Attack ``name``'s ``vs_best`` entry (:func:`~lmaudit.metrics.summarize_attacks`) as a table cell: "best",
    "0.032 [0.010, 0.055]", "0.012 [-0.004, 0.031] ≈ best", or "-" in results written before it existed."""
    vs = metrics.get("vs_best")
    if vs is None:
        return "-"
    if vs["best"] == name:
        return "best"
    text = f"{vs['diff']:.3f}" + ("" if vs["ci95"] is None else f" {ci_text(vs['ci95'])}")
    return text + (" ≈ best" if vs["tied"] else "")


def vs_blind_text(metrics: dict) -> str:
    """An attack's ``vs_blind`` entry as a table cell: "+0.112 [+0.051, +0.170] beyond" when the paired interval of
    AUC(attack) − AUC(best blind baseline) lies above 0, "+0.010 [-0.040, +0.061]" otherwise, "-" without one."""
    return _vs_text(metrics.get("vs_blind"))


def vs_prior_text(metrics: dict) -> str:
    """An attack's ``vs_prior`` entry as a table cell, as :func:`vs_blind_text` writes ``vs_blind``."""
    return _vs_text(metrics.get("vs_prior"))


def _vs_text(vs: dict | None) -> str:
    if vs is None:
        return "-"
    text = f"{vs['diff']:+.3f}" + ("" if vs["ci95"] is None else f" [{vs['ci95'][0]:+.3f}, {vs['ci95'][1]:+.3f}]")
    return text + (" beyond" if vs.get("beyond") else "")


def metric_rows(attacks: dict[str, dict], set_check: dict | None, *,
                details: bool = False) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a membership run's table, best AUC first: every attack with its paired differences to the
    best, the best blind baseline and its own score on the reference (columns only when the run has them), then
    the blind baselines' rows and the reference's own rows. ``details`` (the report) adds the forwards and
    parameters of each row and writes why an unmeasured TPR is missing; the terminal says "n/a"."""
    blind = (set_check or {}).get("baselines") or {}
    prior = ((set_check or {}).get("reference") or {}).get("attacks") or {}
    header = ["attack", "AUC", "95% CI", "Δ vs best [95% CI]", *(["Δ vs blind [95% CI]"] if blind else []),
              *(["Δ vs prior [95% CI]"] if prior else []), "TPR@10%FPR", "TPR@1%FPR", "TPR@0.1%FPR",
              *(["forwards", "parameters"] if details else [])]

    def tprs(m: dict) -> list[str]:
        return [tpr_text(m, key, ci=True) if details or m.get(key) is not None else "n/a" for key in TPR_POINTS]

    rows = []
    for name, m in sorted(attacks.items(), key=lambda kv: -kv[1]["auc"]):
        rows.append([name, f"{m['auc']:.3f}", ci_text(m["auc_ci95"]), vs_best_text(name, m),
                     *([vs_blind_text(m)] if blind else []), *([vs_prior_text(m)] if prior else []), *tprs(m),
                     *([f"{m.get('forwards_per_sample', 1):g}",
                        ", ".join(f"{k}={v}" for k, v in m["params"].items()) or "-"] if details else [])])
    dashes = ["-"] * (1 + bool(blind) + bool(prior))
    for name, m in sorted(blind.items(), key=lambda kv: -kv[1]["auc"]):  # model-free rows, below the attacks
        rows.append([f"{name} (no model)", f"{m['auc']:.3f}", ci_text(m["auc_ci95"]), *dashes, *tprs(m),
                     *(["0", "out of fold"] if details else [])])
    for name, m in sorted(prior.items(), key=lambda kv: -kv[1]["auc"]):  # the reference's own scores, AUC only
        rows.append([f"{name} (reference's own)", f"{m['auc']:.3f}", ci_text(m["auc_ci95"]), *dashes,
                     *("-" for _ in TPR_POINTS), *(["-", f"Mann–Whitney p = {m['p']:.2g}"] if details else [])])
    return header, rows
