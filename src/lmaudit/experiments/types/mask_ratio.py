"""``mask-ratio``: memorisation gain by the mask ratio used in fine-tuning (the Q-Skew paper's Figure 1).

Checks Assumption 3.1: the per-token gain Δ = log p_target − log p_base of member tokens
(cyclic masks) falls as the fixed training mask ratio grows. Payload: ``ratios``
(per ratio: token count, mean / median / 10% / 90% gain, mean gain per exposure, Q-Skew AUC)
and ``gains`` (every member token's Δ per ratio), which is written to ``gains.npz``, not
to ``results.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmaudit import api
from lmaudit.attacks.dlm_common import token_means
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace, metrics
from lmaudit.report import plots
from lmaudit.runs.mia import RunConfig
from lmaudit.settings import each, fraction, integer, setting


@dataclass
class MaskRatioConfig(BaseConfig):
    budget: int = setting(16, check=integer(1))  # masked forwards per model per sample
    mask_ratios: list[float] = setting(default_factory=lambda: [0.25, 0.5, 0.75], check=each(fraction()))


def run(ws: Workspace, cfg: MaskRatioConfig) -> dict:
    """Per-token memorisation gain (Δ = log p_target − log p_base, cyclic masks) by training mask ratio."""
    out: dict[str, dict] = {}
    base = ws.base()
    for seed in cfg.seeds:
        members, nonmembers = ws.data(seed)
        for ratio in cfg.mask_ratios:
            target = ws.finetuned(base, members, seed, mask_ratio=ratio)
            tar, ref = ws.load(target), ws.load(base)
            # Q-Skew's probe: cyclic masks (its default ρ) on the target and the base, through the interface
            records = api.probe(tar, members, reference=ref, config=RunConfig(attacks=["q_skew"], seed=seed,
                                                                              budget=cfg.budget, use_cache=False))
            (stats,) = records.stats.values()
            gains, _ = token_means(stats, stats.logp.astype(np.float64) - stats.ref_logp)
            entry = out.setdefault(str(ratio), {"gains": [], "auc": []})
            entry["gains"].extend(gains.tolist())
            result = ws.mia(target, base, members, nonmembers, seed, budget=cfg.budget, attacks=["q_skew", "loss"])
            entry["auc"].append(metrics(result, "q_skew")["auc"])
    summary = {}
    for ratio, entry in out.items():
        g = np.asarray(entry["gains"])
        summary[ratio] = {
            "n_tokens": len(g), "mean_gain": float(g.mean()), "median_gain": float(np.median(g)),
            "q10_gain": float(np.quantile(g, 0.1)), "q90_gain": float(np.quantile(g, 0.9)),
            "mean_gain_per_exposure": float(g.mean() / (float(ratio) * cfg.epochs)),
            "q_skew_auc": float(np.mean(entry["auc"])),
        }
    return {"ratios": summary, "gains": {r: e["gains"] for r, e in out.items()}}


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """One row per training mask ratio (ascending)."""
    header = ["mask ratio", "tokens", "mean gain", "median gain", "10%–90%", "gain per exposure", "Q-Skew AUC"]
    rows = [[r, str(s["n_tokens"]), f"{s['mean_gain']:.3f}", f"{s['median_gain']:.3f}",
             f"{s['q10_gain']:.2f} – {s['q90_gain']:.2f}", f"{s['mean_gain_per_exposure']:.4f}",
             f"{100 * s['q_skew_auc']:.1f}"]
            for r, s in sorted(record["ratios"].items(), key=lambda kv: float(kv[0]))]
    exp = record["experiment"]
    caption = ("Per-token memorisation gain Δ = log p_target − log p_base (nats) of member tokens under "
               "cyclic masks, by the fixed mask ratio used in fine-tuning; gain per exposure = mean gain / "
               f"(ratio × epochs); Q-Skew AUC in percent ({exp['n_members']} members vs {exp['n_nonmembers']} "
               f"non-members, {exp['budget']} forwards per model per sample; mean over seeds).")
    return [(caption, header, rows)]


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """Violins of the per-token gains by mask ratio (none when the gains are not stored)."""
    if not record.get("gains"):
        return []
    return [("gain_by_mask_ratio", "gain by mask ratio", plots.gain_by_ratio(record["gains"]))]


register_experiment("mask-ratio", config=MaskRatioConfig, run=run, tables=tables, figures=figures,
                    arrays={"gains": "ratio_"})
