"""``regimes``: where Q-Skew beats calibration — a grid of fine-tuning regimes, and the Δ statistics that say why.

Each cell of ``cells`` replaces some settings of the file's own (the centre): ``lr``,
``epochs``, ``preset`` (model size), ``source`` (``corpus``: members and non-members
from the docstring corpus the base was pretrained in the domain of; ``pydoc``: the
Python language reference, text the base never saw) and ``mode`` (``dft`` / ``ift``).
Per cell and seed: the base of the cell's preset (the docstring corpus' pretraining
pool, seed 0) is fine-tuned on the members and attacked with Q-Skew, its mean-of-Δ
ablation (the Q-Skew paper's Table 5, ``statistic="mean"``), calibration as published
(masked ELBO) and as the authors ran it (``variant="unmasked_ratio"``), SAMA and
Min-K%++, reference = the base. ``paired``: AUC(q_skew) − AUC(each calibration) on the
same samples, with the paired stratified bootstrap 95% interval
(:func:`~lmaudit.metrics.paired_auc_diff`, 1,000 resamples). ``delta``: the mean, spread
(population std) and skewness (third standardised moment, Fisher–Pearson g₁) of each
sample's Δ = log p_target − log p_base — every Δ Q-Skew scores, read from the records of
its own cyclic probe (the cached probe of the run, so no extra forward) — averaged over
the members and over the non-members. Theorem 3.2 of the paper predicts members' Δ
right-skewed and non-members' near symmetric; where the members' mean Δ moves more than
their skewness, the mean (and calibration, a mean of loss gaps) should win.

Payload: ``cells``: ``{label: {settings, per_seed, auc, paired, delta}}``; per seed:
``{seed, auc: {row: {auc, tpr@10%fpr, tpr@1%fpr}}, paired: {vs: [diff, lo, hi]}, delta:
{members|nonmembers: {mean, std, skew}, separation: {d_mean, d_skew, auc_mean, auc_skew}},
time_s: {finetune, mia}}`` (:func:`separation`); over seeds
``auc: {row: [mean, std]}``, ``paired: {vs: [mean diff, lo, hi]}`` (one seed: its own
interval; several: :func:`~lmaudit.seeds.pool_paired`, a normal-approximation interval
of the mean difference) and ``delta`` means.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from lmaudit import api
from lmaudit.attacks import get_attack
from lmaudit.data.corpus import SOURCES
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace, aggregate, metrics
from lmaudit.metrics import auc as auc_of
from lmaudit.metrics import paired_auc_diff
from lmaudit.models.presets import PRESETS
from lmaudit.probes.records import MaskedStats
from lmaudit.probes.segments import segment_mean, segment_std
from lmaudit.progress import info
from lmaudit.report import plots
from lmaudit.runs.mia import RunConfig
from lmaudit.seeds import pool_paired
from lmaudit.settings import check_settings, integer, one_of, positive, setting, tables_of

# row label -> (attack, parameters): every row of a cell
ROWS = {
    "q_skew": ("q_skew", {}),
    "q_skew mean Δ": ("q_skew", {"statistic": "mean"}),
    "calibration": ("calibration", {}),
    "calibration unmasked_ratio": ("calibration", {"variant": "unmasked_ratio"}),
    "sama": ("sama", {}),
    "min_k_pp": ("min_k_pp", {}),
}
VERSUS = ("calibration", "calibration unmasked_ratio")  # q_skew − each, paired
N_PAIRED = 1000  # paired bootstrap resamples


@dataclass
class CellSettings:
    """What a cell may change of the centre, each checked as declared when the experiment file is read."""

    lr: float = setting(1e-3, check=positive())
    epochs: int = setting(6, check=integer(1))
    preset: str = setting("tiny", check=one_of(tuple(PRESETS), noun="preset"))
    source: str = setting("corpus", check=one_of(SOURCES, noun="source"))
    mode: str = setting("dft", check=one_of(("dft", "ift"), noun="mode"))

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass
class RegimesConfig(BaseConfig):
    budget: int = setting(16, check=integer(1))  # masked forwards per model per sample (DLM attacks)
    # the centre's members and non-members: corpus (in-domain) | pydoc (out-of-domain)
    source: str = setting("corpus", check=one_of(SOURCES))
    # label -> the centre's settings it replaces (CellSettings)
    cells: dict[str, dict] = setting(default_factory=dict, check=tables_of(CellSettings))


def cell_settings(cfg: RegimesConfig) -> dict[str, dict]:
    """``{label: {lr, epochs, preset, source, mode}}``: every cell's settings, checked before anything is trained.

    A key outside :class:`CellSettings` or a value it refuses was refused when the file was read (naming the
    cell); here, no cell at all, or a ``pydoc`` cell in ``ift`` mode, is an error that names it.
    """
    if not cfg.cells:
        raise LmauditError(f"experiment '{cfg.name}': no cells", hint="add a table [cells] with e.g. centre = {}")
    centre = {"lr": cfg.lr, "epochs": cfg.epochs, "preset": cfg.preset, "source": cfg.source, "mode": cfg.mode}
    out = {}
    for label, overrides in cfg.cells.items():
        where = f"experiment '{cfg.name}', cell '{label}'"
        s = {**centre, **overrides}
        if s["source"] == "pydoc" and s["mode"] != "dft":
            raise LmauditError(f"{where}: the pydoc source serves mode 'dft' only (its paragraphs have no summary "
                               "line to build an instruction from)")
        out[label] = s
    return out


def delta_stats(stats: MaskedStats) -> dict[str, np.ndarray]:
    """Per-sample ``mean``, ``std`` (population) and ``skew`` (g₁ = m₃ / m₂^{3/2}) of Q-Skew's Δ values.

    Δ is what the registered ``q_skew`` attack reads (its ``example``: log p_target −
    log p_reference of every masked entry, so every token once per cyclic round); a
    sample whose Δ has no spread has skewness 0, as Q-Skew scores it.
    """
    delta = get_attack("q_skew", "dlm").example(stats)
    offsets, lengths = stats.offsets, np.diff(stats.offsets)
    mean, std = segment_mean(delta, offsets), segment_std(delta, offsets)
    m3 = np.add.reduceat((delta - np.repeat(mean, lengths)) ** 3, offsets[:-1]) / lengths
    spread = std > 1e-12 * np.maximum(1.0, np.abs(mean))
    skew = np.zeros(len(lengths))
    skew[spread] = m3[spread] / std[spread] ** 3
    return {"mean": mean, "std": std, "skew": skew}


def separation(per_sample: dict[str, np.ndarray], labels: np.ndarray) -> dict[str, float]:
    """How far each per-text statistic of Δ puts members from non-members, across texts.

    ``d_mean`` / ``d_skew``: (members' average − non-members' average) / the pooled
    across-text std of the statistic (Cohen's d); ``auc_mean`` / ``auc_skew``: the AUC of
    the raw per-text mean Δ and of the raw g₁ as membership scores. A statistic with a
    larger d separates better, whatever its size in nats.
    """
    labels = np.asarray(labels).astype(bool)
    out = {}
    for k in ("mean", "skew"):
        v = per_sample[k]
        m, o = v[labels], v[~labels]
        pooled = np.sqrt((m.var() + o.var()) / 2)
        out[f"d_{k}"] = float((m.mean() - o.mean()) / pooled) if pooled > 0 else 0.0
        out[f"auc_{k}"] = float(auc_of(labels, v))
    return out


def q_skew_records(ws: Workspace, target, reference, members: TextSet, nonmembers: TextSet, seed: int,
                   budget: int) -> MaskedStats:
    """The records of Q-Skew's probe (its default plan) of members then non-members, as :meth:`Workspace.mia` probed
    them: the same models, texts, plan and seed, so they come from the probe cache."""
    tar, ref = ws.load(target), ws.load(reference)
    both = TextSet(members.records + nonmembers.records, source=f"{members.source} + {nonmembers.source}")
    records = api.probe(tar, both, reference=ref, config=RunConfig(attacks=["q_skew"], seed=seed, budget=budget,
                                                                   batch_size=ws.cfg.probe_batch_size))
    (stats,) = records.stats.values()  # the one masked probe Q-Skew reads
    return stats


def _passes() -> list[dict[str, tuple[str, dict]]]:
    """The rows split into MIA runs in which each attack appears once (a run takes one parameter set per attack)."""
    passes: list[dict[str, tuple[str, dict]]] = []
    for label, (attack, params) in ROWS.items():
        free = next((p for p in passes if all(a != attack for a, _ in p.values())), None)
        if free is None:
            passes.append(free := {})
        free[label] = (attack, params)
    return passes


def run_cell(ws: Workspace, seed: int, budget: int) -> dict:
    """One cell and seed (``ws`` holds the cell's settings): fine-tune, attack, pair, Δ statistics."""
    t0 = time.perf_counter()
    members, nonmembers = ws.data(seed)
    base = ws.base()
    target = ws.finetuned(base, members, seed)
    t1 = time.perf_counter()
    scores, auc, labels = {}, {}, None
    for rows in _passes():
        attacks = [a for a, _ in rows.values()]
        params = {a: p for a, p in rows.values() if p}
        result = ws.mia(target, base, members, nonmembers, seed, budget=budget, attacks=attacks, params=params)
        labels = result.labels
        for label, (attack, _) in rows.items():
            scores[label], auc[label] = result.scores[attack], metrics(result, attack)
    paired = {vs: list(paired_auc_diff(labels, scores["q_skew"], scores[vs], n_resamples=N_PAIRED, seed=seed))
              for vs in VERSUS}
    per_sample = delta_stats(q_skew_records(ws, target, base, members, nonmembers, seed, budget))
    n = len(members)
    delta = {name: {**{k: float(v[part].mean()) for k, v in per_sample.items()},
                    "per_text_skew": [float(x) for x in per_sample["skew"][part]]}  # an interval over texts
             for name, part in (("members", slice(0, n)), ("nonmembers", slice(n, None)))}
    delta["separation"] = separation(per_sample, labels)
    return {"seed": seed, "auc": auc, "paired": paired, "delta": delta,
            "time_s": {"finetune": round(t1 - t0, 1), "mia": round(time.perf_counter() - t1, 1)}}


def run(ws: Workspace, cfg: RegimesConfig) -> dict:
    """Every cell of the grid, in file order, each over the file's seeds."""
    cells = {}
    for label, s in cell_settings(cfg).items():
        info(f"regime cell '{label}': lr {s['lr']:g}, {s['epochs']} epochs, {s['preset']}, {s['source']}, {s['mode']}")
        cws = ws.cell(source=s["source"], **{k: v for k, v in s.items() if k != "source"})
        per_seed = [run_cell(cws, seed, cfg.budget) for seed in cfg.seeds]
        cells[label] = {
            "settings": s,
            "per_seed": per_seed,
            "auc": {row: aggregate([p["auc"][row] for p in per_seed])["auc"] for row in ROWS},
            "paired": {vs: pool_paired([p["paired"][vs] for p in per_seed]) for vs in VERSUS},
            "delta": {**{part: {k: float(np.mean([p["delta"][part][k] for p in per_seed]))
                                for k in ("mean", "std", "skew")} for part in ("members", "nonmembers")},
                      "separation": {k: float(np.mean([p["delta"]["separation"][k] for p in per_seed]))
                                     for k in per_seed[0]["delta"]["separation"]}},
        }
    return {"cells": cells}


def _setting(s: dict, base: str = "") -> str:
    """A cell's settings in a line; ``base``: the pretrained model in place of the tiny preset."""
    return f"lr {s['lr']:g}, {s['epochs']} ep, {base or s['preset']}, {s['source']}, {s['mode']}"


def _diff(d: list[float]) -> str:
    return f"{100 * d[0]:+.1f} [{100 * d[1]:+.1f}, {100 * d[2]:+.1f}]"


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """Two tables, one row per cell in file order: AUCs and the paired differences; the Δ statistics."""
    exp, cells = record["experiment"], record["cells"]
    seeds = len(exp["seeds"])
    over = "mean over seeds; differences: mean of the per-seed differences and bounds" if seeds > 1 else "one seed"
    auc_rows = [[label, _setting(c["settings"], exp.get("base", ""))]
                + [f"{100 * c['auc'][row][0]:.1f}" for row in ROWS]
                + [_diff(c["paired"][vs]) for vs in VERSUS] for label, c in cells.items()]
    auc_caption = (f"AUC (%) per regime cell ({exp['n_members']} members vs {exp['n_nonmembers']} non-members, "
                   f"{exp['budget']} forwards per model per sample, reference = the cell's base; {over}). The last "
                   "columns: AUC(q_skew) − AUC(calibration) in points with the paired stratified bootstrap 95% "
                   f"interval ({N_PAIRED:,} resamples); an interval above 0 means Q-Skew wins in that cell.")
    header = ["cell", "setting", *ROWS, *(f"q_skew − {vs} [95% CI]" for vs in VERSUS)]
    delta_rows = [[label] + [f"{c['delta'][part][k]:.3f}" for k in ("mean", "std", "skew")
                             for part in ("members", "nonmembers")] for label, c in cells.items()]
    delta_caption = ("Δ = log p_target − log p_base of every masked token per cyclic round (what Q-Skew scores): "
                     "each sample's mean, std and skewness (g₁), averaged over the members (m) and the non-members "
                     "(n). Q-Skew ranks by a skewness, calibration by a mean loss gap: a cell where the members' mean "
                     "Δ stands further from the non-members' (in units of the spread) than their skewness does is one "
                     "where calibration should win.")
    delta_header = ["cell", "mean Δ (m)", "mean Δ (n)", "std Δ (m)", "std Δ (n)", "skew Δ (m)", "skew Δ (n)"]
    out = [(auc_caption, header, auc_rows), (delta_caption, delta_header, delta_rows)]
    if all("separation" in c["delta"] for c in cells.values()):  # results written before it was measured lack it
        sep_rows = [[label] + [f"{c['delta']['separation'][k]:.2f}" for k in ("d_mean", "d_skew")]
                    + [f"{100 * c['delta']['separation'][k]:.1f}" for k in ("auc_mean", "auc_skew")]
                    for label, c in cells.items()]
        out.append(("Why the ordering is what it is: how far each per-text statistic of Δ puts members from "
                    "non-members across texts — d = (members' average − non-members' average) / pooled across-text "
                    "std (Cohen's d) — and the AUC of the raw statistic as a membership score (mean Δ: what "
                    "calibration reads, up to the reference's own loss; g₁: Q-Skew's skewness without its quantile "
                    "weights). Where d(mean) exceeds d(skew), a mean beats a skewness.",
                    ["cell", "d (mean Δ)", "d (skew Δ)", "AUC mean Δ", "AUC skew Δ"], sep_rows))
    return out


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """AUC(q_skew) − AUC(calibration), both variants, with the paired intervals, over the cells; and (results that
    measured it) the separation of the per-text mean and skewness of Δ."""
    cells = record["cells"]
    series = {f"q_skew − {vs}": [c["paired"][vs] for c in cells.values()] for vs in VERSUS}
    png = plots.regime_differences(list(cells), series)
    out = [("q_skew_vs_calibration", "Q-Skew − calibration AUC by regime cell", png)]
    if all("separation" in c["delta"] for c in cells.values()):
        sep = {f"d ({k} Δ)": ([c["delta"]["separation"][f"d_{k}"] for c in cells.values()], [0.0] * len(cells))
               for k in ("mean", "skew")}
        out.append(("separation",
                    "How far the per-text mean and skewness of Δ put members from non-members (Cohen's d)",
                    plots.grouped_bars(list(cells), sep, ylabel="Cohen's d, members vs non-members",
                                       title="Per-text mean vs skewness of Δ by regime", rotate=35)))
    return out


register_experiment("regimes", config=RegimesConfig, run=run, tables=tables, figures=figures)
