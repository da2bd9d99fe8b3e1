"""Table rows of every results kind, shared by the terminal, table.md and the HTML report."""

from __future__ import annotations


def facts_common(res: dict) -> dict[str, str]:
    """Provenance facts every report header shows."""
    pkgs = ", ".join(f"{k} {v}" for k, v in (res.get("packages") or {}).items())
    return {"created": str(res.get("created")), "lmaudit": str(res.get("lmaudit_version")),
            "commit": str(res.get("git_commit")), "packages": pkgs}


def audit_rows(payload: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a set-level audit: one row per method."""
    header = ["method", "ρ (non-member-like)", "90% interval", "unclipped ρ", "trained fraction 1−ρ", "anomaly",
              "fit + bootstrap (ms)"]
    rows = []
    for name, est in payload["methods"].items():
        lo, hi = est["ci90"] if est["ci90"][0] is not None else (float("nan"), float("nan"))
        rows.append([name, f"{est['rho']:.3f}", f"[{lo:.3f}, {hi:.3f}]", f"{est['rho_unclipped']:.3f}",
                     f"{est['trained_fraction']:.3f}", "YES" if est["anomaly"] else "no",
                     f"{est['timings_ms']['fit'] + est['timings_ms']['bootstrap']:.0f}"])
    return header, rows


def asr_rows(payload: dict) -> tuple[list[str], list[list[str]]]:
    header = ["signal", "top-1 ASR", "records", "median rank (when generated)"]
    rows = []
    for s, a in payload["asr"].items():
        ranks = [r for r in payload["records"][f"rank_{s}"] if r is not None]
        med = f"{sorted(ranks)[len(ranks) // 2]}" if ranks else "-"
        rows.append([s, f"{a['percent']:.1f}%", f"{a['count']}/{payload['n_records']}", med])
    return header, rows


def summary_rows(payload: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of an extraction summary: one row per step count (or 'ar')."""
    cfg = payload["config"]
    header = ["steps", "median log p̂", "median Δ log p"]
    for p in cfg["p"]:
        header += [f"discoverable @p={p:g}", f"median n @p={p:g}"]
    header.append("forwards/record")
    rows = []
    for label, row in payload["summary"].items():
        if not isinstance(row, dict):
            continue
        cells = [label, f"{row['median_log_p_hat']:.2f}", f"{row['median_delta_log_p']:+.2f}"]
        for p in cfg["p"]:
            n = row[f"median_n_needed@p={p:g}"]
            cells += [str(row[f"discoverable@p={p:g}"]), "∞" if n == float("inf") else f"{n:.3g}"]
        cells.append(f"{row['mean_forwards_per_record']:.1f}")
        rows.append(cells)
    return header, rows


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
