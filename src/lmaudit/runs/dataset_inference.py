"""A dataset-inference run: every applicable attack scores the suspect and validation sets, and
:func:`lmaudit.audit.dataset_inference.dataset_inference` turns the scores into a p-value for "the model was
trained on the suspect set". With known members, SMI's ρ of the suspect set is estimated beside it from the same
scores (validation texts as the non-members)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.audit.dataset_inference import OUTLIERS, dataset_inference
from lmaudit.data.loaders import Record, TextSet
from lmaudit.data.overlap import check_sets, ngram_overlap
from lmaudit.metrics import auc
from lmaudit.runs.audit_set import AuditConfig, estimate_rho
from lmaudit.runs.common import write_results
from lmaudit.runs.mia import MAX_BUDGET, RunConfig, budget_memory_hint, score_set
from lmaudit.utils import check_settings, integer, one_of, setting

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
    lmaudit.errors.SettingError: splits must be an integer ≥ 1, got 0
    """

    attacks: list[str] | None = None  # None: every attack of the model's kind that can run
    params: dict[str, dict] = field(default_factory=dict)  # per-attack parameter overrides
    splits: int = setting(20, check=integer(1))  # seeded halvings of both sets: the test is repeated on each
    seed: int = setting(0, check=integer(0))
    outliers: str = setting("clip", check=one_of(OUTLIERS, noun="outliers"))  # clip each feature's extremes
    # DLM: masked forwards per model and sample, for every attack
    budget: int = setting(16, check=integer(1, MAX_BUDGET, hint=budget_memory_hint))
    bootstrap: int = setting(200, check=integer(0))  # SMI's interval, with known members
    use_cache: bool = True
    allow_overlap: bool = False  # run although two of the sets share more than a small share of texts

    def __post_init__(self) -> None:
        """Every setting is checked here (its constraint is declared beside it)."""
        check_settings(self)


def run_dataset_inference(target, suspect: TextSet, validation: TextSet, *, reference=None,
                          members: TextSet | None = None,
                          config: InferenceConfig | None = None) -> tuple[dict, pd.DataFrame]:
    """The ``results.json`` payload of a dataset-inference run, and its per-text scores (id, set, one column per
    attack)."""
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
    smi = None
    if members is not None:
        smi = estimate_rho(part["members"], part["validation"], part["suspect"],
                           AuditConfig(method="both", features="scores", bootstrap=config.bootstrap, seed=config.seed))
    names = [name for name, ts in sets.items() for _ in ts.records]
    frame = pd.DataFrame({"id": [r.id for ts in sets.values() for r in ts.records], "set": names,
                          **{n: scores[n] for n in columns}})
    return {"type": "dataset-inference", "config": asdict(config), "model": target.path, "kind": target.kind,
            "fingerprint": target.fingerprint, "reference": None if reference is None else reference.path,
            "n_suspect": len(suspect), "n_validation": len(validation),
            "n_members": None if members is None else len(members),
            "data": {name: ts.source for name, ts in sets.items()}, "overlap": overlap,
            **result, "attacks": per_attack, "smi": smi, "timings_s": timings}, frame


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
    return write_results(out, payload, kind="dataset-inference", tables=tables, report=report)
