"""A results folder logged to MLflow: the run's settings as parameters, its figures as metrics (with their intervals'
ends), the folder itself (report included) as artifacts, and lmaudit's provenance as tags.

``track(folder, tracking_uri)`` (``--mlflow URI`` on every command that writes a results folder) opens one MLflow run
per results folder in the experiment ``experiment`` (default ``lmaudit``) of whatever tracking URI MLflow accepts: a
tracking server (``http://...``), a database or a local folder. MLflow is optional (``pip install
'lmaudit[mlflow]'``, its ``mlflow-skinny`` client); without it, or with a URI MLflow cannot write to, the error says
so before anything is logged, and the results folder is never touched.

Metric names are the figures' own, made legal for MLflow: ``loss/auc``, ``loss/auc_ci95_low``,
``loss/tpr_at_1pct_fpr``, one per attack (or row of the result's table) and figure.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from lmaudit.errors import LmauditError
from lmaudit.report.build import read_results, verify_run
from lmaudit.runs.common import job_of_type
from lmaudit.runs.mia_result import MIAResult

MAX_PARAM = 500  # characters MLflow keeps of a parameter's value


def metric_name(*parts: str) -> str:
    """A metric name MLflow accepts (letters, digits, ``_ - . / space``) from a row and a figure."""
    text = "/".join(str(p) for p in parts if p not in (None, ""))
    text = text.replace("%", "pct").replace("@", "_at_")
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", text)


def _flat(prefix: str, value, out: dict) -> None:
    """Settings as MLflow parameters: nested keys joined by dots, lists and scalars as text."""
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif value is not None:
        out[prefix] = str(value)[:MAX_PARAM]


def metrics_of(result) -> dict[str, float]:
    """The figures of a result: every attack's AUC, TPRs and interval ends for a membership run, else every finite
    number of its table (``to_frame()``: one row per attack, method or record), named row/column."""
    out: dict[str, float] = {}
    if isinstance(result, MIAResult):
        for name, m in result.attacks.items():
            for key, value in m.items():
                if key.endswith("_ci95") and isinstance(value, (list, tuple)) and len(value) == 2:
                    for end, x in zip(("low", "high"), value):
                        if isinstance(x, (int, float)) and math.isfinite(x):
                            out[metric_name(name, f"{key}_{end}")] = float(x)
                elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    out[metric_name(name, key)] = float(value)
        return out
    frame = result.to_frame()
    label = frame.columns[0]
    for _, row in frame.iterrows():
        for column, value in row.items():
            if column != label and isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and math.isfinite(value):
                out[metric_name(row[label], column)] = float(value)
    return out


def _mlflow():
    try:
        import mlflow  # optional: only this module needs it
    except ImportError:
        raise LmauditError("logging to MLflow needs its client", hint="pip install 'lmaudit[mlflow]'") from None
    return mlflow


def track(folder: str | Path, tracking_uri: str, *, experiment: str = "lmaudit", run_name: str | None = None) -> str:
    """Log the results folder ``folder`` to MLflow at ``tracking_uri``; returns the MLflow run's id."""
    folder = Path(folder)
    verify_run(folder)  # an edited or partial folder is refused before anything is logged
    res = read_results(folder / "results.json")
    job = job_of_type(res.get("type") or "mia")
    result = (job.result if job is not None else MIAResult).load(folder)
    mlflow = _mlflow()
    params: dict[str, str] = {}
    _flat("", res.get("config") or res.get("experiment") or {}, params)
    previous = mlflow.get_tracking_uri()  # the caller's own MLflow settings are left as they were
    try:
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_experiment(experiment)
        with mlflow.start_run(run_name=run_name or folder.name) as run:
            mlflow.set_tags({"lmaudit.type": res.get("type") or "mia", "lmaudit.version": res.get("lmaudit_version"),
                             "lmaudit.git_commit": res.get("git_commit"), "lmaudit.folder": str(folder.resolve())})
            if params:
                mlflow.log_params(params)
            mlflow.log_metrics(metrics_of(result))
            mlflow.log_artifacts(str(folder), artifact_path="results")
            return run.info.run_id
    except LmauditError:
        raise
    except Exception as exc:  # MLflow's own errors: an unknown scheme, a store it refuses, a server that is down
        first = " ".join(str(exc).split())[:300]
        raise LmauditError(f"MLflow at '{tracking_uri}': {first}",
                           hint="check the tracking URI (a local folder needs MLFLOW_ALLOW_FILE_STORE=true with "
                                "recent MLflow)") from None
    finally:
        mlflow.set_tracking_uri(previous)
