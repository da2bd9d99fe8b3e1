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
adapter's ``scoring``) picks how a candidate is scored (:data:`CANDIDATE_LOGP`) and whether Q-Skew has masked
windows to read (:data:`SKEW_SCORING`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.attacks.q_skew import weighted_skew
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import DataError, LmauditError, SettingError, check_int
from lmaudit.extraction.reconstruct import (
    PAPER_ALPHA,
    PIIRecord,
    alpha_sweep,
    asr,
    combined,
    dedupe,
    fit_alpha,
    rank_of,
    trim,
)
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.probes.ar import ARProbeConfig, ar_stats
from lmaudit.probes.masked import masked_stats, masked_window_stats
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.records import ArrayDict
from lmaudit.probes.segments import segment_mean
from lmaudit.probes.shards import run_sharded
from lmaudit.progress import progress
from lmaudit.report.build import pii_report
from lmaudit.report.summary import pii_summary
from lmaudit.runs.common import Job, RunResult, register_job, shown_ids, write_results
from lmaudit.settings import boolean, check_settings, fraction, integer, one_of, seed_value, setting
from lmaudit.utils import cache_dir, stable_hash, stable_seed


def mask_lengths(mask_length: int | list[int]) -> list[int]:
    """The mask lengths of a ``mask_length`` setting: one length, or a list (each checked ≥ 1)."""
    lengths = [mask_length] if isinstance(mask_length, int) and not isinstance(mask_length, bool) else mask_length
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise SettingError("mask_length", f"{{name}} must be an integer or a list of integers, got {mask_length!r}")
    return [check_int("mask_length", m, low=1, flag="--mask-length") for m in lengths]


def generate_candidates(loaded, rec: PIIRecord, field: str, *, n: int = 64, mask_length: int | list[int] = 20,
                        steps: int | None = None, temperature: float = 1.0, seed: int = 0) -> list[str]:
    """Trimmed, de-duplicated candidates from ``n`` independent generations at the placeholder.

    A list of mask lengths spreads the ``n`` generations evenly over them (the first
    lengths get the remainder): the attacker does not know how many tokens the value
    has, and a DLM fills every mask it is given (it cannot leave one empty), so a
    length far from the value's makes it pad or truncate the value. ``steps`` is capped
    at each length (default: one token per step).
    """

    tok = loaded.tokenizer
    left = np.asarray(tok(rec.left)["input_ids"], dtype=np.int64)
    lengths = mask_lengths(mask_length)
    right = np.asarray(tok(rec.right, add_special_tokens=False)["input_ids"], dtype=np.int64)
    texts = []
    for i, length in enumerate(lengths):
        k = n // len(lengths) + (i < n % len(lengths))
        if k == 0:
            continue
        # one length keeps the seed it always had, so earlier runs reproduce
        gen_seed = stable_seed("pii-candidates", rec.id, seed, *([length] if len(lengths) > 1 else []))
        x = np.concatenate([left, np.zeros(length, dtype=np.int64), right])  # the span's ids are filled in
        new = loaded.adapter.fill(x, np.arange(len(left), len(left) + length), samples=k,
                                  steps=min(steps or length, length), temperature=temperature, seed=gen_seed)
        texts += tok.batch_decode(new, skip_special_tokens=True)
    return dedupe(trim(t, field) for t in texts)


def _ar_logp(loaded, ts: TextSet, *, ratio: float, batches: int, seed: int):
    return ar_stats(loaded, ts, ARProbeConfig(), description="score candidates")


def _masked_logp(loaded, ts: TextSet, *, ratio: float, batches: int, seed: int):
    return masked_stats(loaded, ts, MaskPlan("random", budget=batches, rho=ratio), seed=seed)


# How a model scores a token (its adapter's ``scoring``) maps to how it scores a candidate text (its per-token
# log-probabilities): one causal pass (or a served model's prompt log-probabilities), or random masks
CANDIDATE_LOGP = {"left-to-right": _ar_logp, "served": _ar_logp, "masked": _masked_logp}


def ce_scores(loaded, texts: list[str], *, ratio: float = 0.35, batches: int = 8, seed: int = 0) -> np.ndarray:
    """−(mean masked cross-entropy) of each text: DLM under ``batches`` random masks of ``ratio``; AR: −mean NLL."""
    score = CANDIDATE_LOGP[loaded.adapter.scoring]
    stats = score(loaded, TextSet.from_texts(texts, prefix="c", source="candidates"), ratio=ratio, batches=batches,
                  seed=seed)
    return segment_mean(stats.logp.astype(np.float64), stats.offsets)


def _window(tok, rec: PIIRecord, value: str, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(window token ids, bool mask of the field's tokens in it).

    The context budget is ``width`` minus the field's length (at least 4 tokens, so a
    long candidate keeps some context); about 40% of it goes before the field.
    """
    left = tok(rec.left, add_special_tokens=False)["input_ids"]
    mid = tok(value, add_special_tokens=False)["input_ids"]
    right = tok(rec.right, add_special_tokens=False)["input_ids"]
    ctx = max(width - len(mid), 4)
    before = min(len(left), max(1, (2 * ctx) // 5))
    after = min(len(right), ctx - before)
    before = min(len(left), ctx - after)  # unused room after the field goes before it
    ids = left[len(left) - before :] + mid + right[:after]
    is_field = np.zeros(len(ids), dtype=bool)
    is_field[before : before + len(mid)] = True
    return np.asarray(ids, dtype=np.int64), is_field


WINDOW_VERSION = 1


@dataclass(frozen=True)
class WindowTask:
    """Masked statistics of candidate windows for one shard (picklable: runs here or on a Ray worker).

    A shard's records are candidates: ``target`` is the candidate value, ``fields``
    hold the record's ``left`` and ``right`` text and its ``record`` id. Masks fall on
    the field (``where="pii"``) or on its context (``"context"``) of each window.
    """

    plan: MaskPlan
    where: str
    width: int
    seed: int

    def windows(self, tokenizer, shard: TextSet) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
        windows, allowed, seeds = [], [], []
        for r in shard.records:
            rec = PIIRecord(r.fields["record"], r.fields["left"], r.fields["right"], None)
            w, is_field = _window(tokenizer, rec, r.target, self.width)
            allow = np.flatnonzero(is_field if self.where == "pii" else ~is_field)
            if len(allow) == 0:
                raise LmauditError(f"record '{rec.id}': the window holds no {self.where} token",
                                   hint="use a wider {window}", options=("window",))
            windows.append(w)
            allowed.append(allow)
            seeds.append(stable_seed("pii-skew", rec.id, r.target, self.seed))
        return windows, allowed, seeds

    def __call__(self, handle, shard: TextSet) -> ArrayDict:
        windows, allowed, seeds = self.windows(handle.tokenizer, shard)
        stats, offsets = masked_window_stats(handle.adapter, windows, allowed, self.plan, seeds)
        return ArrayDict(stats=stats, offsets=offsets)


def _window_shard_key(shard: TextSet):
    return stable_hash([(r.target, r.fields["record"], r.fields["left"], r.fields["right"]) for r in shard.records])


def window_logp(loaded, rec: PIIRecord, values: list[str], task: WindowTask, *, use_cache: bool = True,
                description: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """log p of every masked window token of every candidate (flat, float64) and the per-candidate offsets.

    The windows go through the sharded probe machinery: cached per shard under the
    model's fingerprint (a second ranking of the same candidates does no forward
    pass) and run on the current backend (local or Ray).
    """
    cands = TextSet([Record(f"{rec.id}:{i}", v, fields={"record": rec.id, "left": rec.left, "right": rec.right})
                     for i, v in enumerate(values)], source=f"candidates of '{rec.id}'")
    key = None
    if use_cache and loaded.fingerprint:
        key = ("pii-window", WINDOW_VERSION, loaded.fingerprint, tokenizer_fingerprint(loaded.tokenizer),
               task.plan.cache_key(), task.where, task.width, task.seed)
    shards = run_sharded(cands, task=task, handle=loaded, key=key, load=ArrayDict.load,
                         cache_dir=cache_dir() if key else None, description=description, fingerprint=_window_shard_key)
    parts = shards.all()
    logp = np.concatenate([p["stats"][:, 0] for p in parts]).astype(np.float64)
    sizes = np.concatenate([np.diff(p["offsets"]) for p in parts])
    return logp, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


SKEW_SCORING = ("masked",)  # how a model must score a token for its masked windows to give Q-Skew its signal


def skew_scores(target, reference, rec: PIIRecord, values: list[str], *, where: str, window: int = 20,
                rho: float = 0.35, budget: int = 12, seed: int = 0) -> np.ndarray:
    """Q-Skew per candidate, masks restricted to the field (``where="pii"``) or to its context (``"context"``).

    Target and reference see identical windows and masks (the reference must share the tokenizer).
    """
    task = WindowTask(MaskPlan("cyclic", budget=budget, rho=rho), where, window, seed)
    tar, offsets = window_logp(target, rec, values, task, description=f"Q-Skew ({where}) target")
    ref, _ = window_logp(reference, rec, values, task, description=f"Q-Skew ({where}) reference")
    return weighted_skew(tar - ref, offsets)


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

    field: str = "email"
    candidates: int = setting(64, check=integer(1))
    mask_length: int | list[int] = 20  # a list spreads the candidates over several lengths
    steps: int | None = setting(None, check=integer(1, optional=True))  # DLM denoising steps (default: mask_length)
    temperature: float = 1.0
    alpha: float | str = setting("auto", check=fraction(also=("auto",)))  # "auto": fitted on calibration records
    skew_signal: str = setting("pii", check=one_of(("pii", "context"), noun="skew signal"))  # what combined uses
    window: int = setting(20, check=integer(2))
    ce_batches: int = setting(8, check=integer(1))
    include_truth: bool = setting(False, check=boolean())  # inference mode: the true value joins the candidates
    seed: int = setting(0, check=seed_value())

    def __post_init__(self) -> None:
        """Every setting is checked here (its constraint is declared beside it), before any model is loaded."""
        mask_lengths(self.mask_length)
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
                       show_pii: bool = False) -> dict:
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
    payload = {"type": "pii-reconstruction", "mode": mode, "dtype": target.dtype, "device": target.device,
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
    return payload


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

    return write_results(out, {k: v for k, v in payload.items() if k != "_cases"}, kind="pii-reconstruction",
                         tables={"records.csv": pd.DataFrame(shown_ids(payload["records"], show_pii))},
                         files=candidates if show_pii else None, report=report)


class ReconstructionResult(RunResult):
    """A PII reconstruction run: ``to_frame()`` has one row per record (ranks only, as ``records.csv``)."""

    def headline(self) -> str:
        return pii_summary(self.payload).headline

    def _write(self, out: Path, report: bool) -> Path:
        return write_reconstruction(self.payload, out, show_pii=bool(self.payload.get("show_pii")), report=report)


JOB = register_job(Job("reconstruct_pii", "pii-reconstruction", "pii", ReconstructionResult,
                       run_reconstruction, ReconstructConfig, pii_report))
