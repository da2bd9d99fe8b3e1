"""GPU-ready batching: token-budget batches, and batches halved on out-of-memory with unchanged results."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import assert_ok, assert_user_error, causal, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.probes.masked import probe_masked
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.tokenize import length_batches

STATS = ("logp", "top1_logp", "mu", "sigma")


def texts(n=17, seed=3):
    return TextSet.from_texts(make_texts(n, seed=seed, min_words=2, max_words=40))


def test_token_budget_batches_cover_every_sample_once_within_the_budget():
    lengths = np.array([10, 3, 8, 3, 8, 3, 40])
    batches = length_batches(lengths, batch_size=32, max_tokens=20)
    assert [lengths[b].tolist() for b in batches] == [[40], [10, 8], [8, 3], [3, 3]]  # 40 > 20: alone
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    assert all(len(b) * lengths[b].max() <= 20 for b in batches[1:])
    assert [len(b) for b in length_batches(lengths, batch_size=2, max_tokens=1000)] == [2, 2, 2, 1]  # size caps too


def test_a_token_budget_does_not_change_ar_statistics(tiny_model, tokenizer):
    plain = probe_ar(causal(tiny_model, tokenizer), texts(), ARProbeConfig(batch_size=8))
    budget = probe_ar(causal(tiny_model, tokenizer), texts(), ARProbeConfig(batch_size=8, max_batch_tokens=64))
    np.testing.assert_array_equal(plain.offsets, budget.offsets)
    for name in STATS:
        np.testing.assert_allclose(getattr(plain, name), getattr(budget, name), atol=1e-5)


def test_out_of_memory_halves_the_batch_and_the_ar_statistics_are_unchanged(tiny_model, tokenizer, monkeypatch):
    plain = probe_ar(causal(tiny_model, tokenizer), texts(), ARProbeConfig(batch_size=8))
    monkeypatch.setenv("LMAUDIT_FAULT", "probe-batch:2:oom")  # the second batch (of 8 texts) runs out of memory
    with pytest.warns(UserWarning, match="out of memory on a batch of 8 texts: continuing with batches of 4"):
        halved = probe_ar(causal(tiny_model, tokenizer), texts(), ARProbeConfig(batch_size=8))
    np.testing.assert_array_equal(plain.offsets, halved.offsets)
    for name in STATS:
        np.testing.assert_allclose(getattr(plain, name), getattr(halved, name), atol=1e-5)


def test_out_of_memory_halves_masked_batches_too(tiny_dlm, tokenizer, monkeypatch):
    plan = MaskPlan("cyclic", budget=6, rho=0.35)
    plain = probe_masked(tiny_dlm.handle(), texts(9), plan, batch_size=16)
    monkeypatch.setenv("LMAUDIT_FAULT", "probe-batch:1:oom")
    with pytest.warns(UserWarning, match="out of memory on a batch of 16 texts: continuing with batches of 8"):
        halved = probe_masked(tiny_dlm.handle(), texts(9), plan, batch_size=16)
    np.testing.assert_array_equal(plain.position, halved.position)
    for name in STATS:
        np.testing.assert_allclose(getattr(plain, name), getattr(halved, name), atol=1e-5)


def test_a_single_text_that_does_not_fit_is_a_clear_error(tiny_model, tokenizer, monkeypatch):
    monkeypatch.setenv("LMAUDIT_FAULT", "probe-batch:1:oom")
    with pytest.raises(LmauditError, match=r"out of memory on a single text of \d+ tokens"):
        probe_ar(causal(tiny_model, tokenizer), texts(1), ARProbeConfig(batch_size=1))


def test_mia_with_a_token_budget_gives_the_same_results(tmp_path, tiny_model_dir):
    write_jsonl(tmp_path / "m.jsonl", make_texts(12, seed=1))
    write_jsonl(tmp_path / "n.jsonl", make_texts(12, seed=2))
    res = []
    for extra in ([], ["--max-batch-tokens", "40", "--no-cache"]):
        out = tmp_path / f"out{len(res)}"
        assert_ok(lmaudit("mia", "--model", str(tiny_model_dir), "--members", str(tmp_path / "m.jsonl"), "--nonmembers",
                          str(tmp_path / "n.jsonl"), "--out", str(out), "--attacks", "loss,min_k", "--bootstrap", "10",
                          "--no-report", *extra))
        res.append(json.loads((out / "results.json").read_text())["attacks"])
    assert {n: m["auc"] for n, m in res[0].items()} == {n: m["auc"] for n, m in res[1].items()}
    assert_user_error(lmaudit("mia", "--model", str(tiny_model_dir), "--members", str(tmp_path / "m.jsonl"),
                              "--nonmembers", str(tmp_path / "n.jsonl"), "--max-batch-tokens", "0"),
                      "--max-batch-tokens must be an integer ≥ 1")


def _config_only(**cfg):
    from types import SimpleNamespace

    return SimpleNamespace(config=SimpleNamespace(**cfg))


def test_the_default_batch_follows_the_models_shapes_on_a_cpu():
    import torch

    from lmaudit.models.batching import CPU_BATCH_BYTES, CPU_LOGITS_BYTES, default_batch_tokens

    cpu = torch.device("cpu")
    smollm2 = _config_only(hidden_size=576, intermediate_size=1536, vocab_size=49152)
    tiny = _config_only(hidden_size=128, intermediate_size=512, vocab_size=4096)
    assert default_batch_tokens(smollm2, cpu) == CPU_BATCH_BYTES // (4 * (576 + 1536))
    assert default_batch_tokens(tiny, cpu) == CPU_BATCH_BYTES // (4 * (128 + 512))
    assert default_batch_tokens(tiny, cpu) > 3 * default_batch_tokens(smollm2, cpu)  # wider layers, fewer tokens
    # logits that exist whole cap the batch by the vocabulary
    huge_vocab = _config_only(hidden_size=64, intermediate_size=128, vocab_size=2**20)
    assert default_batch_tokens(huge_vocab, cpu, fused=False) == max(256, CPU_LOGITS_BYTES // (4 * 2**20))
    assert default_batch_tokens(huge_vocab, cpu, fused=True) > default_batch_tokens(huge_vocab, cpu, fused=False)


def test_without_a_batch_size_a_probe_batches_by_the_models_budget(tiny_model, tokenizer):
    from lmaudit.models.adapters import ARAdapter
    from lmaudit.probes.tokenize import model_batches

    adapter = ARAdapter(tiny_model, tokenizer)
    lengths = np.array([300, 200, 120, 90, 90, 40, 7, 3] * 20)
    budget = adapter.batch_tokens()
    batches = model_batches(lengths, adapter)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    assert max(len(b) * lengths[b].max() for b in batches) <= budget \
        < 2 * max(len(b) * lengths[b].max() for b in batches)
    assert [len(b) for b in model_batches(lengths, adapter, batch_size=32)][:2] == [32, 32]  # a count alone: no cap
    default = probe_ar(causal(tiny_model, tokenizer), texts(), ARProbeConfig())
    one_by_one = probe_ar(causal(tiny_model, tokenizer), texts(), ARProbeConfig(batch_size=1))
    for name in STATS:
        np.testing.assert_allclose(getattr(default, name), getattr(one_by_one, name), rtol=0, atol=2e-5)
