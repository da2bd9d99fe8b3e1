"""The unlearning-audit experiment: how much of a forget set do set-level and per-sample audits call unseen?

Per seed: a tiny AR model is fine-tuned on a training set D (corpus member passages);
a fraction of D is the forget set F, the rest the retain set. Each unlearning method
produces a model (``none`` is the fine-tuned model itself, ``retrain`` the gold
standard: the base fine-tuned on the retain set only). Every audit estimates ρ, the
fraction of F that behaves like non-members, against reference sets drawn from the
retain set (members) and held-out non-members, disjoint from F:

- ``smi`` / ``smi-m``: set-level estimates on hidden-state features;
- ``smi-scores`` / ``smi-m-scores``: the same on the vector of attack scores
  (loss, zlib, min_k, reference);
- ``threshold-loss`` / ``threshold-reference``: a thresholded MIA at a fixed FPR,
  corrected for its TPR and FPR (:func:`~lmaudit.audit.per_sample.threshold_forgetting`);
- ``threshold-lira``: the same on offline LiRA scores from K shadow models fine-tuned
  from the base on random halves of D ∪ non-members.
"""

from __future__ import annotations

import time

import numpy as np

from lmaudit.audit.per_sample import threshold_forgetting
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.build import cached_build
from lmaudit.models.shadows import ShadowSet, shadow_splits, text_key
from lmaudit.models.unlearn import unlearn
from lmaudit.probes.features import hidden_features
from lmaudit.progress import info
from lmaudit.runs.audit_set import AuditConfig, estimate_rho
from lmaudit.runs.mia import RunConfig, score_set

AUDITS = ("smi", "smi-m", "smi-scores", "smi-m-scores", "threshold-loss", "threshold-reference", "threshold-lira")
SCORE_FEATURES = ("loss", "zlib", "min_k", "reference")  # the score vector of the *-scores audits


def _sub(ts: TextSet, idx, source: str) -> TextSet:
    return TextSet([ts.records[i] for i in idx], source=source)


def _unlearned(ws, method: str, target, base, forget: TextSet, retain: TextSet, seed: int):

    c = ws.cfg
    if method == "none":
        return target
    if method == "retrain":
        return ws.finetuned(base, retain, seed)
    opts = {"lr": 1e-4, "epochs": 3.0, "retain_weight": 1.0, "npo_beta": 0.1, **c.unlearn}
    key = ("unlearn", str(target), method, forget.fingerprint(), retain.fingerprint(), opts, c.block, c.batch_size, seed)
    return cached_build("models", key, lambda tmp: unlearn(target, forget, retain, tmp, method=method, block=c.block,
                                                            batch_size=c.batch_size, seed=seed, **opts))


def _shadow_set(ws, base, pool: TextSet, seed: int):

    halves = shadow_splits(pool, ws.cfg.n_shadows, seed)
    return ShadowSet([ws.finetuned(base, h, seed + 100 + j) for j, h in enumerate(halves)],
                     [{text_key(r) for r in h.records} for h in halves])


def _nan_stat(fn, values) -> float:
    v = np.asarray(values, dtype=float)
    return float(fn(v)) if np.isfinite(v).any() else float("nan")


def run_unlearning(ws) -> dict:
    c = ws.cfg
    if c.kind != "ar":
        raise LmauditError("the unlearning-audit experiment runs on AR models (LiRA's shadows are AR)")
    rows: dict[str, list[float]] = {}
    cost: dict[str, list[float]] = {"smi": [], "smi-m": [], "features": [], "lira_shadow_training": [],
                                    "lira_probes": []}
    base = ws.base()
    for seed in c.seeds:
        train, nonmembers = ws.data(seed)
        target = ws.finetuned(base, train, seed)
        pool = TextSet(train.records + nonmembers.records, source="D ∪ non-members")
        t0 = time.perf_counter()
        shadows = _shadow_set(ws, base, pool, seed)
        cost["lira_shadow_training"].append(time.perf_counter() - t0)
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(train))
        half = len(nonmembers) // 2
        ref_n = _sub(nonmembers, range(half), "non-members (reference)")
        for frac in c.forget_fractions:
            n_forget = max(2, int(round(frac * len(train))))
            forget = _sub(train, np.sort(order[:n_forget]), "forget")
            retain = _sub(train, np.sort(order[n_forget:]), "retain")
            ref_m = _sub(retain, range(min(len(retain), half)), "retain (reference)")
            for method in c.unlearn_methods:
                model = ws.load(_unlearned(ws, method, target, base, forget, retain, seed))
                for audit, value in _audits(ws, model, ws.load(base), shadows, ref_m, ref_n, forget, cost).items():
                    rows.setdefault(f"{frac:g} / {method} / {audit}", []).append(value)
    table = {k: {"per_seed": v, "mean": _nan_stat(np.nanmean, v), "std": _nan_stat(np.nanstd, v),
                 "n_undefined": int(np.isnan(v).sum())} for k, v in rows.items()}
    return {"unlearning": table, "cost_s": {k: float(np.mean(v)) if v else None for k, v in cost.items()},
            "n_train": c.n_members, "n_nonmembers": c.n_nonmembers}


def _audits(ws, model, base, shadows, ref_m: TextSet, ref_n: TextSet, forget: TextSet, cost: dict) -> dict:
    out = {}
    t0 = time.perf_counter()
    feats = [hidden_features(model, ts) for ts in (ref_m, ref_n, forget)]
    cost["features"].append(time.perf_counter() - t0)
    both = TextSet(ref_m.records + ref_n.records + forget.records, source="audit sets")
    n_m, n_n = len(ref_m), len(ref_n)
    t0 = time.perf_counter()
    scores = score_set(model, both, reference=base, config=RunConfig(attacks=[*SCORE_FEATURES, "lira"]),
                       shadows=shadows)
    cost["lira_probes"].append(time.perf_counter() - t0)
    vec = np.column_stack([scores[a] for a in SCORE_FEATURES])
    score_feats = [vec[:n_m], vec[n_m : n_m + n_n], vec[n_m + n_n :]]
    for method, fs in (("smi", feats), ("smi-m", feats), ("smi-scores", score_feats), ("smi-m-scores", score_feats)):
        base_method = method.removesuffix("-scores")
        t0 = time.perf_counter()
        try:
            out[method] = estimate_rho(*fs, AuditConfig(method=base_method, seed=0))[base_method]["rho"]
        except LmauditError as exc:  # reference sets not separable: ρ is not identifiable, recorded as NaN
            info(f"[yellow]{method}: {exc.message}[/yellow]")
            out[method] = float("nan")
        cost.setdefault(method, []).append(time.perf_counter() - t0)
    for attack in ("loss", "reference", "lira"):
        s = scores[attack]
        out[f"threshold-{attack}"] = threshold_forgetting(s[:n_m], s[n_m : n_m + n_n], s[n_m + n_n :],
                                                          fpr=ws.cfg.audit_fpr)["rho"]
    return out
