"""A results folder logged to MLflow (a local file store), read back with MLflow's own client: what was audited,
settings, every attack's figures and interval ends, the folder as artifacts; bad URIs refused before any work, a
failed logging that keeps the audit, ``lmaudit track``, the active run, secrets masked."""

from __future__ import annotations

import json
import os
import re

import pytest

from helpers import assert_ok, assert_user_error, make_texts, synthetic_run, write_jsonl
from helpers import lmaudit as cli
from lmaudit.folders import write_manifest

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking._tracking_service import utils as mlflow_uris  # noqa: E402

SWITCH = "MLFLOW_ALLOW_FILE_STORE"


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)  # a local store works without MLflow's switch
    return (tmp_path / "mlruns").as_uri()


def client_of(store, monkeypatch):
    """MLflow's own client, to read a local store back (reading needs the switch: set for the test only)."""
    monkeypatch.setenv(SWITCH, "true")
    return mlflow.tracking.MlflowClient(tracking_uri=store)


@pytest.fixture
def run(tmp_path, tiny_model_dir):
    import lmaudit

    texts = make_texts(24, seed=21)
    out = tmp_path / "run"
    lmaudit.mia(tiny_model_dir, texts[:12], texts[12:],
                config=lmaudit.RunConfig(attacks=["loss", "min_k"], n_bootstrap=50, blind=False)).write(out)
    return out


@pytest.fixture
def sets(tmp_path):
    texts = make_texts(16, seed=22)
    return write_jsonl(tmp_path / "m.jsonl", texts[:8]), write_jsonl(tmp_path / "n.jsonl", texts[8:])


def mia_command(model, sets, out, *more):
    return cli("mia", "--model", model, "--members", sets[0], "--nonmembers", sets[1], "--attacks", "loss",
               "--bootstrap", 20, "--out", out, "--no-report", *more)


def test_a_run_read_back_from_mlflow_holds_what_was_audited_its_figures_settings_and_folder(run, store,
                                                                                           monkeypatch):
    import lmaudit

    run_id = lmaudit.track(run, store, experiment="audits")
    assert os.environ.get(SWITCH) is None  # set for the call only
    client = client_of(store, monkeypatch)
    got = client.get_run(run_id)
    res = json.loads((run / "results.json").read_text())
    loss, params = res["attacks"]["loss"], got.data.params
    assert got.data.metrics["lmaudit/loss/auc"] == pytest.approx(loss["auc"])
    assert got.data.metrics["lmaudit/loss/auc_ci95_low"] == pytest.approx(loss["auc_ci95"][0])
    assert got.data.metrics["lmaudit/min_k/auc_ci95_high"] == pytest.approx(res["attacks"]["min_k"]["auc_ci95"][1])
    assert params["lmaudit.config.attacks"] == "['loss', 'min_k']" and params["lmaudit.config.n_bootstrap"] == "50"
    assert params["lmaudit.model"] == res["target"]["path"]
    assert params["lmaudit.model_fingerprint"] == res["target"]["fingerprint"] != ""
    assert (params["lmaudit.n_members"], params["lmaudit.n_nonmembers"]) == ("12", "12")
    assert params["lmaudit.exposure"] in ("low", "moderate", "high", "severe", "cannot tell")
    assert params["lmaudit.verdict"].startswith(f"Exposure: {params['lmaudit.exposure']}")
    assert got.data.tags["lmaudit.type"] == "mia" and got.info.run_name == "run"
    files = {a.path for a in client.list_artifacts(run_id, "results")}
    assert {"results/results.json", "results/scores.parquet"} <= files
    assert client.get_experiment(got.info.experiment_id).name == "audits"


def test_metric_names_are_those_the_training_callback_logs():
    from lmaudit.utils import metric_name

    names = [metric_name("lmaudit", "min_k", f) for f in ("auc", "tpr@1%fpr", "tpr@0.1%fpr", "tpr@10%fpr_ci95_low")]
    assert names == ["lmaudit/min_k/auc", "lmaudit/min_k/tpr_at_1pct_fpr", "lmaudit/min_k/tpr_at_0.1pct_fpr",
                     "lmaudit/min_k/tpr_at_10pct_fpr_ci95_low"]
    # what transformers' MLflow reporter does to a name before logging it leaves these as they are
    assert [re.sub(r"[^0-9A-Za-z_\-\.\ :/]", "_", n) for n in names] == names


def test_the_command_line_logs_a_run_to_a_file_store_without_mlflows_switch(tmp_path, tiny_model_dir, store, sets,
                                                                           monkeypatch):
    r = mia_command(tiny_model_dir, sets, tmp_path / "cli", "--mlflow", store, "--mlflow-experiment", "audits",
                    "--mlflow-run-name", "first")
    assert_ok(r)
    assert "mlflow: run " in r.output and os.environ.get(SWITCH) is None
    client = client_of(store, monkeypatch)
    runs = client.search_runs([client.get_experiment_by_name("audits").experiment_id])
    assert [x.info.run_name for x in runs] == ["first"] and runs[0].info.status == "FINISHED"
    params, metrics = runs[0].data.params, runs[0].data.metrics
    res = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert params["lmaudit.model_fingerprint"] == res["target"]["fingerprint"]
    assert params["lmaudit.model"] == res["target"]["path"] and params["lmaudit.n_nonmembers"] == "8"
    assert "lmaudit.exposure" in params and "lmaudit.verdict" in params
    assert metrics["lmaudit/loss/auc"] == pytest.approx(res["attacks"]["loss"]["auc"])
    assert mlflow.get_tracking_uri() != store  # the caller's setting is left as it was


@pytest.mark.parametrize("uri, needles", [
    ("sqlite:///{tmp}/mlflow.db", ["needs the modules sqlalchemy and alembic", "pip install mlflow (the full"]),
    ("nosuch://x", ["MLflow has no store for 'nosuch://'"]),
    ("{tmp}/m.jsonl", ["is a file, not a folder"]),
])
def test_a_uri_mlflow_cannot_write_to_is_refused_before_any_model_loads(uri, needles, tmp_path, tiny_model_dir,
                                                                        sets, monkeypatch):
    from lmaudit.runs import tracking

    monkeypatch.setattr(tracking, "missing_modules", lambda: ["sqlalchemy", "alembic"])  # mlflow-skinny's lack
    monkeypatch.setattr("lmaudit.api.membership.load_models", lambda *a, **k: pytest.fail("a model was loaded"))
    r = mia_command(tiny_model_dir, sets, tmp_path / "out", "--mlflow", uri.format(tmp=tmp_path))
    assert_user_error(r, *needles)
    assert not (tmp_path / "out").exists()


def test_a_logging_failure_keeps_the_audit_and_says_how_to_log_it_later(tmp_path, tiny_model_dir, store, sets,
                                                                        monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    out, down = tmp_path / "kept", "http://127.0.0.1:1"  # no server listens there
    r = mia_command(tiny_model_dir, sets, out, "--mlflow", down)
    exc = assert_user_error(r, f"the results are in {out}", f"lmaudit track {out} --mlflow {down}")
    assert "…" not in exc.message.split("http://127.0.0.1:1")[1][:10]  # the URI is whole
    assert (out / "results.json").exists() and (out / "lmaudit_manifest.json").exists()
    r = cli("track", out, "--mlflow", store, "--experiment", "later", "--run-name", "kept")
    assert_ok(r)
    client = client_of(store, monkeypatch)
    runs = client.search_runs([client.get_experiment_by_name("later").experiment_id])
    assert [x.info.run_name for x in runs] == ["kept"] and "lmaudit/loss/auc" in runs[0].data.metrics


def test_tracking_goes_into_the_active_run(run, store, monkeypatch):
    import lmaudit
    from lmaudit.errors import LmauditError

    # the caller's own MLflow set-up, read from the environment (and put back after the test)
    monkeypatch.setattr(mlflow_uris, "_tracking_uri", None)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv(SWITCH, "true")
    with mlflow.start_run(run_name="training") as active:
        assert lmaudit.track(run) == active.info.run_id
    client = mlflow.tracking.MlflowClient(tracking_uri=store)
    assert "lmaudit/loss/auc" in client.get_run(active.info.run_id).data.metrics
    assert [r.info.run_name for r in client.search_runs([active.info.experiment_id])] == ["training"]
    outer = client.create_run(active.info.experiment_id, run_name="outer")
    monkeypatch.setenv("MLFLOW_RUN_ID", outer.info.run_id)  # a process started inside a run: `mlflow run`, a job
    assert_ok(cli("track", run))  # its URI from MLFLOW_TRACKING_URI
    assert client.get_run(outer.info.run_id).data.params["lmaudit.config.n_bootstrap"] == "50"
    other = run.parent / "other"
    other.mkdir()
    with pytest.raises(LmauditError, match="a run keeps one value per parameter"):  # another folder's settings
        lmaudit.track(synthetic_run(other))


def test_parameters_and_tags_have_their_secrets_masked(tmp_path, store, monkeypatch):
    import lmaudit

    planted = "sk-planted-0123456789abcdef"
    monkeypatch.setenv("LMAUDIT_API_KEY", planted)
    monkeypatch.setenv(SWITCH, "true")
    folder = tmp_path / "served"
    folder.mkdir()
    synthetic_run(folder)
    res = json.loads((folder / "results.json").read_text())
    res["target"]["path"] = "http://alice:hunter2-password@models.internal/v1"
    res["config"]["note"] = f"served with the key {planted}"
    (folder / "results.json").write_text(json.dumps(res))
    write_manifest(folder, "run")
    run_id = lmaudit.track(folder, store)
    got = client_of(store, monkeypatch).get_run(run_id)
    shown = json.dumps([got.data.params, got.data.tags])
    assert planted not in shown and "hunter2" not in shown
    assert got.data.params["lmaudit.model"] == "http://***@models.internal/v1"
    assert got.data.params["lmaudit.config.note"] == "served with the key ***"


def test_track_refuses_hostile_folders_before_logging_anything(run, store, tmp_path, monkeypatch):
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(run, edited)
    res = json.loads((edited / "results.json").read_text())
    res["attacks"]["loss"]["auc"] = 0.99  # a figure changed after the run: its manifest says so
    (edited / "results.json").write_text(json.dumps(res))
    assert_user_error(cli("track", edited, "--mlflow", store), "results.json")
    (tmp_path / "empty").mkdir()
    assert_user_error(cli("track", tmp_path / "empty", "--mlflow", store), "no results.json")
    assert_user_error(cli("track", tmp_path / "absent\u200b", "--mlflow", store), "absent")
    client = client_of(store, monkeypatch)
    assert [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])] == []
