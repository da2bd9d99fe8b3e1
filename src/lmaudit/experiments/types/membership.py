"""Membership-inference tables: every attack (``mia``), Q-Skew ablations (``ablation``), other references (``misaligned-ref``).

The three types share their payload — ``rows``: ``{label: {per_seed, auc, tpr@10%fpr,
tpr@1%fpr}}`` with each metric as [mean, std] over seeds — and its table; they differ in
their keys and in what a row is: an attack, a variant, or a (reference, attack) pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import METRICS, Workspace, aggregate, metrics

HEADERS = ("AUC", "TPR@10%FPR", "TPR@1%FPR")


@dataclass
class MIAConfig(BaseConfig):
    budget: int = 16  # masked forwards per model per sample (DLM attacks)
    attacks: list[str] | None = None  # None: every attack of the model's kind


@dataclass
class AblationConfig(BaseConfig):
    budget: int = 16
    variants: dict[str, dict] = field(default_factory=dict)  # label -> {attack, parameters...}


@dataclass
class MisalignedConfig(BaseConfig):
    budget: int = 16
    attacks: list[str] | None = None
    references: list[str] = field(default_factory=lambda: ["golden", "other-seed", "perturbed"])


def _rows(collected: dict[str, list]) -> dict:
    return {"rows": {k: {"per_seed": v, **aggregate(v)} for k, v in collected.items()}}


def run_mia_table(ws: Workspace, cfg: MIAConfig) -> dict:
    """Every attack (or ``attacks``) on the target fine-tuned on the members, reference = its base."""
    rows: dict[str, list] = {}
    for seed in cfg.seeds:
        members, nonmembers, base, target = ws.fine_tuned_run(seed)
        result = ws.mia(target, base, members, nonmembers, seed, budget=cfg.budget, attacks=cfg.attacks)
        for name in result.attacks:
            rows.setdefault(name, []).append(metrics(result, name))
    return _rows(rows)


def run_ablation(ws: Workspace, cfg: AblationConfig) -> dict:
    """One row per variant: an attack and its parameters (``[variants.LABEL] attack = ..., k = ...``)."""
    rows: dict[str, list] = {}
    for seed in cfg.seeds:
        members, nonmembers, base, target = ws.fine_tuned_run(seed)
        for label, variant in cfg.variants.items():
            attack = variant["attack"]
            params = {k: v for k, v in variant.items() if k != "attack"}
            result = ws.mia(target, base, members, nonmembers, seed, budget=cfg.budget, attacks=[attack],
                            params={attack: params})
            rows.setdefault(label, []).append(metrics(result, attack))
    return _rows(rows)


def run_misaligned(ws: Workspace, cfg: MisalignedConfig) -> dict:
    """Reference-based attacks with the golden reference, another seed's base, or a base tuned on perturbed text."""
    rows: dict[str, list] = {}
    for seed in cfg.seeds:
        members, nonmembers, base, target = ws.fine_tuned_run(seed)
        refs = {"golden": base, "other-seed": ws.base(seed=1),
                "perturbed": ws.finetuned(base, ws.other_data(seed), seed)}
        for ref_name in cfg.references:
            result = ws.mia(target, refs[ref_name], members, nonmembers, seed, budget=cfg.budget, attacks=cfg.attacks)
            for name in result.attacks:
                rows.setdefault(f"{ref_name} / {name}", []).append(metrics(result, name))
    return _rows(rows)


def rows_tables(record: dict, first: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """One table: a row per label, best mean AUC first, each metric as mean ± std in percent.

    Parameters
    ----------
    record : dict
        The record of ``results.json`` (``experiment`` and ``rows``).
    first : str
        The header of the label column.
    """
    exp = record["experiment"]
    rows = [[label] + [f"{100 * r[k][0]:.1f} ± {100 * r[k][1]:.1f}" for k in METRICS]
            for label, r in sorted(record["rows"].items(), key=lambda kv: -kv[1]["auc"][0])]
    budget = f"; {exp['budget']} forwards per model per sample" if "budget" in exp else ""
    caption = (f"{exp['n_members']} members vs {exp['n_nonmembers']} non-members{budget}. Values are mean ± std "
               "over seeds, in percent.")
    return [(caption, [first, *HEADERS], rows)]


register_experiment("mia", config=MIAConfig, run=run_mia_table, tables=lambda rec: rows_tables(rec, "attack"))
register_experiment("ablation", config=AblationConfig, run=run_ablation,
                    tables=lambda rec: rows_tables(rec, "variant"))
register_experiment("misaligned-ref", config=MisalignedConfig, run=run_misaligned,
                    tables=lambda rec: rows_tables(rec, "reference / attack"))
