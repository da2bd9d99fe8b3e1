"""ReCaLL's prefixed pass with the shared prefix computed once: the same statistics as every text run whole (to
float32 rounding), at any batch size, and the shared run found as the probe needs it."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import make_texts
from lmaudit.data.loaders import Record, TextSet
from lmaudit.models.adapters import handle_for
from lmaudit.probes.ar import MIN_SHARED, ARProbeConfig, ar_stats, shared_run


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
    handle = handle_for(tiny_model, tokenizer)
    whole = ar_stats(handle, prefixed, ARProbeConfig(batch_size=batch_size))
    calls = []
    once = handle.adapter.prefix_cache
    monkeypatch.setattr(handle.adapter, "prefix_cache", lambda ids: calls.append(ids.shape) or once(ids))
    reused = ar_stats(handle, prefixed, ARProbeConfig(batch_size=batch_size, reuse_prefix=True))
    assert len(calls) == 1 and calls[0][1] >= MIN_SHARED  # the prefix ran once, for every batch
    assert np.array_equal(whole.offsets, reused.offsets)
    for field in ("logp", "top1_logp", "mu", "sigma"):
        np.testing.assert_allclose(getattr(reused, field), getattr(whole, field), atol=2e-5, rtol=1e-5)
