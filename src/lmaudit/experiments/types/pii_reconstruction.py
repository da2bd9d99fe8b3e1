"""``pii-reconstruction``: top-1 ASR of redacted e-mails and phones per ranking signal (DLM).

The DLM of ``pii-extraction``; for ``n_targets`` training messages per field the value is
replaced by a placeholder and reconstructed (``[reconstruct]``: keys of ReconstructConfig),
reference = the DLM base; α of the combined signal is fitted on ``n_calibration`` further
known messages. Payload: ``asr`` (per signal, per field: percent per seed), ``fields`` (per
field, per seed: coverage, α, seconds per record, distinct candidates), ``n_targets`` and
``n_calibration``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.experiments.config import BaseConfig
from lmaudit.experiments.registry import register_experiment
from lmaudit.experiments.workspace import Workspace
from lmaudit.extraction.reconstruct import redact, redacted_records
from lmaudit.runs.pii import ReconstructConfig, run_reconstruction


@dataclass
class ReconstructionConfig(BaseConfig):
    pii_fields: list[str] = field(default_factory=lambda: ["email", "phone"])
    reconstruct: dict = field(default_factory=dict)  # keys of ReconstructConfig
    n_targets: int = 50  # redacted records per field
    n_calibration: int = 10  # known records to fit alpha on


def run(ws: Workspace, cfg: ReconstructionConfig) -> dict:
    """Top-1 ASR per ranking signal for redacted e-mails and phones of training messages (DLM)."""
    asr: dict[str, dict[str, list]] = {}
    extra: dict[str, dict[str, list]] = {}
    for seed in cfg.seeds:
        train, _, models = ws.pii_models(seed, kinds=("dlm",))
        target, base = ws.load(models["dlm"]), ws.load(ws.base(kind="dlm"))
        for pii_field in cfg.pii_fields:
            recs = redacted_records(redact(TextSet(train.records[: cfg.n_targets], source=train.source), pii_field),
                                    pii_field)
            calib_set = TextSet(train.records[cfg.n_targets : cfg.n_targets + cfg.n_calibration], source=train.source)
            calib = redacted_records(redact(calib_set, pii_field), pii_field)
            rcfg = ReconstructConfig(**{"field": pii_field, **cfg.reconstruct, "seed": seed})
            t0 = time.perf_counter()
            out = run_reconstruction(target, recs, rcfg, reference=base, calibration=calib)
            per_record = (time.perf_counter() - t0) / (len(recs) + len(calib))
            for signal, a in out["asr"].items():
                asr.setdefault(signal, {}).setdefault(pii_field, []).append(a["percent"])
            e = extra.setdefault(pii_field, {"coverage": [], "alpha": [], "seconds_per_record": [],
                                             "mean_candidates": []})
            e["coverage"].append(out["coverage"]["percent"])
            e["alpha"].append(out["alpha"])
            e["seconds_per_record"].append(per_record)
            e["mean_candidates"].append(out["mean_candidates"])
    return {"asr": asr, "fields": extra, "n_targets": cfg.n_targets, "n_calibration": cfg.n_calibration}


def _pm(values) -> str:
    return f"{np.mean(values):.1f} ± {np.std(values):.1f}"


def tables(record: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """ASR per signal and field (mean ± std over seeds), then coverage, α, candidates and cost per field."""
    fields = list(record["fields"])
    rows = [[signal] + [_pm(by_field[f]) for f in fields] for signal, by_field in record["asr"].items()]
    info = [[label] + [_pm(record["fields"][f][key]) for f in fields]
            for label, key in (("true value among candidates (%)", "coverage"), ("fitted α", "alpha"),
                               ("distinct candidates per record", "mean_candidates"),
                               ("seconds per record", "seconds_per_record"))]
    caption = (f"Top-1 attack success rate (%) on {record['n_targets']} redacted training messages per field "
               f"(mean ± std over seeds); α fitted on {record['n_calibration']} further known messages.")
    return [(caption, ["signal"] + fields, rows), ("Candidates, α and cost.", [""] + fields, info)]


register_experiment("pii-reconstruction", config=ReconstructionConfig, run=run, tables=tables)
