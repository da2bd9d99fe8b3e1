"""Set validity: what the blind baselines, the reference's own scores and dataset inference say on sets drawn
alike and on sets with a planted shift, on a model fine-tuned on the members and on one that never saw them.

Per seed, two splits: ``iid`` (members and non-members from the corpus' member and non-member pools, drawn
alike) and ``shifted`` (the same members; non-members from another source, the Python language reference, which
the members' docstrings differ from in style and vocabulary). Each is scored on two models: ``fine-tuned`` (the
base fine-tuned on the members, the base as reference) and ``untouched`` (the base itself, which saw neither set:
every difference it finds is the sets'). One membership run per cell (every attack, the blind baselines, the
reference's prior) and dataset inference on the same scores, members as the suspect set and non-members as the
validation set: on the shifted split it rejects without any training, which is the assumption it rests on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmaudit.attacks import get_attack
from lmaudit.audit.dataset_inference import dataset_inference
from lmaudit.errors import LmauditError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace
from lmaudit.report.summary import mia_summary
from lmaudit.report.validity import adjusted_auc, evidence, gain
from lmaudit.settings import each, integer, one_of, setting, text

SPLITS = ("iid", "shifted")
MODELS = ("fine-tuned", "untouched")


@dataclass
class SetValidityConfig(BaseConfig):
    splits: list[str] | None = setting(None, check=each(one_of(SPLITS), optional=True))  # None: iid and shifted
    # None: every attack without shadow models
    attacks: list[str] | None = setting(None, check=each(text(), optional=True))
    di_splits: int = setting(20, check=integer(1, 10_000))  # seeded halvings of dataset inference


def _cell(result, di: dict) -> dict:
    """What one (split, model, seed) cell keeps: the set check, the best attack and what it adds, the verdict."""
    res = result.payload()
    check = res["set_check"]
    best = max(res["attacks"], key=lambda n: res["attacks"][n]["auc"])
    m = res["attacks"][best]
    prior = check.get("reference")
    return {"blind": {"auc": check.get("auc"), "ci95": check.get("auc_ci95"), "p": check.get("p_adjusted"),
                      "differ": check.get("differ"), "best": check.get("best")},
            "best": {"attack": best, "auc": m["auc"], "ci95": m["auc_ci95"], "vs_blind": m.get("vs_blind")},
            "prior": None if not prior else {"attack": prior["best"], "auc": prior["auc"], "ci95": prior["auc_ci95"],
                                             "p": prior["p_adjusted"], "differ": prior["differ"]},
            "evidence": sorted(evidence(res)), "headline": mia_summary([("", res)]).headline,
            "beyond": _beyond(res),
            "dataset_inference": {"p": di["test"]["p_combined"], "control_p": di["control"]["p_combined"],
                                  "spread": di["test"]["p_spread"]},
            "ngrams_13": res["overlap"]["ngrams"]["13"]}


def _beyond(res: dict) -> dict | None:
    """The attack that adds most beyond the sets' differences (the verdict's), what it adds and its interval."""
    shown = evidence(res)
    if not shown:
        return None
    name = max(shown, key=lambda n: adjusted_auc(res, n))
    found = gain(res, name)
    return {"attack": name, "gain": None if found is None else found[0], "ci95": None if found is None else found[1],
            "auc": res["attacks"][name]["auc"]}


def run_set_validity(ws: Workspace, cfg: SetValidityConfig) -> dict:
    splits = cfg.splits or list(SPLITS)
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise LmauditError(f"unknown split(s) {', '.join(unknown)}", hint=f"use {', '.join(SPLITS)}")
    if cfg.mode != "dft":
        raise LmauditError("set-validity draws passages: it runs with mode = \"dft\"")
    cells: dict[str, list] = {}
    shifted_source = ws.cell(source="pydoc")
    for seed in cfg.seeds:
        members, nonmembers, base, target = ws.fine_tuned_run(seed)
        for split in splits:
            others = nonmembers if split == "iid" else shifted_source.data(seed)[1]
            for model, path, reference in (("fine-tuned", target, base), ("untouched", base, None)):
                attacks = cfg.attacks if reference or cfg.attacks is None else \
                    [a for a in cfg.attacks if not get_attack(a, cfg.kind).needs_reference]
                result = ws.mia(path, reference, members, others, seed, budget=16, attacks=attacks)
                names = sorted(result.scores)
                x = np.column_stack([result.scores[n] for n in names])
                di = dataset_inference(x[result.labels == 1], x[result.labels == 0], names, splits=cfg.di_splits,
                                       seed=seed)
                cells.setdefault(f"{split} / {model}", []).append({"seed": seed, **_cell(result, di)})
    return {"cells": cells}


def _ci(pair) -> str:
    return "-" if not pair else f"[{pair[0]:.3f}, {pair[1]:.3f}]"


def _p(p) -> str:
    return "-" if p is None else (f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}")


def _gain(beyond: dict | None) -> str:
    if not beyond:
        return "none"
    if beyond["gain"] is None:  # nothing subtracted: sets drawn alike, or a reference-calibrated attack
        return f"{beyond['attack']} (AUC {beyond['auc']:.3f})"
    return f"{beyond['attack']} {beyond['gain']:+.3f} {_ci(beyond['ci95'])}"


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """One row per (split, model, seed): the blind baseline, the best attack and what it adds beyond it, the
    reference's own AUC, the verdict's headline and dataset inference's p-value with its control."""
    rows = []
    for label, per_seed in record["cells"].items():
        for c in per_seed:
            vs = c["best"]["vs_blind"] or {}
            prior = c["prior"] or {}
            rows.append([label, str(c["seed"]),
                         f"{c['blind']['auc']:.3f} {_ci(c['blind']['ci95'])}" if c["blind"]["auc"] is not None else "-",
                         _p(c["blind"]["p"]), f"{c['best']['attack']} {c['best']['auc']:.3f} {_ci(c['best']['ci95'])}",
                         f"{vs['diff']:+.3f} {_ci(vs.get('ci95'))}" if vs else "-",
                         f"{prior['auc']:.3f} (p {_p(prior['p'])})" if prior else "-",
                         _gain(c.get("beyond")), c["headline"].replace("Exposure: ", ""),
                         _p(c["dataset_inference"]["p"]),
                         _p(c["dataset_inference"]["control_p"])])
    caption = ("Blind: the best model-free baseline's AUC [95% interval] and its held-out p-value (both baselines, "
               "Bonferroni). Best attack: the highest AUC of the run; Δ blind: its paired AUC difference to the blind "
               "baseline. Reference's own: the base model scoring the sets as a target (fine-tuned rows only; "
               "two-sided Mann–Whitney, Bonferroni over attacks). Evidence: the attack the verdict reads, and what it "
               "adds beyond the sets' differences when they differ (its paired interval). Verdict: the report's "
               "exposure headline. DI p: "
               "dataset inference (members as the suspect set, non-members as validation; twice the median split "
               "p-value) and its control on two halves of the non-members.")
    header = ["split / model", "seed", "blind AUC", "blind p", "best attack", "Δ blind", "reference's own",
              "evidence", "verdict", "DI p", "control p"]
    return [(caption, header, rows)]


register_experiment("set-validity", config=SetValidityConfig, run=run_set_validity, tables=tables)
