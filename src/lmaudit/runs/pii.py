"""PII reconstruction: recover a redacted field by generating candidates and ranking them.

A record is a text with one placeholder (``[REDACTED]`` by default) where the value
was, and, for evaluation, the true value. Candidates come from the model itself (a
DLM fills ``mask_length`` mask tokens at the placeholder; an AR model continues the
left context); they are trimmed to the field's pattern and de-duplicated. Each
candidate is filled back into the record and ranked (higher = more likely true):

- ``ce``: −cross-entropy of the filled text under random 35% masks (DLM; mean NLL for AR);
- ``skew_pii`` / ``skew_context``: Q-Skew of Δ = log p_target − log p_reference over a
  window of ``window`` tokens around the field, cyclic masks restricted to the field
  or to the context (DLM with a reference);
- ``combined``: −(1−α)·Z(ce) + α·Z(skew) with z-scores over the candidate set (α fitted, or given);
  ``combined_paper``: the same at the paper's fixed α = 0.1
  (Z(ce) of the cross-entropy, so lower loss ranks higher).

Two modes. ``generation`` (the default) ranks the generated candidates only: a record
whose true value was never generated is a miss for every signal, so the ASR is bounded
by the coverage. ``inference`` (``include_truth``, as in PII-inference evaluations) adds
the true value to each record's candidates (once, last, so a tie never favours it; a
record with no generated candidate stays a miss): the signals are compared as rankers
even where generation misses. Every score is computed per candidate, so the inference
run also reports what generation mode gives (the ranks over the generated subset).

The models' handles travel whole: candidates come from the adapter's ``fill``, and how a token is scored (the
adapter's ``scoring``) picks how a candidate is scored and whether Q-Skew has masked windows to read
(:mod:`lmaudit.runs.pii_candidates`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.errors import DataError
from lmaudit.extraction.reconstruct import (
    PAPER_ALPHA,
    PATTERNS,
    PIIRecord,
    alpha_sweep,
    asr,
    combined,
    fit_alpha,
    rank_of,
)
from lmaudit.progress import progress
from lmaudit.report.build import pii_report
from lmaudit.report.summary import pii_summary
from lmaudit.runs.common import Job, RunResult, register_job, shown_ids, write_results
from lmaudit.runs.pii_candidates import SKEW_SCORING, ce_scores, generate_candidates, mask_length_setting, skew_scores
from lmaudit.settings import boolean, check_settings, fraction, integer, non_negative, one_of, seed_value, setting

TYPE = "pii-reconstruction"  # the folder kind its results are written as (its Job's type)


@dataclass
class ReconstructConfig:
    """Settings of a PII reconstruction (recorded in ``results.json``): the field, how many candidates are generated
    and at what mask lengths, and how the ``combined`` signal weighs cross-entropy against Q-Skew (``alpha``).

    Examples
    --------
    >>> lmaudit.ReconstructConfig(field="phone", mask_length=[8, 12], alpha=0.3).mask_length
    [8, 12]
    >>> lmaudit.ReconstructConfig(alpha=5)
    Traceback (most recent call last):
    ...
    lmaudit.errors.SettingError: alpha must be in [0, 1] (or 'auto'), got 5
    """

    field: str = setting("email", check=one_of(tuple(PATTERNS), noun="field"))
    candidates: int = setting(64, check=integer(1))
    # a list spreads the candidates over several lengths
    mask_length: int | list[int] = setting(20, check=mask_length_setting)
    steps: int | None = setting(None, check=integer(1, optional=True))  # DLM denoising steps (default: mask_length)
    temperature: float = setting(1.0, check=non_negative())  # 0: greedy
    alpha: float | str = setting("auto", check=fraction(also=("auto",)))  # "auto": fitted on calibration records
    skew_signal: str = setting("pii", check=one_of(("pii", "context"), noun="skew signal"))  # what combined uses
    window: int = setting(20, check=integer(2))
    ce_batches: int = setting(8, check=integer(1))
    include_truth: bool = setting(False, check=boolean())  # inference mode: the true value joins the candidates
    seed: int = setting(0, check=seed_value())

    def __post_init__(self) -> None:
        """Every setting is checked here (its constraint is declared beside it), before any model is loaded."""
        check_settings(self)


def score_record(target, reference, rec: PIIRecord, cfg: ReconstructConfig) -> dict:
    """Candidates of one record and every available signal's scores over them.

    ``values`` are the generated candidates, then (``include_truth``) the true value when
    it was not generated; ``n_generated`` says how many of ``values`` were generated.
    """
    values = generate_candidates(target, rec, cfg.field, n=cfg.candidates, mask_length=cfg.mask_length,
                                 steps=cfg.steps, temperature=cfg.temperature, seed=cfg.seed)
    n_generated = len(values)
    if not values:
        return {"values": [], "n_generated": 0, "truth": rec.truth}
    if cfg.include_truth and rec.truth is not None and rec.truth not in values:
        values = values + [rec.truth]
    out = {"values": values, "n_generated": n_generated, "truth": rec.truth,
           "ce": ce_scores(target, [rec.filled(v) for v in values], batches=cfg.ce_batches, seed=cfg.seed)}
    if reference is not None and target.adapter.scoring in SKEW_SCORING:
        for where in ("pii", "context"):
            out[f"skew_{where}"] = skew_scores(target, reference, rec, values, where=where, window=cfg.window,
                                               seed=cfg.seed)
        out["skew"] = out[f"skew_{cfg.skew_signal}"]
    return out


def generated_only(case: dict) -> dict:
    """A scored case restricted to its generated candidates (what generation mode ranks)."""
    n = case["n_generated"]
    return {k: (v[:n] if k in ("values", "ce", "skew", "skew_pii", "skew_context") else v) for k, v in case.items()}


def evaluate(cases: list[dict], calib: list[dict], alpha: float | str) -> dict:
    """ASR (count, percent, Wilson 95% interval) and per-record ranks of every signal over scored ``cases``.

    ``alpha="auto"`` fits α on the ``calib`` cases (0.5 without any); the α sweep
    re-ranks ``combined`` at α = 0, 0.1, …, 1 without a forward pass.
    """
    has_skew = any("skew" in c for c in cases)
    calib_hits = None
    if has_skew and alpha == "auto":
        usable = [c for c in calib if "skew" in c]
        alpha, calib_hits = fit_alpha(usable) if usable else (0.5, None)
    signals = ["ce"] + (["skew_pii", "skew_context", "combined", "combined_paper"] if has_skew else [])
    weight = {"combined": float(alpha), "combined_paper": PAPER_ALPHA} if has_skew else {}  # fitted, and the paper's
    ranks: dict[str, list] = {s: [] for s in signals}
    for c in cases:
        for s in signals:
            if not c["values"]:
                ranks[s].append(None)
                continue
            score = combined(c["ce"], c["skew"], weight[s]) if s in weight else c[s]
            ranks[s].append(rank_of(score, c["values"], c["truth"]))
    n = len(cases)
    return {"asr": {s: asr(sum(r == 1 for r in ranks[s]), n) for s in signals}, "ranks": ranks,
            "alpha": float(alpha) if has_skew else None, "calibration_hits": calib_hits,
            "alpha_sweep": alpha_sweep([c for c in cases if "skew" in c], n) if has_skew else None}


def run_reconstruction(target, records: list[PIIRecord], cfg: ReconstructConfig, *, reference=None,
                       calibration: list[PIIRecord] | None = None, placeholder: str = "[REDACTED]",
                       show_pii: bool = False) -> ReconstructionResult:
    """Rank candidates for every record; top-1 attack success rate (ASR) with Wilson 95% intervals per signal.

    ``mode`` says whether the true value was added to the candidates (``inference``) or
    not (``generation``); ``coverage`` is always of the generated candidates. In
    inference mode ``generation`` holds the ASRs (and α) of generation mode, from the
    same scores. ``alpha_sweep`` is the ASR of ``combined`` at α = 0, 0.1, …, 1.
    """

    if any(r.truth is None for r in records):
        missing = next(r.id for r in records if r.truth is None)
        raise DataError(f"record '{missing}' has no true '{cfg.field}' value to evaluate against",
                        hint=f"add a '{cfg.field}' column with the true value")
    with progress("PII reconstruction", total=len(records) + len(calibration or [])) as bar:
        def scored(recs):
            out = []
            for r in recs:
                out.append(score_record(target, reference, r, cfg))
                bar.advance()
            return out

        cases, calib = scored(records), scored(calibration or [])
    mode = "inference" if cfg.include_truth else "generation"
    main = evaluate(cases, calib, cfg.alpha)
    n = len(records)
    generated = sum(c["truth"] in c["values"][: c["n_generated"]] for c in cases)
    payload = {"type": TYPE, "mode": mode, "dtype": target.dtype, "device": target.device,
               "n_records": n, "asr": main["asr"], "coverage": asr(generated, n),
               "alpha": main["alpha"], "calibration_hits": main["calibration_hits"],
               "alpha_sweep": main["alpha_sweep"], "n_calibration": len(calibration or []),
               "mean_candidates": float(np.mean([c["n_generated"] for c in cases])),
               "records": {"id": [r.id for r in records], "n_candidates": [c["n_generated"] for c in cases],
                           "truth_generated": [c["truth"] in c["values"][: c["n_generated"]] for c in cases],
                           **{f"rank_{s}": main["ranks"][s] for s in main["ranks"]}},
               "_cases": cases}
    if mode == "inference":
        gen = evaluate([generated_only(c) for c in cases], [generated_only(c) for c in calib], cfg.alpha)
        payload["generation"] = {"asr": gen["asr"], "alpha": gen["alpha"], "calibration_hits": gen["calibration_hits"],
                                 "ranks": gen["ranks"]}
    payload.update({"config": {**cfg.__dict__, "placeholder": placeholder}, "model": target.path,
                    "reference": None if reference is None else reference.path, "show_pii": show_pii})
    return ReconstructionResult(payload)


def write_reconstruction(payload: dict, out: Path, *, show_pii: bool, report: bool = False) -> Path:
    """results.json (with provenance) and records.csv (ranks only); candidates.jsonl with the values only when
    ``show_pii``."""
    cases = payload["_cases"]

    def candidates(folder: Path) -> None:
        with open(folder / "candidates.jsonl", "w", encoding="utf-8") as fh:
            for rid, c in zip(payload["records"]["id"], cases):
                fh.write(json.dumps({"id": rid, "truth": c["truth"], "candidates": c["values"],
                                     "n_generated": c["n_generated"],
                                     **{k: [float(x) for x in c[k]] for k in ("ce", "skew_pii", "skew_context")
                                        if k in c}}) + "\n")

    return write_results(out, {k: v for k, v in payload.items() if k != "_cases"}, kind=TYPE,
                         tables={"records.csv": pd.DataFrame(shown_ids(payload["records"], show_pii))},
                         files=candidates if show_pii else None, report=report)


class ReconstructionResult(RunResult):
    """A PII reconstruction run: ``to_frame()`` has one row per record (ranks only, as ``records.csv``)."""

    def headline(self) -> str:
        return pii_summary(self.payload).headline

    def _write(self, out: Path, report: bool) -> Path:
        return write_reconstruction(self.payload, out, show_pii=bool(self.payload.get("show_pii")), report=report)


JOB = register_job(Job("reconstruct_pii", TYPE, "pii", ReconstructionResult,
                       run_reconstruction, ReconstructConfig, pii_report))
