"""A results folder logged to MLflow (a local file store), read back with MLflow's own client: parameters, every
attack's figures and interval ends, the folder as artifacts; bad URIs and edited folders refused."""

from __future__ import annotations

import json

import pytest

from helpers import lmaudit as cli
from helpers import make_texts

mlflow = pytest.importorskip("mlflow")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # recent MLflow keeps local folders behind this switch
    return (tmp_path / "mlruns").as_uri()


@pytest.fixture
def run(tmp_path, tiny_model_dir):
    import lmaudit

    texts = make_texts(24, seed=21)
    out = tmp_path / "run"
    lmaudit.mia(tiny_model_dir, texts[:12], texts[12:],
                config=lmaudit.RunConfig(attacks=["loss", "min_k"], n_bootstrap=50, blind=False)).write(out)
    return out


def test_a_run_read_back_from_mlflow_holds_its_figures_settings_and_folder(run, store):
    import lmaudit
    from lmaudit.runs.tracking import metric_name

    run_id = lmaudit.track(run, store, experiment="audits")
    client = mlflow.tracking.MlflowClient(tracking_uri=store)
    got = client.get_run(run_id)
    res = json.loads((run / "results.json").read_text())
    loss = res["attacks"]["loss"]
    assert got.data.metrics["loss/auc"] == pytest.approx(loss["auc"])
    assert got.data.metrics["loss/auc_ci95_low"] == pytest.approx(loss["auc_ci95"][0])
    assert got.data.metrics["min_k/auc_ci95_high"] == pytest.approx(res["attacks"]["min_k"]["auc_ci95"][1])
    assert got.data.params["attacks"] == "['loss', 'min_k']" and got.data.params["n_bootstrap"] == "50"
    assert got.data.tags["lmaudit.type"] == "mia"
    files = {a.path for a in client.list_artifacts(run_id, "results")}
    assert {"results/results.json", "results/scores.parquet"} <= files
    assert client.get_experiment(got.info.experiment_id).name == "audits"
    assert metric_name("min_k", "tpr@1%fpr") == "min_k/tpr_at_1pctfpr"


def test_the_command_line_logs_a_run_and_bad_targets_are_refused(tmp_path, tiny_model_dir, store, run):
    import lmaudit
    from lmaudit.errors import LmauditError

    texts = make_texts(16, seed=22)
    for name, part in (("m.jsonl", texts[:8]), ("n.jsonl", texts[8:])):
        (tmp_path / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
    r = cli("mia", "--model", tiny_model_dir, "--members", tmp_path / "m.jsonl", "--nonmembers", tmp_path / "n.jsonl",
            "--attacks", "loss", "--bootstrap", 20, "--out", tmp_path / "cli", "--no-report", "--mlflow", store)
    assert r.exit_code == 0, r.output
    assert "mlflow: run " in r.output
    client = mlflow.tracking.MlflowClient(tracking_uri=store)
    runs = client.search_runs([client.get_experiment_by_name("lmaudit").experiment_id])
    assert [x.info.run_name for x in runs] == ["cli"] and "loss/auc" in runs[0].data.metrics
    assert mlflow.get_tracking_uri() != store  # the global setting was restored
    with pytest.raises(LmauditError, match="MLflow at 'nosuch://x'"):
        lmaudit.track(run, "nosuch://x")
    (run / "results.json").write_text((run / "results.json").read_text().replace('"auc"', '"auc" ', 1))
    with pytest.raises(LmauditError):  # an edited folder is refused before anything is logged
        lmaudit.track(run, store)
