"""Two membership-inference runs compared on the texts both scored: a served model against its weights, a model
before and after unlearning, two checkpoints.

Texts are matched by their content (the digest every run stores per record, never the id), and must carry the same
label in both runs. For every attack both ran: each run's AUC on the matched texts, the difference B − A with its
paired stratified bootstrap 95% interval (both AUCs of a replicate from the same resample of the matched texts), the
same for the TPR at 1% FPR where enough non-members resolve it, and the Spearman correlation of the two runs'
scores (how alike they rank the same texts). Each run's own verdict is shown beside the other's.

The difference is read from its interval: "higher in B" or "lower in B" when the interval excludes 0, "no
difference shown" otherwise. Runs that match too few texts are refused, naming how many.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from lmaudit.errors import LmauditError
from lmaudit.metrics import auc, paired_auc_diff, paired_tpr_diffs
from lmaudit.report.build import read_results, verify_run
from lmaudit.report.document import Report, Section
from lmaudit.report.summary import mia_summary
from lmaudit.report.tables import facts_common
from lmaudit.runs.common import Job, RunResult, register_job
from lmaudit.runs.mia_result import MIAResult
from lmaudit.settings import check_settings, integer, seed_value, setting

MIN_MATCHED = 4  # members and non-members each the two runs must share


@dataclass
class CompareConfig:
    """The bootstrap of the paired differences: ``n_bootstrap`` resamples of the matched texts, ``seed``.

    Examples
    --------
    >>> lmaudit.CompareConfig(n_bootstrap=500).n_bootstrap
    500
    >>> lmaudit.CompareConfig(n_bootstrap=10)
    Traceback (most recent call last):
    ...
    lmaudit.errors.SettingError: n_bootstrap must be an integer ≥ 100, got 10
    """

    n_bootstrap: int = setting(1000, check=integer(100), flag="--bootstrap")
    seed: int = setting(0, check=seed_value())

    def __post_init__(self) -> None:
        check_settings(self)


def _run(given, name: str) -> tuple[MIAResult, str]:
    """A membership run: a folder (checked against its manifest, as ``lmaudit report`` reads one) or a result."""
    if isinstance(given, MIAResult):
        return given, str(given.target.get("path") or name)
    folder = Path(given)
    if not (folder / "results.json").is_file():
        raise LmauditError(f"{name} '{folder}': no results.json", hint="pass a folder written by lmaudit mia")
    kind = read_results(folder / "results.json").get("type") or "mia"
    if kind not in ("mia", "demo"):
        raise LmauditError(f"{name} '{folder}': {'an' if kind[:1] in 'aeiou' else 'a'} {kind} run, not a "
                           "membership-inference run",
                           hint="compare two folders written by lmaudit mia (or demo)")
    verify_run(folder)  # files changed since the run wrote them are refused, naming the file
    return MIAResult.load(folder), str(folder)


def _matched(a: MIAResult, b: MIAResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """(indices in a, indices in b, labels) of the texts both runs scored, and the counts."""
    if not a.digests or not b.digests:
        raise LmauditError("a run without its texts' digests (written by an older lmaudit) cannot be matched",
                           hint="run it again: every run now stores one digest per text")
    where_b = {}
    for j, d in enumerate(b.digests):
        where_b.setdefault(d, j)
    pairs = [(i, where_b[d]) for i, d in enumerate(a.digests) if d in where_b]
    clash = next(((i, j) for i, j in pairs if a.labels[i] != b.labels[j]), None)
    if clash is not None:
        raise LmauditError(f"text '{a.ids[clash[0]]}' is a {'member' if a.labels[clash[0]] else 'non-member'} in run A "
                           f"but a {'member' if b.labels[clash[1]] else 'non-member'} in run B",
                           hint="compare runs over the same members and non-members")
    ia = np.array([i for i, _ in pairs], dtype=np.int64)
    ib = np.array([j for _, j in pairs], dtype=np.int64)
    labels = a.labels[ia] if len(ia) else np.zeros(0, dtype=np.int64)
    counts = {"members": int(labels.sum()), "nonmembers": int(len(labels) - labels.sum()),
              "only_a": len(a.digests) - len(ia), "only_b": len(b.digests) - len(ib)}
    if min(counts["members"], counts["nonmembers"]) < MIN_MATCHED:
        raise LmauditError(f"the runs share {counts['members']} member(s) and {counts['nonmembers']} non-member(s) "
                           f"(texts matched by content; {counts['only_a']} only in A, {counts['only_b']} only in B)",
                           hint=f"compare runs over the same texts: at least {MIN_MATCHED} of each")
    return ia, ib, labels, counts


def _reading(lo: float, hi: float) -> str:
    return "higher in B" if lo > 0 else "lower in B" if hi < 0 else "no difference shown"


def compare_runs(run_a, run_b, config: CompareConfig | None = None) -> ComparisonResult:
    """The result of a comparison (module docstring) of two membership runs (folders or results)."""
    cfg = config or CompareConfig()
    a, where_a = _run(run_a, "run A")
    b, where_b = _run(run_b, "run B")
    ia, ib, labels, counts = _matched(a, b)
    attacks = {}
    for name in [n for n in a.scores if n in b.scores]:
        sa, sb = np.asarray(a.scores[name], float)[ia], np.asarray(b.scores[name], float)[ib]
        diff = paired_auc_diff(labels, sb, sa, n_resamples=cfg.n_bootstrap, seed=cfg.seed)
        tpr = paired_tpr_diffs(labels, sb, sa, n_resamples=cfg.n_bootstrap, seed=cfg.seed)["tpr@1%fpr"]
        rho = spearmanr(sa, sb).statistic if np.ptp(sa) > 0 and np.ptp(sb) > 0 else float("nan")
        attacks[name] = {"auc_a": float(auc(labels, sa)), "auc_b": float(auc(labels, sb)),
                         "delta_auc": diff.diff, "delta_auc_ci95": [diff.lo, diff.hi],
                         "reading": _reading(diff.lo, diff.hi), "spearman": float(rho),
                         "delta_tpr@1%fpr": None if tpr is None else tpr["diff"],
                         "delta_tpr@1%fpr_ci95": None if tpr is None else tpr["ci95"]}
    if not attacks:
        raise LmauditError("the runs share no attack", hint="run both with the same --attacks")
    return ComparisonResult({
        "type": "comparison", "config": asdict(cfg),
        "runs": {key: {"path": where, "target": run.target, "n_members": run.n_members,
                       "n_nonmembers": run.n_nonmembers, "verdict": _verdict(run)}
                 for key, run, where in (("a", a, where_a), ("b", b, where_b))},
        "same_model": a.target.get("fingerprint") == b.target.get("fingerprint"),
        "matched": counts, "attacks": attacks})


def _verdict(run: MIAResult) -> str:
    return mia_summary([("", {"attacks": run.attacks, "n_members": run.n_members, "n_nonmembers": run.n_nonmembers,
                              "set_check": run.set_check, "overlap": run.overlap})]).headline


class ComparisonResult(RunResult):
    """Two membership runs compared: ``to_frame()`` one row per attack (AUCs, ΔAUC and its interval, Spearman)."""

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"attack": name, **{k: v for k, v in m.items() if not k.endswith("ci95")},
                              "delta_auc_low": m["delta_auc_ci95"][0], "delta_auc_high": m["delta_auc_ci95"][1]}
                             for name, m in self.payload["attacks"].items()])

    def headline(self) -> str:
        moved = [n for n, m in self.payload["attacks"].items() if m["reading"] != "no difference shown"]
        return (f"{len(moved)} of {len(self.payload['attacks'])} attacks differ on "
                f"{self.payload['matched']['members'] + self.payload['matched']['nonmembers']} shared texts")


def comparison_rows(payload: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a comparison: per attack, both AUCs, B − A with its interval and reading, Spearman."""
    header = ["attack", "AUC A", "AUC B", "ΔAUC (B − A)", "95% CI", "reading", "Spearman"]
    out = []
    for name, m in payload["attacks"].items():
        lo, hi = m["delta_auc_ci95"]
        out.append([name, f"{m['auc_a']:.3f}", f"{m['auc_b']:.3f}", f"{m['delta_auc']:+.3f}",
                    f"[{lo:+.3f}, {hi:+.3f}]", m["reading"], f"{m['spearman']:.2f}"])
    return header, out


def comparison_report(run: Path, res: dict, *, where: Path | None = None, show_pii: bool = False) -> Report:
    """The report of a comparison: both runs' verdicts side by side, then the per-attack differences."""
    m = res["matched"]
    text = (f"{m['members']} members and {m['nonmembers']} non-members scored by both runs (matched by content; "
            f"{m['only_a']} texts only in A, {m['only_b']} only in B). ΔAUC = AUC(B) − AUC(A) on those texts, with a "
            f"paired stratified bootstrap 95% interval ({res['config']['n_bootstrap']:,} resamples); 'higher in B' "
            "or 'lower in B' only when the interval excludes 0. Spearman: how alike the two runs rank the texts.")
    verdicts = (["run", "model", "verdict"],
                [[k.upper(), str(r["target"].get("path")), r["verdict"]] for k, r in res["runs"].items()])
    facts = {"run A": res["runs"]["a"]["path"], "run B": res["runs"]["b"]["path"],
             "same model": "yes" if res["same_model"] else "no", **facts_common(res)}
    return Report("lmaudit comparison", f"Folder: {where or run}", facts,
                  [Section("Verdicts side by side", "Each run's own verdict, on all of its texts.", table=verdicts),
                   Section("Per attack, on the shared texts", text, table=comparison_rows(res))])


JOB = register_job(Job("compare", "comparison", "compare", ComparisonResult, compare_runs, CompareConfig,
                       comparison_report))
