"""``lmaudit attacks``: the registered attacks (imports no model code, so it answers at once)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from lmaudit.api.tools import list_attacks
from lmaudit.commands.common import PANEL_AUDIT, config_option, print_table

app = typer.Typer(add_completion=False)


@app.command("attacks", rich_help_panel=PANEL_AUDIT)
def attacks_cmd(
    config: Optional[Path] = config_option(),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    kind: Optional[str] = typer.Option(None, help="Only attacks for ar or dlm models."),
) -> None:
    """List registered attacks: kind, what they need (reference, shadows, access to the model), default parameters.

    Access, least first: generation (sampled text), logprob (each token's log-probability), top_k (also the top
    log-probabilities at each position), distribution (the whole next-token distribution), weights (the model
    itself). A served model gives logprob and top_k."""
    specs = [s.describe() for s in list_attacks(kind)]
    if as_json:
        sys.stdout.write(json.dumps(specs, indent=2) + "\n")
        return
    table = Table(title="Registered attacks (higher score = more likely a member)")
    for col in ("name", "kind", "reference", "shadows", "access", "parameters", "summary"):
        table.add_column(col)
    for s in specs:
        params = ", ".join(f"{k}={v}" for k, v in s["params"].items()) or "-"
        table.add_row(s["name"], s["kind"], "yes" if s["needs_reference"] else "no",
                      "yes" if s["needs_shadows"] else "no", s["access"], params, s["summary"])
    print_table(table)
