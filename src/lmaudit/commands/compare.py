"""``lmaudit compare RUN_A RUN_B``: two membership-inference runs compared on the texts both scored."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api.reports import comparison_rows
from lmaudit.commands import common as c
from lmaudit.commands.running import check_out
from lmaudit.progress import stdout_console

app = typer.Typer(add_completion=False)


@app.command("compare", rich_help_panel=c.PANEL_RESULTS)
def compare_cmd(
    config: Optional[Path] = c.config_option(),
    run_a: Path = typer.Argument(..., help="A folder written by lmaudit mia (e.g. the served model's run)."),
    run_b: Path = typer.Argument(..., help="Another one over the same texts (e.g. the local weights' run)."),
    out: Optional[Path] = typer.Option(None, help="Write the comparison (results.json and report) to this folder."),
    bootstrap: int = typer.Option(1000, "--bootstrap", help="Resamples of the shared texts for the paired intervals."),
    seed: int = c.seed_option("Seed of the bootstrap resamples."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not write report.html / report.md with --out."),
) -> None:
    """Per attack on the texts both runs scored: AUC(B) − AUC(A) with its paired interval, the rank correlation of
    the scores, and both verdicts side by side (served vs local, before vs after unlearning, two checkpoints)."""
    if out is not None:
        check_out(out, job="compare", inputs={"RUN_A": run_a, "RUN_B": run_b})
    found = api.compare(run_a, run_b, config=api.CompareConfig(n_bootstrap=bootstrap, seed=seed))
    p = found.payload
    for key in ("a", "b"):
        stdout_console.print(f"{key.upper()}: {p['runs'][key]['path']}: {p['runs'][key]['verdict']}", markup=False,
                             soft_wrap=True)
    m = p["matched"]
    c.print_table(c.rich_table(f"B − A on {m['members']} members and {m['nonmembers']} non-members both runs scored "
                               f"({m['only_a']} only in A, {m['only_b']} only in B)", *comparison_rows(p)))
    if out is not None:
        found.write(out, report=not no_report)
        stdout_console.print(f"results: {out / 'results.json'}")
