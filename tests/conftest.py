"""Shared fixtures: tiny seeded tokenizer and models built locally (never downloaded)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("LMAUDIT_PROGRESS", "0")
torch.set_num_threads(2)

WORDS = (
    "the a model data train token layer value array matrix function return input output tensor shape "
    "index batch vector sample weight bias gradient loss mean sum axis dtype float integer string list "
    "dict key default optional parameter argument raise error type object class method call result set "
    "number size length first last next order sort random seed state device memory cache file path read "
    "write open close line column row table frame series group merge join split apply map filter reduce"
).split()


def make_texts(n: int, *, seed: int, min_words: int = 12, max_words: int = 24) -> list[str]:
    """Seeded pseudo-sentences over a small vocabulary (distinct per seed)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(min_words, max_words + 1))
        out.append(" ".join(rng.choice(WORDS, size=k)).capitalize() + ".")
    return out


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LMAUDIT_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def tokenizer():
    from lmaudit.models.tokenizer import train_tokenizer

    return train_tokenizer(make_texts(2000, seed=123), vocab_size=400)


@pytest.fixture(scope="session")
def tiny_model(tokenizer):
    from lmaudit.models.presets import Preset, build_ar_model

    preset = Preset("test", hidden=32, layers=2, heads=2, intermediate=64, context=128,
                    pretrain_tokens=0, block=32, batch=8, lr=1e-3)
    return build_ar_model(preset, tokenizer, seed=0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_model, tokenizer):
    path = tmp_path_factory.mktemp("tiny_ar")
    tiny_model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


TEST_PRESET_ARGS = dict(hidden=32, layers=2, heads=2, intermediate=64, context=128, pretrain_tokens=0, block=32, batch=8, lr=1e-3)


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
