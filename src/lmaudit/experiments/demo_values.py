"""The quick demo's values, committed: ``results/demo-quick.json``, and a fresh run compared with them.

The file holds, for every attack of the quick demo's AR and DLM runs, its AUC and TPRs at 10% and 1% FPR on seed 0
(what ``lmaudit demo --quick`` prints), their spread over seeds 0, 1 and 2 (the standard deviation, ddof = 1: the
demo run again with each seed, its tiny models trained again), and what the runs were built from: the corpus' and
tokenizer's content hashes and the package versions. :func:`compare_demo` reads a fresh demo folder against it,
figure by figure, within :data:`~lmaudit.experiments.reproduce.SPREADS` seed spreads (and the same corpus).

``lmaudit reproduce --record-demo`` writes the file (three quick demos, about 10 minutes on two cores); a change
that moves the values says so in its commit.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from lmaudit.errors import LmauditError
from lmaudit.experiments.demo import QUICK, run_demo
from lmaudit.experiments.reproduce import Comparison, Figure
from lmaudit.utils import atomic_path, package_versions

DEMO_VALUES = Path("results") / "demo-quick.json"
METRICS = ("auc", "tpr@10%fpr", "tpr@1%fpr")
SEEDS = (0, 1, 2)


def demo_values(folder: Path) -> dict:
    """{``ar/attack/metric`` or ``dlm/attack/metric``: value} of a quick demo's folder, and what it was built from."""
    values, built = {}, None
    for part, sub in (("ar", ""), ("dlm", "dlm/")):
        path = Path(folder) / sub / "results.json"
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise LmauditError(f"{path}: cannot read a demo's results ({exc.__class__.__name__})") from None
        built = built or record.get("built_from")
        for attack, m in record["attacks"].items():
            for metric in METRICS:
                if isinstance(m.get(metric), (int, float)):
                    values[f"{part}/{attack}/{metric}"] = float(m[metric])
    return {"values": values, "built_from": built or {}}


def record_demo(out: Path = DEMO_VALUES, *, scratch: Path = Path("runs/demo-seeds"), seeds=SEEDS) -> Path:
    """Run the quick demo once per seed into ``scratch/seed-N`` and write ``out``: seed 0's values, the spread over
    ``seeds``, and what the runs were built from."""
    runs = []
    for seed in seeds:
        folder = Path(scratch) / f"seed-{seed}"
        run_demo(folder, replace(QUICK, seed=seed))
        runs.append(demo_values(folder))
    keys = [k for k in runs[0]["values"] if all(k in r["values"] for r in runs)]
    spread = {k: float(np.std([r["values"][k] for r in runs], ddof=1)) for k in keys}
    payload = {"what": "lmaudit demo --quick: seed 0's values and their spread over seeds (std, ddof = 1)",
               "command": "lmaudit reproduce --record-demo", "seeds": list(seeds),
               "built_from": runs[0]["built_from"], "packages": package_versions(),
               "values": {k: runs[0]["values"][k] for k in keys}, "spread": spread}
    with atomic_path(Path(out)) as tmp:
        tmp.write_text(json.dumps(payload, indent=2) + "\n")
    return Path(out)


def compare_demo(folder: Path, committed: Path = DEMO_VALUES) -> Comparison:
    """A fresh quick demo's folder (seed 0) against the committed values: each figure within the seed spread."""
    try:
        stored = json.loads(Path(committed).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LmauditError(f"{committed}: cannot read the committed demo values ({exc.__class__.__name__})",
                           hint="write them with 'lmaudit reproduce --record-demo'") from None
    fresh = demo_values(folder)
    comparison = Comparison("demo --quick", (stored["built_from"].get("corpus"), fresh["built_from"].get("corpus")))
    for key, value in stored["values"].items():
        if key in fresh["values"]:
            comparison.figures.append(Figure(key, value, stored["spread"].get(key), fresh["values"][key]))
    missing = sorted(set(stored["values"]) - set(fresh["values"]))
    if missing:
        raise LmauditError(f"{folder}: the demo lacks {len(missing)} committed value(s), e.g. {missing[0]}",
                           hint="a demo of this lmaudit runs other attacks: record the values again")
    return comparison
