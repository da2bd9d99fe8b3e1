"""Run folders of every report kind, written by the runs' own writers from hand-made payloads (no model).

Not a test module: test_report.py, test_summary.py and test_report_browser.py build their folders here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from lmaudit.metrics import summarize
from lmaudit.runs.audit_set import AuditConfig, AuditResult, estimate_rho
from lmaudit.runs.common import write_results
from lmaudit.runs.extract import ExtractConfig, summarise, write_extraction
from lmaudit.runs.mia import MIAResult, RunConfig

REPO = Path(__file__).resolve().parents[1]

# a member whose text carries PII: the report masks it unless --show-pii
PII_TEXT = "Write to jane.roe@example.org or call +1 (555) 301-2288 about the quarterly figures."


def mia_folder(out: Path, *, with_texts: bool = True, n_members: int = 60, n_nonmembers: int = 120,
               seed: int = 0) -> tuple[Path, MIAResult]:
    """A mia folder written by :meth:`MIAResult.write` from seeded scores: ``loss`` separates weakly,
    ``min_k`` strongly; with ``with_texts`` the folder holds ``members.jsonl`` (as the demo's does)."""
    rng = np.random.default_rng(seed)
    labels = np.r_[np.ones(n_members), np.zeros(n_nonmembers)].astype(np.int64)
    scores = {"loss": rng.normal(size=len(labels)) + 0.3 * labels, "min_k": rng.normal(size=len(labels)) + 2.0 * labels}
    ids = [f"m{i}" for i in range(n_members)] + [f"n{i}" for i in range(n_nonmembers)]
    attacks = {n: {"params": {}, "forwards_per_sample": 1, **summarize(labels, s, n_resamples=50, seed=0)}
               for n, s in scores.items()}
    result = MIAResult(config=RunConfig(n_bootstrap=50),
                       target={"path": "/models/t", "fingerprint": "f00d", "kind": "ar"},
                       reference=None, n_members=n_members, n_nonmembers=n_nonmembers, attacks=attacks, scores=scores,
                       labels=labels, ids=ids, timings_s={"probe_target": 0.5})
    texts = [PII_TEXT if i == int(np.argmax(scores["min_k"][:n_members])) else f"Member text number {i}, plain prose."
             for i in range(n_members)]

    def members_file(folder: Path) -> None:
        with open(folder / "members.jsonl", "w", encoding="utf-8") as fh:
            for i, t in enumerate(texts):
                fh.write(json.dumps({"id": f"m{i}", "text": t}) + "\n")

    result.write(out, files=members_file if with_texts else None)
    return out, result


def audit_folder(out: Path, *, seed: int = 0) -> Path:
    """A set-level audit folder: 30% of the suspect set is drawn like the non-members."""
    rng = np.random.default_rng(seed)
    members, nonmembers = rng.normal(0, 1, (80, 6)), rng.normal(1.5, 1, (80, 6))
    suspect = np.r_[rng.normal(0, 1, (56, 6)), rng.normal(1.5, 1, (24, 6))]
    cfg = AuditConfig(bootstrap=50, seed=seed)
    methods = estimate_rho(members, nonmembers, suspect, cfg)
    payload = {"type": "set-audit", "config": cfg.__dict__, "model": "/models/t", "kind": "ar", "dtype": "float32",
               "device": "cpu", "fingerprint": "f00d", "reference": None, "n_members": 80, "n_nonmembers": 80,
               "n_suspect": 80, "data": {"members": "m.jsonl", "nonmembers": "n.jsonl", "suspect": "forget.jsonl"},
               "features": {"kind": "hidden", "dim": 6, "columns": []}, "methods": methods,
               "timings_ms": {"features": 1.0}}
    AuditResult(payload).write(out)
    return out


def extraction_folder(out: Path) -> Path:
    """An extraction folder of 10 records: p̂ = 0.01 for 2 records at 1 step and 3 records at max steps
    (extractable within n = 10,000 queries at p = 0.5 and 0.99), 1e-8 for the others."""
    cfg = ExtractConfig(steps=["1", "max"], n=10_000, p=[0.5, 0.99], trajectories=8)
    table = {}
    for label, hits in (("1", 2), ("max", 3)):
        p_hat = np.r_[np.full(hits, 0.01), np.full(10 - hits, 1e-8)]
        table[label] = {"log_p_hat": np.log(p_hat), "p_hat": p_hat, "std_error": np.zeros(10),
                        "forwards": np.full(10, 4.0), "steps": np.full(10, 1 if label == "1" else 8)}
    payload = {"config": cfg.__dict__, "kind": "dlm", "model": "/models/dlm", "dtype": "float32", "device": "cpu",
               "n_records": 10, "n_masked": {"median": 8.0, "min": 8, "max": 8}, "summary": summarise(table, cfg),
               "runtime_s": 1.0,
               "records": {"id": [f"r{i}" for i in range(10)],
                           **{f"{k}@{lb}": v.tolist() for lb, col in table.items() for k, v in col.items()}}}
    write_extraction(payload, out)
    return out


def pii_folder(out: Path) -> Path:
    """A PII-reconstruction folder: 20 records, ``combined`` ranks the truth first for 5, ``ce`` for 3; the truth was
    generated for 12."""
    ranks = {"ce": [1] * 3 + [2] * 9 + [None] * 8, "combined": [1] * 5 + [3] * 7 + [None] * 8}
    asr = {s: {"count": sum(r == 1 for r in v), "percent": 100.0 * sum(r == 1 for r in v) / 20}
           for s, v in ranks.items()}
    payload = {"type": "pii-reconstruction", "config": {"field": "email", "candidates": 16, "mask_length": 20},
               "model": "/models/dlm", "reference": "/models/base", "dtype": "float32", "device": "cpu",
               "n_records": 20, "asr": asr, "coverage": {"count": 12, "percent": 60.0}, "alpha": 0.5,
               "calibration_hits": None, "n_calibration": 0, "mean_candidates": 9.5,
               "records": {"id": [f"r{i}" for i in range(20)], "n_candidates": [10] * 20,
                           **{f"rank_{s}": v for s, v in ranks.items()}}}
    write_results(out, payload, kind="pii-reconstruction", tables={"records.csv": pd.DataFrame(payload["records"])})
    return out


def experiment_folder(out: Path, name: str = "dlm-dft") -> Path:
    """A copy of a committed experiment folder, its report files removed."""
    shutil.copytree(REPO / "results" / name, out)
    for old in ("report.html", "report.md"):
        (out / old).unlink(missing_ok=True)
    shutil.rmtree(out / "report_files", ignore_errors=True)
    return out
