"""ReCaLL's prefixed pass with the shared prefix computed once: the same statistics as every text run whole (to
float32 rounding), at any batch size, and the shared run found as the probe needs it, whatever a transformers release
calls the key-value cache."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from helpers import causal, make_texts
from lmaudit.data.loaders import Record, TextSet
from lmaudit.models.kv_cache import cache_argument, cache_of
from lmaudit.probes.ar import MIN_SHARED, ARProbeConfig, probe_ar, shared_run


def test_shared_run_stops_before_the_first_scored_token_and_below_the_minimum():
    ids = [np.arange(40), np.r_[np.arange(30), [99, 98]]]
    scored = [np.arange(40) >= 35, np.arange(32) >= 20]
    assert shared_run(ids, scored) == 19  # the run is 30 long, but text 2 scores from 20: its row 19 is fed
    assert shared_run(ids, [np.arange(40) >= 35, np.arange(32) >= 10]) == 0  # 9 < MIN_SHARED
    assert MIN_SHARED == 16


@pytest.mark.parametrize("batch_size", [1, 3, None])
def test_a_shared_prefix_computed_once_gives_the_whole_texts_statistics(tiny_model, tokenizer, batch_size,
                                                                        monkeypatch):
    prefix = " ".join(make_texts(2, seed=4))[:200]
    texts = make_texts(7, seed=8)
    prefixed = TextSet([Record(f"r{i}", t, prefix) for i, t in enumerate(texts)], source="prefixed")
    handle = causal(tiny_model, tokenizer)
    whole = probe_ar(handle, prefixed, ARProbeConfig(batch_size=batch_size))
    calls = []
    once = handle.adapter.prefix_cache
    monkeypatch.setattr(handle.adapter, "prefix_cache", lambda ids: calls.append(ids.shape) or once(ids))
    reused = probe_ar(handle, prefixed, ARProbeConfig(batch_size=batch_size, reuse_prefix=True))
    assert len(calls) == 1 and calls[0][1] >= MIN_SHARED  # the prefix ran once, for every batch
    assert np.array_equal(whole.offsets, reused.offsets)
    for field in ("logp", "top1_logp", "mu", "sigma"):
        np.testing.assert_allclose(getattr(reused, field), getattr(whole, field), atol=2e-5, rtol=1e-5)


class _OneCacheName(torch.nn.Module):
    """The tiny model behind a forward that knows its key-value cache by one name only, as a transformers release
    does (``past_key_values`` in 5.17 and before, ``cache`` later): the output has no attribute of the other name."""

    def __init__(self, inner, name: str):
        super().__init__()
        self.inner, self.name, self.config = inner, name, inner.config
        params = inspect.signature(inner.forward).parameters
        self.installed = "cache" if "cache" in params else "past_key_values"

    def run(self, input_ids, attention_mask, past, use_cache):
        extra = {self.installed: past} if past is not None else {}
        out = self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=use_cache, **extra)
        return SimpleNamespace(logits=out.logits, **{self.name: getattr(out, self.installed) if use_cache else None})


class _PastKeyValues(_OneCacheName):
    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=False):
        return self.run(input_ids, attention_mask, past_key_values, use_cache)


class _Cache(_OneCacheName):
    def forward(self, input_ids, attention_mask=None, cache=None, use_cache=False):
        return self.run(input_ids, attention_mask, cache, use_cache)


@pytest.mark.parametrize("wrapper, name", [(_PastKeyValues, "past_key_values"), (_Cache, "cache")])
def test_the_prefix_cache_is_passed_and_read_under_either_name(tiny_model, tokenizer, wrapper, name):
    prefix = " ".join(make_texts(2, seed=4))[:200]
    prefixed = TextSet([Record(f"r{i}", t, prefix) for i, t in enumerate(make_texts(5, seed=9))], source="prefixed")
    whole = probe_ar(causal(tiny_model, tokenizer), prefixed, ARProbeConfig(batch_size=2))
    handle = causal(wrapper(tiny_model, name), tokenizer)
    assert handle.adapter.fused_head() is None  # logits from the wrapper's own forward, the cache as it names it
    assert cache_argument(handle.model) == name
    reused = probe_ar(handle, prefixed, ARProbeConfig(batch_size=2, reuse_prefix=True))
    assert np.array_equal(whole.offsets, reused.offsets)
    for field in ("logp", "top1_logp", "mu", "sigma"):
        np.testing.assert_allclose(getattr(reused, field), getattr(whole, field), atol=2e-5, rtol=1e-5)
    # an output that names the cache either way; a wrapper passing **kwargs on to its base model (as PEFT's does)
    assert cache_of(SimpleNamespace(**{name: "kv"})) == "kv"
    peft_like = SimpleNamespace(forward=lambda **kwargs: None, get_base_model=lambda: handle.model)
    assert cache_argument(peft_like) == name
    assert cache_argument(SimpleNamespace(forward=lambda **kwargs: None)) == "past_key_values"  # accepted by all
