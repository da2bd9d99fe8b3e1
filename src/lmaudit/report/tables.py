"""Table rows of the audit-set, extract and pii results, shared by the terminal and the HTML report.

An experiment's tables are built by its type (``lmaudit.experiments.types``) and stored in its results.json.
"""

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
    """(header, rows) of a PII reconstruction: top-1 ASR per signal with its Wilson 95% interval (when stored)."""
    header = ["signal", "top-1 ASR", "95% interval (Wilson)", "records", "median rank (when among candidates)"]
    rows = []
    for s, a in payload["asr"].items():
        ranks = [r for r in payload["records"][f"rank_{s}"] if r is not None]
        med = f"{sorted(ranks)[len(ranks) // 2]}" if ranks else "-"
        ci = f"[{a['ci95'][0]:.1f}, {a['ci95'][1]:.1f}]%" if "ci95" in a else "-"
        rows.append([s, f"{a['percent']:.1f}%", ci, f"{a['count']}/{payload['n_records']}", med])
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
