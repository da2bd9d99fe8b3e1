"""Model loading is local and safe: no network, no pickle without consent, no unshipped remote code."""

from __future__ import annotations

import json
import shutil
import socket

import pytest
import torch

from lmaudit.errors import ModelLoadError
from lmaudit.models.loading import load_model


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test (and is recorded)."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return calls


def _with_auto_map(src, dst, auto_map):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["auto_map"] = auto_map
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_hub_name_is_a_missing_path_not_a_download(no_network):
    with pytest.raises(ModelLoadError, match="model path 'gpt2' does not exist.*never downloads"):
        load_model("gpt2")
    assert no_network == []


def test_remote_code_needs_the_flag_and_a_shipped_module(no_network, tiny_model_dir, tmp_path):
    folder = _with_auto_map(tiny_model_dir, tmp_path / "custom", {"AutoModelForCausalLM": "modeling_custom.CustomLM"})
    with pytest.raises(ModelLoadError, match="needs custom modeling code.*trust_remote_code=True"):
        load_model(folder, kind="ar")
    with pytest.raises(ModelLoadError, match="names custom code in 'modeling_custom.py', which is not in the folder"):
        load_model(folder, kind="ar", trust_remote_code=True)
    other = _with_auto_map(tiny_model_dir, tmp_path / "elsewhere",
                           {"AutoModelForCausalLM": "someone/repo--modeling_x.XLM"})
    with pytest.raises(ModelLoadError, match="modeling code from another repository"):
        load_model(other, kind="ar", trust_remote_code=True)
    assert no_network == []


def test_pickle_weights_need_consent_and_then_load_the_same_model(no_network, tiny_model, tokenizer, tmp_path):
    folder = tmp_path / "pickled"
    tiny_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    for f in folder.glob("*.safetensors"):  # the same weights as a pickle checkpoint
        f.unlink()
    torch.save(tiny_model.state_dict(), folder / "pytorch_model.bin")
    assert (folder / "pytorch_model.bin").exists() and not list(folder.glob("*.safetensors"))
    with pytest.raises(ModelLoadError, match="only pickle weights.*allow_pickle=True"):
        load_model(folder, kind="ar")
    loaded = load_model(folder, kind="ar", allow_pickle=True)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():  # the fixture runs on the CPU, the loaded model where auto put it: float32 (TF32 off) on
        # two devices sums in another order, a few ulps of logits of order 1
        torch.testing.assert_close(loaded.model(ids.to(loaded.model.device)).logits.cpu(), tiny_model(ids).logits,
                                   atol=1e-5, rtol=1e-5)
    assert loaded.model.lmaudit_load_spec["allow_pickle"] is True  # a Ray worker reloads it the same way
    assert no_network == []
