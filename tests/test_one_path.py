"""One path for every job: a job is declared once (the registry), only the interface runs job bodies, and a result
is the same whichever way the job was started."""

import ast
import json
from pathlib import Path

import pytest

import lmaudit
import lmaudit.api
from helpers import make_texts, write_jsonl
from lmaudit.cli import COMMANDS
from lmaudit.folders import folder_kind
from lmaudit.probes.backends import LocalBackend, current_backend
from lmaudit.report.kinds import REPORTS
from lmaudit.runs.common import JOBS, Job, RunResult, job_of_type, register_job
from lmaudit.runs.extract import ExtractConfig, run_extraction
from lmaudit.runs.inputs import given_texts

SRC = Path(__file__).resolve().parents[1] / "src"
# the bodies of the jobs: what only lmaudit.api (and the job modules themselves) may call
BODIES = {"run_mia", "run_audit", "run_dataset_inference", "run_extraction", "run_reconstruction", "run_epsilon",
          "run_exposure", "probe_records", "score_records"}


def body_imports(root: Path) -> list[str]:
    """'file: name' of every import of a job body outside lmaudit/api/ and lmaudit/runs/."""
    found = []
    for path in sorted((root / "lmaudit").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("lmaudit/api/", "lmaudit/runs/")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lmaudit."):
                found += [f"{rel}: {a.name}" for a in node.names if a.name in BODIES]
    return found


def test_nothing_outside_the_interface_runs_a_job_body():
    assert body_imports(SRC) == []


def test_the_body_check_finds_an_experiment_calling_a_body(tmp_path):
    pkg = tmp_path / "lmaudit" / "experiments"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("from lmaudit.runs.mia import RunConfig, run_mia\nfrom lmaudit import api\n")
    (tmp_path / "lmaudit" / "api").mkdir()
    (tmp_path / "lmaudit" / "api" / "m.py").write_text("from lmaudit.runs.mia import run_mia\n")
    assert body_imports(tmp_path) == ["lmaudit/experiments/x.py: run_mia"]


def test_every_job_is_declared_once_with_its_command_result_and_report():
    assert set(JOBS) == {"mia", "demo", "audit_set", "dataset_inference", "extract", "reconstruct_pii", "epsilon",
                         "canaries", "finetune", "unlearn", "pretrain", "shadows", "unlearning_check", "compare"}
    for name, job in JOBS.items():
        assert job.command in COMMANDS, name  # the command line has it
        assert name == "demo" or name in lmaudit.api.__all__, name  # the interface runs it
        if job.report is not None:
            assert REPORTS[job.type] is job.report  # its report is found by the type of its results
    assert job_of_type("pii-reconstruction") is JOBS["reconstruct_pii"] and job_of_type("nothing") is None
    again = Job("extract", "extraction", "extract", RunResult)  # another declaration under a taken name
    with pytest.raises(lmaudit.errors.LmauditError, match="job 'extract' is declared twice"):
        register_job(again)
    assert JOBS["extract"] is not again


def test_a_result_written_and_read_back_is_of_its_jobs_type_and_says_the_same(tmp_path, tiny_model_dir):
    data = write_jsonl(tmp_path / "d.jsonl", make_texts(4, seed=3))
    run = lmaudit.extract(tiny_model_dir, data, config=lmaudit.ExtractConfig(mask="suffix:4", trajectories=2, n=10))
    run.write(tmp_path / "x")
    back = lmaudit.load_results(tmp_path / "x")
    assert type(back) is type(run) is JOBS["extract"].result and folder_kind(tmp_path / "x") == "extraction"
    assert repr(back) == repr(run) and repr(run).startswith("<ExtractionResult extraction: ")
    assert back.to_frame()["id"].tolist() == run.to_frame()["id"].tolist()


def test_a_payload_is_the_same_whichever_way_the_job_started(tmp_path, tiny_model_dir):
    """The job writes every field: the body's payload is the interface's (``model`` once came only from the api)."""
    texts = make_texts(4, seed=3)
    cfg = dict(mask="suffix:4", trajectories=2, n=10)
    by_api = lmaudit.extract(tiny_model_dir, texts, config=ExtractConfig(**cfg), show_pii=True).payload
    by_body = run_extraction(lmaudit.load_model(tiny_model_dir), given_texts(texts, "texts"),
                             ExtractConfig(**cfg), show_pii=True)
    drop = ("runtime_s",)
    assert by_body["model"] == by_api["model"] == str(tiny_model_dir) and by_body["show_pii"] is True
    assert json.dumps({k: v for k, v in by_body.items() if k not in drop}, sort_keys=True, default=str) == \
        json.dumps({k: v for k, v in by_api.items() if k not in drop}, sort_keys=True, default=str)


class Recording(LocalBackend):
    """The local backend, counting the shards it ran and whether it was closed."""

    def __init__(self):
        self.shards, self.closed = 0, False

    def map(self, handle, task, shards):
        for index, shard in shards:
            self.shards += 1
            yield index, task(handle, shard)

    def close(self):
        self.closed = True


def test_the_backend_is_a_parameter_of_the_jobs(tiny_model_dir):
    texts = make_texts(8, seed=4)
    chosen = Recording()
    cfg = lmaudit.RunConfig(attacks=["loss"], n_bootstrap=20, blind=False, use_cache=False)
    run = lmaudit.mia(tiny_model_dir, texts[:4], texts[4:], config=cfg, backend=chosen)
    assert chosen.shards >= 1 and not chosen.closed  # the caller's backend ran the shards and is the caller's to close
    assert current_backend().name == "local" and not isinstance(current_backend(), Recording)  # nothing left behind
    again = Recording()
    lmaudit.extract(tiny_model_dir, texts[:2], config=ExtractConfig(mask="suffix:4", trajectories=2, n=10),
                    backend=again)
    assert again.shards >= 1
    with pytest.raises(lmaudit.errors.LmauditError, match="unknown backend 'gpu'"):
        lmaudit.mia(tiny_model_dir, texts[:4], texts[4:], config=cfg, backend="gpu")
    assert run.attacks["loss"]["auc"] == lmaudit.mia(tiny_model_dir, texts[:4], texts[4:], config=cfg).attacks[
        "loss"]["auc"]


@pytest.mark.parametrize("job", ["mia", "dataset_inference", "extract"])
def test_an_unknown_backend_name_is_refused_before_any_model_loads(job):
    import lmaudit
    from lmaudit.errors import SettingError

    args = {"mia": (["a b c"], ["d e f"]), "dataset_inference": (["a b c"], ["d e f"]), "extract": (["a b c"],)}[job]
    with pytest.raises(SettingError, match="unknown backend 'rey'"):  # not "no such model folder"
        getattr(lmaudit, job)("no/such/model", *args, backend="rey")
