"""``extraction-steps``: does a finer sampling resolution raise the chance of reproducing training text?

The DLM of the ``mia`` experiments (fine-tuned on member passages); one mask per member
(``[extract] mask``); teacher-forced single-query success p̂ for each step count of
``[extract] steps``; the median Δ log p̂ of each step count relative to the first.
Payload: ``steps`` (per step count: median Δ log p̂ and median log p̂ as [mean, std] over
seeds, forwards per record, per-seed summaries), ``monotone_fraction`` ([mean, std]),
``n_masked``, ``median_delta_monotone`` and ``log_p_columns`` (per-record log p̂, first seed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace, extract_config, step_labels
from lmaudit.report import extraction_plots as xplots
from lmaudit.seeds import seed_std
from lmaudit.settings import setting, table


@dataclass
class StepsConfig(BaseConfig):
    extract: dict = setting(default_factory=dict, check=table())  # keys of ExtractConfig (mask, steps, order, ...)


def _mean_std(values: list[float]) -> list[float]:
    return [float(np.mean(values)), seed_std(values)]


def run(ws: Workspace, cfg: StepsConfig) -> dict:
    """Extraction of one mask per member for every step count; each seed fine-tunes its own target."""
    per_label: dict[str, list[dict]] = {}
    monotone, columns = [], {}
    for seed in cfg.seeds:
        members, _, _, target = ws.fine_tuned_run(seed)
        payload = ws.extract(target, members, extract_config(cfg.extract, seed))
        for label in step_labels(payload["summary"]):
            per_label.setdefault(label, []).append(payload["summary"][label])
        monotone.append(payload["summary"].get("monotone_fraction", float("nan")))
        if seed == cfg.seeds[0]:
            columns = {lb: payload["records"][f"log_p_hat@{lb}"] for lb in step_labels(payload["summary"])}
            n_masked = payload["n_masked"]
    steps = {label: {"median_delta_log_p": _mean_std([r["median_delta_log_p"] for r in rows]),
                     "median_log_p_hat": _mean_std([r["median_log_p_hat"] for r in rows]),
                     "forwards_per_record": float(np.mean([r["mean_forwards_per_record"] for r in rows])),
                     "per_seed": rows}
             for label, rows in per_label.items()}
    deltas = [steps[lb]["median_delta_log_p"][0] for lb in steps]
    return {"steps": steps, "monotone_fraction": _mean_std(monotone), "n_masked": n_masked,
            "median_delta_monotone": bool(np.all(np.diff(deltas) >= 0)), "log_p_columns": columns}


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """One row per step count: median Δ log p̂ (± std over seeds when there are several), median log p̂, forwards."""
    one = len(record["experiment"]["seeds"]) == 1
    pm = lambda v: f"{v[0]:+.2f}" if one else f"{v[0]:+.2f} ± {v[1]:.2f}"  # noqa: E731
    rows = [[lb, pm(s["median_delta_log_p"]), f"{s['median_log_p_hat'][0]:.2f}", f"{s['forwards_per_record']:.1f}"]
            for lb, s in record["steps"].items()]
    mono = record["monotone_fraction"]
    caption = ("Median Δ log p̂ = median over records of log(p̂_N / p̂_1) "
               f"(nats{'' if one else '; mean ± std over seeds'}); "
               f"masks of {record['n_masked']['median']:g} tokens (median). The medians "
               f"{'rise' if record['median_delta_monotone'] else 'do not rise'} monotonically with N; per record, "
               f"log p̂ never fell as N grew on {100 * mono[0]:.0f}%{'' if one else f' ± {100 * mono[1]:.0f}%'} "
               "of masks.")
    return [(caption, ["steps N", "median Δ log p̂", "median log p̂", "forwards/record"], rows)]


def figures(record: dict) -> list[tuple[str, str, bytes]]:
    """Box plots of the per-record log10 p̂ of each step count (first seed)."""
    cols = {lb: np.asarray(v, dtype=float) for lb, v in record["log_p_columns"].items()}
    return [("log_p_by_steps", "log10 p̂ per mask by step count (first seed)", xplots.log_p_by_steps(cols))]


register_experiment("extraction-steps", config=StepsConfig, run=run, tables=tables, figures=figures)
