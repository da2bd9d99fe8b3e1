"""``lmaudit track``: log a results folder already written to MLflow."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmaudit import api
from lmaudit.api import tools
from lmaudit.commands import common as c
from lmaudit.errors import LmauditError
from lmaudit.progress import stdout_console

app = typer.Typer(add_completion=False)


@app.command(rich_help_panel=c.PANEL_RESULTS)
def track(
    run_folder: Path = typer.Argument(..., help="A results folder any lmaudit command wrote (its results.json)."),
    mlflow: Optional[str] = typer.Option(None, "--mlflow", metavar="URI", envvar="MLFLOW_TRACKING_URI",
                                         help="MLflow tracking URI: a server (http://HOST:5000), a local folder "
                                              "(file:///PATH/mlruns) or a database (sqlite:///PATH/mlflow.db, with "
                                              "the full mlflow package)."),
    experiment: str = typer.Option("lmaudit", metavar="NAME", help="The MLflow experiment of the run (when no run "
                                                                   "is active)."),
    run_name: Optional[str] = typer.Option(None, metavar="NAME", help="The MLflow run's name (default: the folder's "
                                                                      "name)."),
) -> None:
    """Log a results folder to MLflow: what was audited and the settings as parameters, the figures as metrics, the
    folder as artifacts (into the active run when MLFLOW_RUN_ID names one)."""
    if not mlflow:
        raise LmauditError("no MLflow tracking URI", hint="give --mlflow URI (or set MLFLOW_TRACKING_URI)")
    uri = api.check_tracking_uri(mlflow)
    run_id = api.track(run_folder, uri, experiment=experiment, run_name=run_name)
    stdout_console.print(f"mlflow: run {run_id} at {tools.mask_secrets(uri)}", markup=False, highlight=False)
