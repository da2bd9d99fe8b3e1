"""Extraction experiments: the sampling-resolution effect, PII extraction AR vs DLM, relaxed extraction.

- ``extraction-steps``: a DLM fine-tuned on member passages (the ``mia`` experiments'
  model); one mask per member; median Δ log p̂ of each step count relative to one step.
- ``pii-extraction``: AR and DLM models of one lineage (the DLM is the AR base
  adapted), fine-tuned on the same synthetic PII messages with the same tokenizer,
  data and epochs; e-mails and phones extracted from their left context; counts of
  (n, p)-discoverable records for AR, DLM one-step and DLM max-step, and the shift of
  log p̂ between training and unseen messages.
- ``extraction-relaxed``: the same PII models; a suffix mask; Gaussian-predicted vs
  empirical Pr(d ≤ ε) of sampled generations (DLM: max steps); and, for every training
  message's e-mail (``budget_mask``, left context), the extractable fraction vs the
  query budget n.
"""

from __future__ import annotations

import time
from dataclasses import fields

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.data.pii import pii_corpus
from lmaudit.errors import LmauditError
from lmaudit.extraction.discoverable import success_within
from lmaudit.extraction.reconstruct import redact, redacted_records
from lmaudit.runs.extract import ExtractConfig, run_extraction
from lmaudit.runs.pii import ReconstructConfig, run_reconstruction


def extract_config(raw: dict, seed: int, **overrides) -> ExtractConfig:
    """The experiment's ``[extract]`` table as an :class:`ExtractConfig` (unknown keys are errors)."""
    known = {f.name for f in fields(ExtractConfig)}
    for key in raw:
        if key not in known:
            raise LmauditError(f"unknown key 'extract.{key}'", hint=f"known keys: {', '.join(sorted(known))}")
    return ExtractConfig(**{**raw, **overrides, "seed": seed})


def _finite_median(x) -> float:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else float("nan")


def _mean_std(values: list[float]) -> list[float]:
    return [float(np.mean(values)), float(np.std(values))]


def _labels(summary: dict) -> list[str]:
    return [k for k, v in summary.items() if isinstance(v, dict)]


def run_steps(ws) -> dict:
    per_label: dict[str, list[dict]] = {}
    monotone, columns = [], {}
    for seed in ws.cfg.seeds:
        members, _, _, target = ws.fine_tuned_run(seed)
        payload = run_extraction(ws.load(target), members, extract_config(ws.cfg.extract, seed))
        for label in _labels(payload["summary"]):
            per_label.setdefault(label, []).append(payload["summary"][label])
        monotone.append(payload["summary"].get("monotone_fraction", float("nan")))
        if seed == ws.cfg.seeds[0]:
            columns = {lb: payload["records"][f"log_p_hat@{lb}"] for lb in _labels(payload["summary"])}
            n_masked = payload["n_masked"]
    steps = {label: {"median_delta_log_p": _mean_std([r["median_delta_log_p"] for r in rows]),
                     "median_log_p_hat": _mean_std([r["median_log_p_hat"] for r in rows]),
                     "forwards_per_record": float(np.mean([r["mean_forwards_per_record"] for r in rows])),
                     "per_seed": rows}
             for label, rows in per_label.items()}
    deltas = [steps[lb]["median_delta_log_p"][0] for lb in steps]
    return {"steps": steps, "monotone_fraction": _mean_std(monotone), "n_masked": n_masked,
            "median_delta_monotone": bool(np.all(np.diff(deltas) >= 0)), "log_p_columns": columns}


def pii_models(ws, seed: int, kinds=("ar", "dlm")):
    """(train, unseen, {kind: path}): each kind fine-tuned on the same PII messages."""

    c = ws.cfg
    train, unseen = pii_corpus(ws.corpus, c.n_members, c.n_nonmembers, seed=seed, passage_chars=c.passage_chars)
    return train, unseen, {kind: ws.finetuned(ws.base(kind=kind), train, seed) for kind in kinds}


def run_reconstruction_experiment(ws) -> dict:
    """Top-1 ASR per ranking signal for redacted e-mails and phones of training messages (DLM)."""


    c = ws.cfg
    asr: dict[str, dict[str, list]] = {}
    extra: dict[str, dict[str, list]] = {}
    for seed in c.seeds:
        train, _, models = pii_models(ws, seed, kinds=("dlm",))
        target, base = ws.load(models["dlm"]), ws.load(ws.base(kind="dlm"))
        for field in c.pii_fields:
            recs = redacted_records(redact(TextSet(train.records[: c.n_targets], source=train.source), field), field)
            calib_set = TextSet(train.records[c.n_targets : c.n_targets + c.n_calibration], source=train.source)
            calib = redacted_records(redact(calib_set, field), field)
            cfg = ReconstructConfig(**{"field": field, **c.reconstruct, "seed": seed})
            t0 = time.perf_counter()
            out = run_reconstruction(target, recs, cfg, reference=base, calibration=calib)
            per_record = (time.perf_counter() - t0) / (len(recs) + len(calib))
            for signal, a in out["asr"].items():
                asr.setdefault(signal, {}).setdefault(field, []).append(a["percent"])
            e = extra.setdefault(field, {"coverage": [], "alpha": [], "seconds_per_record": [], "mean_candidates": []})
            e["coverage"].append(out["coverage"]["percent"])
            e["alpha"].append(out["alpha"])
            e["seconds_per_record"].append(per_record)
            e["mean_candidates"].append(out["mean_candidates"])
    return {"asr": asr, "fields": extra, "n_targets": c.n_targets, "n_calibration": c.n_calibration}


def run_pii(ws) -> dict:
    c = ws.cfg
    rows: dict[str, list[dict]] = {}
    shift: dict[str, dict[str, list]] = {}
    for seed in c.seeds:
        train, unseen, models = pii_models(ws, seed)
        for field in c.pii_fields:
            for kind, steps in (("ar", ["1"]), ("dlm", ["1", "max"])):
                cfg = extract_config(c.extract, seed, mask=f"pii:{field}", steps=steps, context="left")
                on = {name: run_extraction(ws.load(models[kind]), data, cfg) for name, data in
                      (("train", train), ("unseen", unseen))}
                for label in _labels(on["train"]["summary"]):
                    setting = "AR" if kind == "ar" else {"1": "DLM one-step", "max": "DLM max-step"}[label]
                    key = f"{field} / {setting}"
                    entry = {k: v for k, v in on["train"]["summary"][label].items() if k.startswith("discoverable")}
                    lp = {name: on[name]["records"][f"log_p_hat@{label}"] for name in on}
                    entry.update({"median_log_p_train": _finite_median(lp["train"]),
                                  "median_log_p_unseen": _finite_median(lp["unseen"]),
                                  "unseen_discoverable": {k: v for k, v in on["unseen"]["summary"][label].items()
                                                          if k.startswith("discoverable")}})
                    rows.setdefault(key, []).append(entry)
                    if seed == c.seeds[0]:
                        shift[key] = lp
    return {"pii_rows": rows, "likelihood_shift": shift, "n_train": c.n_members, "n_unseen": c.n_nonmembers}


def run_relaxed(ws) -> dict:
    c = ws.cfg
    ns = np.unique(np.round(np.logspace(0, 6, 61)).astype(np.int64))
    out: dict = {"budget": {"n": ns.tolist(), "p": c.budget_p, "mask": c.budget_mask, "fractions": {}}, "relaxed": {}}
    seed = c.seeds[0]
    train, _, models = pii_models(ws, seed)
    data = TextSet(train.records[: c.n_relaxed], source=train.source)
    for kind in ("ar", "dlm"):
        steps = ["1"] if kind == "ar" else ["1", "max"]
        payload = run_extraction(ws.load(models[kind]), data, extract_config(c.extract, seed, steps=[steps[-1]]))
        out["relaxed"]["AR" if kind == "ar" else "DLM"] = payload["relaxed"]
        out["n_masked"] = payload["n_masked"]
        # the query-budget curve: every training message, the budget mask, left context only
        budget_cfg = extract_config({k: v for k, v in c.extract.items() if k not in ("relaxed", "mask")}, seed,
                                    steps=steps, mask=c.budget_mask, context="left")
        payload = run_extraction(ws.load(models[kind]), train, budget_cfg)
        for label in _labels(payload["summary"]):
            name = "AR" if kind == "ar" else {"1": "DLM one-step", "max": "DLM max-step"}[label]
            p_hat = np.asarray(payload["records"][f"p_hat@{label}"])
            reached = success_within(p_hat[:, None], ns[None, :]) >= c.budget_p  # (records, n)
            out["budget"]["fractions"][name] = reached.mean(axis=0).tolist()
    out["budget"]["n_records"] = len(train)
    return out
