"""Tables (Markdown) and plots (PNG) of experiment results."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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


def _save_fig(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def plot_epochs(curves: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, c in sorted(curves.items()):
        epochs = sorted(int(e) for e in c)
        mean = np.array([c[str(e)]["auc"][0] for e in epochs])
        std = np.array([c[str(e)]["auc"][1] for e in epochs])
        ax.plot(epochs, mean, marker="o", lw=2.2 if name == "q_skew" else 1.2, label=name)
        ax.fill_between(epochs, mean - std, mean + std, alpha=0.12)
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="fine-tuning epochs", ylabel="AUC", title="Membership inference vs fine-tuning epochs")
    ax.legend(fontsize=8, ncol=2)
    _save_fig(fig, path)


def plot_gains(gains: dict[str, list], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = sorted(gains, key=float)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    data = [np.asarray(gains[r]) for r in ratios]
    ax.violinplot(data, showmeans=True, showextrema=False)
    ax.set_xticks(range(1, len(ratios) + 1), [f"mask ratio {r}" for r in ratios])
    ax.axhline(0.0, color="grey", lw=0.8, ls=":")
    ax.set(ylabel="per-token gain Δ (nats)", title="Memorisation gain by fine-tuning mask ratio")
    _save_fig(fig, path)


def write_outputs(folder: Path, record: dict) -> Path:
    """results.json, table.md and (where it applies) a plot; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    exp = record["experiment"]
    gains = record.pop("gains", None)
    if gains is not None:
        np.savez_compressed(folder / "gains.npz", **{f"ratio_{r}": np.asarray(v, dtype=np.float32) for r, v in gains.items()})
    write_json_atomic(folder / "results.json", record)
    if "rows" in record:
        first = {"ablation": "variant", "misaligned-ref": "reference / attack"}.get(exp["type"], "attack")
        body = rows_table(record["rows"], first)
    elif "curves" in record:
        body = epochs_table(record["curves"])
        plot_epochs(record["curves"], folder / "auc_vs_epochs.png")
        body += "\n\n![AUC vs epochs](auc_vs_epochs.png)"
    else:
        body = ratio_table(record["ratios"])
        plot_gains(gains, folder / "gain_by_mask_ratio.png")
        body += "\n\n![gain by mask ratio](gain_by_mask_ratio.png)"
    seeds = ", ".join(map(str, exp["seeds"]))
    head = (f"# {exp['name']}\n\n{exp['description']}\n\n"
            f"Command: `{record['command']}` — run time {record['runtime_s'] / 60:.1f} min; seeds {seeds}; "
            f"{exp['n_members']} members vs {exp['n_nonmembers']} non-members; {exp['kind']} `{exp['preset']}`, "
            f"{exp['mode']} fine-tuning for {exp['epochs']} epochs; {exp['budget']} forwards per model per sample. "
            "Values are mean ± std over seeds, in percent.\n\n")
    with atomic_path(folder / "table.md") as tmp:
        tmp.write_text(head + body + "\n")
    return folder
