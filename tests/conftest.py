"""Shared fixtures: tiny seeded tokenizer and models built locally (never downloaded)."""

from __future__ import annotations

import os

# Tiny models run fastest on one thread, and threads that share busy cores can be 100x slower. Set before
# torch is imported, so that the subprocesses tests start use one thread too (and compute bit for bit the same).
os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("LMAUDIT_PROGRESS", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers import TEST_PRESET_ARGS, make_texts  # noqa: E402
from lmaudit.utils import _FAULT_COUNT  # noqa: E402

torch.set_num_threads(1)
# float32 matrix products in float32 on a GPU too (no TF32): the tests' tolerances are float32's
torch.set_float32_matmul_precision("highest")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LMAUDIT_CACHE", str(tmp_path / "cache"))
    _FAULT_COUNT.clear()  # every test counts the fault hook's passes from zero


@pytest.fixture(scope="session")
def tokenizer():
    from lmaudit.models.tokenizer import train_tokenizer

    return train_tokenizer(make_texts(2000, seed=123), vocab_size=400)


@pytest.fixture(scope="session")
def tiny_model(tokenizer):
    from lmaudit.models.presets import Preset, build_ar_model

    preset = Preset("test", **TEST_PRESET_ARGS)
    return build_ar_model(preset, tokenizer, seed=0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_model, tokenizer):
    path = tmp_path_factory.mktemp("tiny_ar")
    tiny_model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_dlm(tokenizer):
    from lmaudit.models.adapters import adapter_for
    from lmaudit.models.dlm import build_dlm_model
    from lmaudit.models.presets import Preset

    model = build_dlm_model(Preset("test-dlm", **TEST_PRESET_ARGS), tokenizer, seed=0)
    return adapter_for(model, tokenizer)


@pytest.fixture(scope="session")
def tiny_dlm_dir(tmp_path_factory, tiny_dlm, tokenizer):
    path = tmp_path_factory.mktemp("tiny_dlm")
    tiny_dlm.model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
