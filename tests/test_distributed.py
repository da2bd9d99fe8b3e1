"""The Ray backend gives exactly the local backend's results (local Ray instance, 2 CPUs).

The Ray tests are skipped where Ray is not installed; the option checks run everywhere.
Starting a model's workers costs seconds, so the tests that share a model come one after
the other (the backend keeps one pool of workers, for the last model it served).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import TEST_PRESET_ARGS, causal, make_texts, write_jsonl
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.loading import load_model
from lmaudit.probes.backends import LocalBackend, current_backend, make_backend, use_backend

TEXTS = TextSet.from_texts(make_texts(14, seed=41), source="ray-texts")


@pytest.fixture(scope="module")
def ray_backend():
    ray = pytest.importorskip("ray")
    from lmaudit.probes.backends import RayBackend

    backend = RayBackend(workers=2, num_cpus=2)
    yield backend
    backend.close()
    ray.shutdown()


@pytest.fixture(scope="module")
def ar_handle(tiny_model_dir):
    """One loaded AR model for the tests that use it: Ray's workers load it once (a pool per model)."""
    return load_model(tiny_model_dir, kind="ar")


@pytest.fixture(scope="module")
def dlm_handle(tiny_dlm_dir):
    return load_model(tiny_dlm_dir, kind="dlm")


def _both(fn, backend):
    """fn() on the local backend, then on ``backend`` (left open for the next test)."""
    local = fn()
    with use_backend(backend, close=False):
        remote = fn()
    return local, remote


def test_ar_probe_identical_on_ray(ray_backend, ar_handle):
    from lmaudit.probes.ar import probe_ar

    local, remote = _both(lambda: probe_ar(ar_handle, TEXTS, shard_size=5), ray_backend)
    for name in ("logp", "top1_logp", "mu", "sigma", "entropy", "offsets", "zlib_len", "sample_keys"):
        np.testing.assert_array_equal(getattr(remote, name), getattr(local, name), err_msg=name)
    assert remote.n_samples == len(TEXTS)


def test_worker_warnings_reach_the_driver(ray_backend, ar_handle):
    from lmaudit.probes.ar import ARProbeConfig, probe_ar

    long = TextSet.from_texts(make_texts(3, seed=9, min_words=200, max_words=220), source="long.jsonl")
    with use_backend(ray_backend, close=False):
        with pytest.warns(UserWarning,
                          match=r"3 of 3 text\(s\) in long.jsonl \(records 1–3\) exceed the model context"):
            stats = probe_ar(ar_handle, long, ARProbeConfig(max_length=64))
    assert stats.lengths.max() == 63


@pytest.mark.slow  # kept out of the default run: the suite must stay under 5 minutes
def test_hidden_features_and_extraction_identical_on_ray(ray_backend, dlm_handle, monkeypatch):
    from lmaudit.probes.features import hidden_features
    from lmaudit.runs.extract import ExtractConfig, run_extraction

    local, remote = _both(lambda: hidden_features(dlm_handle, TEXTS, use_cache=False), ray_backend)
    np.testing.assert_array_equal(remote, local)
    assert local.shape == (len(TEXTS), dlm_handle.model.config.hidden_size)
    cfg = dict(mask="suffix:4", steps=["1", "2", "max"], trajectories=6, relaxed=3, samples=4, seed=2)
    monkeypatch.setenv("LMAUDIT_SHARD_SIZE", "5")  # three shards (5 + 5 + 4): relaxed seeds use the global index
    local, remote = _both(lambda: run_extraction(dlm_handle, TEXTS, ExtractConfig(**cfg), use_cache=False), ray_backend)
    assert remote["records"] == local["records"] and remote["summary"] == local["summary"]
    assert remote["relaxed"]["empirical"] == local["relaxed"]["empirical"]
    assert len(local["records"]["id"]) == len(TEXTS)


@pytest.mark.slow  # heavy (a subprocess or a Ray DLM pass): make test-slow runs it
def test_dlm_probe_with_reference_identical_on_ray(ray_backend, dlm_handle, tokenizer, tmp_path):
    from lmaudit.models.dlm import build_dlm_model
    from lmaudit.models.presets import Preset
    from lmaudit.probes.masked import probe_masked
    from lmaudit.probes.masks import MaskPlan

    other = build_dlm_model(Preset("test-dlm", **TEST_PRESET_ARGS), tokenizer, seed=1)  # another model: another pool
    other.save_pretrained(tmp_path / "ref")
    tokenizer.save_pretrained(tmp_path / "ref")
    reference = load_model(tmp_path / "ref", kind="dlm")
    plan = MaskPlan("cyclic", budget=4)
    run = lambda: probe_masked(dlm_handle, TEXTS, plan,  # noqa: E731
                               reference=reference.adapter, seed=3, shard_size=7)
    local, remote = _both(run, ray_backend)
    for name in ("offsets", "pattern", "position", "logp", "mu", "sigma", "ref_logp", "ref_top1_logp", "n_patterns"):
        np.testing.assert_array_equal(getattr(remote, name), getattr(local, name), err_msg=name)
    assert remote.has_reference and not np.array_equal(local.logp, local.ref_logp)  # two different models


@pytest.mark.slow  # kept out of the default run: the suite must stay under 5 minutes
def test_in_memory_model_is_shipped_to_the_workers(ray_backend, tiny_model, tokenizer):
    """A model that was never saved (no folder to load from) travels through Ray's object store."""
    from lmaudit.probes.ar import probe_ar

    local, remote = _both(lambda: probe_ar(causal(tiny_model, tokenizer), TEXTS, shard_size=9), ray_backend)
    np.testing.assert_array_equal(remote.logp, local.logp)
    assert remote.n_samples == len(TEXTS) and np.array_equal(remote.sigma, local.sigma)


@pytest.mark.slow  # a Ray instance and its actors start in a subprocess
def test_mia_command_with_ray_backend_matches_local(tmp_path, tiny_model_dir):
    """In its own process: the command starts its own Ray instance (this module's workers hold its CPUs here)."""
    pytest.importorskip("ray")
    m = write_jsonl(tmp_path / "m.jsonl", make_texts(24, seed=1))
    n = write_jsonl(tmp_path / "n.jsonl", make_texts(24, seed=2))
    env = {**os.environ, "LMAUDIT_PROGRESS": "0", "LMAUDIT_SHARD_SIZE": "8"}
    results = {}
    for backend in ("local", "ray"):
        args = ["--target", str(tiny_model_dir), "--members", str(m), "--nonmembers", str(n), "--out",
                str(tmp_path / backend), "--no-report", "--no-cache", "--bootstrap", "50", "--backend", backend]
        if backend == "ray":
            args += ["--workers", "2"]
        out = subprocess.run([sys.executable, "-m", "lmaudit.cli", "mia", *args], capture_output=True, text=True,
                             env=env)
        assert out.returncode == 0, out.stderr
        results[backend] = json.loads((tmp_path / backend / "results.json").read_text())["attacks"]
    assert results["ray"] == results["local"]
    assert set(results["local"]) >= {"loss", "zlib", "min_k", "min_k_pp", "gap_k"}


def test_missing_ray_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    with pytest.raises(LmauditError, match=r"needs Ray, which is not installed.*lmaudit\[ray\]") as info:
        make_backend("ray")
    assert "--backend local" in str(info.value)


def test_backend_options_are_checked():
    with pytest.raises(LmauditError, match="unknown backend 'spark'"):
        make_backend("spark")
    with pytest.raises(LmauditError, match="--address and --workers need --backend ray"):
        make_backend("local", workers=2)
    assert isinstance(current_backend(), LocalBackend)
