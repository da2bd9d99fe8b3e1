"""Writing an experiment's outputs: results.json, table.md and its plots (the tables come from :mod:`lmaudit.report`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmaudit.report import extraction_tables, plots
from lmaudit.report.tables import epochs_table, ratio_table, rows_table
from lmaudit.utils import atomic_path, write_json_atomic


def _write_png(path: Path, png: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(png)


def write_outputs(folder: Path, record: dict) -> Path:
    """results.json, table.md and (where it applies) a plot; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    exp = record["experiment"]
    gains = record.pop("gains", None)
    if gains is not None:
        np.savez_compressed(folder / "gains.npz", **{f"ratio_{r}": np.asarray(v, dtype=np.float32) for r, v in gains.items()})
    write_json_atomic(folder / "results.json", record)
    if extraction_tables.module_for(exp["type"]) is not None:
        body, pngs = extraction_tables.markdown(record)
        for name, png in pngs:
            _write_png(folder / name, png)
    elif "rows" in record:
        first = {"ablation": "variant", "misaligned-ref": "reference / attack"}.get(exp["type"], "attack")
        body = rows_table(record["rows"], first)
    elif "curves" in record:
        body = epochs_table(record["curves"])
        _write_png(folder / "auc_vs_epochs.png", plots.auc_vs_epochs(record["curves"]))
        body += "\n\n![AUC vs epochs](auc_vs_epochs.png)"
    else:
        body = ratio_table(record["ratios"])
        _write_png(folder / "gain_by_mask_ratio.png", plots.gain_by_ratio(gains))
        body += "\n\n![gain by mask ratio](gain_by_mask_ratio.png)"
    seeds = ", ".join(map(str, exp["seeds"]))
    if extraction_tables.module_for(exp["type"]) is not None:
        head = (f"# {exp['name']}\n\n{exp['description']}\n\n"
                f"Command: `{record['command']}` — run time {record['runtime_s'] / 60:.1f} min; seeds {seeds}; "
                f"{exp['kind']} `{exp['preset']}`, {exp['mode']} fine-tuning for {exp['epochs']} epochs.\n\n")
        with atomic_path(folder / "table.md") as tmp:
            tmp.write_text(head + body + "\n")
        return folder
    head = (f"# {exp['name']}\n\n{exp['description']}\n\n"
            f"Command: `{record['command']}` — run time {record['runtime_s'] / 60:.1f} min; seeds {seeds}; "
            f"{exp['n_members']} members vs {exp['n_nonmembers']} non-members; {exp['kind']} `{exp['preset']}`, "
            f"{exp['mode']} fine-tuning for {exp['epochs']} epochs; {exp['budget']} forwards per model per sample. "
            "Values are mean ± std over seeds, in percent.\n\n")
    with atomic_path(folder / "table.md") as tmp:
        tmp.write_text(head + body + "\n")
    return folder
