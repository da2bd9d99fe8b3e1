"""Nothing a user gave is lost or mistaken for something else (the hostile round after the fault-injection one).

Each test names the case it reproduces: an ``--out`` that is (or holds, or lies inside) an
input, or that holds another kind of output; texts that differ only in Unicode form or
spacing; weights replaced in place with the old size and modification time; and errors that
came late, raw or never (a symlinked ``--out``, a full disk, a truncated results.json, a FIFO
given as data, counts ≤ 0 and names with spaces in experiment files, a hand-edited AUC).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pandas as pd
import pytest

from helpers import (
    TEST_PRESET_ARGS,
    assert_ok,
    assert_user_error,
    lmaudit,
    make_texts,
    mini_experiment,
    synthetic_run,
    write_jsonl,
)
from lmaudit.errors import LmauditError
from lmaudit.folders import MANIFEST, check_replaceable, folder_kind, verify_folder, with_cache, write_manifest
from lmaudit.models.build import save_model
from lmaudit.models.fingerprint import model_dir_fingerprint
from lmaudit.models.presets import Preset, build_ar_model
from lmaudit.report.build import write_report
from lmaudit.utils import cache_dir

FAST = ["--no-report", "--bootstrap", "20", "--attacks", "loss,zlib"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def data(tmp_path):
    return write_jsonl(tmp_path / "m.jsonl", make_texts(24, seed=1)), write_jsonl(tmp_path / "n.jsonl",
                                                                                make_texts(24, seed=2))


@pytest.fixture
def written_model(tmp_path, tiny_model, tokenizer):
    """A model folder lmaudit wrote (its manifest says "model")."""
    out = tmp_path / "model"
    save_model(tiny_model, tokenizer, out, {"note": "test"})
    return out


def _mia(model, data, out, *extra):
    return lmaudit("mia", "--model", model, "--members", data[0], "--nonmembers", data[1], "--out", out, *FAST, *extra)


# 1. an --out that is an input is refused before any work, naming both; the input is left as it was

def test_mia_out_that_is_the_target_is_refused_and_the_model_kept(written_model, data):
    before = _snapshot(written_model)
    assert_user_error(_mia(written_model, data, written_model), f"--out '{written_model}' is --model", "replace")
    assert _snapshot(written_model) == before


def test_mia_out_that_is_the_reference_is_refused(tiny_model_dir, written_model, data):
    before = _snapshot(written_model)
    assert_user_error(_mia(tiny_model_dir, data, written_model, "--reference", written_model), "is --reference")
    assert _snapshot(written_model) == before


def test_an_out_inside_the_model_or_holding_the_data_is_refused(tmp_path, tiny_model_dir, data):
    assert_user_error(_mia(tiny_model_dir, data, tiny_model_dir / "runs"), "lies inside --model")
    # the demo's own layout: OUT/members.jsonl read by a run that would replace OUT
    demo = tmp_path / "demo"
    demo.mkdir()
    members = write_jsonl(demo / "members.jsonl", make_texts(24, seed=1))
    before = _snapshot(demo)
    assert_user_error(_mia(tiny_model_dir, (members, data[1]), demo), f"--out '{demo}' contains --members")
    assert _snapshot(demo) == before


def test_an_out_inside_or_around_the_cache_is_refused(tmp_path, tiny_model_dir, data):
    assert_user_error(_mia(tiny_model_dir, data, cache_dir() / "runs"), "lies inside the cache")
    with pytest.raises(LmauditError, match="contains the cache"):
        check_replaceable(cache_dir().parent, kind="mia", inputs=with_cache())


def test_audit_set_and_extract_never_write_over_the_model(written_model, data):
    before = _snapshot(written_model)
    assert_user_error(lmaudit("audit-set", "--model", written_model, "--members", data[0], "--nonmembers", data[1],
                              "--suspect", data[1], "--out", written_model), "is --model")
    assert_user_error(lmaudit("extract", "--model", written_model, "--data", data[0], "--out", written_model),
                      "is --model")
    assert _snapshot(written_model) == before


def test_finetune_over_its_base_is_refused_and_the_base_kept(written_model, data):
    before = _snapshot(written_model)
    assert_user_error(lmaudit("finetune", "--base", written_model, "--data", data[0], "--out", written_model),
                      "is --model")
    assert _snapshot(written_model) == before


def test_an_adapters_base_counts_as_an_input(tmp_path, written_model, data):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA",
                                                             "base_model_name_or_path": str(written_model)}))
    assert_user_error(_mia(adapter, data, written_model), f"is --model '{written_model}'")


def test_a_folder_of_another_kind_is_never_replaced(tmp_path, tiny_model_dir, written_model, data):
    run = tmp_path / "run"
    assert_ok(_mia(tiny_model_dir, data, run))
    assert folder_kind(run) == "mia" and folder_kind(written_model) == "model"
    before = _snapshot(run)
    # a fine-tune whose --out is a mia run: refused before training, the run kept
    assert_user_error(lmaudit("finetune", "--model", tiny_model_dir, "--data", data[0], "--out", run),
                      "holds a mia run lmaudit wrote; this command writes a model")
    assert _snapshot(run) == before
    # a mia run over a model folder lmaudit wrote (not an input of this run)
    assert_user_error(_mia(tiny_model_dir, data, written_model), "holds a model lmaudit wrote; this command writes a "
                                                                 "mia run")
    # the same kind is replaced, as before
    assert_ok(_mia(tiny_model_dir, data, run, "--seed", "3"))
    assert json.loads((run / "results.json").read_text())["config"]["seed"] == 3


def test_the_python_interface_never_writes_a_run_over_its_model(written_model, data):
    import lmaudit as api

    result = api.mia(str(written_model), data[0], data[1], config=api.RunConfig(attacks=["loss"], n_bootstrap=10))
    before = _snapshot(written_model)
    with pytest.raises(LmauditError, match="is the target model"):
        result.write(written_model)
    assert _snapshot(written_model) == before


# 2. texts are compared as a reader would

def _nfc_nfd(tmp_path, n=24):
    texts = [f"Café {t} naïve résumé" for t in make_texts(n, seed=5)]
    members = write_jsonl(tmp_path / "nfc.jsonl", [unicodedata.normalize("NFC", t) for t in texts])
    nonmembers = write_jsonl(tmp_path / "nfd.jsonl", [unicodedata.normalize("NFD", t) for t in texts])
    assert members.read_bytes() != nonmembers.read_bytes()
    return members, nonmembers


def test_texts_equal_up_to_unicode_form_are_one_text(tmp_path, tiny_model_dir):
    """The issue's case: the same texts in NFC and NFD gave AUC 1.000 and "Exposure: severe" with no warning."""
    pair = _nfc_nfd(tmp_path)
    assert_user_error(_mia(tiny_model_dir, pair, tmp_path / "run"), "24 text(s) of nonmembers",
                      "24 of them only after Unicode NFC and whitespace normalisation", "--allow-overlap")
    with pytest.warns(UserWarning, match="also in members"):
        assert_ok(_mia(tiny_model_dir, pair, tmp_path / "run", "--allow-overlap"))
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    found = res["overlap"]["pairs"]["members/nonmembers"]
    assert (found["exact"], found["normalised"], found["share"]) == (0, 24, 1.0)
    assert_ok(lmaudit("report", tmp_path / "run"))
    report = (tmp_path / "run" / "report.md").read_text()
    assert "(on sets that share texts)" in report and "another Unicode form" in report


def test_copies_that_differ_by_spacing_are_flagged_and_counted(tmp_path, tiny_model_dir):
    texts = make_texts(40, seed=6)
    members = write_jsonl(tmp_path / "m.jsonl", texts[:20] + [texts[0] + "  "])  # a member repeated, spaced
    nonmembers = write_jsonl(tmp_path / "n.jsonl", texts[20:39] + [texts[1].replace(" ", "\t", 1) + "\n"])
    with pytest.warns(UserWarning, match="1 text"):
        assert_ok(_mia(tiny_model_dir, (members, nonmembers), tmp_path / "run"))  # 1 of 20 = 5%: a warning only
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["overlap"]["pairs"]["members/nonmembers"]["normalised"] == 1
    assert res["overlap"]["pairs"]["members/nonmembers"]["exact"] == 0
    assert res["overlap"]["duplicates"]["members"] == {"exact": 0, "normalised": 1}


def test_one_file_given_as_both_sets_is_refused_even_when_overlap_is_allowed(tmp_path, tiny_model_dir, data):
    twice = (data[0], data[0])
    assert_user_error(_mia(tiny_model_dir, twice, tmp_path / "run", "--allow-overlap"), "hold the same 24 texts")
    assert not (tmp_path / "run").exists()


def test_audit_set_counts_what_its_three_sets_share(tmp_path, tiny_model_dir, data):
    suspect = write_jsonl(tmp_path / "s.jsonl", make_texts(24, seed=1)[:12] + make_texts(12, seed=3))
    assert_user_error(lmaudit("audit-set", "--model", tiny_model_dir, "--members", data[0], "--nonmembers", data[1],
                              "--suspect", suspect, "--out", tmp_path / "audit"), "12 text(s) of suspect",
                      "also in members", "50.0% of the smaller set")


# 3. a fingerprint cannot outlive its weights

def _replace_in_place(folder: Path, source: Path) -> None:
    """Copy ``source``'s weights over ``folder``'s (same size) and put the old modification time back."""
    weights = folder / "model.safetensors"
    st = weights.stat()
    assert source.stat().st_size == st.st_size
    shutil.copyfile(source, weights)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (weights.stat().st_size, weights.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


@pytest.fixture
def other_weights(tmp_path, tokenizer):
    other = build_ar_model(Preset("test", **TEST_PRESET_ARGS), tokenizer, seed=1)
    folder = tmp_path / "other"
    other.save_pretrained(folder)
    tokenizer.save_pretrained(folder)  # the model fingerprint holds the tokenizer files: the same ones as the target
    return folder / "model.safetensors"


def test_weights_replaced_in_place_get_the_new_fingerprint_and_results(tmp_path, tiny_model_dir, other_weights, data):
    folder = shutil.copytree(tiny_model_dir, tmp_path / "target")  # no manifest: the digest memo alone decides
    assert_ok(_mia(folder, data, tmp_path / "before"))
    old = model_dir_fingerprint(folder)
    _replace_in_place(folder, other_weights)
    assert model_dir_fingerprint(folder) != old  # the memo keyed on (path, size, mtime) returned the old digest
    assert model_dir_fingerprint(folder) == model_dir_fingerprint(other_weights.parent)
    assert_ok(_mia(folder, data, tmp_path / "after"))
    fresh = shutil.copytree(other_weights.parent, tmp_path / "fresh")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_model_dir / name, fresh / name)
    assert_ok(_mia(fresh, data, tmp_path / "expected", "--no-cache"))
    after, expected = (pd.read_parquet(tmp_path / d / "scores.parquet") for d in ("after", "expected"))
    pd.testing.assert_frame_equal(after, expected)  # the new weights' scores, not the cached old ones
    assert not after.equals(pd.read_parquet(tmp_path / "before" / "scores.parquet"))


def test_a_written_model_whose_weights_were_replaced_in_place_is_refused(written_model, other_weights, data, tmp_path):
    verify_folder(written_model, hashes=False)
    _replace_in_place(written_model, other_weights)
    with pytest.raises(LmauditError, match=r"model\.safetensors: changed since"):
        verify_folder(written_model, hashes=False)  # the stat key changed: the hash was checked
    assert_user_error(_mia(written_model, data, tmp_path / "run"), "model.safetensors: changed since")


def test_a_copied_model_folder_is_rehashed_and_accepted(tmp_path, written_model):
    copy = shutil.copytree(written_model, tmp_path / "copy")  # new inodes: every file is hashed once more
    entry = json.loads((copy / MANIFEST).read_text())["files"]["model.safetensors"]
    assert entry["stat"][0] != (copy / "model.safetensors").stat().st_ino
    assert verify_folder(copy, hashes=False) is not None  # same bytes: accepted


# 4. errors a person can act on

def test_a_symlinked_out_is_written_through_the_link(tmp_path, tiny_model_dir, data):
    real = tmp_path / "real"
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    assert_ok(_mia(tiny_model_dir, data, link))  # was: NotADirectoryError after all the work
    assert link.is_symlink() and (real / "results.json").is_file()
    verify_folder(real)


@pytest.mark.slow  # heavy (a subprocess or a Ray DLM pass): make test-slow runs it
def test_a_full_cache_is_one_line_naming_the_path(tmp_path, tiny_model_dir, data):
    env = {**os.environ, "LMAUDIT_PROGRESS": "0", "LMAUDIT_CACHE": str(cache_dir()),
           "LMAUDIT_FAULT": "shard-unrenamed:1:enospc"}
    m, n = data
    proc = subprocess.run([sys.executable, "-m", "lmaudit.cli", "mia", "--model", str(tiny_model_dir), "--members",
                           str(m), "--nonmembers", str(n), "--out", str(tmp_path / "run"), *FAST],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.stdout.strip().splitlines()[-1]
    assert "No space left on device" in last and str(cache_dir()) in last and "--no-cache" in last, last
    assert "Traceback" not in proc.stderr + proc.stdout


def test_report_on_a_truncated_results_json_names_the_file(tmp_path):
    run = synthetic_run(tmp_path)
    text = (run / "results.json").read_text()
    (run / "results.json").write_text(text[: len(text) // 2])
    write_manifest(run, "run")  # consistent hashes: the damage is in the file itself
    assert_user_error(lmaudit("report", run), "results.json: not valid JSON", "truncated")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_fifo_given_as_data_is_refused_at_once(tmp_path, tiny_model_dir, data):
    fifo = tmp_path / "members.jsonl"
    os.mkfifo(fifo)
    assert_user_error(_mia(tiny_model_dir, (fifo, data[1]), tmp_path / "run"), "not a regular file", "named pipe")


def test_experiment_counts_below_one_and_names_with_spaces_are_refused(tmp_path):
    with pytest.raises(LmauditError, match=r"mini\.toml: n_members must be an integer ≥ 1, got 0"):
        mini_experiment(tmp_path, type="mia", n_members=0)
    with pytest.raises(LmauditError, match=r"mini\.toml: epochs must be"):
        mini_experiment(tmp_path, type="mia", epochs=-1)
    with pytest.raises(LmauditError, match="letters, digits"):
        mini_experiment(tmp_path, type="mia", name="my run")


def test_report_without_a_manifest_refuses_a_hand_edited_auc(tmp_path):
    run = synthetic_run(tmp_path)
    (run / MANIFEST).unlink()
    res = json.loads((run / "results.json").read_text())
    from lmaudit.metrics import auc

    scores = pd.read_parquet(run / "scores.parquet")
    for name in res["attacks"]:
        res["attacks"][name]["auc"] = auc(scores["label"], scores[name])
    (run / "results.json").write_text(json.dumps(res))
    with pytest.warns(UserWarning, match="AUCs are checked against its scores"):
        write_report(run)  # consistent figures: reported
    res["attacks"]["loss"]["auc"] = 0.99
    (run / "results.json").write_text(json.dumps(res))
    with pytest.warns(UserWarning), pytest.raises(LmauditError, match="loss's AUC is 0.99 but its scores"):
        write_report(run)


def test_corpus_pii_writes_its_folder_whole_and_never_over_other_files(tmp_path, monkeypatch):
    import lmaudit.commands.corpus as corpus_cmd
    from lmaudit.data.loaders import TextSet as TS

    fake = TS.from_texts(["Mail anna@example.org about the report."])
    monkeypatch.setattr(corpus_cmd, "build_corpus", lambda: None)
    monkeypatch.setattr(corpus_cmd, "pii_corpus", lambda corpus, n_train, n_unseen, seed: (fake, fake))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "train.jsonl").write_text('{"text": "my own data"}\n')
    assert_user_error(lmaudit("corpus", "pii", "--out", mine), "holds files lmaudit did not write", "train.jsonl")
    assert (mine / "train.jsonl").read_text() == '{"text": "my own data"}\n'
    assert_ok(lmaudit("corpus", "pii", "--out", tmp_path / "pii"))
    assert folder_kind(tmp_path / "pii") == "corpus" and verify_folder(tmp_path / "pii") is not None


def test_provenance_says_whether_the_code_differed_from_its_commit_and_is_read_once(monkeypatch):
    import subprocess as sp

    from lmaudit import utils
    from lmaudit.runs.common import provenance

    answers = {"rev-parse": "abc123\n", "status": " M src/lmaudit/folders.py\n"}

    def fake_run(args, **kwargs):
        return sp.CompletedProcess(args, 0, stdout=answers[args[1]], stderr="")

    monkeypatch.setattr(utils.subprocess, "run", fake_run)
    utils.git_state.cache_clear()
    try:
        assert provenance()["git_commit"] == "abc123" and provenance()["git_dirty"] is True
        answers.update({"rev-parse": "def456\n", "status": ""})  # a commit made while the run works
        assert utils.git_state() == {"commit": "abc123", "dirty": True}  # the code it imported, not the new HEAD
        utils.git_state.cache_clear()
        assert utils.git_state() == {"commit": "def456", "dirty": False}
    finally:
        utils.git_state.cache_clear()
