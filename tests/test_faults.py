"""Fault injection: full disks, kills at named stages, races and damaged files never give a wrong result with exit 0.

Faults come through the ``LMAUDIT_FAULT`` hook (:func:`lmaudit.utils.fault_point`):
``STAGE:K`` SIGKILLs the process at the K-th pass through a stage, ``STAGE:K:enospc``
raises "No space left on device" there. Each test states the defect of the issue it
reproduces; the sharded probe cache's kills, bit flips and deletions are in
``test_resume.py`` and the digest memos' damaged files in ``test_fingerprint.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from helpers import assert_ok, assert_user_error, lmaudit, make_texts, synthetic_run, write_jsonl
from lmaudit.cache import cached_build
from lmaudit.errors import LmauditError
from lmaudit.folders import MANIFEST, check_replaceable, verify_folder, write_manifest
from lmaudit.models.fingerprint import model_dir_fingerprint
from lmaudit.report.build import write_report
from lmaudit.runs.common import write_results
from lmaudit.utils import cache_dir

MIA = ["--no-report", "--bootstrap", "20", "--attacks", "loss,zlib"]


@pytest.fixture
def data(tmp_path):
    write_jsonl(tmp_path / "m.jsonl", make_texts(12, seed=1))
    write_jsonl(tmp_path / "n.jsonl", make_texts(12, seed=2))
    return tmp_path / "m.jsonl", tmp_path / "n.jsonl"


def _mia_args(model_dir, data, out, *extra):
    m, n = data
    return ["mia", "--model", str(model_dir), "--members", str(m), "--nonmembers", str(n), "--out", str(out),
            *MIA, *extra]


def _process(args, **env):
    """``lmaudit ARGS`` in a real process (one a fault hook may SIGKILL), with this test's cache."""
    env = {**os.environ, "LMAUDIT_PROGRESS": "0", "LMAUDIT_CACHE": str(cache_dir()), **env}
    return subprocess.run([sys.executable, "-m", "lmaudit.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# item 1: a full disk while memoising digests must not make two models share a fingerprint

def test_a_full_disk_while_memoising_digests_never_merges_two_models(tmp_path, tiny_model_dir, monkeypatch):
    a, b = shutil.copytree(tiny_model_dir, tmp_path / "a"), shutil.copytree(tiny_model_dir, tmp_path / "b")
    (b / "config.json").write_text((b / "config.json").read_text().replace("{", '{"note": "b",', 1))
    monkeypatch.setenv("LMAUDIT_FAULT", "digest-write:1:enospc")
    with pytest.warns(UserWarning, match="cannot memoise"):
        full = model_dir_fingerprint(a), model_dir_fingerprint(b)
    assert not list((cache_dir() / "digests").glob("*")), "a full disk must leave no (empty) memo behind"
    monkeypatch.delenv("LMAUDIT_FAULT")
    assert full == (model_dir_fingerprint(a), model_dir_fingerprint(b))
    # b differs from a only in config.json: the weights' digest is shared, the fingerprint is not
    assert full[0] != full[1]


def test_four_processes_fingerprinting_one_folder_never_read_an_empty_digest(tiny_model_dir):
    expected = model_dir_fingerprint(tiny_model_dir)
    code = textwrap.dedent(f"""
        import shutil, sys
        from lmaudit.models.fingerprint import model_dir_fingerprint
        from lmaudit.utils import cache_dir
        for _ in range(60):
            shutil.rmtree(cache_dir() / "digests", ignore_errors=True)  # every round re-memoises, racing the others
            got = model_dir_fingerprint({str(tiny_model_dir)!r})
            if got != {expected!r}:
                sys.exit("wrong fingerprint " + got)
    """)
    env = {**os.environ, "LMAUDIT_CACHE": str(cache_dir())}
    procs = [subprocess.Popen([sys.executable, "-W", "ignore", "-c", code], env=env, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors


# item 2: two runs writing one --out

_WRITER = textwrap.dedent("""
    import sys
    import pandas as pd
    from lmaudit.runs.common import write_results
    out, who = sys.argv[1], sys.argv[2]
    for i in range(12):
        frame = pd.DataFrame({"id": ["a", "b"], "label": [1, 0], "writer": [who] * 2, "round": [i] * 2})
        write_results(out, {"writer": who, "round": i}, kind="mia", tables={"scores.parquet": frame})
""")


def test_two_processes_writing_one_out_leave_one_whole_run(tmp_path):
    out = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(out), who], stderr=subprocess.PIPE, text=True)
             for who in ("A", "B")]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors  # no crash on a shared temporary name
    verify_folder(out)  # every file as its writer left it
    res = json.loads((out / "results.json").read_text())
    scores = pd.read_parquet(out / "scores.parquet")
    assert (scores["writer"].iloc[0], scores["round"].iloc[0]) == (res["writer"], res["round"])  # from one run
    assert sorted(p.name for p in out.iterdir()) == sorted(["results.json", "scores.parquet", MANIFEST])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # nothing left beside it


# item 3: a run killed or stopped by a full disk while replacing an older run in the same folder

@pytest.fixture
def previous_run(tmp_path, tiny_model_dir, data):
    out = tmp_path / "out"
    assert_ok(lmaudit(*_mia_args(tiny_model_dir, data, out)))
    return out, _snapshot(out)


def test_a_run_killed_before_its_folder_is_in_place_leaves_the_previous_run_whole(previous_run, tiny_model_dir, data):
    out, before = previous_run
    proc = _process(_mia_args(tiny_model_dir, data, out, "--seed", "7"), LMAUDIT_FAULT="folder-written:1")
    assert proc.returncode == -9, proc.stderr
    assert _snapshot(out) == before
    verify_folder(out)


def test_a_run_killed_mid_swap_is_a_clear_error_then_recovers(previous_run, tiny_model_dir, data):
    out, _ = previous_run
    proc = _process(_mia_args(tiny_model_dir, data, out, "--seed", "7"), LMAUDIT_FAULT="folder-aside:1")
    assert proc.returncode == -9, proc.stderr
    assert not out.exists()  # the old run is moved aside, the new one not yet in place
    assert_user_error(lmaudit("report", str(out)), "no results.json", ".prev")  # says where the old run is
    assert_ok(lmaudit(*_mia_args(tiny_model_dir, data, out, "--seed", "7")))
    verify_folder(out)
    assert json.loads((out / "results.json").read_text())["config"]["seed"] == 7


def test_a_full_disk_while_writing_the_folder_keeps_the_previous_run(previous_run, tiny_model_dir, data, monkeypatch):
    out, before = previous_run
    monkeypatch.setenv("LMAUDIT_FAULT", "folder-written:1:enospc")
    assert_user_error(lmaudit(*_mia_args(tiny_model_dir, data, out, "--seed", "7")),
                      "No space left on device", "left unchanged")
    assert _snapshot(out) == before
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".out.")]  # the partial folder is removed


def test_report_refuses_files_from_two_runs_naming_the_file(tmp_path):
    run = synthetic_run(tmp_path)
    frame = pd.read_parquet(run / "scores.parquet")
    frame["loss"] = -frame["loss"]  # another run's scores, of the same shape
    frame.to_parquet(run / "scores.parquet")
    with pytest.raises(LmauditError, match=r"scores\.parquet: changed since the run wrote it"):
        write_report(run)
    assert not (run / "report.html").exists()


def test_report_refuses_scores_that_lack_an_attack(tmp_path):
    run = synthetic_run(tmp_path)
    pd.read_parquet(run / "scores.parquet").drop(columns=["q_skew"]).to_parquet(run / "scores.parquet")
    write_manifest(run, "run")  # consistent hashes: the files were written together, but wrongly
    with pytest.raises(LmauditError, match=r"scores\.parquet does not match results\.json \(no column q_skew\)"):
        write_report(run)


# an output folder replaces --out whole: a folder holding a user's files is refused before any work

def test_an_out_holding_other_files_is_refused_and_left_alone(tmp_path, tiny_model_dir, data):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert_user_error(lmaudit(*_mia_args(tiny_model_dir, data, out)), "holds files lmaudit did not write", "notes.txt")
    assert (out / "notes.txt").read_text() == "mine"
    check_replaceable(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    check_replaceable(tmp_path / "empty")


# item 6: a fine-tune over an existing model folder, killed or stopped while saving

@pytest.mark.slow
def test_a_finetune_killed_while_saving_leaves_the_previous_model_whole(tmp_path, tiny_model_dir, data):
    out = tmp_path / "model"
    common = ["finetune", "--model", str(tiny_model_dir), "--data", str(data[0]), "--out", str(out), "--epochs", "1"]
    assert _process([*common, "--seed", "1"]).returncode == 0
    before = _snapshot(out)
    proc = _process([*common, "--seed", "2"], LMAUDIT_FAULT="folder-written:1")
    assert proc.returncode == -9, proc.stderr
    assert _snapshot(out) == before
    assert json.loads((out / "lmaudit_training.json").read_text())["train_config"]["seed"] == 1


def test_a_model_folder_whose_weights_were_replaced_is_refused(tmp_path, tiny_model_dir, data):
    out = tmp_path / "model"
    assert_ok(lmaudit("finetune", "--model", str(tiny_model_dir), "--data", str(data[0]), "--out", str(out),
                      "--epochs", "0.2"))
    verify_folder(out)
    weights = out / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert_user_error(lmaudit(*_mia_args(out, data, tmp_path / "run")), "model.safetensors")


# two processes building one cached model: the later one keeps the folder the first put in place

def test_a_cached_build_that_loses_the_race_keeps_the_winners_folder():
    calls = []

    def build(tmp):
        calls.append(tmp)
        (tmp / "who.txt").write_text(str(len(calls)))
        if len(calls) == 1:  # while this build runs, another process finishes the same key
            assert cached_build("models", ("race",), build).joinpath("who.txt").read_text() == "2"

    folder = cached_build("models", ("race",), build)
    assert (folder / "who.txt").read_text() == "2"  # the first in place is kept, never deleted under a reader
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no temporary left


def test_a_writer_whose_neighbour_vanishes_while_it_looks_for_stale_folders_carries_on(tmp_path, monkeypatch):
    """Found by the two-writer race: another writer's partial folder was renamed into place between the listing of
    stale temporaries and their stat, and the listing crashed with FileNotFoundError."""
    out = tmp_path / "out"
    ghost = tmp_path / ".out.gone.partial"  # listed, but gone by the time it is looked at
    real_glob = Path.glob
    monkeypatch.setattr(Path, "glob", lambda self, pattern: [*real_glob(self, pattern), ghost])
    frame = pd.DataFrame({"id": ["a", "b"], "label": [1, 0]})
    write_results(out, {"writer": "A"}, kind="mia", tables={"scores.parquet": frame})
    verify_folder(out)  # raises when a file does not match the manifest
    assert json.loads((out / "results.json").read_text())["writer"] == "A"
    assert pd.read_parquet(out / "scores.parquet")["id"].tolist() == ["a", "b"]
