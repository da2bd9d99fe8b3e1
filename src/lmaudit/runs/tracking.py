"""A results folder logged to MLflow: what was audited and the run's settings as parameters, its figures as metrics
(with their intervals' ends), the folder itself (report included) as artifacts, and lmaudit's provenance as tags.

``track(folder, tracking_uri)`` (``lmaudit track FOLDER --mlflow URI``, and ``--mlflow URI`` on every command that
writes a results folder) logs into the active MLflow run when there is one (``mlflow.start_run()`` in the caller's
process, or ``MLFLOW_RUN_ID`` in its environment), else into a new run named after the folder (``run_name``) in the
experiment ``experiment`` (default ``lmaudit``). Any tracking URI MLflow accepts works: a tracking server
(``http://...``), a database (``sqlite:///...``: the full ``mlflow`` package) or a local folder (``file:///...``, a
plain path). :func:`check_tracking_uri` says what is wrong with a URI before anything runs. MLflow is optional (``pip
install 'lmaudit[mlflow]'``, its ``mlflow-skinny`` client).

Names (the same for the training callback, :mod:`lmaudit.integrations.transformers`): metrics
``lmaudit/ATTACK/auc``, ``lmaudit/ATTACK/auc_ci95_low``, ``lmaudit/ATTACK/tpr_at_1pct_fpr``
(:func:`~lmaudit.utils.metric_name`: ``%`` spelled ``pct``, ``@`` spelled ``_at_``), one per attack (or row of the
result's table) and figure; parameters ``lmaudit.model``, ``lmaudit.model_fingerprint``, ``lmaudit.n_members``,
``lmaudit.exposure``, ``lmaudit.verdict``, ``lmaudit.config.KEY``; every parameter and tag passes through
:func:`~lmaudit.credentials.mask_secrets`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from lmaudit.credentials import mask_secrets
from lmaudit.errors import LmauditError
from lmaudit.folders import missing_folder_hint
from lmaudit.report.build import build_report, read_results, verify_run
from lmaudit.report.summary import CANNOT_TELL, mia_summary
from lmaudit.runs.common import job_of_type
from lmaudit.runs.mia_notes import verdict_text
from lmaudit.runs.mia_result import MIAResult
from lmaudit.utils import metric_name

PREFIX = "lmaudit"  # the first part of every metric, parameter and tag lmaudit logs
MAX_PARAM = 6000  # characters MLflow (≥ 2) keeps of a parameter's value
LOCAL, SERVERS, HOSTED = ("", "file"), ("http", "https"), ("databricks", "databricks-uc", "uc")
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow's SQLAlchemy stores
DATABASE_MODULES = ("sqlalchemy", "alembic")  # what they need, and mlflow-skinny leaves out
FILE_STORE_SWITCH = "MLFLOW_ALLOW_FILE_STORE"  # recent MLflow writes a local folder only with this set to true
MAX_MESSAGE = 400  # characters of MLflow's own error kept in ours (whole sentences)


def _flat(prefix: str, value, out: dict) -> None:
    """Settings as MLflow parameters: nested keys joined by dots, lists and scalars as text, secrets masked."""
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif value is not None:
        out[prefix] = mask_secrets(str(value))[:MAX_PARAM]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def metrics_of(result, prefix: str = PREFIX) -> dict[str, float]:
    """The figures of a result: every attack's AUC, TPRs and interval ends for a membership run, else every finite
    number of its table (``to_frame()``: one row per attack, method or record), named ``PREFIX/ROW/FIGURE``."""
    out: dict[str, float] = {}
    if isinstance(result, MIAResult):
        for name, m in result.attacks.items():
            for key, value in m.items():
                if key.endswith("_ci95") and isinstance(value, (list, tuple)) and len(value) == 2:
                    for end, x in zip(("low", "high"), value):
                        if _number(x):
                            out[metric_name(prefix, name, f"{key}_{end}")] = float(x)
                elif _number(value):
                    out[metric_name(prefix, name, key)] = float(value)
        return out
    frame = result.to_frame()
    label = frame.columns[0]
    for _, row in frame.iterrows():
        for column, value in row.items():
            if column != label and _number(value):
                out[metric_name(prefix, row[label], column)] = float(value)
    return out


def _summary(folder: Path, res: dict, result) -> tuple[str | None, str | None]:
    """(exposure level, verdict) of the folder's report: for a membership run the level and the line the command
    prints; else the report's level and headline with its first point. Nones where its kind has no verdict."""
    mia = isinstance(result, MIAResult)
    try:
        summary = mia_summary([("", res)]) if mia else build_report(folder).summary
        if summary is None:
            return None, None
        verdict = verdict_text(result) if mia else ". ".join([summary.headline, *summary.points[:1]])
    except (LmauditError, KeyError, TypeError, ValueError):
        return None, None
    return summary.level or (CANNOT_TELL if mia else None), verdict


def run_params(folder: Path, res: dict, result=None) -> dict[str, str]:
    """What a run audited, as MLflow parameters: each model's path and fingerprint, the sizes of its sets
    (``n_members``, ...), the report's exposure level and verdict, and every setting (``lmaudit.config.KEY``); every
    value with its secrets masked (:func:`~lmaudit.credentials.mask_secrets`)."""
    found: dict = {}
    for key, name in (("target", "model"), ("model", "model"), ("reference", "reference")):
        value = res.get(key)
        if isinstance(value, dict):
            found.setdefault(name, value.get("path"))
            found.setdefault(f"{name}_fingerprint", value.get("fingerprint"))
        elif isinstance(value, str):
            found.setdefault(name, value)
    if res.get("fingerprint"):
        found.setdefault("model_fingerprint", res["fingerprint"])
    found.update({k: v for k, v in res.items() if k.startswith("n_") and isinstance(v, int)})
    found["exposure"], found["verdict"] = _summary(folder, res, result)
    params: dict[str, str] = {}
    _flat(PREFIX, {k: v for k, v in found.items() if v not in (None, "")}, params)
    _flat(f"{PREFIX}.config", res.get("config") or res.get("experiment") or {}, params)
    return params


def _mlflow():
    try:
        import mlflow  # optional: only this module needs it
    except ImportError:
        raise LmauditError("logging to MLflow needs its client, mlflow-skinny",
                           hint="pip install mlflow-skinny (or lmaudit with its mlflow extra)") from None
    return mlflow


def _scheme(uri: str) -> str:
    scheme = urlsplit(uri).scheme.lower()
    return "" if len(scheme) == 1 else scheme  # C:\runs is a local path, not a scheme


def _plugin_schemes() -> set[str]:
    """Tracking-store schemes that installed MLflow plugins add."""
    return {e.name for e in importlib.metadata.entry_points(group="mlflow.tracking_store")}


def missing_modules(names=DATABASE_MODULES) -> list[str]:
    """The modules of ``names`` that are not installed."""
    return [n for n in names if importlib.util.find_spec(n) is None]


def check_tracking_uri(uri: str) -> str:
    """Refuse, before any work, a tracking URI that MLflow could not write to from here; return it.

    Checked without contacting anything: MLflow's client is installed; the scheme is one MLflow has a store for
    (``http(s)://HOST``, ``file:///PATH`` or a plain path, ``sqlite``/``postgresql``/``mysql``/``mssql``,
    ``databricks``, a plugin's); a database store has SQLAlchemy and Alembic, which ``mlflow-skinny`` leaves out; a
    local store is not a file. A server that is down is found when the run is logged."""
    _mlflow()
    text = str(uri or "").strip()
    if not text:
        raise LmauditError("the MLflow tracking URI is empty", hint="e.g. --mlflow http://HOST:5000 or "
                                                                    "--mlflow file:///PATH/mlruns")
    scheme = _scheme(text)
    engine = scheme.split("+")[0]  # postgresql+psycopg2://...
    if scheme in LOCAL:
        path = Path(url2pathname(urlsplit(text).path) if scheme else text).expanduser()
        if path.exists() and not path.is_dir():
            raise LmauditError(f"MLflow tracking URI '{text}': {path} is a file, not a folder",
                               hint="name a folder for MLflow's local store, e.g. file:///PATH/mlruns")
    elif engine in DATABASES:
        missing = missing_modules()
        if missing:
            driver = "" if engine == "sqlite" else f", and the {engine} driver SQLAlchemy uses"
            raise LmauditError(
                f"MLflow tracking URI '{text}': a {engine} store needs the modules {' and '.join(missing)}, which "
                "mlflow-skinny (the MLflow client of lmaudit's mlflow extra) leaves out",
                hint=f"pip install mlflow (the full package: SQLAlchemy and Alembic){driver}; or log to a tracking "
                     "server (--mlflow http://HOST:5000) or a local folder (--mlflow file:///PATH/mlruns)")
    elif scheme in SERVERS:
        if not urlsplit(text).netloc:
            raise LmauditError(f"MLflow tracking URI '{text}' names no server", hint="e.g. http://HOST:5000")
    elif scheme not in HOSTED and scheme not in _plugin_schemes():
        raise LmauditError(f"MLflow tracking URI '{text}': MLflow has no store for '{scheme}://'",
                           hint="a tracking server (http://HOST:5000), a local folder (file:///PATH/mlruns), or a "
                                "database (sqlite:///PATH/mlflow.db, with the full mlflow package)")
    return text


@contextmanager
def _store_allowed(uri: str) -> Iterator[None]:
    """For a local store the caller named: MLflow's switch for it set during the block only, then put back."""
    if _scheme(uri) not in LOCAL:
        yield
        return
    before = os.environ.get(FILE_STORE_SWITCH)
    os.environ[FILE_STORE_SWITCH] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FILE_STORE_SWITCH, None)
        else:
            os.environ[FILE_STORE_SWITCH] = before


def _sentences(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` on one line, cut after a whole sentence (never inside a word or URL) once it reaches ``limit``."""
    text = " ".join(str(text).split())
    out = ""
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if out and len(out) + len(sentence) >= limit:
            return out + " …"
        out = f"{out} {sentence}".strip()
    return out


def _same_store(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def track(folder: str | Path, tracking_uri: str | None = None, *, experiment: str = "lmaudit",
          run_name: str | None = None) -> str:
    """Log the results folder ``folder`` (any job's) to MLflow at ``tracking_uri``; returns the MLflow run's id.

    Into the active run when there is one (``mlflow.start_run()`` in this process at the same tracking URI, or
    ``MLFLOW_RUN_ID``); else into a new run ``run_name`` (default: the folder's name) of the experiment
    ``experiment``. ``tracking_uri`` None: MLflow's own (``MLFLOW_TRACKING_URI``). The folder is checked first (an
    edited or partial folder is refused before anything is logged) and never changed; the caller's MLflow settings
    and environment are left as they were."""
    folder = Path(folder)
    if not (folder / "results.json").is_file():
        raise LmauditError(f"{folder}: {'no results.json' if folder.is_dir() else 'no such folder'}",
                           hint=missing_folder_hint(folder) or "name a folder an lmaudit command wrote")
    verify_run(folder)
    res = read_results(folder / "results.json")
    job = job_of_type(res.get("type") or "mia")
    result = (job.result if job is not None else MIAResult).load(folder)
    mlflow = _mlflow()
    current = mlflow.get_tracking_uri()
    uri = check_tracking_uri(tracking_uri or current)
    params, metrics = run_params(folder, res, result), metrics_of(result)
    tags = {f"{PREFIX}.type": res.get("type") or "mia", f"{PREFIX}.version": res.get("lmaudit_version"),
            f"{PREFIX}.git_commit": res.get("git_commit"), f"{PREFIX}.folder": mask_secrets(str(folder.resolve()))}
    tags = {k: str(v) for k, v in tags.items() if v is not None}
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    active = mlflow.active_run()
    own = None
    try:
        with _store_allowed(uri):
            client = MlflowClient(tracking_uri=uri)
            if active is not None and _same_store(uri, current):
                run_id = active.info.run_id
            elif os.environ.get("MLFLOW_RUN_ID") and _same_store(uri, current):
                run_id = client.get_run(os.environ["MLFLOW_RUN_ID"]).info.run_id
            else:
                found = client.get_experiment_by_name(experiment)
                experiment_id = found.experiment_id if found else client.create_experiment(experiment)
                own = run_id = client.create_run(experiment_id, run_name=run_name or folder.name).info.run_id
            now = int(1000 * time.time())
            client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
                             params=[Param(k, v) for k, v in params.items()],
                             tags=[RunTag(k, v) for k, v in tags.items()])
            client.log_artifacts(run_id, str(folder), artifact_path="results")
            if own is not None:
                client.set_terminated(own)
            return run_id
    except LmauditError:
        raise
    except Exception as exc:  # MLflow's own errors: a store it refuses, a server that is down, a parameter clash
        if own is not None:
            _end_failed(client, own)
        message = _sentences(str(exc))
        clash = "param" in message.lower() and ("changing" in message.lower() or "already" in message.lower())
        hint = ("a run keeps one value per parameter: log this folder into a run of its own" if clash else
                "check that the tracking server is up and the URI is right")
        raise LmauditError(f"MLflow at '{uri}': {type(exc).__name__}: {message}",
                           hint=f"{hint}; the results folder is unchanged") from None


def _end_failed(client, run_id: str) -> None:
    """Mark a run this call opened as failed (best effort: the store may be what failed)."""
    try:
        client.set_terminated(run_id, status="FAILED")
    except Exception:  # the first error is the one to report
        pass
