"""A dataset-inference run: every applicable attack scores the suspect and validation sets, and
:func:`lmaudit.audit.dataset_inference.dataset_inference` turns the scores into a p-value for "the model was
trained on the suspect set". With known members, SMI's ρ of the suspect set is estimated beside it from the same
scores (validation texts as the non-members).

The test assumes the validation set is drawn like the suspect set. The run checks that assumption as ``mia`` does
(:func:`lmaudit.runs.set_check.two_set_check`): the blind baselines read the two sets' texts alone, and with a
reference model its own reference-free scores; when either tells them apart, the sets differ without the model
and the verdict is "cannot tell" whatever the p-value (``verdict`` in ``results.json``)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.attacks import get_attack
from lmaudit.audit.dataset_inference import OUTLIERS, dataset_inference
from lmaudit.data.loaders import Record, TextSet
from lmaudit.data.overlap import check_sets, ngram_overlap
from lmaudit.metrics import auc
from lmaudit.report.dataset_inference import inference_report, inference_summary
from lmaudit.runs.audit_set import AuditConfig, estimate_rho
from lmaudit.runs.common import Job, RunResult, register_job, write_results
from lmaudit.runs.mia import score_set
from lmaudit.runs.mia_result import MAX_BUDGET, RunConfig, budget_memory_hint
from lmaudit.runs.set_check import PRIOR, two_set_check
from lmaudit.settings import boolean, check_settings, each, integer, one_of, seed_value, setting, table, text

TYPE = "dataset-inference"  # the folder kind its results are written as (its Job's type)

SETS = ("suspect", "validation", "members")


@dataclass
class InferenceConfig:
    """Settings of a dataset-inference run (recorded in ``results.json``).

    Examples
    --------
    >>> lmaudit.InferenceConfig(splits=50).splits
    50
    >>> lmaudit.InferenceConfig(splits=0)
    Traceback (most recent call last):
    ...
    lmaudit.errors.SettingError: splits must be an integer between 1 and 10,000, got 0 (hint: each split fits ...)
    """

    # None: every attack of the model's kind that can run
    attacks: list[str] | None = setting(None, check=each(text(), optional=True))
    params: dict[str, dict] = setting(default_factory=dict, check=table())  # per-attack parameter overrides
    # seeded halvings of both sets: the test is repeated on each
    splits: int = setting(20, check=integer(1, 10_000, hint=(
        "each split fits two logistic regressions and keeps two p-values in results.json; the median p-value "
        "settles within a few hundred splits (default 20)")))
    seed: int = setting(0, check=seed_value())
    outliers: str = setting("clip", check=one_of(OUTLIERS, noun="outliers"))  # clip each feature's extremes
    # DLM: masked forwards per model and sample, for every attack
    budget: int = setting(16, check=integer(1, MAX_BUDGET, hint=budget_memory_hint))
    bootstrap: int = setting(200, check=integer(0))  # the set checks' AUC intervals; SMI's, with known members
    use_cache: bool = setting(True, check=boolean())
    # run although two of the sets share more than a small share of texts
    allow_overlap: bool = setting(False, check=boolean())
    blind: bool = setting(True, check=boolean())  # model-free baselines: do the sets differ without the model?
    # with a reference: its own reference-free scores (it never saw either set: its AUC should be near 0.5)
    reference_prior: bool = setting(True, check=boolean())

    def __post_init__(self) -> None:
        """Every setting is checked here (its constraint is declared beside it)."""
        check_settings(self)


def run_dataset_inference(target, suspect: TextSet, validation: TextSet, *, reference=None,
                          members: TextSet | None = None,
                          config: InferenceConfig | None = None) -> InferenceResult:
    """The result of a dataset-inference run: its ``results.json`` payload and its per-text scores (id, set, one
    column per attack)."""
    config = config or InferenceConfig()
    sets = {"suspect": suspect, "validation": validation, **({"members": members} if members is not None else {})}
    pairs = [("validation", "suspect")] + ([("members", "suspect"), ("members", "validation")] if members else [])
    overlap = check_sets(sets, pairs, allow_overlap=config.allow_overlap)
    overlap["ngrams"] = ngram_overlap(suspect, validation)  # validation texts that are near-copies of suspect ones
    both = TextSet([Record(f"{name[0]}:{r.id}", r.target, r.context) for name, ts in sets.items() for r in ts.records],
                   source=" + ".join(ts.source for ts in sets.values()))
    t0 = time.perf_counter()
    scores = score_set(target, both, reference=reference,
                       config=RunConfig(attacks=config.attacks, params=config.params, seed=config.seed,
                                        budget=config.budget, use_cache=config.use_cache, blind=False))
    timings = {"scores": time.perf_counter() - t0}
    columns = sorted(scores)
    x = np.column_stack([scores[n] for n in columns])
    sizes = np.cumsum([0] + [len(ts) for ts in sets.values()])
    part = {name: x[sizes[i]:sizes[i + 1]] for i, name in enumerate(sets)}
    t0 = time.perf_counter()
    result = dataset_inference(part["suspect"], part["validation"], columns, splits=config.splits, seed=config.seed,
                               outliers=config.outliers)
    timings["test"] = time.perf_counter() - t0
    per_attack = _per_attack(part["suspect"], part["validation"], columns)
    n_checked = len(suspect) + len(validation)  # suspect (first) against validation: the known members stay out
    prior, calibrated = _prior(target, reference, both, columns, config, n_checked)
    check, summary, blind = two_set_check(suspect, validation, {c: scores[c][:n_checked] for c in columns},
                                          prior=prior, calibrated=calibrated, blind=config.blind,
                                          n_resamples=config.bootstrap, seed=config.seed, timings=timings)
    # prompt/response pairs against plain texts: the format alone tells the sets apart
    check["formats"] = {"suspect": suspect.form, "validation": validation.form,
                        "differ": suspect.form != validation.form}
    for name in columns:  # what each attack alone adds beyond the sets' own differences
        per_attack[name].update({k: summary[name][k] for k in ("vs_blind", "vs_prior") if k in summary[name]})
    smi = None
    if members is not None:
        smi = estimate_rho(part["members"], part["validation"], part["suspect"],
                           AuditConfig(method="both", features="scores", bootstrap=config.bootstrap, seed=config.seed))
    names = [name for name, ts in sets.items() for _ in ts.records]
    rest = np.full(len(names) - n_checked, np.nan)
    checked = {**blind, **{PRIOR + a: s for a, s in prior.items()}}
    frame = pd.DataFrame({"id": [r.id for ts in sets.values() for r in ts.records], "set": names,
                          **{n: scores[n] for n in columns}, **{k: np.r_[v, rest] for k, v in checked.items()}})
    return InferenceResult({
        "type": TYPE, "config": asdict(config), "model": target.path, "kind": target.kind,
        "fingerprint": target.fingerprint, "reference": None if reference is None else reference.path,
        **({"served": target.facts()["served"]} if "served" in target.facts() else {}),
        "n_suspect": len(suspect), "n_validation": len(validation),
        "n_members": None if members is None else len(members),
        "data": {name: ts.source for name, ts in sets.items()}, "overlap": overlap,
        **result, "set_check": check, "verdict": verdict(result["decision"], check),
        "attacks": per_attack, "smi": smi, "timings_s": timings}, scores=frame)


def verdict(decision: dict[str, bool], check: dict) -> str:
    """``cannot tell`` when a blind baseline or the reference tells the suspect set from the validation set, or their
    formats differ (they differ without the model, so the test's p-value measures that difference, not training);
    otherwise ``trained`` when the test rejects at 0.05, else ``not shown``."""
    if check.get("differ") \
            or (check.get("reference") or {}).get("differ") \
            or (check.get("formats") or {}).get("differ"):
        return "cannot tell"
    return "trained" if decision.get("0.05") else "not shown"


def _prior(target, reference, both: TextSet, columns: list[str], config: InferenceConfig,
           n: int) -> tuple[dict[str, np.ndarray], list[str]]:
    """The reference's own scores of the first ``n`` texts of ``both`` (suspect, then validation) under every
    reference-free attack of ``columns``, scored with the reference as the target, and the attacks the reference
    calibrates; ({}, []) without a reference or with ``reference_prior`` off."""
    if reference is None or not config.reference_prior:
        return {}, []
    specs = {name: get_attack(name, target.kind) for name in columns}
    free = [name for name, s in specs.items() if not s.needs_reference and not s.needs_shadows]
    calibrated = [name for name, s in specs.items() if s.needs_reference or s.needs_shadows]
    if not free:
        return {}, calibrated
    own = score_set(reference, TextSet(both.records[:n], source=both.source),
                    config=RunConfig(attacks=free, params={a: p for a, p in config.params.items() if a in free},
                                     seed=config.seed, budget=config.budget, use_cache=config.use_cache, blind=False))
    return {name: own[name] for name in free}, calibrated


def _per_attack(suspect: np.ndarray, validation: np.ndarray, columns: list[str]) -> dict:
    """Per attack, how it alone separates the sets: the suspect texts' mean score in validation standard
    deviations from the validation mean, and its AUC (suspect = positive)."""
    y = np.r_[np.ones(len(suspect)), np.zeros(len(validation))].astype(int)
    out = {}
    for j, name in enumerate(columns):
        spread = validation[:, j].std(ddof=1)
        shift = (suspect[:, j].mean() - validation[:, j].mean()) / spread if spread > 0 else 0.0
        out[name] = {"shift_sd": float(shift), "auc": auc(y, np.r_[suspect[:, j], validation[:, j]])}
    return out


def write_inference(payload: dict, out: str | Path, *, scores: pd.DataFrame | None = None,
                    report: bool = False) -> Path:
    """``OUT/results.json`` and ``OUT/scores.parquet`` (one row per text: id, set, one column per attack)."""
    tables = {"scores.parquet": scores} if scores is not None else None
    return write_results(out, payload, kind=TYPE, tables=tables, report=report)


class InferenceResult(RunResult):
    """A dataset-inference run: ``to_frame()`` has one row per attack; ``scores`` the per-text scores (id, set, one
    column per attack) the run writes to ``scores.parquet`` (None when read back from a folder)."""

    def __init__(self, payload: dict, source: Path | None = None, scores: pd.DataFrame | None = None):
        super().__init__(payload, source)
        self.scores = scores

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"attack": name, **m} for name, m in self.payload["attacks"].items()])

    def headline(self) -> str:
        return inference_summary(self.payload).headline

    def _write(self, out: Path, report: bool) -> Path:
        return write_inference(self.payload, out, scores=self.scores, report=report)


JOB = register_job(Job("dataset_inference", TYPE, "dataset-inference", InferenceResult,
                       run_dataset_inference, InferenceConfig, inference_report))
