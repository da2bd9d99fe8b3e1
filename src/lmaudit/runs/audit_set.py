"""A set-level audit run: features of the three sets → SMI / SMI-M estimates of ρ with 90% intervals."""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from lmaudit.audit.sets import standardise
from lmaudit.audit.smi import KERNELS, smi, smi_m
from lmaudit.data.loaders import TextSet
from lmaudit.data.overlap import check_sets
from lmaudit.errors import LmauditError
from lmaudit.probes.features import hidden_features
from lmaudit.report.build import set_audit_report
from lmaudit.report.summary import audit_summary
from lmaudit.runs.common import Job, RunResult, register_job
from lmaudit.runs.mia import score_set
from lmaudit.runs.mia_result import MAX_BUDGET, RunConfig, budget_memory_hint
from lmaudit.settings import check_settings, integer, one_of, seed_value, setting

METHODS = ("smi", "smi-m", "both")
FEATURES = ("hidden", "scores")


@dataclass
class AuditConfig:
    """Settings of a set-level audit (recorded in ``results.json``).

    Examples
    --------
    >>> lmaudit.AuditConfig(method="smi-m", kernel="laplacian").kernel
    'laplacian'
    >>> lmaudit.AuditConfig(method="lira")
    Traceback (most recent call last):
    ...
    lmaudit.errors.SettingError: unknown method 'lira' (hint: use one of smi, smi-m, both)
    """

    method: str = setting("both", check=one_of(METHODS, noun="method"))
    features: str = setting("hidden", check=one_of(FEATURES, noun="features"))
    kernel: str = setting("rbf", check=one_of(KERNELS, noun="kernel"))
    bandwidth_factor: float = 1.0
    bootstrap: int = setting(200, check=integer(0))
    seed: int = setting(0, check=seed_value())
    attacks: list[str] | None = None  # features=scores: the attacks whose scores form the feature vector
    # features=scores on a DLM: masked forwards per sample
    budget: int = setting(16, check=integer(1, MAX_BUDGET, hint=budget_memory_hint))
    allow_overlap: bool = False  # run although two of the sets share more than a small share of texts

    def __post_init__(self) -> None:
        """Every setting is checked here (its constraint is declared beside it), from the command line and from
        Python alike."""
        check_settings(self)


def score_features(loaded, textset: TextSet, *, reference=None, attacks: list[str] | None = None,
                   seed: int = 0, budget: int = 16) -> tuple[np.ndarray, list[str]]:
    """(n, k) attack scores (one column per attack, all higher = more member-like) and the attack names."""
    scores = score_set(loaded, textset, reference=reference,
                       config=RunConfig(attacks=attacks, seed=seed, budget=budget))
    names = sorted(scores)
    return np.column_stack([scores[n] for n in names]), names


def features_for(kind: str, loaded, sets: dict[str, TextSet], **kwargs) -> tuple[dict[str, np.ndarray], list[str]]:
    """Features of every named set; the names of the columns for ``scores`` (empty for ``hidden``)."""
    if kind not in FEATURES:
        raise LmauditError(f"unknown features '{kind}'", hint=f"use one of {', '.join(FEATURES)}")
    if kind == "hidden":
        if not hasattr(loaded.adapter, "hidden_states"):  # a served model: no hidden state leaves the server
            raise LmauditError("features=hidden reads the model's hidden states, which a served model does not give",
                               hint="use {features}=scores (the attacks' scores), or audit the weights on disk",
                               options=("features",))
        return {name: hidden_features(loaded, ts) for name, ts in sets.items()}, []
    out, names = {}, []
    for name, ts in sets.items():
        out[name], names = score_features(loaded, ts, **kwargs)
    return out, names


def estimate_rho(M, N, U, cfg: AuditConfig) -> dict[str, dict]:
    """{method: SetEstimate as a dict, plus ``trained_fraction`` = 1 − ρ} on standardised features."""
    M, N, U = standardise(M, N, U)
    out = {}
    if cfg.method in ("smi", "both"):
        out["smi"] = smi(M, N, U, bootstrap=cfg.bootstrap, seed=cfg.seed).to_dict()
    if cfg.method in ("smi-m", "both"):
        out["smi-m"] = smi_m(M, N, U, kernel=cfg.kernel, bandwidth_factor=cfg.bandwidth_factor,
                             bootstrap=cfg.bootstrap, seed=cfg.seed).to_dict()
    for name, est in out.items():
        est["trained_fraction"] = 1.0 - est["rho"]
        if est["anomaly"]:
            warnings.warn(f"{name}: unclipped ρ = {est['rho_unclipped']:.2f} lies far outside [0, 1]: the suspect set "
                          "resembles neither reference set (a forged or mismatched audit?)", stacklevel=2)
    return out


def run_audit(loaded, members: TextSet, nonmembers: TextSet, suspect: TextSet, cfg: AuditConfig, *,
              reference=None) -> dict:
    """Estimate ρ, the fraction of ``suspect`` that behaves like non-members; return the results payload."""
    overlap = check_sets({"members": members, "nonmembers": nonmembers, "suspect": suspect},
                         [("members", "nonmembers"), ("members", "suspect"), ("nonmembers", "suspect")],
                         allow_overlap=cfg.allow_overlap)
    t0 = time.perf_counter()
    kwargs = {} if cfg.features == "hidden" else {"reference": reference, "attacks": cfg.attacks, "seed": cfg.seed,
                                                   "budget": cfg.budget}
    feats, columns = features_for(cfg.features, loaded, {"members": members, "nonmembers": nonmembers,
                                                         "suspect": suspect}, **kwargs)
    t_features = time.perf_counter() - t0
    methods = estimate_rho(feats["members"], feats["nonmembers"], feats["suspect"], cfg)
    return {"type": "set-audit", "config": asdict(cfg), "model": loaded.path, "kind": loaded.kind,
            "dtype": loaded.dtype, "device": loaded.device,
            "fingerprint": loaded.fingerprint, "reference": None if reference is None else reference.path,
            "n_members": len(members), "n_nonmembers": len(nonmembers), "n_suspect": len(suspect),
            "data": {"members": members.source, "nonmembers": nonmembers.source, "suspect": suspect.source},
            "overlap": overlap,
            "features": {"kind": cfg.features, "dim": int(feats["members"].shape[1]), "columns": columns},
            "methods": methods, "timings_ms": {"features": 1e3 * t_features}}


class AuditResult(RunResult):
    """A set-level audit: ``to_frame()`` has one row per method (ρ, its 90% interval, the unclipped ρ)."""

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"method": name, "rho": est["rho"], "rho_low": est["ci90"][0],
                              "rho_high": est["ci90"][1], "rho_unclipped": est.get("rho_unclipped")}
                             for name, est in self.payload["methods"].items()])

    def headline(self) -> str:
        return audit_summary(self.payload).headline


JOB = register_job(Job("audit_set", "set-audit", "audit-set", AuditResult, AuditConfig, set_audit_report))
