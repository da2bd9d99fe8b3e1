"""``epochs``: AUC of each attack after 1..N fine-tuning epochs (the Q-Skew paper's Figure 2).

Payload: ``curves``: ``{attack: {epoch: {per_seed, auc, tpr@10%fpr, tpr@1%fpr}}}``, each
metric as [mean, std] over seeds. Every epoch count is a separate fine-tuning run with its
own schedule (not a checkpoint of a longer run).
"""

from __future__ import annotations

from dataclasses import dataclass

from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace, aggregate, metrics
from lmaudit.report import plots
from lmaudit.settings import each, integer, setting, text


@dataclass
class EpochsConfig(BaseConfig):
    budget: int = setting(16, check=integer(1))  # masked forwards per model per sample (DLM attacks)
    attacks: list[str] | None = setting(None, check=each(text(), optional=True))  # None: every attack of the kind


def run(ws: Workspace, cfg: EpochsConfig) -> dict:
    """Membership inference on the target after each number of epochs from 1 to ``epochs``."""
    curves: dict[str, dict[int, list]] = {}
    for seed in cfg.seeds:
        members, nonmembers = ws.data(seed)
        base = ws.base()
        for epoch in range(1, cfg.epochs + 1):
            result = ws.mia(ws.finetuned(base, members, seed, epochs=epoch), base, members, nonmembers, seed,
                            budget=cfg.budget, attacks=cfg.attacks)
            for name in result.attacks:
                curves.setdefault(name, {}).setdefault(epoch, []).append(metrics(result, name))
    return {"curves": {name: {str(e): {"per_seed": v, **aggregate(v)} for e, v in by_epoch.items()}
                       for name, by_epoch in curves.items()}}


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """One row per attack (by name), one column per epoch count: mean AUC in percent."""
    curves, exp = record["curves"], record["experiment"]
    epochs = sorted({int(e) for c in curves.values() for e in c})
    rows = [[name] + [f"{100 * c[str(e)]['auc'][0]:.1f}" for e in epochs] for name, c in sorted(curves.items())]
    caption = (f"AUC (%) after each number of fine-tuning epochs; {exp['n_members']} members vs "
               f"{exp['n_nonmembers']} non-members, {exp['budget']} forwards per model per sample, mean over seeds.")
    return [(caption, ["attack"] + [f"epoch {e}" for e in epochs], rows)]


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """AUC (mean ± std over seeds) against the number of epochs, one line per attack."""
    return [("auc_vs_epochs", "AUC vs epochs", plots.auc_vs_epochs(record["curves"]))]


register_experiment("epochs", config=EpochsConfig, run=run, tables=tables, figures=figures)
