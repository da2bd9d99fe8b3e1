"""``extraction-relaxed``: Gaussian-predicted vs empirical relaxed extraction, and extraction vs query budget.

The PII models of ``pii-extraction`` (first seed); a suffix mask (``[extract] mask``) on
``n_relaxed`` training messages; Gaussian-predicted vs empirical Pr(d ≤ ε) of sampled
generations (DLM: max steps); and, for every training message's ``budget_mask`` (left
context), the fraction extractable with probability ≥ ``budget_p`` as the query budget n
grows. Payload: ``relaxed`` (per model: ε, predicted and empirical rates, mean |error|),
``budget`` (n grid, p, mask, per-setting fractions, record count) and ``n_masked``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace, extract_config, step_labels
from lmaudit.extraction.discoverable import success_within
from lmaudit.models.kinds import extraction_row, extraction_steps, label
from lmaudit.report import extraction_plots as xplots
from lmaudit.settings import fraction, integer, setting, table, text

BUDGET_POINTS = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)  # the budget table's columns


@dataclass
class RelaxedConfig(BaseConfig):
    extract: dict = setting(default_factory=dict, check=table())  # keys of ExtractConfig (mask, relaxed, ...)
    n_relaxed: int = setting(30, check=integer(1))  # training messages sampled for the relaxed comparison
    budget_p: float = setting(0.5, check=fraction())  # target probability of the query-budget curve
    budget_mask: str = setting("pii:email", check=text())  # the mask of the query-budget curve


def run(ws: Workspace, cfg: RelaxedConfig) -> dict:
    """Relaxed extraction of the suffix of ``n_relaxed`` messages, then the budget curve of every message."""
    ns = np.unique(np.round(np.logspace(0, 6, 61)).astype(np.int64))
    out: dict = {"budget": {"n": ns.tolist(), "p": cfg.budget_p, "mask": cfg.budget_mask, "fractions": {}},
                 "relaxed": {}}
    seed = cfg.seeds[0]
    train, _, models = ws.pii_models(seed)
    data = TextSet(train.records[: cfg.n_relaxed], source=train.source)
    for kind in ("ar", "dlm"):
        steps = extraction_steps(kind)  # the relaxed samples: the last (a DLM's max steps)
        payload = ws.extract(models[kind], data, extract_config(cfg.extract, seed, steps=[steps[-1]]))
        out["relaxed"][label(kind)] = payload["relaxed"]
        out["n_masked"] = payload["n_masked"]
        # the query-budget curve: every training message, the budget mask, left context only
        budget_cfg = extract_config({k: v for k, v in cfg.extract.items() if k not in ("relaxed", "mask")}, seed,
                                    steps=steps, mask=cfg.budget_mask, context="left")
        payload = ws.extract(models[kind], train, budget_cfg)
        for step in step_labels(payload["summary"]):
            p_hat = np.asarray(payload["records"][f"p_hat@{step}"])
            reached = success_within(p_hat[:, None], ns[None, :]) >= cfg.budget_p  # (records, n)
            out["budget"]["fractions"][extraction_row(kind, step)] = reached.mean(axis=0).tolist()
    out["budget"]["n_records"] = len(train)
    return out


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """Pr(d ≤ ε) per ε (Gaussian vs empirical, DLM and AR), then the extractable fraction at a few budgets."""
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
    """Pr(d ≤ ε) per model (Gaussian vs empirical) and the extractable fraction against the query budget."""
    out = [(f"relaxed_{m.lower()}", f"Relaxed extraction, {m}: Gaussian vs empirical",
            xplots.relaxed_rates(r["eps"], r["predicted"], r["empirical"], label=m))
           for m, r in record["relaxed"].items()]
    out.append(("budget", "Extractable fraction vs query budget",
                xplots.budget_curves(np.asarray(record["budget"]["n"]), record["budget"]["fractions"],
                                     p=record["budget"]["p"])))
    return out


register_experiment("extraction-relaxed", config=RelaxedConfig, run=run, tables=tables, figures=figures)
