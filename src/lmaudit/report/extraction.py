"""Report sections for extraction runs (``lmaudit extract``)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from lmaudit.models.kinds import EXACT_EXTRACTION
from lmaudit.report import extraction_plots as xplots
from lmaudit.report.document import Figure, Report, Section
from lmaudit.report.summary import extraction_summary
from lmaudit.report.tables import facts_common, summary_rows


def extraction_report(run: Path, res: dict, *, where: Path | None = None, show_pii: bool = False) -> Report:
    """The report of an extraction run: the verdict, the (n, p) table by step count, relaxed extraction."""
    cfg = res["config"]
    records = pd.read_csv(run / "records.csv")
    labels = [k for k, v in res["summary"].items() if isinstance(v, dict)]
    columns = {lb: records[f"log_p_hat@{lb}"].to_numpy(dtype=float) for lb in labels}
    orders = ("left to right, one order (p̂ is exact: no trajectories are sampled)" if res["kind"] in EXACT_EXTRACTION
              else f"{cfg['trajectories']} trajectories ({cfg['order']} order)")
    text = (f"{res['n_records']} records, mask {cfg['mask']} ({res['n_masked']['median']:g} tokens median), "
            f"{orders}, T = {cfg['temperature']:g}, n = {cfg['n']:,} queries."
            + (" Δ log p is relative to the first row." if len(labels) > 1 else ""))
    if "monotone_fraction" in res["summary"]:
        text += f" log p̂ never fell as N grew on {100 * res['summary']['monotone_fraction']:.0f}% of records."
    sections = [Section("(n, p)-discoverable extraction", text, table=summary_rows(res),
                        figures=[Figure("log_p_by_steps", "log10 p̂ per record", xplots.log_p_by_steps(columns))])]
    if "relaxed" in res:
        r = res["relaxed"]
        sections.append(Section(
            "Relaxed extraction", f"{cfg['samples']} sampled generations per record ({r['steps']} steps); Hamming "
            f"distance to the target; mean |Gaussian − empirical| = {r['mean_abs_error']:.3f}.",
            figures=[Figure("relaxed", "Pr(d ≤ ε)", xplots.relaxed_rates(r["eps"], r["predicted"], r["empirical"]))]))
    facts = {"model": str(res.get("model")), "kind": res["kind"], "configuration": json.dumps(cfg),
             "run time": f"{res['runtime_s']:.1f} s", **facts_common(res)}
    return Report("lmaudit extraction report", f"Run folder: {where or run}", facts, sections,
                  summary=extraction_summary(res))

