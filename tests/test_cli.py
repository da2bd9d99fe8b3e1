"""The command line: listing attacks, a full mia run, and one-line errors."""

import json
import os
import subprocess
import sys

import pytest

from conftest import make_texts


def lmaudit(*args, cwd=None):
    env = {**os.environ, "LMAUDIT_PROGRESS": "0"}
    return subprocess.run([sys.executable, "-m", "lmaudit.cli", *args], capture_output=True, text=True, env=env, cwd=cwd)


def test_attacks_json_lists_metadata():
    out = lmaudit("attacks", "--json")
    assert out.returncode == 0
    specs = {s["name"]: s for s in json.loads(out.stdout)}
    assert specs["reference"]["needs_reference"] is True
    assert specs["gap_k"]["params"] == {"k": 0.2, "window": 3, "smooth": "sequential"}
    assert all(s["direction"] == "higher = member" for s in specs.values())


def test_missing_model_path_is_one_line_error_and_debug_shows_traceback(tmp_path):
    data = tmp_path / "m.jsonl"
    data.write_text('{"text": "some text here"}\n')
    args = ["mia", "--target", str(tmp_path / "absent"), "--members", str(data), "--nonmembers", str(data)]
    out = lmaudit(*args)
    assert out.returncode != 0
    lines = [ln for ln in out.stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(lines) == 1 and "does not exist" in lines[0] and "never downloads" in lines[0]
    assert "Traceback" not in out.stderr
    debug = lmaudit("--debug", *args)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_malformed_data_error_names_line(tmp_path, tiny_model_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{oops\n')
    out = lmaudit("mia", "--target", str(tiny_model_dir), "--members", str(bad), "--nonmembers", str(bad))
    assert out.returncode == 2 and "bad.jsonl: line 2: malformed JSON" in out.stderr


def test_mia_command_writes_results(tmp_path, tiny_model_dir):
    for name, seed in (("m.jsonl", 1), ("n.jsonl", 2)):
        (tmp_path / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in make_texts(12, seed=seed)))
    out = lmaudit("mia", "--target", str(tiny_model_dir), "--reference", str(tiny_model_dir),
                  "--members", str(tmp_path / "m.jsonl"), "--nonmembers", str(tmp_path / "n.jsonl"),
                  "--attacks", "loss,gap_k,reference", "--param", "gap_k.k=0.5", "--out", str(tmp_path / "run"),
                  "--bootstrap", "100")
    assert out.returncode == 0, out.stderr
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert set(res["attacks"]) == {"loss", "gap_k", "reference"}
    assert res["attacks"]["gap_k"]["params"]["k"] == 0.5
    assert res["attacks"]["reference"]["auc"] == pytest.approx(0.5)  # same model as reference: no signal at all
    assert "loss" in out.stdout and "AUC" in out.stdout


def test_pickle_only_model_refused_without_flag(tmp_path, tiny_model_dir):
    import shutil

    import torch

    folder = tmp_path / "pickled"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "model.safetensors").unlink()
    torch.save({}, folder / "pytorch_model.bin")
    (tmp_path / "x.jsonl").write_text('{"text": "a b c d"}\n')
    out = lmaudit("mia", "--target", str(folder), "--members", str(tmp_path / "x.jsonl"),
                  "--nonmembers", str(tmp_path / "x.jsonl"))
    assert out.returncode == 2 and "pickle weights" in out.stderr and "--allow-pickle" in out.stderr


def test_config_file_sets_defaults_and_command_line_wins(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('kind = "dlm"\nas-json = true\n')
    out = lmaudit("attacks", "--config", str(cfg))
    assert out.returncode == 0 and {s["kind"] for s in json.loads(out.stdout)} == {"dlm"}
    out = lmaudit("attacks", "--config", str(cfg), "--kind", "ar")
    assert out.returncode == 0 and {s["kind"] for s in json.loads(out.stdout)} == {"ar"}


def test_unknown_config_key_is_named(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('kinds = "dlm"\n')
    out = lmaudit("attacks", "--config", str(cfg))
    assert out.returncode == 2 and "unknown key 'kinds'" in out.stderr and "Traceback" not in out.stderr


def test_report_command_on_a_mia_run(tmp_path, tiny_model_dir):
    for name, seed in (("m.jsonl", 1), ("n.jsonl", 2)):
        (tmp_path / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in make_texts(10, seed=seed)))
    cfg = tmp_path / "mia.toml"
    cfg.write_text(f'target = "{tiny_model_dir}"\nmembers = "{tmp_path / "m.jsonl"}"\n'
                   f'nonmembers = "{tmp_path / "n.jsonl"}"\nattacks = ["loss", "min_k"]\nbootstrap = 50\n')
    out = lmaudit("mia", "--config", str(cfg), "--out", str(tmp_path / "run"))
    assert out.returncode == 0, out.stderr
    assert set(json.loads((tmp_path / "run" / "results.json").read_text())["attacks"]) == {"loss", "min_k"}
    assert (tmp_path / "run" / "report.html").stat().st_size > 10000
    (tmp_path / "run" / "report.html").unlink()
    out = lmaudit("report", str(tmp_path / "run"))
    assert out.returncode == 0 and (tmp_path / "run" / "report.html").exists()
