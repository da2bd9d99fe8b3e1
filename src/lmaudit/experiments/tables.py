"""Tables (Markdown) and plots (PNG) of experiment results."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmaudit.experiments import extraction_tables
from lmaudit.report import plots
from lmaudit.utils import atomic_path, write_json_atomic

HEADERS = ("AUC", "TPR@10%FPR", "TPR@1%FPR")
KEYS = ("auc", "tpr@10%fpr", "tpr@1%fpr")


def _pm(pair: list[float]) -> str:
    mean, std = pair
    return f"{100 * mean:.1f} ± {100 * std:.1f}"


def rows_table(rows: dict[str, dict], first: str = "attack") -> str:
    """Markdown table of {label: {metric: [mean, std]}}, best AUC first; values in percent."""
    lines = [f"| {first} | " + " | ".join(HEADERS) + " |", "|---|" + "---:|" * len(HEADERS)]
    for label, r in sorted(rows.items(), key=lambda kv: -kv[1]["auc"][0]):
        lines.append(f"| {label} | " + " | ".join(_pm(r[k]) for k in KEYS) + " |")
    return "\n".join(lines)


def epochs_table(curves: dict[str, dict]) -> str:
    epochs = sorted({int(e) for c in curves.values() for e in c})
    lines = ["| attack | " + " | ".join(f"epoch {e}" for e in epochs) + " |", "|---|" + "---:|" * len(epochs)]
    for name, c in sorted(curves.items()):
        lines.append(f"| {name} | " + " | ".join(f"{100 * c[str(e)]['auc'][0]:.1f}" for e in epochs) + " |")
    return "AUC (%) after each number of fine-tuning epochs.\n\n" + "\n".join(lines)


def ratio_table(ratios: dict[str, dict]) -> str:
    lines = ["| mask ratio | tokens | mean gain | median gain | 10%–90% | gain per exposure | Q-Skew AUC |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r, s in sorted(ratios.items(), key=lambda kv: float(kv[0])):
        lines.append(f"| {r} | {s['n_tokens']} | {s['mean_gain']:.3f} | {s['median_gain']:.3f} | "
                     f"{s['q10_gain']:.2f} – {s['q90_gain']:.2f} | {s['mean_gain_per_exposure']:.4f} | "
                     f"{100 * s['q_skew_auc']:.1f} |")
    return ("Per-token memorisation gain Δ = log p_target − log p_base (nats) of member tokens under "
            "cyclic masks, by the fixed mask ratio used in fine-tuning.\n\n" + "\n".join(lines))


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
