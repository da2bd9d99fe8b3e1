"""Killed runs resume: sharded caches, atomic writes, manifests, and what a changed input invalidates."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_ok, causal, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import Record, TextSet
from lmaudit.probes.ar import probe_ar, probe_ar_shards
from lmaudit.probes.records import ARStats

N_SHARDS = 15  # 15 + 15 texts in shards of 2
SHARD_ENV = {"LMAUDIT_SHARD_SIZE": "2"}
MIA_ARGS = ["--no-report", "--bootstrap", "50", "--attacks", "loss,zlib,min_k,gap_k"]


def _write_sets(folder):
    for name, seed in (("m.jsonl", 11), ("n.jsonl", 12)):
        write_jsonl(folder / name, make_texts(15, seed=seed))


def _mia_args(folder, model_dir, out):
    return ["mia", "--target", str(model_dir), "--members", str(folder / "m.jsonl"), "--nonmembers",
            str(folder / "n.jsonl"), "--out", str(out), *MIA_ARGS]


def _mia_process(folder, model_dir, out, cache, **env_extra):
    """``lmaudit mia`` in a real process (one that the test or a fault hook can SIGKILL)."""
    env = {**os.environ, "LMAUDIT_PROGRESS": "0", "LMAUDIT_CACHE": str(cache), **SHARD_ENV, **env_extra}
    return subprocess.Popen([sys.executable, "-m", "lmaudit.cli", *_mia_args(folder, model_dir, out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _mia_here(folder, model_dir, out, cache):
    """``lmaudit mia`` in this process (no kill needed): the same options and environment."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMAUDIT_CACHE", str(cache))
        for key, value in SHARD_ENV.items():
            mp.setenv(key, value)
        result = lmaudit(*_mia_args(folder, model_dir, out))
    assert_ok(result)
    return result


def _attacks(out):
    res = json.loads((out / "results.json").read_text())["attacks"]
    return {name: {k: v for k, v in m.items() if k != "params"} for name, m in res.items()}


def _manifest(cache):
    (path,) = (cache / "probes" / "manifests").glob("*.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_model_dir):
    folder = tmp_path_factory.mktemp("uninterrupted")
    _write_sets(folder)
    _mia_here(folder, tiny_model_dir, folder / "out", folder / "cache")
    assert _manifest(folder / "cache")["n_done"] == N_SHARDS
    probe_s = json.loads((folder / "out" / "results.json").read_text())["timings_s"]["probe_target"]
    return _attacks(folder / "out"), probe_s


@pytest.mark.parametrize("fault", [pytest.param("shard-saved:3", marks=pytest.mark.slow), "shard-unrenamed:5"])
def test_killed_mia_run_resumes_to_identical_results(fault, tmp_path, tiny_model_dir, uninterrupted):
    _write_sets(tmp_path)
    proc = _mia_process(tmp_path, tiny_model_dir, tmp_path / "out", tmp_path / "cache", LMAUDIT_FAULT=fault)
    _, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err
    assert not (tmp_path / "out" / "results.json").exists()
    manifest = _manifest(tmp_path / "cache")
    n_done = manifest["n_done"]
    assert n_done == int(fault.split(":")[1]) - (fault.startswith("shard-unrenamed")) \
        and len(manifest["shards"]) == N_SHARDS
    if fault.startswith("shard-unrenamed"):  # the half-written shard is a temporary file, never under its name
        assert list((tmp_path / "cache" / "probes" / "shards").glob(".*.tmp"))

    resumed = _mia_here(tmp_path, tiny_model_dir, tmp_path / "out", tmp_path / "cache")
    assert f"resuming, {n_done} of {N_SHARDS} shards already cached" in resumed.stderr  # only the missing ones ran
    assert _manifest(tmp_path / "cache")["n_done"] == N_SHARDS
    assert _attacks(tmp_path / "out") == uninterrupted[0]


@pytest.mark.slow
def test_kill_at_arbitrary_moments_then_resume(tmp_path, tiny_model_dir, uninterrupted):
    """SIGKILL from outside at moments spread over the probe; each restart continues; the last one finishes (slow:
    the kills at named points, test_killed_mia_run_resumes_to_identical_results, run by default)."""
    _write_sets(tmp_path)
    probe_s = uninterrupted[1]
    manifests = tmp_path / "cache" / "probes" / "manifests"
    progress = []
    for fraction in (0.25, 0.6):
        before = {p: p.stat().st_mtime_ns for p in manifests.glob("*.json")} if manifests.exists() else {}
        proc = _mia_process(tmp_path, tiny_model_dir, tmp_path / "out", tmp_path / "cache")
        while proc.poll() is None:  # the probe starts when this run (re)writes its manifest
            now = {p: p.stat().st_mtime_ns for p in manifests.glob("*.json")} if manifests.exists() else {}
            if now and now != before:
                break
            time.sleep(0.002)
        time.sleep(probe_s * fraction)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        progress.append(_manifest(tmp_path / "cache")["n_done"] if manifests.exists() else 0)
    assert any(0 < n < N_SHARDS for n in progress), progress  # at least one kill fell inside the probe
    assert progress == sorted(progress)  # a restart never lost finished shards
    resumed = _mia_here(tmp_path, tiny_model_dir, tmp_path / "out", tmp_path / "cache")
    if progress[-1] < N_SHARDS:  # the manifest may lag the shard files by the shard being renamed at the kill
        cached = re.search(rf"resuming, (\d+) of {N_SHARDS} shards already cached", resumed.stderr)
        if cached is None:  # the manifest lagged the last shard, which was in place: nothing left to resume
            assert progress[-1] == N_SHARDS - 1 and "resuming" not in resumed.stderr, (progress, resumed.stderr)
        else:
            assert progress[-1] <= int(cached.group(1)) <= progress[-1] + 1, resumed.stderr
    assert _attacks(tmp_path / "out") == uninterrupted[0]


def test_damaged_shard_file_is_recomputed_not_read(tiny_model, tokenizer, tmp_path):
    texts = TextSet.from_texts(make_texts(10, seed=5))
    first = probe_ar(causal(tiny_model, tokenizer, "fp"), texts, cache_dir=tmp_path, shard_size=4)
    files = sorted((tmp_path / "probes" / "shards").glob("*.npz"))
    assert len(files) == 3
    data = files[1].read_bytes()
    files[1].write_bytes(data[: len(data) // 2])  # as a full disk or a copy gone wrong would leave it
    with pytest.warns(UserWarning, match="unreadable .*recomputing it"):
        again = probe_ar(causal(tiny_model, tokenizer, "fp"), texts, cache_dir=tmp_path, shard_size=4)
    np.testing.assert_array_equal(again.logp, first.logp)
    assert files[1].read_bytes() == data


def _flip_a_byte_inside(path):
    """Flip one bit in the middle of the first array member's data in an uncompressed .npz (not in a zip header,
    which the reader may ignore): its size and zip directory stay whole."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.infolist()[0]
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len  # the member's bytes: .npy header, then the array
    data[start + info.compress_size - 8] ^= 0x10  # inside the array's last value
    path.write_bytes(bytes(data))


def test_a_flipped_bit_in_a_cached_shard_is_recomputed_not_read(tiny_model, tokenizer, tmp_path):
    texts = TextSet.from_texts(make_texts(10, seed=5))
    kw = dict(cache_dir=tmp_path, shard_size=4)
    first = probe_ar(causal(tiny_model, tokenizer, "fp"), texts, **kw)
    files = sorted((tmp_path / "probes" / "shards").glob("*.npz"))
    data = files[1].read_bytes()
    _flip_a_byte_inside(files[1])
    with pytest.warns(UserWarning, match=rf"{files[1].name} could not be read .*CRC.*recomputing that shard"):
        again = probe_ar(causal(tiny_model, tokenizer, "fp"), texts, **kw)
    np.testing.assert_array_equal(again.logp, first.logp)
    assert files[1].read_bytes() == data  # cached again, whole


@pytest.mark.parametrize("what", ["shard files", "the cache's probes folder"])
def test_a_shard_deleted_after_the_check_is_recomputed(what, tiny_model, tokenizer, tmp_path):
    texts = TextSet.from_texts(make_texts(10, seed=5))
    kw = dict(cache_dir=tmp_path, shard_size=4)
    first = probe_ar(causal(tiny_model, tokenizer, "fp"), texts, **kw)
    shards = probe_ar_shards(causal(tiny_model, tokenizer, "fp"), texts, **kw)  # every shard found in the cache
    if what == "shard files":  # removed by another process between the check and the read
        for path in shards.paths:
            path.unlink()
    else:
        shutil.rmtree(tmp_path / "probes")
    with pytest.warns(UserWarning, match="could not be read .*FileNotFoundError"):
        again = ARStats.concat(shards.all())
    np.testing.assert_array_equal(again.logp, first.logp)
    assert all(p.exists() for p in shards.paths)


def test_one_changed_record_invalidates_one_shard(tiny_model, tokenizer, tmp_path):
    texts = TextSet.from_texts(make_texts(12, seed=6))
    kw = dict(cache_dir=tmp_path, shard_size=4)
    probe_ar(causal(tiny_model, tokenizer, "fp"), texts, **kw)
    shards_dir = tmp_path / "probes" / "shards"
    before = {p.name: p.stat().st_mtime_ns for p in shards_dir.glob("*.npz")}
    changed = list(texts.records)
    changed[5] = Record(changed[5].id, changed[5].target + " Extra words.")
    result = probe_ar_shards(causal(tiny_model, tokenizer, "fp"), TextSet(changed), **kw)
    after = {p.name: p.stat().st_mtime_ns for p in shards_dir.glob("*.npz")}
    new = set(after) - set(before)
    assert len(before) == 3 and len(new) == 1 and {p.name for p in result.paths} - set(before) == new
    assert all(after[name] == t for name, t in before.items())  # nothing rewritten
    probe_ar_shards(causal(tiny_model, tokenizer, "other-model"), texts, cache_dir=tmp_path, shard_size=4)
    assert len(list(shards_dir.glob("*.npz"))) == 7  # another model: its own shards, the first model's kept


def test_sharded_results_do_not_depend_on_the_shard_size(tiny_model, tokenizer):
    texts = TextSet.from_texts(make_texts(11, seed=7))
    a = probe_ar(causal(tiny_model, tokenizer), texts, shard_size=3)
    b = probe_ar(causal(tiny_model, tokenizer), texts, shard_size=256)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    np.testing.assert_allclose(a.logp, b.logp, atol=1e-5)  # batches differ: float32 rounding only


def test_bad_shard_size_setting_is_a_clear_error(monkeypatch, tiny_model, tokenizer):
    from lmaudit.errors import LmauditError

    monkeypatch.setenv("LMAUDIT_SHARD_SIZE", "zero")
    with pytest.raises(LmauditError, match="LMAUDIT_SHARD_SIZE must be a positive integer, got 'zero'"):
        probe_ar(causal(tiny_model, tokenizer), TextSet.from_texts(make_texts(2, seed=1)))


def test_extraction_does_not_depend_on_sharding_and_its_cache_key_holds_ids(tiny_dlm_dir, monkeypatch):
    from lmaudit.models.loading import load_model
    from lmaudit.runs.extract import ExtractConfig, run_extraction

    loaded = load_model(tiny_dlm_dir, kind="dlm")
    texts = TextSet.from_texts(make_texts(8, seed=8))

    def cfg():
        return ExtractConfig(mask="random:0.3", steps=["1", "max"], trajectories=4, relaxed=2, samples=3, seed=1)

    def column(payload, name="log_p_hat@max"):
        return np.array(payload["records"][name])

    whole = run_extraction(loaded, texts, cfg(), use_cache=False)  # one shard of 8 records
    monkeypatch.setenv("LMAUDIT_SHARD_SIZE", "3")
    small = run_extraction(loaded, texts, cfg())  # shards of 3 + 3 + 2, cached
    assert len(list((Path(os.environ["LMAUDIT_CACHE"]) / "probes" / "shards").iterdir())) == 3
    np.testing.assert_allclose(column(small), column(whole), rtol=1e-6)  # other batches: float32 rounding only
    assert small["relaxed"]["empirical"] == whole["relaxed"]["empirical"]  # seeds follow the index in the set
    # random masks are drawn per record id: the same texts under other ids are new work, not a cache hit
    renamed = TextSet([Record("other-" + r.id, r.target) for r in texts.records])
    cached = run_extraction(loaded, renamed, cfg())
    fresh = run_extraction(loaded, renamed, cfg(), use_cache=False)
    np.testing.assert_allclose(column(cached), column(fresh), rtol=1e-9)
    assert not np.allclose(column(cached), column(small))


def test_truncated_npy_shard_is_recomputed_not_read(tiny_model_dir, monkeypatch):
    from lmaudit.models.loading import load_model
    from lmaudit.probes.features import hidden_features

    monkeypatch.setenv("LMAUDIT_SHARD_SIZE", "4")
    loaded = load_model(tiny_model_dir, kind="ar")
    texts = TextSet.from_texts(make_texts(8, seed=10))
    first = hidden_features(loaded, texts)
    files = sorted((Path(os.environ["LMAUDIT_CACHE"]) / "probes" / "shards").glob("*.npy"))
    assert len(files) == 2
    data = files[0].read_bytes()
    files[0].write_bytes(data[:-40])  # the header is whole; the array is short
    with pytest.warns(UserWarning, match="unreadable .*recomputing it"):
        again = hidden_features(loaded, texts)
    np.testing.assert_array_equal(again, first)
    assert files[0].read_bytes() == data
