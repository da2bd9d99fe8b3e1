"""``unlearning-audit``: how much of a forget set do set-level and per-sample audits call unseen?

Per seed: a tiny AR model is fine-tuned on a training set D (corpus member passages);
a fraction of D is the forget set F, the rest the retain set. Each unlearning method
produces a model (``none`` is the fine-tuned model itself, ``retrain`` the gold
standard: the base fine-tuned on the retain set only). Every audit estimates ρ, the
fraction of F that behaves like non-members, against reference sets drawn from the
retain set (members) and held-out non-members, disjoint from F:

- ``smi`` / ``smi-m``: set-level estimates on hidden-state features;
- ``smi-scores`` / ``smi-m-scores``: the same on the vector of attack scores
  (loss, zlib, min_k, reference);
- ``smi-m-scores LABEL``: one more SMI-M audit on the score features per entry of
  ``smi_m_variants`` (``[smi_m_variants.LABEL] kernel = ..., bandwidth_factor = ...``),
  for the kernel and bandwidth sweep;
- ``threshold-loss`` / ``threshold-reference``: a thresholded MIA at a fixed FPR,
  corrected for its TPR and FPR (:func:`~lmaudit.audit.per_sample.threshold_forgetting`);
- ``threshold-lira``: the same on offline LiRA scores from K shadow models fine-tuned
  from the base on random halves of D ∪ non-members (``n_shadows = 0``: left out, for a
  model whose shadows do not fit the budget).

On a pretrained ``base`` with ``lora`` set, the target, the retrained model and every
unlearning method train LoRA adapters (an unlearning adapter on top of the target's),
never every weight of the real model.

Payload: ``unlearning`` (per "fraction / method / audit": per-seed ρ, mean, std — the
sample std, ddof = 1, of the defined estimates — and the count of undefined estimates),
``intervals`` (the SMI / SMI-M audits' bootstrap 90% intervals, per "fraction / method /
audit" and seed), ``intervals_unclipped`` (the same percentiles of the unclipped estimate;
:func:`coverage` counts how many hold the value ρ must take for ``none``, 0, and for
``retrain``, 1), ``rho_unclipped`` (per key and seed), ``cost_s`` (mean seconds of each
audit step; LiRA's shadow training from the seconds each shadow's training record stores, so a re-run that reads
them from the model cache still reports what they cost), ``cost_runs`` (per seed: every timing of each audit step, one
a model audited, and ``shadows_timed``, whether every shadow's record gave its seconds), ``threshold_intervals`` (the
thresholded MIAs' bootstrap 90% intervals of ρ, per key and seed: :func:`threshold_forgetting_interval`),
``n_train`` and ``n_nonmembers``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from lmaudit import api
from lmaudit.audit.coverage import coverage, stored_intervals
from lmaudit.audit.per_sample import threshold_forgetting, threshold_forgetting_interval
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError, SettingError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace
from lmaudit.models.kinds import unlearning_audited
from lmaudit.models.shadows import ShadowSet, shadow_splits, text_key
from lmaudit.models.sources import TRAINING_FILE, read_record
from lmaudit.models.unlearn import METHODS, UnlearnConfig
from lmaudit.probes.features import hidden_features
from lmaudit.progress import info
from lmaudit.report import plots
from lmaudit.runs.audit_set import AuditConfig
from lmaudit.runs.mia import RunConfig
from lmaudit.seeds import seed_std
from lmaudit.settings import each, fraction, integer, keys_of, one_of, positive, refusing, setting, table

AUDITS = ("smi", "smi-m", "smi-scores", "smi-m-scores", "threshold-loss", "threshold-reference", "threshold-lira")
SCORE_FEATURES = ("loss", "zlib", "min_k", "reference")  # the score vector of the *-scores audits


def _shadow_count(value, name: str, flag: str | None) -> None:
    """0 (no LiRA audit) or at least 2: LiRA's shadows come in complementary halves."""
    integer(0)(value, name, flag)
    if value == 1:
        raise SettingError(name, "{name} must be 0 (no LiRA audit) or at least 2 (LiRA's shadows come in "
                                 "complementary halves), got 1", flag=flag)


SHADOW_COUNT = refusing(_shadow_count, -1, 1, 2.5, "2", None, valid=(0, 2))


@dataclass
class UnlearningConfig(BaseConfig):
    forget_fractions: list[float] = setting(default_factory=lambda: [0.05, 0.1], check=each(fraction()))
    unlearn_methods: list[str] = setting(default_factory=lambda: ["none", "retrain", "gradient_ascent", "npo",
                                                                  "finetune"], check=each(one_of(("none",) + METHODS)))
    # lr, epochs, retain_weight, npo_beta (and mode): each checked as UnlearnConfig declares it
    unlearn: dict = setting(default_factory=dict,
                            check=keys_of(UnlearnConfig, ("epochs", "lr", "mode", "retain_weight", "npo_beta")))
    n_shadows: int = setting(8, check=SHADOW_COUNT)  # LiRA shadow models (0: no LiRA audit)
    # FPR at which per-sample audits set their threshold: in (0, 1), as threshold_forgetting takes it (0 or 1 passed
    # the file's check once and failed after every model was trained)
    audit_fpr: float = setting(0.1, check=positive(below=1.0))
    # extra SMI-M audits on the score features, label -> {kernel, bandwidth_factor}: audit "smi-m-scores LABEL"
    smi_m_variants: dict[str, dict] = setting(default_factory=dict, check=table())


def _sub(ts: TextSet, idx, source: str) -> TextSet:
    return TextSet([ts.records[i] for i in idx], source=source)


def _unlearned(ws: Workspace, cfg: UnlearningConfig, method: str, target, base, forget: TextSet, retain: TextSet,
               seed: int):
    if method == "none":
        return target
    if method == "retrain":
        return ws.finetuned(base, retain, seed)
    opts = {"lr": 1e-4, "epochs": 3.0, "retain_weight": 1.0, "npo_beta": 0.1, **cfg.unlearn}
    key = ("unlearn", str(target), method, forget.fingerprint(), retain.fingerprint(), opts, cfg.block, cfg.batch_size,
           seed)
    if cfg.lora:  # full-weight unlearnings keep the keys (and cached models) they had before LoRA unlearning
        key += ("lora", cfg.lora)
    return api.unlearn(target, forget, retain, method=method, block=cfg.block, batch_size=cfg.batch_size, seed=seed,
                       lora=cfg.lora or None, cache_key=key, **opts).path


def _shadow_set(ws: Workspace, cfg: UnlearningConfig, base, pool: TextSet, seed: int) -> ShadowSet | None:
    if cfg.n_shadows == 0:
        return None
    halves = shadow_splits(pool, cfg.n_shadows, seed)
    return ShadowSet([ws.finetuned(base, h, seed + 100 + j) for j, h in enumerate(halves)],
                     [{text_key(r) for r in h.records} for h in halves])


def _training_seconds(shadows: ShadowSet) -> float | None:
    """The seconds the shadow models took to train, from their training records; None where a record predates the
    field (its model was trained before lmaudit timed training)."""
    seconds = [(read_record(p, TRAINING_FILE) or {}).get("seconds") for p in shadows.paths]
    return None if any(s is None for s in seconds) else float(sum(seconds))


def _nan_stat(fn, values) -> float:
    v = np.asarray(values, dtype=float)
    return float(fn(v)) if np.isfinite(v).any() else float("nan")


def _seed_std(values) -> float:
    """The sample std (ddof = 1) of the defined per-seed estimates; 0 for one, NaN for none (as ``seed_std``)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return seed_std(v) if v.size else float("nan")


def _std(cell: dict) -> float:
    """A cell's std, recomputed from its per-seed values (results written before ddof = 1 stored ddof = 0)."""
    return _seed_std(cell["per_seed"]) if "per_seed" in cell else cell["std"]


def run(ws: Workspace, cfg: UnlearningConfig) -> dict:
    """ρ of each audit for every forget fraction, unlearning method and seed, and the cost of each audit."""
    if not unlearning_audited(cfg.kind):
        raise LmauditError("the unlearning-audit experiment runs on AR models (LiRA's shadows are AR)")
    variants = _variant_configs(cfg.smi_m_variants)  # checked before anything is trained
    rows: dict[str, list[float]] = {}
    intervals: dict[str, list] = {}
    threshold_intervals: dict[str, list] = {}
    cost_runs: list[dict] = []
    unclipped: dict[str, dict[str, list]] = {"rho_unclipped": {}, "intervals_unclipped": {}}
    cost: dict[str, list[float]] = {"smi": [], "smi-m": [], "features": [], "lira_shadow_training": [],
                                    "lira_probes": []}
    base = ws.base()
    for seed in cfg.seeds:
        train, nonmembers = ws.data(seed)
        target = ws.finetuned(base, train, seed)
        pool = TextSet(train.records + nonmembers.records, source="D ∪ non-members")
        marks = {k: len(v) for k, v in cost.items()}
        t0 = time.perf_counter()
        shadows = _shadow_set(ws, cfg, base, pool, seed)
        recorded = None if shadows is None else _training_seconds(shadows)
        if shadows is not None:  # what training them cost, where the records say; else this run's (maybe a load)
            cost["lira_shadow_training"].append(time.perf_counter() - t0 if recorded is None else recorded)
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(train))
        half = len(nonmembers) // 2
        ref_n = _sub(nonmembers, range(half), "non-members (reference)")
        for frac in cfg.forget_fractions:
            n_forget = max(2, int(round(frac * len(train))))
            forget = _sub(train, np.sort(order[:n_forget]), "forget")
            retain = _sub(train, np.sort(order[n_forget:]), "retain")
            ref_m = _sub(retain, range(min(len(retain), half)), "retain (reference)")
            for method in cfg.unlearn_methods:
                model = ws.load(_unlearned(ws, cfg, method, target, base, forget, retain, seed))
                audits, cis, raw = _audits(cfg, model, ws.load(base), shadows, ref_m, ref_n, forget, cost, variants)
                for audit, value in audits.items():
                    rows.setdefault(f"{frac:g} / {method} / {audit}", []).append(value)
                for audit, ci in cis.items():
                    into = threshold_intervals if audit.startswith("threshold-") else intervals
                    into.setdefault(f"{frac:g} / {method} / {audit}", []).append(ci)
                for audit, (rho_u, ci_u) in raw.items():
                    unclipped["rho_unclipped"].setdefault(f"{frac:g} / {method} / {audit}", []).append(rho_u)
                    unclipped["intervals_unclipped"].setdefault(f"{frac:g} / {method} / {audit}", []).append(ci_u)
        cost_runs.append({"seed": seed, "shadows_timed": recorded is not None,
                          **{k: v[marks.get(k, 0):] for k, v in cost.items()}})
    table = {k: {"per_seed": v, "mean": _nan_stat(np.nanmean, v), "std": _seed_std(v),
                 "n_undefined": int(np.isnan(v).sum())} for k, v in rows.items()}
    return {"unlearning": table, "intervals": intervals, "threshold_intervals": threshold_intervals, **unclipped,
            "cost_s": {k: float(np.mean(v)) if v else None for k, v in cost.items()}, "cost_runs": cost_runs,
            "n_train": cfg.n_members, "n_nonmembers": cfg.n_nonmembers}


def _variant_configs(variants: dict[str, dict]) -> dict[str, AuditConfig]:
    """``smi_m_variants`` as SMI-M audit settings; a bad key or value names its variant."""
    out = {}
    for label, v in variants.items():
        unknown = set(v) - {"kernel", "bandwidth_factor"}
        if unknown:
            raise LmauditError(f"smi_m_variants.{label}: unknown key(s) {', '.join(sorted(unknown))}",
                               hint="a variant takes kernel and bandwidth_factor")
        try:
            out[f"smi-m-scores {label}"] = AuditConfig(method="smi-m", seed=0, **v)
        except LmauditError as exc:
            raise LmauditError(f"smi_m_variants.{label}: {exc.message}", hint=exc.hint) from exc
    return out


def _plans(feats: list, score_feats: list, variants: dict[str, AuditConfig]) -> list[tuple[str, list, AuditConfig]]:
    """(audit name, its (members, non-members, forget) features, its settings) of every set-level audit: SMI and
    SMI-M on hidden and on score features, then each ``smi_m_variants`` entry on the score features."""
    plans = [(m, fs, AuditConfig(method=m.removesuffix("-scores"), seed=0)) for m, fs in (
        ("smi", feats), ("smi-m", feats), ("smi-scores", score_feats), ("smi-m-scores", score_feats))]
    return plans + [(label, score_feats, conf) for label, conf in variants.items()]


def _audits(cfg: UnlearningConfig, model, base, shadows, ref_m: TextSet, ref_n: TextSet, forget: TextSet,
            cost: dict, variants: dict[str, AuditConfig]) -> tuple[dict, dict, dict]:
    """ρ of every audit, the bootstrap 90% interval of each ([None, None] when undefined), and each set-level one's
    (unclipped estimate, its interval)."""
    out, cis, raw = {}, {}, {}
    t0 = time.perf_counter()
    feats = [hidden_features(model, ts, batch_size=cfg.probe_batch_size) for ts in (ref_m, ref_n, forget)]
    cost["features"].append(time.perf_counter() - t0)
    both = TextSet(ref_m.records + ref_n.records + forget.records, source="audit sets")
    n_m, n_n = len(ref_m), len(ref_n)
    t0 = time.perf_counter()
    lira = ["lira"] if shadows is not None else []
    scores = api.score_texts(model, both, reference=base, shadows=shadows,
                             config=RunConfig(attacks=[*SCORE_FEATURES, *lira], batch_size=cfg.probe_batch_size))
    cost["lira_probes"].append(time.perf_counter() - t0)
    vec = np.column_stack([scores[a] for a in SCORE_FEATURES])
    score_feats = [vec[:n_m], vec[n_m : n_m + n_n], vec[n_m + n_n :]]
    for method, fs, conf in _plans(feats, score_feats, variants):
        base_method = conf.method
        t0 = time.perf_counter()
        try:
            est = api.audit_features(*fs, config=conf)[base_method]
            out[method], cis[method] = est["rho"], est["ci90"]
            raw[method] = (est["rho_unclipped"], est["ci90_unclipped"])
        except LmauditError as exc:  # reference sets not separable: ρ is not identifiable, recorded as NaN
            info(f"[yellow]{method}: {exc.message}[/yellow]")
            out[method], cis[method], raw[method] = float("nan"), [None, None], (float("nan"), [None, None])
        cost.setdefault(method, []).append(time.perf_counter() - t0)
    for attack in ("loss", "reference", *lira):
        sets = (scores[attack][:n_m], scores[attack][n_m : n_m + n_n], scores[attack][n_m + n_n :])
        out[f"threshold-{attack}"] = threshold_forgetting(*sets, fpr=cfg.audit_fpr)["rho"]
        cis[f"threshold-{attack}"] = threshold_forgetting_interval(*sets, fpr=cfg.audit_fpr)
    return out, cis, raw


def _split(key: str) -> tuple[str, str, str]:
    frac, method, audit = key.split(" / ")
    return frac, method, audit


def _axes(table: dict) -> tuple[list[str], list[str], list[str]]:
    """(forget fractions, methods, audits) of the table's keys, in the order they were run."""
    return tuple(list(dict.fromkeys(_split(k)[i] for k in table)) for i in range(3))


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """ρ per method and audit for each forget fraction (mean ± std over seeds), then the cost per audit."""
    table = record["unlearning"]
    fracs, methods, audits = _axes(table)
    out = []
    for frac in fracs:
        rows = []
        for method in methods:
            rows.append([method] + [f"{table[f'{frac} / {method} / {a}']['mean']:.2f} ± "
                                    f"{_std(table[f'{frac} / {method} / {a}']):.2f}" for a in audits])
        gold = {a: table[f"{frac} / retrain / {a}"]["mean"] for a in audits} if "retrain" in methods else None
        caption = (f"Forget {100 * float(frac):g}% of the training set: estimated ρ (fraction of the forget set that "
                   "looks unseen; mean ± std over seeds, ddof = 1). 'none' should read 0 and 'retrain' (the gold "
                   "standard) 1.")
        if gold:
            caption += " Retrain as measured by each audit: " + ", ".join(f"{a} {v:.2f}" for a, v in gold.items()) + "."
        out.append((caption, ["method"] + audits, rows))
    cost = record["cost_s"]
    audit_s = lambda m: (cost["features"] or 0) + (cost[m] or 0)  # noqa: E731
    cost_rows = [["SMI (hidden features + estimate)", f"{audit_s('smi'):.2f}"],
                 ["SMI-M (hidden features + estimate)", f"{audit_s('smi-m'):.2f}"],
                 ["SMI / SMI-M on score features (estimate only; the scores come with the probes)",
                  f"{cost.get('smi-scores') or 0:.3f} / {cost.get('smi-m-scores') or 0:.3f}"],
                 *([["LiRA: shadow training (once per seed)", f"{cost['lira_shadow_training']:.1f}"],
                    ["LiRA: target + shadow probes (per model audited)", f"{cost['lira_probes']:.2f}"]]
                   if cost["lira_shadow_training"] is not None else
                   [["score probes: target + reference (per model audited; no LiRA)", f"{cost['lira_probes']:.2f}"]])]
    if record.get("intervals"):
        intervals, which = stored_intervals(record)
        cov = coverage(intervals)
        out.append((f"How often each set-level audit's bootstrap 90% interval (of the {which}) holds the value ρ "
                    "must take ('none': 0, 'retrain': 1), over forget fractions and seeds; nominal 90%. Degenerate "
                    "intervals (an estimate clipped to 0 or 1 on every resample, or one holding all of [0, 1]) hold "
                    "the truth whatever the audit does and are counted apart.",
                    ["audit", "covered", "share", "median width", "clipped to a point", "all of [0, 1]"],
                    [[a, f"{c['covered']}/{c['n']}", f"{100 * c['covered'] / c['n']:.0f}%" if c["n"] else "n/a",
                      f"{float(np.median(c['widths'])):.2f}" if c["widths"] else "n/a", str(c["clipped"]),
                      str(c["vacuous"])] for a, c in cov.items()]))
    timed = all(r.get("shadows_timed") for r in record.get("cost_runs") or [{}])
    lira_note = ("" if cost["lira_shadow_training"] is None else
                 "; shadow training as each shadow's training record timed it" if timed else
                 "; shadow training from the model cache is near 0 on a re-run — the first run's figure is in the note")
    out.append((f"Cost per audit in seconds (mean over runs{lira_note}).", ["audit", "seconds"], cost_rows))
    return out


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """ρ by method for each audit (largest forget fraction), as grouped bars."""
    table = record["unlearning"]
    _, methods, audits = _axes(table)
    frac = sorted({_split(k)[0] for k in table}, key=float)[-1]
    series = {a: ([table[f"{frac} / {m} / {a}"]["mean"] for m in methods],
                  [_std(table[f"{frac} / {m} / {a}"]) for m in methods]) for a in audits}
    png = plots.grouped_bars(methods, series, ylabel="estimated ρ (forget set looks unseen)", ylim=(0, 1.05),
                             title=f"Unlearning audit, forget {100 * float(frac):g}%")
    return [("rho_by_method", "Estimated ρ per unlearning method and audit", png)]


register_experiment("unlearning-audit", config=UnlearningConfig, run=run, tables=tables, figures=figures)
