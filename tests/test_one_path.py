"""One path for every job: a job is declared once (the registry), only the interface runs job bodies, and a result
is the same whichever way the job was started."""

import ast
import importlib
import inspect
import json
import re
import typing
from pathlib import Path

import pytest

import lmaudit
import lmaudit.api
from helpers import make_texts, write_jsonl
from lmaudit.cli import COMMANDS
from lmaudit.data.given import given_texts
from lmaudit.folders import folder_kind
from lmaudit.probes.backends import LocalBackend, current_backend
from lmaudit.report.kinds import REPORTS
from lmaudit.runs.common import JOBS, Job, RunResult, job_of_type, register_job
from lmaudit.runs.extract import ExtractConfig, run_extraction
from test_architecture import LAYERS, RANK

SRC = Path(__file__).resolve().parents[1] / "src"
# the layers above the interface (experiments, integrations, the command line): they reach jobs through it alone
ABOVE = tuple(name for names in LAYERS[RANK["api"] + 1:] for name in names)


def bodies(*, forms: bool = True) -> set[tuple[str, str]]:
    """(module, name) of every job's body, as the registry declares them (the interface's job families loaded), and
    with ``forms`` every function of its module that runs it, directly or through another such function (its cached
    form: ``cached_pretrain`` runs ``pretrain``; ``embedded_models`` runs ``cached_pretrain``)."""
    lmaudit.api.load_jobs()
    found = {(job.body.__module__, job.body.__name__) for job in JOBS.values()}
    while forms:
        more = set()
        for module in {m for m, _ in found}:
            tree = ast.parse(inspect.getsource(importlib.import_module(module)))
            names = {name for m, name in found if m == module}
            more |= {(module, fn.name) for fn in tree.body if isinstance(fn, ast.FunctionDef) and any(
                isinstance(n, ast.Call) and getattr(n.func, "id", None) in names for n in ast.walk(fn))}
        if more <= found:
            break
        found |= more
    return found


def _is_function(module: str, name: str) -> bool:
    try:
        return inspect.isfunction(getattr(importlib.import_module(module), name, None))
    except ImportError:
        return False


def body_calls(root: Path, declared: set[tuple[str, str]]) -> list[str]:
    """'file: module.name' of every job body (``declared``) and every function of a job module (``lmaudit.runs``)
    imported or called through its module by a module above the interface."""
    def flagged(module: str, name: str) -> bool:
        return (module, name) in declared or (module.startswith("lmaudit.runs.") and _is_function(module, name))

    found = []
    for path in sorted((root / "lmaudit").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[1].removesuffix(".py") not in ABOVE:
            continue
        tree = ast.parse(path.read_text())
        aliases = {}  # a name bound to a module: ``from lmaudit.models import build``, ``import lmaudit.runs.mia as m``
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lmaudit"):
                for a in node.names:
                    if flagged(node.module, a.name):
                        found.append(f"{rel}: {node.module}.{a.name}")
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                aliases.update({a.asname: a.name for a in node.names if a.asname})
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                if flagged(aliases[node.value.id], node.attr):
                    found.append(f"{rel}: {aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


def test_every_job_names_its_body_and_the_interface_runs_it():
    assert len(bodies(forms=False)) == len(JOBS)  # one body a job
    for job in JOBS.values():  # the interface function calls its body
        tree = ast.parse(inspect.getsource(getattr(lmaudit.api, job.name)))
        called = {getattr(n.func, "attr", getattr(n.func, "id", None)) for n in ast.walk(tree)
                  if isinstance(n, ast.Call)}
        assert job.body.__name__ in called, job.name


def test_every_body_returns_its_jobs_result_type():
    """A body gives the typed result its Job declares (the interface hands it on as it is); a training body is its
    ``models/`` function returning the folder it wrote read as that result (``runs.training.typed``)."""
    lmaudit.api.load_jobs()
    for job in JOBS.values():
        assert typing.get_type_hints(job.body)["return"] is job.result, job.name


def test_nothing_above_the_interface_runs_a_job_body():
    assert body_calls(SRC, bodies()) == []


def test_the_body_check_finds_an_experiment_calling_a_body(tmp_path):
    pkg = tmp_path / "lmaudit" / "experiments"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("from lmaudit.runs.mia import RunConfig, run_mia, score_set\nfrom lmaudit import api\n"
                              "from lmaudit.models import build\nimport lmaudit.runs.audit_set as audits\n"
                              "build.finetune(a, b, c)\nbuild.corpus_tokenizer(c)\naudits.estimate_rho(m, n, u, c)\n"
                              "build.embedded_models()\n")  # a body two calls away: it pretrains through the cache
    (tmp_path / "lmaudit" / "api").mkdir()
    (tmp_path / "lmaudit" / "api" / "m.py").write_text("from lmaudit.runs.mia import run_mia\n")
    (tmp_path / "lmaudit" / "runs").mkdir()  # below the interface: a job composes what it needs
    (tmp_path / "lmaudit" / "runs" / "j.py").write_text("from lmaudit.models.build import finetune\n")
    assert body_calls(tmp_path, bodies()) == ["lmaudit/experiments/x.py: lmaudit.models.build.embedded_models",
                                              "lmaudit/experiments/x.py: lmaudit.models.build.finetune",
                                              "lmaudit/experiments/x.py: lmaudit.runs.audit_set.estimate_rho",
                                              "lmaudit/experiments/x.py: lmaudit.runs.mia.run_mia",
                                              "lmaudit/experiments/x.py: lmaudit.runs.mia.score_set"]


def test_commands_name_their_job_and_read_its_output_kind_from_its_declaration():
    """A command checks its output folder against its ``Job``'s type (``check_out(out, job=...)``), never a copy of
    it: no job's result type is spelled in ``commands/`` (a model or shadows folder is also written by commands
    that run no job, as ``models import``)."""
    from lmaudit.folders import NOT_RESULTS

    lmaudit.api.load_jobs()
    types = {job.type for job in JOBS.values()} - set(NOT_RESULTS)
    spelled = [(path.name, kind) for path in sorted((SRC / "lmaudit" / "commands").glob("*.py"))
               for kind in re.findall(r'kind="([^"]+)"', path.read_text()) if kind in types]
    assert spelled == []
    jobs = [(path.name, job) for path in sorted((SRC / "lmaudit" / "commands").glob("*.py"))
            for job in re.findall(r'check_out\([^)]*job="([^"]+)"', path.read_text())]
    own_folder = {name for name, job in JOBS.items() if job.type not in NOT_RESULTS}
    assert {job for _, job in jobs} == own_folder - {"epsilon"}  # epsilon adds epsilon.json beside the run it reads


def test_every_job_is_declared_once_with_its_command_result_and_report():
    lmaudit.api.load_jobs()
    for name, job in JOBS.items():
        assert job.command in COMMANDS, name  # the command line has it
        assert name in lmaudit.api.__all__, name  # the interface runs it
        if job.report is not None:
            assert all(REPORTS[t] is job.report for t in job.types)  # its report is found by the type of its results
    assert job_of_type("pii-reconstruction") is JOBS["reconstruct_pii"] and job_of_type("nothing") is None
    assert job_of_type("demo") is JOBS["mia"]  # the demo writes a membership run under its own type
    again = Job("extract", "extraction", "extract", RunResult, run_extraction)  # a second declaration of a name
    with pytest.raises(lmaudit.errors.LmauditError, match="job 'extract' is declared twice"):
        register_job(again)
    assert JOBS["extract"] is not again
    with pytest.raises(lmaudit.errors.LmauditError, match="job 'nobody' names no body"):
        register_job(Job("nobody", "nothing", "nobody", RunResult, None))
    assert "nobody" not in JOBS


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
    result = run_extraction(lmaudit.load_model(tiny_model_dir), given_texts(texts, "texts"), ExtractConfig(**cfg),
                            show_pii=True)
    assert type(result) is JOBS["extract"].result  # the body's typed result, which the interface hands on
    by_body = result.payload
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


def _jobs_taking_a_backend() -> list[str]:
    lmaudit.api.load_jobs()
    return [name for name in JOBS if "backend" in inspect.signature(getattr(lmaudit.api, name)).parameters]


# each job's inputs, as readable texts (and a canary folder): what it reads before any model loads
BACKEND_INPUTS = {"mia": ((), {"members": ["a b c"], "nonmembers": ["d e f"]}),
                  "audit_set": ((), {"members": ["a b c"], "nonmembers": ["d e f"], "suspect": ["g h i"]}),
                  "dataset_inference": ((["a b c"], ["d e f"]), {}), "extract": ((["a b c"],), {}),
                  "reconstruct_pii": ((["Mail [REDACTED] now"],), {}), "canaries": (("{canaries}",), {})}


@pytest.mark.parametrize("job", _jobs_taking_a_backend())
def test_an_unknown_backend_name_is_refused_before_any_model_loads(job, tmp_path):
    """Every job whose interface takes a backend (read from the registry) refuses a bad name before it loads the
    model, which does not exist here."""
    from lmaudit.api.secrets import write_exposure_canaries
    from lmaudit.errors import SettingError

    assert set(BACKEND_INPUTS) == set(_jobs_taking_a_backend())  # a new job with a backend needs its inputs here
    write_exposure_canaries(tmp_path / "c", "pin {digits:6}", n=4, insertions=[1])
    args, kwargs = BACKEND_INPUTS[job]
    args = [str(tmp_path / "c") if a == "{canaries}" else a for a in args]
    with pytest.raises(SettingError, match="unknown backend 'rey'"):  # not "no such model folder"
        getattr(lmaudit, job)("no/such/model", *args, backend="rey", **kwargs)


def test_the_job_registry_read_first_holds_every_job():
    """``lmaudit.api.JOBS`` imports every job before it is read (as ``lmaudit.JOBS`` does): read first in a fresh
    process, it is not the empty registry of a process that has imported no job yet."""
    import subprocess
    import sys

    lmaudit.api.load_jobs()
    found = subprocess.run([sys.executable, "-c", "from lmaudit import api; print(' '.join(sorted(api.JOBS)))"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert found == sorted(JOBS)
