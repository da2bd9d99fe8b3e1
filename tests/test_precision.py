"""Precision and device: --dtype and --device on every command that loads a model; statistics stay float32."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers import AUTO_DEVICE, assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import TextSet
from lmaudit.errors import ModelLoadError
from lmaudit.models.loading import load_model
from lmaudit.models.resolve import resolve_device
from lmaudit.models.sources import resolve_dtype
from lmaudit.probes.ar import ARProbeConfig, probe_ar


def test_bf16_statistics_are_float32_statistics_of_the_bf16_logits(tiny_model_dir):
    handle = load_model(tiny_model_dir, dtype="bfloat16")
    assert (handle.dtype, handle.device) == ("bfloat16", AUTO_DEVICE)
    assert next(handle.model.parameters()).dtype == torch.bfloat16
    texts = make_texts(4, seed=9)
    stats = probe_ar(handle, TextSet.from_texts(texts), ARProbeConfig(batch_size=1))
    assert stats.logp.dtype == np.float32
    want, top = [], 0.0
    for text in texts:
        ids = torch.tensor([handle.tokenizer(text)["input_ids"]], device=handle.model.device)
        with torch.no_grad():
            logits = handle.model(ids).logits[0, :-1]
        assert logits.dtype == torch.bfloat16
        lp, ids = torch.log_softmax(logits.float(), dim=-1).cpu(), ids.cpu()
        want.append(lp[torch.arange(ids.shape[1] - 1), ids[0, 1:]].numpy())
        top = max(top, float(logits.float().abs().max()))
    # on the CPU the probe's bf16 logits are the plain forward's, bit for bit; a GPU may run the output layer on
    # T - 1 rows with another kernel than on T, and round a bf16 logit the other way: one bf16 step (2^-8 relative)
    # of the largest logit, in the logit and in log Z
    atol = 1e-5 if handle.device == "cpu" else 2 * 2**-8 * top
    np.testing.assert_allclose(stats.logp, np.concatenate(want), atol=atol)
    f32 = load_model(tiny_model_dir)
    full = probe_ar(f32, TextSet.from_texts(texts), ARProbeConfig(batch_size=1))
    assert np.abs(full.logp - stats.logp).max() > 1e-4  # bf16 weights really change the statistics ...


def test_a_bf16_load_has_its_own_fingerprint(tiny_model_dir):
    """... so cached float32 statistics are never read for a bf16 model, nor the reverse."""
    full, half = load_model(tiny_model_dir), load_model(tiny_model_dir, dtype="bfloat16")
    assert full.fingerprint != half.fingerprint
    assert load_model(tiny_model_dir, dtype="float32").fingerprint == full.fingerprint


def test_mia_records_dtype_and_device(tmp_path, tiny_model_dir):
    write_jsonl(tmp_path / "m.jsonl", make_texts(10, seed=1))
    write_jsonl(tmp_path / "n.jsonl", make_texts(10, seed=2))
    runs = {}
    for dtype in ("float32", "bfloat16"):
        out = tmp_path / dtype
        assert_ok(lmaudit("mia", "--model", str(tiny_model_dir), "--members", str(tmp_path / "m.jsonl"),
                          "--nonmembers", str(tmp_path / "n.jsonl"), "--out", str(out), "--attacks", "loss",
                          "--bootstrap", "10", "--no-report", "--dtype", dtype, "--device", "cpu"))
        runs[dtype] = json.loads((out / "results.json").read_text())
        assert {k: runs[dtype]["target"][k] for k in ("dtype", "device")} == {"dtype": dtype, "device": "cpu"}
    assert runs["float32"]["target"]["fingerprint"] != runs["bfloat16"]["target"]["fingerprint"]


def test_auto_dtype_follows_the_checkpoint_on_a_gpu_and_is_float32_on_a_cpu():
    assert resolve_dtype("auto", {"torch_dtype": "bfloat16"}, "cuda") == "bfloat16"
    assert resolve_dtype(None, {"dtype": "float16"}, "cuda:0") == "float16"
    assert resolve_dtype("auto", {"torch_dtype": "bfloat16"}, "cpu") == "float32"
    assert resolve_dtype("auto", {}, "cuda") == "float32"
    assert resolve_dtype("bfloat16", {}, "cpu") == "bfloat16"


@pytest.mark.parametrize("args, needle", [
    (["--dtype", "float16", "--device", "cpu"], "--dtype float16 on the CPU"),
    (["--dtype", "half"], "--dtype must be auto, float32, bfloat16 or float16, got 'half'"),
    (["--device", "tpu"], "--device must be cpu, cuda, cuda:N or auto, got 'tpu'"),
])
def test_bad_precision_or_device_is_a_one_line_error(tmp_path, tiny_model_dir, args, needle):
    write_jsonl(tmp_path / "m.jsonl", make_texts(4, seed=1))
    result = lmaudit("mia", "--model", str(tiny_model_dir), "--members", str(tmp_path / "m.jsonl"), "--nonmembers",
                     str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "o"), *args)
    assert_user_error(result, needle)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without a GPU")
def test_a_cuda_device_without_a_gpu_is_a_clear_error():
    with pytest.raises(ModelLoadError, match="this machine has 0 CUDA GPU"):
        resolve_device("cuda:0")
    assert resolve_device("auto") == "cpu"
