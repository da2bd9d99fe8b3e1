"""Extraction runs: masks → trajectory probabilities → (n, p) counts, step effects, relaxed rates.

The model's handle travels whole; its adapter answers what differs between models: the ids a span is scored
on (``span_input``), how a token is scored (``scoring``, which picks the span's table in :data:`TABLES`), the
settings it does not read (``ignored_settings``) and how a span is sampled (``fill``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError, warn
from lmaudit.extraction.discoverable import discoverable, gaussian_relaxed_rate, queries_needed
from lmaudit.extraction.masks import MaskSpec, mask_text, parse_steps, step_counts
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.shards import run_sharded, shard_size_default
from lmaudit.probes.stored import ArrayDict
from lmaudit.probes.trajectories import Target, TrajectoryResult, ar_suffix_logp, dlm_trajectories
from lmaudit.progress import progress
from lmaudit.report.extraction import extraction_report
from lmaudit.report.summary import extraction_summary
from lmaudit.runs.common import Job, RunResult, register_job, shown_ids, write_results
from lmaudit.settings import (
    check_settings,
    each,
    fraction,
    integer,
    one_of,
    positive,
    seed_value,
    setting,
)
from lmaudit.utils import cache_dir, stable_hash

TYPE = "extraction"  # the folder kind its results are written as (its Job's type)


@dataclass
class ExtractConfig:
    """Settings of an extraction run (recorded in ``results.json``).

    Examples
    --------
    >>> lmaudit.ExtractConfig(mask="pii:email", steps=["1", "max"], p=[0.5]).steps
    ['1', 'max']
    >>> lmaudit.ExtractConfig(trajectories=0)
    Traceback (most recent call last):
    ...
    lmaudit.errors.SettingError: trajectories must be an integer ≥ 1, got 0
    """

    mask: str = setting("suffix:32", check=mask_text)  # as MaskSpec.parse reads it
    steps: list[str] = setting(default_factory=lambda: ["1", "2", "4", "8", "max"], check=step_counts)
    order: str = setting("random", check=one_of(("random", "low_confidence")))
    trajectories: int = setting(512, check=integer(1))
    temperature: float = setting(1.0, check=positive())
    n: int = setting(10_000, check=integer(1))
    p: list[float] = setting(default_factory=lambda: [0.5, 0.99], check=each(fraction(above_zero=True), nonempty=True))
    # DLM: "left" hides the tokens after the mask, as an AR model never sees them
    context: str = setting("both", check=one_of(("both", "left")))
    relaxed: int | None = setting(None, check=integer(0, optional=True))  # largest Hamming tolerance ε (relaxed)
    samples: int = setting(128, check=integer(1))  # generations per record for relaxed extraction
    seed: int = setting(0, check=seed_value())
    max_tokens: int | None = setting(None, check=integer(1, optional=True))  # rows × length per forward (None: the
    # model's token budget)

    def __post_init__(self) -> None:
        """Every count is checked here (its constraint is declared beside it), before any model is loaded."""
        check_settings(self)


def prepare_targets(handle: ModelHandle, textset: TextSet, spec: MaskSpec, *, max_length: int,
                    context: str = "both", seed: int = 0) -> list[Target]:
    """Tokenise each record with the tokenizer of ``handle`` and resolve its mask to positions in the input ids; its
    adapter says which ids score the span (:meth:`~lmaudit.models.adapters.ARAdapter.span_input`: an AR model's input
    ends with one span)."""
    adapter, tokenizer = handle.adapter, handle.tokenizer
    if context not in ("both", "left"):
        raise LmauditError(f"unknown context '{context}'", hint="use both or left")
    special = set(tokenizer.all_special_ids)
    enc = tokenizer(textset.texts, add_special_tokens=True, return_offsets_mapping=True)
    targets, n_truncated = [], 0
    for i, rec in enumerate(textset.records):
        ids = np.asarray(enc["input_ids"][i], dtype=np.int64)
        if len(ids) > max_length:
            ids, n_truncated = ids[:max_length], n_truncated + 1
        text_idx = np.array([j for j, t in enumerate(ids) if int(t) not in special], dtype=np.int64)
        offsets = [tuple(enc["offset_mapping"][i][j]) for j in text_idx]
        pos = spec.resolve(len(text_idx), record_id=rec.id, where=f"{textset.source}: ", text=rec.text,
                           fields=rec.fields, offsets=offsets, seed=seed)
        masked = text_idx[pos]
        ids = adapter.span_input(ids, masked, context=context, where=f"{textset.source}: record '{rec.id}', mask "
                                                                     f"{spec.text}: ")
        targets.append(Target(stable_hash(rec.id, rec.text), ids, masked))
    if n_truncated:
        warn(f"{n_truncated} record(s) of {textset.describe()} were longer than {max_length} tokens and were "
                      "truncated; masks must fall inside the kept tokens")
    return targets


def _groups(n_rows: np.ndarray, lengths: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Records grouped (similar lengths together) so that rows × length of a group stays ≤ max_tokens."""
    order = np.argsort(-lengths, kind="stable")
    groups, cur, cur_rows = [], [], 0
    for i in order:
        if cur and (cur_rows + n_rows[i]) * lengths[cur[0]] > max_tokens:
            groups.append(np.array(cur))
            cur, cur_rows = [], 0
        cur.append(i)
        cur_rows += n_rows[i]
    if cur:
        groups.append(np.array(cur))
    return groups


def _ar_table(loaded, targets: list[Target], cfg: ExtractConfig, description) -> dict[str, dict[str, np.ndarray]]:
    """One exact column, 'ar': the span's probability read left to right (the steps and order are a DLM's)."""
    res = ar_suffix_logp(loaded, targets, temperature=cfg.temperature)
    return {"ar": _columns(res, np.array([len(t.masked) for t in targets]))}


def _dlm_table(loaded, targets: list[Target], cfg: ExtractConfig, description) -> dict[str, dict[str, np.ndarray]]:
    """One column per step count: the trajectories' estimate of the span's probability when unmasked in that many
    steps (one trajectory when the order is fixed)."""
    n_masked = np.array([len(t.masked) for t in targets])
    lengths = np.array([len(t.ids) for t in targets])
    max_tokens = cfg.max_tokens or loaded.adapter.batch_tokens()
    out = {}
    with progress(description, total=len(targets) * len(cfg.steps)) as bar:
        for label in cfg.steps:
            steps = n_masked if label == "max" else np.minimum(int(label), n_masked)
            deterministic = (steps == 1) | (cfg.order == "low_confidence")
            n_rows = np.where(deterministic, 1, cfg.trajectories)
            results: list = [None] * len(targets)
            for group in _groups(n_rows, lengths, max_tokens):
                res = dlm_trajectories(loaded, [targets[i] for i in group],
                                       steps=[int(steps[i]) for i in group],
                                       order=cfg.order, trajectories=cfg.trajectories, temperature=cfg.temperature,
                                       seed=cfg.seed, max_tokens=max_tokens)
                for i, r in zip(group, res):
                    results[i] = r
                bar.advance(len(group))
            out[label] = _columns(results, steps)
    return out


def _served_table(loaded, targets: list[Target], cfg: ExtractConfig, description) -> dict[str, dict[str, np.ndarray]]:
    """One exact column, 'ar', from a served model's prompt log-probabilities (one request per record)."""
    if cfg.temperature != 1.0:
        raise LmauditError(f"a served model's log-probabilities are at temperature 1, not {cfg.temperature:g}",
                           hint="use temperature 1, or audit the weights on disk")
    res = [TrajectoryResult(np.array([loaded.adapter.span_logp(t.ids, t.masked, where=f"record {t.key[:8]}: ")]), 1)
           for t in targets]
    return {"ar": _columns(res, np.array([len(t.masked) for t in targets]))}


# How a model scores a token (its adapter's ``scoring``) maps to how a span's probability is estimated: exactly,
# read left to right in one pass (by the weights, or from a served model's answers), or along unmasking trajectories
# (a model that scores like one of these: no entry)
TABLES = {"left-to-right": _ar_table, "masked": _dlm_table, "served": _served_table}


def trajectory_table(loaded, targets: list[Target], cfg: ExtractConfig,
                     description: str | None = "extraction trajectories") -> dict[str, dict[str, np.ndarray]]:
    """{label: {log_p_hat, p_hat, std_error, forwards, steps}} per record, one label per step count ('ar' for AR)."""
    return TABLES[loaded.adapter.scoring](loaded, targets, cfg, description)


COLUMNS = ("log_p_hat", "p_hat", "std_error", "forwards", "steps", "log_p_hat_quarter", "log_p_hat_half")
UNCONVERGED_NATS = float(np.log(2))  # p̂ that still moves by more than 2× from R/2 to R trajectories has not settled


def _columns(results, steps) -> dict[str, np.ndarray]:
    return {"log_p_hat": np.array([r.log_p_hat for r in results]), "p_hat": np.array([r.p_hat for r in results]),
            "std_error": np.array([r.std_error for r in results]), "forwards": np.array([r.forwards for r in results]),
            "steps": np.asarray(steps),
            # the estimate from the first R/4 and R/2 trajectories: its convergence in R (equal to it for one)
            "log_p_hat_quarter": np.array([r.log_p_hat_of(len(r.logp) // 4) for r in results]),
            "log_p_hat_half": np.array([r.log_p_hat_of(len(r.logp) // 2) for r in results])}


def convergence(col: dict[str, np.ndarray]) -> dict:
    """How far each record's log p̂ still moves between R/4, R/2 and R trajectories: the median |change| (nats) of
    each step, and the fraction of records whose p̂ changed by more than 2× from R/2 to R (not converged). Where no
    change is finite (every p̂ is 0), both are NaN: convergence cannot be checked, which is not the same as 0% moved."""
    out = {}
    for name, (a, b) in {"quarter_to_half": ("log_p_hat_quarter", "log_p_hat_half"),
                         "half_to_full": ("log_p_hat_half", "log_p_hat")}.items():
        with np.errstate(invalid="ignore"):
            change = np.abs(col[b] - col[a])
        finite = change[np.isfinite(change)]
        out[f"median_abs_change_{name}"] = float(np.median(finite)) if len(finite) else float("nan")
    with np.errstate(invalid="ignore"):
        moved = np.abs(col["log_p_hat"] - col["log_p_hat_half"])
    out["not_converged_fraction"] = float(np.mean(moved[np.isfinite(moved)] > UNCONVERGED_NATS)) if np.isfinite(
        moved).any() else float("nan")
    return out


def summarise(table: dict[str, dict[str, np.ndarray]], cfg: ExtractConfig) -> dict:
    """Counts of (n, p)-discoverable records, n needed for each p, and step effects relative to the first label."""
    labels = list(table)
    first = table[labels[0]]["log_p_hat"]
    summary = {}
    for label, col in table.items():
        entry = {"median_log_p_hat": float(np.median(col["log_p_hat"])),
                 "mean_forwards_per_record": float(np.mean(col["forwards"]))}
        for p in cfg.p:
            entry[f"discoverable@p={p:g}"] = int(discoverable(col["p_hat"], n=cfg.n, p=p).sum())
            entry[f"median_n_needed@p={p:g}"] = float(np.median(queries_needed(col["p_hat"], p)))
        with np.errstate(invalid="ignore"):
            delta = col["log_p_hat"] - first
        finite = delta[np.isfinite(delta)]
        entry["median_delta_log_p"] = float(np.median(finite)) if len(finite) else float("nan")
        if "log_p_hat_half" in col:  # tables written before the convergence columns have none
            entry["convergence"] = convergence(col)
        summary[label] = entry
    if len(labels) > 1:
        stacked = np.stack([table[lb]["log_p_hat"] for lb in labels])  # (labels, records)
        summary["monotone_fraction"] = float(np.mean(np.all(np.diff(stacked, axis=0) >= -1e-9, axis=0)))
    return summary


def relaxed_rows(loaded, targets: list[Target], cfg: ExtractConfig, steps_label: str, *, start: int = 0,
                 description: str | None = "relaxed extraction (sampling)") -> ArrayDict:
    """Per record: Gaussian and empirical Pr(d ≤ ε) of ``cfg.samples`` generations, and μ, σ of d.

    ``start`` is the index of ``targets[0]`` in the whole set (record i samples with seed ``seed·1000003 + i``).
    """
    eps = np.arange(cfg.relaxed + 1)
    pred, emp, mus, sigmas = [], [], [], []
    with progress(description, total=len(targets)) as bar:
        for i, t in enumerate(targets, start=start):
            seed = cfg.seed * 1_000_003 + i
            # a DLM's step count ("max": one token per step); an AR model ("ar") samples left to right
            steps = min(int(steps_label), len(t.masked)) if steps_label.isdigit() else len(t.masked)
            gen = loaded.adapter.fill(t.ids, t.masked, samples=cfg.samples, steps=steps, temperature=cfg.temperature,
                                      remasking="low_confidence" if cfg.order == "low_confidence" else "random",
                                      seed=seed)
            d = (gen != t.ids[t.masked][None, :]).sum(axis=1)
            p_, e_, mu, sigma = gaussian_relaxed_rate(d, eps)
            pred.append(p_)
            emp.append(e_)
            mus.append(mu)
            sigmas.append(sigma)
            bar.advance()
    return ArrayDict(predicted=np.array(pred).reshape(len(targets), len(eps)),
                     empirical=np.array(emp).reshape(len(targets), len(eps)),
                     mu=np.array(mus, dtype=np.float64), sigma=np.array(sigmas, dtype=np.float64))


def relaxed_summary(rows: ArrayDict, cfg: ExtractConfig, steps_label: str) -> dict:
    pred, emp = rows["predicted"], rows["empirical"]
    return {"eps": list(range(cfg.relaxed + 1)), "steps": steps_label, "predicted": pred.mean(axis=0).tolist(),
            "empirical": emp.mean(axis=0).tolist(), "mean_abs_error": float(np.abs(pred - emp).mean()),
            "mu": rows["mu"].tolist(), "sigma": rows["sigma"].tolist()}


EXTRACT_VERSION = 2  # 2: the estimate at R/4 and R/2 trajectories (convergence) is stored


@dataclass(frozen=True)
class ExtractionTask:
    """Trajectory probabilities (and relaxed-extraction samples) of one shard's records.

    Picklable: it runs in this process or on a Ray worker. Every random draw depends
    on the record (masks, orders) or on its index in the whole set (relaxed samples),
    never on the shard it falls in.
    """

    cfg: ExtractConfig
    spec: MaskSpec

    def __call__(self, handle, shard: TextSet) -> ArrayDict:
        cfg = self.cfg
        targets = prepare_targets(handle, shard, self.spec, max_length=handle.adapter.context_length,
                                  context=cfg.context, seed=cfg.seed)
        table = trajectory_table(handle, targets, cfg, description=None)
        out = ArrayDict({f"{k}@{label}": v for label, col in table.items() for k, v in col.items()})
        out["n_masked"] = np.array([len(t.masked) for t in targets], dtype=np.int64)
        if cfg.relaxed is not None:
            rows = relaxed_rows(handle, targets, cfg, list(table)[-1], start=shard.meta.get("shard_start", 0),
                                description=None)
            out.update({f"relaxed.{k}": v for k, v in rows.items()})
        return out


def run_extraction(loaded, textset: TextSet, cfg: ExtractConfig, *, use_cache: bool = True,
                   show_pii: bool = False) -> ExtractionResult:
    """Run an extraction audit on ``textset``; return its result: the ``results.json`` payload plus per-record columns
    (``show_pii``: ``records.csv`` keeps ids that look like e-mail addresses or phone numbers).

    The records are processed in shards on the current backend; with ``use_cache``
    each shard's result is cached (a killed run resumes where it stopped).
    """

    t0 = time.perf_counter()
    if cfg.relaxed is not None and not hasattr(loaded.adapter, "fill"):
        raise LmauditError("relaxed extraction samples the model's fills: this model offers no sampling here",
                           hint="leave out the relaxed setting, or audit the weights on disk")
    spec = MaskSpec.parse(cfg.mask)
    cfg.steps = parse_steps(cfg.steps)
    if "order" in loaded.adapter.ignored_settings and cfg.order != "random":
        warn(f"{loaded.adapter.ignored_settings['order']}; --order is ignored")
    key = None
    if use_cache and loaded.fingerprint:
        # n and p are read from the shards afterwards; max_tokens (rows per forward) stays in: a trajectory's float32
        # log p changes in the last bits with the rows batched beside it
        settings = {k: v for k, v in asdict(cfg).items() if k not in ("n", "p")}
        key = ("extraction", EXTRACT_VERSION, loaded.fingerprint, loaded.kind,
               tokenizer_fingerprint(loaded.tokenizer), settings)
    def shard_fingerprint(shard: TextSet):
        # masks and trajectory orders depend on ids and fields too; relaxed samples on the position in the set
        rows = [(r.id, r.context, r.target, sorted(r.fields.items())) for r in shard.records]
        return stable_hash(rows, shard.meta.get("shard_start") if cfg.relaxed is not None else None)

    shards = run_sharded(textset, task=ExtractionTask(cfg, spec), handle=loaded, key=key, load=ArrayDict.load,
                         cache_dir=cache_dir() if key else None, description="extraction",
                         fingerprint=shard_fingerprint,
                         shard_size=min(16, shard_size_default()))  # records are slow: finer progress
    parts = shards.all()
    merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    labels = list(dict.fromkeys(k.split("@", 1)[1] for k in merged if k.startswith("log_p_hat@")))  # the table's
    table = {label: {k: merged[f"{k}@{label}"] for k in COLUMNS} for label in labels}
    n_masked = merged["n_masked"]
    payload = {"type": TYPE, "config": asdict(cfg), "kind": loaded.kind, "dtype": loaded.dtype,
               "device": loaded.device, "n_records": len(textset),
               "n_masked": {"median": float(np.median(n_masked)), "min": int(n_masked.min()),
                            "max": int(n_masked.max())},
               "summary": summarise(table, cfg)}
    if cfg.relaxed is not None:
        rows = ArrayDict({k.split(".", 1)[1]: v for k, v in merged.items() if k.startswith("relaxed.")})
        payload["relaxed"] = relaxed_summary(rows, cfg, labels[-1])
    payload["runtime_s"] = round(time.perf_counter() - t0, 2)
    payload["records"] = {"id": [r.id for r in textset.records],
                          **{f"{k}@{label}": v.tolist() for label, col in table.items() for k, v in col.items()}}
    payload["model"], payload["show_pii"] = loaded.path, show_pii
    if "served" in loaded.facts():  # the endpoint as mia records it: URL without credentials, capabilities, alignment
        payload["served"] = loaded.facts()["served"]
    return ExtractionResult(payload)


def write_extraction(payload: dict, out: Path, *, report: bool = False) -> Path:
    """``OUT/results.json`` (provenance, summary, config) and ``OUT/records.csv`` (one row per record; ids that look
    like e-mail addresses or phone numbers masked unless the payload's ``show_pii``)."""
    body = {**{k: v for k, v in payload.items() if k != "records"}, "type": TYPE}
    records = shown_ids(payload["records"], bool(payload.get("show_pii")))
    return write_results(out, body, kind=TYPE, tables={"records.csv": pd.DataFrame(records)}, report=report)


class ExtractionResult(RunResult):
    """An extraction run: ``to_frame()`` has one row per record (as ``records.csv``)."""

    def headline(self) -> str:
        return extraction_summary(self.payload).headline

    def _write(self, out: Path, report: bool) -> Path:
        return write_extraction(self.payload, out, report=report)


JOB = register_job(Job("extract", TYPE, "extract", ExtractionResult, run_extraction, ExtractConfig,
                       extraction_report))
