"""Table rows of the audit-set, extract, pii and unlearning-check results, shared by the terminal and the HTML report.

An experiment's tables are built by its type (``lmaudit.experiments.types``) and stored in its results.json.
"""

from __future__ import annotations


def facts_common(res: dict) -> dict[str, str]:
    """Provenance facts every report header shows."""
    pkgs = ", ".join(f"{k} {v}" for k, v in (res.get("packages") or {}).items())
    return {"created": str(res.get("created")), "lmaudit": str(res.get("lmaudit_version")),
            "commit": str(res.get("git_commit")), "packages": pkgs}


def audit_rows(payload: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a set-level audit: one row per method (DUCI's own columns: :func:`duci_rows`)."""
    if "duci" in payload["methods"]:
        return duci_rows(payload)
    header = ["method", "ρ (non-member-like)", "90% interval", "unclipped ρ", "trained fraction 1−ρ", "anomaly",
              "fit + bootstrap (ms)"]
    rows = []
    for name, est in payload["methods"].items():
        lo, hi = est["ci90"] if est["ci90"][0] is not None else (float("nan"), float("nan"))
        rows.append([name, f"{est['rho']:.3f}", f"[{lo:.3f}, {hi:.3f}]", f"{est['rho_unclipped']:.3f}",
                     f"{est['trained_fraction']:.3f}", "YES" if est["anomaly"] else "no",
                     f"{est['timings_ms']['fit'] + est['timings_ms']['bootstrap']:.0f}"])
    return header, rows


def duci_rows(payload: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a DUCI audit: the USED proportion p̂ (trained on), its 95% interval, and 1 − p̂ on SMI's
    scale (ρ, the unused share); the attack's rates on the shadows and the raw share it calls members."""
    header = ["method", "attack", "used proportion p̂ (trained on)", "95% interval", "unclipped p̂",
              "unused 1 − p̂ (SMI's ρ scale)", "TPR / FPR on shadows", "called members (raw share)", "anomaly",
              "fit + bootstrap (ms)"]
    est = payload["methods"]["duci"]
    lo, hi = est["ci95"] if est["ci95"][0] is not None else (float("nan"), float("nan"))
    row = ["duci", est["attack"], f"{est['proportion']:.3f}", f"[{lo:.3f}, {hi:.3f}]",
           f"{est['proportion_unclipped']:.3f}", f"{1 - est['proportion']:.3f}", f"{est['tpr']:.3f} / {est['fpr']:.3f}",
           f"{est['decided_share']:.3f}", "YES" if est["anomaly"] else "no",
           f"{est['timings_ms']['fit'] + est['timings_ms']['bootstrap']:.0f}"]
    return header, [row]


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
    """(header, rows) of an extraction summary: one row per step count (or 'ar'); the change of log p̂ against the
    first row only where there is more than one."""
    cfg = payload["config"]
    several = sum(isinstance(v, dict) for v in payload["summary"].values()) > 1
    header = ["steps", "median log p̂"] + (["median Δ log p"] if several else [])
    for p in cfg["p"]:
        header += [f"discoverable @p={p:g}", f"median n @p={p:g}"]
    header.append("forwards/record")
    rows = []
    for label, row in payload["summary"].items():
        if not isinstance(row, dict):
            continue
        cells = [label, f"{row['median_log_p_hat']:.2f}"] + ([f"{row['median_delta_log_p']:+.2f}"] if several else [])
        for p in cfg["p"]:
            n = row[f"median_n_needed@p={p:g}"]
            cells += [str(row[f"discoverable@p={p:g}"]), "∞" if n == float("inf") else f"{n:.3g}"]
        cells.append(f"{row['mean_forwards_per_record']:.1f}")
        rows.append(cells)
    return header, rows


def check_rows(payload: dict) -> list[dict]:
    """One row per check and statistic: each model's value before and after, the changes and the verdict."""
    rows = []
    for check, stats in payload["checks"].items():
        for stat, row in stats.items():
            values = {f"{m} {v}": payload["values"][m][v][stat] for m in ("unlearned", "retrained")
                      for v in ("as is", check)}
            rows.append({"check": check, "statistic": "SMI-M 1 - rho" if stat == "smi-m" else f"AUC {stat}",
                         **{k.replace(check, "after"): v for k, v in values.items()},
                         **{f"{k} change": row[k]["diff"] for k in ("unlearned", "retrained")},
                         "beyond": row["beyond"]["diff"], "beyond_low": row["beyond"]["ci95"][0],
                         "beyond_high": row["beyond"]["ci95"][1], "verdict": row["verdict"]})
    return rows


def _num(x, sign: str = "") -> str:
    return "undefined" if x is None else f"{x:{sign}.3f}"


def check_table(payload: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of an unlearning check, for the command line and the report."""
    header = ["check", "statistic", "unlearned before → after", "retrained before → after",
              "beyond retrained (95% interval)", "unlearned − retrained after", "verdict"]
    rows = []
    for r, (check, stat) in zip(check_rows(payload), ((c, s) for c, v in payload["checks"].items() for s in v)):
        after = payload["checks"][check][stat]["after"]
        rows.append([check, r["statistic"], f"{_num(r['unlearned as is'])} → {_num(r['unlearned after'])}",
                     f"{_num(r['retrained as is'])} → {_num(r['retrained after'])}",
                     f"{_num(r['beyond'], '+')} [{_num(r['beyond_low'], '+')}, {_num(r['beyond_high'], '+')}]",
                     f"{_num(after['diff'], '+')} [{_num(after['ci95'][0], '+')}, {_num(after['ci95'][1], '+')}]",
                     r["verdict"]])
    return header, rows
