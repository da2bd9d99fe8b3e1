"""``unlearning-robustness``: does an unlearning that the audits read as done come back under relearning or
quantisation?

Per seed: the base fine-tuned on a training set D (the target); a ``forget_fraction`` of D is the forget set F, the
rest the retain set; ``retrain`` (the base fine-tuned on the retain set: the gold standard) and each unlearning
method of ``unlearn_methods`` (``none`` is the target itself, a control that never forgot) are checked by
:func:`lmaudit.api.unlearning_check` against the retrained model: relearning on
``relearn_fraction`` of F for ``relearn_steps`` steps, and GGUF ``quantize`` schemes; the audited rest of F read
against retain (members) and held-out (non-member) reference texts, per attack (AUC) and by SMI-M (1 − ρ on the
attack scores); the ``reference`` attack, when named, compares with the base both models were tuned from.

Payload: ``checks`` (per "method / check / statistic": per-seed ``beyond`` — the unlearned model's change minus the
retrained model's, with its paired 95% interval — and ``unlearned`` / ``retrained`` changes and ``after``),
``before`` (per "method / statistic": unlearned − retrained as they are, per seed), ``values`` (per "method /
variant / statistic" for the unlearned model and "retrain / variant / statistic" for the gold standard, per seed),
``verdicts`` (per "method / check / statistic": the seeds' intervals of ``beyond`` read by
:func:`~lmaudit.claims.verdicts.comparison`: "reproduced" means it came back on every seed), ``n_audited``,
``n_relearn`` and ``cost_s``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from lmaudit import api
from lmaudit.claims.verdicts import AGAINST, NOT_REPRODUCED, REPRODUCED, comparison, seed_verdicts
from lmaudit.errors import LmauditError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.types.unlearning_audit import _sub, _unlearned
from lmaudit.experiments.workspace import Workspace
from lmaudit.models.kinds import unlearning_audited
from lmaudit.models.lora import LoraSpec
from lmaudit.models.unlearn import METHODS, UnlearnConfig
from lmaudit.report import plots
from lmaudit.runs.unlearning_check import SCHEMES, SMI_M, CheckConfig
from lmaudit.seeds import seed_std
from lmaudit.settings import each, fraction, integer, keys_of, non_negative, one_of, setting, text

# the seeds' verdicts read together (comparison(): every seed came back → reproduced, ...)
READ = {"reproduced": "came back on every seed", "against the claim": "less than retrained on every seed",
        "partly reproduced": "came back on some seeds", "inconclusive": "no evidence of a return"}


def _read(verdict: str, per_seed: list[str], t: float) -> str:
    """The verdict of one row in words; "not reproduced" says whether every seed rules the return out or the seeds
    contradict each other (some came back, others less than retrained)."""
    if len(per_seed) == 1:  # one seed: its own interval's reading, said to be one seed's
        text = READ[verdict] if verdict != NOT_REPRODUCED else f"a return of {t:g} or more ruled out"
        return text.replace(" on every seed", "") + " (one seed)"
    if verdict != NOT_REPRODUCED:
        return READ[verdict]
    if all(v in (NOT_REPRODUCED, AGAINST) for v in per_seed):
        return f"a return of {t:g} or more ruled out on every seed"
    if REPRODUCED in per_seed:
        return "seeds contradict each other"
    return f"a return of {t:g} or more ruled out on some seeds, no evidence on the others"


@dataclass
class RobustnessConfig(BaseConfig):
    forget_fraction: float = setting(0.2, check=fraction(above_zero=True))
    unlearn_methods: list[str] = setting(default_factory=lambda: ["none", "gradient_ascent", "npo"],
                                         check=each(one_of(("none",) + tuple(m for m in METHODS if m != "retrain"))))
    unlearn: dict = setting(default_factory=dict,
                            check=keys_of(UnlearnConfig, ("epochs", "lr", "mode", "retain_weight", "npo_beta")))
    relearn_fraction: float = setting(0.25, check=fraction(above_zero=True))
    relearn_steps: int = setting(20, check=integer(1))
    relearn_lr: float = setting(0.0, check=non_negative(hint="0: the fine-tuning default of the model"))
    quantize: list[str] = setting(default_factory=lambda: list(SCHEMES), check=each(one_of(SCHEMES)))
    attacks: list[str] = setting(default_factory=lambda: ["loss", "zlib", "min_k"], check=each(text()))
    bootstrap: int = setting(1000, check=integer(20))
    n_references: int = setting(100, check=integer(5))  # retain and held-out reference texts, each
    min_return: float = setting(0.02, check=non_negative())  # the smallest return that counts (CheckConfig)


def run(ws: Workspace, cfg: RobustnessConfig) -> dict:
    """Each method's checks on every seed (module docstring)."""
    if not unlearning_audited(cfg.kind):
        raise LmauditError("the unlearning-robustness experiment runs on AR models")
    check = CheckConfig(relearn_fraction=cfg.relearn_fraction, steps=cfg.relearn_steps,
                        lr=cfg.relearn_lr or None, quantize=cfg.quantize, attacks=cfg.attacks,
                        bootstrap=cfg.bootstrap, min_return=cfg.min_return)
    lora = LoraSpec(cfg.lora) if cfg.lora else None
    out: dict[str, dict] = {"checks": {}, "before": {}, "values": {}}
    cost: dict[str, list[float]] = {}
    sizes = {}
    base = ws.base()
    for seed in cfg.seeds:
        train, nonmembers = ws.data(seed)
        target = ws.finetuned(base, train, seed)
        order = np.random.default_rng(seed).permutation(len(train))
        n_forget = max(2, int(round(cfg.forget_fraction * len(train))))
        forget = _sub(train, np.sort(order[:n_forget]), "forget")
        retain = _sub(train, np.sort(order[n_forget:]), "retain")
        ref_m = _sub(retain, range(min(len(retain), cfg.n_references)), "retain (reference)")
        ref_n = _sub(nonmembers, range(min(len(nonmembers), cfg.n_references)), "non-members (reference)")
        retrained = _unlearned(ws, cfg, "retrain", target, base, forget, retain, seed)
        for i, method in enumerate(cfg.unlearn_methods):
            model = _unlearned(ws, cfg, method, target, base, forget, retain, seed)
            t0 = time.perf_counter()
            payload = api.unlearning_check(model, retrained, forget, ref_m, ref_n,
                                           config=CheckConfig(**{**check.__dict__, "seed": seed}), lora=lora,
                                           reference=base if "reference" in cfg.attacks else None).payload
            cost.setdefault(method, []).append(time.perf_counter() - t0)
            sizes = {"n_audited": payload["n_audited"], "n_relearn": payload["n_relearn"]}
            _collect(out, method, payload, gold=i == 0)
    out["verdicts"] = {key: comparison([s["beyond"]["ci95"] for s in per_seed], threshold=cfg.min_return)
                       for key, per_seed in out["checks"].items()}
    return {**out, **sizes, "cost_s": {k: float(np.mean(v)) for k, v in cost.items()},
            "n_references": cfg.n_references, "min_return": cfg.min_return}


def _collect(out: dict, method: str, payload: dict, *, gold: bool) -> None:
    """Append one seed's check of ``method`` to the experiment's per-seed lists (with ``gold``, the retrained
    model's values too: every method of a seed checks against the same retrained model)."""
    for check, stats in payload["checks"].items():
        for stat, row in stats.items():
            out["checks"].setdefault(f"{method} / {check} / {stat}", []).append(row)
    for stat, diff in payload["before"].items():
        out["before"].setdefault(f"{method} / {stat}", []).append(diff)
    for role, name in (("unlearned", method), ("retrained", "retrain"))[: 2 if gold else 1]:
        for variant, values in payload["values"][role].items():
            for stat, value in values.items():
                out["values"].setdefault(f"{name} / {variant} / {stat}", []).append(value)


def _label(stat: str) -> str:
    return "SMI-M 1 − ρ" if stat == SMI_M else f"AUC {stat}"


def _cell(per_seed: list[dict]) -> str:
    """Per-seed differences with their intervals."""
    return "; ".join(f"{d['diff']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]" for d in per_seed)


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per check: each method and statistic's return beyond the retrained model, per seed, and its verdict; then the
    gap to the retrained model before any check."""
    checks, t = record["checks"], record.get("min_return", 0.0)
    names = list(dict.fromkeys(k.split(" / ")[1] for k in checks))
    out = []
    for name in names:
        rows = [[k.split(" / ")[0], _label(k.split(" / ")[2]), _cell([s["unlearned"] for s in v]),
                 _cell([s["retrained"] for s in v]), _cell([s["beyond"] for s in v]),
                 _read(record["verdicts"][k], seed_verdicts([s["beyond"]["ci95"] for s in v], threshold=t), t)]
                for k, v in checks.items() if k.split(" / ")[1] == name]
        what = (f"relearning ({record['n_relearn']} forget texts)" if name == "relearn" else
                f"GGUF {name.upper()} quantisation")
        out.append((f"{what}: change of each audit statistic of the {record['n_audited']} audited forget texts "
                    "under the check, for the unlearned and the retrained model, and the unlearned model's change "
                    "beyond the retrained one's (per seed, paired 95% intervals); the verdict reads the seeds' "
                    f"intervals of that last column by the one rule of CLAIMS.md, a return of "
                    f"{record.get('min_return', 0.0):g} or more being the effect that counts.",
                    ["method", "statistic", "unlearned change", "retrained change", "beyond retrained", "verdict"],
                    rows))
    rows = [[k.split(" / ")[0], _label(k.split(" / ")[1]), _cell(v)] for k, v in record["before"].items()]
    out.append(("Before any check: unlearned − retrained (per seed, paired 95% intervals). 0 is what a perfect "
                "unlearning gives; 'none' (the target itself) shows what the audit sees of an unlearning not done.",
                ["method", "statistic", "unlearned − retrained"], rows))
    return out


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """SMI-M's trained fraction of the audited forget texts per model, as it is and after each check."""
    values = record["values"]
    models = list(dict.fromkeys(k.split(" / ")[0] for k in values))
    variants = list(dict.fromkeys(k.split(" / ")[1] for k in values))
    series = {}
    for variant in variants:
        cells = [values.get(f"{m} / {variant} / {SMI_M}", [float("nan")]) for m in models]
        series[variant] = ([float(np.mean(c)) for c in cells], [seed_std(c) if len(c) > 1 else 0.0 for c in cells])
    png = plots.grouped_bars(models, series, ylabel="SMI-M trained fraction 1 − ρ of the audited forget texts",
                             ylim=(0, 1.05), title="Unlearning under relearning and quantisation")
    return [("trained_fraction_by_check", "SMI-M's trained fraction per model, as it is and after each check", png)]


register_experiment("unlearning-robustness", config=RobustnessConfig, run=run, tables=tables, figures=figures)
