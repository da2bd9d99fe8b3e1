"""A set-level audit run: features of the three sets → SMI / SMI-M estimates of ρ with 90% intervals; or one attack's
scores of the suspect set on the target and on shadow models of known membership → DUCI's used proportion."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.attacks import get_attack
from lmaudit.audit.duci import duci
from lmaudit.audit.sets import standardise
from lmaudit.audit.smi import KERNELS, smi, smi_m
from lmaudit.data.loaders import TextSet
from lmaudit.data.overlap import check_sets
from lmaudit.errors import LmauditError, warn
from lmaudit.models.loading import load_model
from lmaudit.models.shadows import ShadowSet, text_key
from lmaudit.probes.features import hidden_features
from lmaudit.progress import info
from lmaudit.report.build import set_audit_report
from lmaudit.report.summary import audit_summary
from lmaudit.runs.common import Job, RunResult, register_job
from lmaudit.runs.mia import score_set
from lmaudit.runs.mia_result import MAX_BUDGET, RunConfig, budget_memory_hint
from lmaudit.settings import boolean, check_settings, each, integer, one_of, positive, seed_value, setting, text

METHODS = ("smi", "smi-m", "both", "duci")  # both: smi and smi-m
SMI_ONLY = ("features", "kernel", "bandwidth_factor", "attacks", "allow_overlap")  # settings DUCI does not read
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
    lmaudit.errors.SettingError: unknown method 'lira' (hint: use one of smi, smi-m, both, duci)
    """

    method: str = setting("both", check=one_of(METHODS, noun="method"))
    features: str = setting("hidden", check=one_of(FEATURES, noun="features"))
    kernel: str = setting("rbf", check=one_of(KERNELS, noun="kernel"))
    bandwidth_factor: float = setting(1.0, check=positive())
    bootstrap: int = setting(200, check=integer(0))
    seed: int = setting(0, check=seed_value())
    # features=scores: the attacks whose scores form the feature vector
    attacks: list[str] | None = setting(None, check=each(text(), optional=True))
    # features=scores on a DLM: masked forwards per sample
    budget: int = setting(16, check=integer(1, MAX_BUDGET, hint=budget_memory_hint))
    # run although two of the sets share more than a small share of texts
    allow_overlap: bool = setting(False, check=boolean())
    # method=duci: the attack whose decisions are counted (None: reference with a reference model, else loss)
    attack: str | None = setting(None, check=text(optional=True))
    use_cache: bool = setting(True, check=boolean())  # read and write the probe cache (False: time every pass)

    def __post_init__(self) -> None:
        """Every setting is checked here (its constraint is declared beside it), from the command line and from
        Python alike."""
        check_settings(self)


def score_features(loaded, textset: TextSet, *, reference=None, attacks: list[str] | None = None,
                   seed: int = 0, budget: int = 16, use_cache: bool = True) -> tuple[np.ndarray, list[str]]:
    """(n, k) attack scores (one column per attack, all higher = more member-like) and the attack names."""
    scores = score_set(loaded, textset, reference=reference,
                       config=RunConfig(attacks=attacks, seed=seed, budget=budget, use_cache=use_cache))
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
            warn(f"{name}: unclipped ρ = {est['rho_unclipped']:.2f} lies far outside [0, 1]: the suspect set "
                          "resembles neither reference set (a forged or mismatched audit?)")
    return out


def run_audit(loaded, members: TextSet, nonmembers: TextSet, suspect: TextSet, cfg: AuditConfig, *,
              reference=None) -> dict:
    """Estimate ρ, the fraction of ``suspect`` that behaves like non-members; return the results payload."""
    if cfg.method == "duci":
        raise LmauditError("method duci reads no members or non-members: it runs on shadow models (run_duci)",
                           options=("method",))
    overlap = check_sets({"members": members, "nonmembers": nonmembers, "suspect": suspect},
                         [("members", "nonmembers"), ("members", "suspect"), ("nonmembers", "suspect")],
                         allow_overlap=cfg.allow_overlap)
    t0 = time.perf_counter()
    kwargs = {} if cfg.features == "hidden" else {"reference": reference, "attacks": cfg.attacks, "seed": cfg.seed,
                                                   "budget": cfg.budget, "use_cache": cfg.use_cache}
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


def suspect_membership(shadows: ShadowSet, suspect: TextSet, where: str) -> np.ndarray:
    """(n_suspect, K): True where shadow j trained on suspect record i (matched by text key); a record that no
    shadow trained on was not in the shadows' pool, so its error rates are not measured: refused, with the count."""
    keys = [text_key(r) for r in suspect.records]
    membership = np.array([[key in trained for trained in shadows.trained] for key in keys], dtype=bool)
    unknown = int((~membership.any(axis=1)).sum())
    if unknown:
        raise LmauditError(
            f"{where}: {unknown} of the {len(keys)} suspect records ({suspect.source}) are in no shadow model's "
            "training set: the shadows were trained on other data than the suspect set, so DUCI cannot measure its "
            "attack's error rates on them",
            hint="train the shadows on a pool that holds the suspect set, e.g. 'lmaudit shadows --model BASE --pool "
                 "SUSPECT --out DIR' (complementary halves: each record IN for some shadows, OUT for the others)")
    return membership


def duci_attack(cfg: AuditConfig, kind: str, has_reference: bool) -> str:
    """The attack DUCI counts decisions of: ``cfg.attack``, else ``reference`` with a reference model, else
    ``loss``; one that needs shadow models is refused (the shadows are DUCI's reference models here)."""
    name = cfg.attack or ("reference" if has_reference else "loss")
    spec = get_attack(name, kind)
    if spec.needs_shadows:
        raise LmauditError(f"attack {name} needs shadow models of its own: DUCI's shadows calibrate its decisions",
                           hint="choose an attack scored from the model (and the reference): loss, reference, ...",
                           options=("attack",))
    if spec.needs_reference and not has_reference:
        raise LmauditError(f"attack {name} needs a reference model", hint="pass {reference} DIR, or {attack} loss",
                           options=("reference", "attack"))
    return name


def run_duci(loaded, suspect: TextSet, cfg: AuditConfig, *, shadows: ShadowSet, where: str | Path = "shadows",
             reference=None, load: Callable | None = None) -> dict:
    """DUCI's estimate of the proportion of ``suspect`` the model was trained on: one attack's scores of the suspect
    records on the target and on every shadow (``load(path)`` loads a shadow; default: a model of the target's kind),
    debiased by the attack's TPR and FPR on the shadows (:func:`~lmaudit.audit.duci.duci`); the results payload."""
    if cfg.method != "duci":
        raise LmauditError(f"run_duci runs method duci, not {cfg.method}")
    attack = duci_attack(cfg, loaded.kind, reference is not None)
    membership = suspect_membership(shadows, suspect, str(where))
    load = load or (lambda path: load_model(path, kind=loaded.kind))
    run_cfg = RunConfig(attacks=[attack], seed=cfg.seed, budget=cfg.budget, use_cache=cfg.use_cache)
    t0 = time.perf_counter()
    target_scores = score_set(loaded, suspect, reference=reference, config=run_cfg)[attack]
    t1 = time.perf_counter()
    columns = []
    for j, path in enumerate(shadows.paths):
        info(f"DUCI: scoring the suspect set on shadow {j + 1}/{len(shadows.paths)}")
        columns.append(score_set(load(path), suspect, reference=reference, config=run_cfg)[attack])
    t2 = time.perf_counter()
    try:
        est = duci(target_scores, np.column_stack(columns), membership, bootstrap=cfg.bootstrap, seed=cfg.seed)
    except LmauditError as exc:
        raise LmauditError(f"{where}: {exc.message}", hint=exc.hint) from None
    out = {**est.to_dict(), "attack": attack, "trained_fraction": est.proportion, "rho": 1.0 - est.proportion,
           "rho_unclipped": 1.0 - est.proportion_unclipped}
    if est.anomaly:
        warn(f"duci: unclipped proportion {est.proportion_unclipped:.2f} lies far outside [0, 1]: the target "
                      "errs unlike the shadows (trained otherwise, or another attack regime?)")
    config = {k: v for k, v in asdict(cfg).items() if k not in SMI_ONLY}
    return {"type": "set-audit", "config": config, "model": loaded.path, "kind": loaded.kind,
            "dtype": loaded.dtype, "device": loaded.device, "fingerprint": loaded.fingerprint,
            "reference": None if reference is None else reference.path, "shadows": str(where),
            "n_members": 0, "n_nonmembers": 0, "n_suspect": len(suspect), "n_shadows": len(shadows.paths),
            "data": {"suspect": suspect.source}, "overlap": {},
            "features": {"kind": "scores", "dim": 1, "columns": [attack]},
            "methods": {"duci": out},
            "timings_ms": {"features": 1e3 * (t1 - t0), "shadow_scores": 1e3 * (t2 - t1)}}


def run_set_audit(loaded, suspect: TextSet, cfg: AuditConfig, *, members: TextSet | None = None,
                  nonmembers: TextSet | None = None, reference=None, shadows: ShadowSet | None = None,
                  where: str | Path = "shadows", load: Callable | None = None) -> AuditResult:
    """The set-level audit of ``suspect`` by ``cfg.method``: ρ against ``members`` and ``nonmembers``
    (:func:`run_audit`), or DUCI's proportion calibrated on ``shadows`` (:func:`run_duci`); the results payload."""
    if cfg.method == "duci":
        return AuditResult(run_duci(loaded, suspect, cfg, shadows=shadows, where=where, reference=reference,
                                    load=load))
    return AuditResult(run_audit(loaded, members, nonmembers, suspect, cfg, reference=reference))


class AuditResult(RunResult):
    """A set-level audit: ``to_frame()`` has one row per method (ρ, its 90% interval, the unclipped ρ); a DUCI audit
    one row of the used proportion (its 95% interval, the unclipped value, ρ = 1 − proportion)."""

    def to_frame(self) -> pd.DataFrame:
        if "duci" in self.payload["methods"]:
            est = self.payload["methods"]["duci"]
            (lo, hi), keys = est["ci95"], ("proportion", "proportion_unclipped", "rho", "tpr", "fpr")
            return pd.DataFrame([{"method": "duci", **{k: est[k] for k in keys}, "proportion_low": lo,
                                  "proportion_high": hi}])
        return pd.DataFrame([{"method": name, "rho": est["rho"], "rho_low": est["ci90"][0],
                              "rho_high": est["ci90"][1], "rho_unclipped": est.get("rho_unclipped")}
                             for name, est in self.payload["methods"].items()])

    def headline(self) -> str:
        return audit_summary(self.payload).headline


JOB = register_job(Job("audit_set", "set-audit", "audit-set", AuditResult, run_set_audit, AuditConfig,
                       set_audit_report))
