"""``pii-extraction``: (n, p)-discoverable e-mails and phones for AR, DLM one-step and DLM max-step.

AR and DLM models of one lineage (the DLM is the AR base adapted) are fine-tuned on the
same synthetic PII messages with the same tokenizer, data and epochs; each e-mail or phone
is extracted from its left context. On a pretrained ``base`` (an AR model): with ``kind = "ar"`` the AR rows only,
with ``kind = "dlm"`` that model and the DLM adapted from it (``adapt_*``), fine-tuned alike.
Payload: ``pii_rows`` (per "field / setting", per
seed: discoverable counts on training and unseen messages, median log p̂ of each; DLM rows: the
convergence of p̂ in the number of orders on the training messages),
``likelihood_shift`` (per-record log p̂ on training and unseen messages, first seed),
``n_train`` and ``n_unseen``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace, extract_config, step_labels
from lmaudit.models.kinds import exact_extraction, extraction_row, extraction_steps, lineage
from lmaudit.report import extraction_plots as xplots
from lmaudit.settings import each, setting, table, text


@dataclass
class PIIExtractionConfig(BaseConfig):
    # keys of ExtractConfig (mask, steps and context are set per run)
    extract: dict = setting(default_factory=dict, check=table())
    pii_fields: list[str] = setting(default_factory=lambda: ["email", "phone"], check=each(text()))


def _finite_median(x) -> float:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else float("nan")


def run(ws: Workspace, cfg: PIIExtractionConfig) -> dict:
    """Extract every field of the training and unseen messages with each model and step setting."""
    rows: dict[str, list[dict]] = {}
    shift: dict[str, dict[str, list]] = {}
    # the models of the experiment's lineage: an AR experiment has the AR rows alone, a DLM one both models (on a
    # pretrained base: that AR model and the DLM adapted from it)
    kinds = lineage(cfg.kind)
    for seed in cfg.seeds:
        train, unseen, models = ws.pii_models(seed, kinds=list(kinds))
        for pii_field in cfg.pii_fields:
            for kind in kinds:
                xcfg = extract_config(cfg.extract, seed, mask=f"pii:{pii_field}", steps=extraction_steps(kind),
                                      context="left")
                on = {name: ws.extract(models[kind], data, xcfg) for name, data in
                      (("train", train), ("unseen", unseen))}
                for label in step_labels(on["train"]["summary"]):
                    key = f"{pii_field} / {extraction_row(kind, label)}"
                    entry = {k: v for k, v in on["train"]["summary"][label].items() if k.startswith("discoverable")}
                    lp = {name: on[name]["records"][f"log_p_hat@{label}"] for name in on}
                    entry.update({"median_log_p_train": _finite_median(lp["train"]),
                                  "median_log_p_unseen": _finite_median(lp["unseen"]),
                                  "unseen_discoverable": {k: v for k, v in on["unseen"]["summary"][label].items()
                                                          if k.startswith("discoverable")}})
                    # an exact p̂ (AR: one left-to-right pass) has no sampled orders to converge over
                    if not exact_extraction(kind) and "convergence" in on["train"]["summary"][label]:
                        entry["convergence"] = on["train"]["summary"][label]["convergence"]
                    rows.setdefault(key, []).append(entry)
                    if seed == cfg.seeds[0]:
                        shift[key] = lp
    return {"pii_rows": rows, "likelihood_shift": shift, "n_train": cfg.n_members, "n_unseen": cfg.n_nonmembers}


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """One row per field and setting: discoverable counts (train, unseen) per p and median log p̂ (mean over seeds)."""
    first = next(iter(record["pii_rows"].values()))[0]
    ps = [k.split("=")[1] for k in first if k.startswith("discoverable")]
    header = (["field / model"] + [f"train @p={p}" for p in ps] + [f"unseen @p={p}" for p in ps]
              + ["median log p̂ train", "median log p̂ unseen"])
    converges = any("convergence" in e for entries in record["pii_rows"].values() for e in entries)
    if converges:
        header.append("p̂ moved > 2× R/2 → R")
    rows = []
    for key, entries in record["pii_rows"].items():
        train = [np.mean([e[f"discoverable@p={p}"] for e in entries]) for p in ps]
        unseen = [np.mean([e["unseen_discoverable"][f"discoverable@p={p}"] for e in entries]) for p in ps]
        medians = [np.mean([e[k] for e in entries]) for k in ("median_log_p_train", "median_log_p_unseen")]
        rows.append([key] + [f"{v:.1f}" for v in train + unseen] + [f"{v:.2f}" for v in medians])
        if converges:
            moved = [e["convergence"]["not_converged_fraction"] for e in entries if "convergence" in e]
            exact = not key.endswith("max-step")  # AR: one forward; one step: every order gives the same p̂
            unknown = not moved or np.isnan(moved).any()  # not stored, or a seed with every p̂ = 0 (NaN)
            rows[-1].append("exact" if exact else "—" if unknown else f"{100 * max(moved):.1f}%")
    n = record["experiment"]["extract"].get("n", 10_000)
    caption = (f"(n, p)-discoverable records at n = {n:,} queries among {record['n_train']} training and "
               f"{record['n_unseen']} unseen messages (mean over seeds); each value is extracted from its left "
               "context only" + (", for both model kinds." if any("DLM" in key for key in record["pii_rows"]) else ".")
               + (" The last column: the share of training records whose DLM p̂ changed by more than 2× between "
                  "the first half of the sampled orders and all of them (the highest over seeds; the AR p̂ and "
                  "the one-step p̂, the same for every order, are exact; — where it cannot be checked)."
                  if converges else ""))
    return [(caption, header, rows)]


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """Histograms of log10 p̂ on training vs unseen messages, one per field and setting (first seed)."""
    out = []
    for key, lp in record["likelihood_shift"].items():
        stem = "shift_" + key.replace(" / ", "_").replace(" ", "_").replace("-", "_").lower()
        out.append((stem, f"Training vs unseen log10 p̂: {key}",
                    xplots.likelihood_shift(np.asarray(lp["train"], float), np.asarray(lp["unseen"], float),
                                            title=key)))
    return out


register_experiment("pii-extraction", config=PIIExtractionConfig, run=run, tables=tables, figures=figures)
