"""The model seam: a model's handle travels whole to the probes, which run its adapter; what differs between models
in a job is keyed by what the adapter can do (its ``scoring``), never by its kind."""

import numpy as np
import pytest

from helpers import make_texts
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.adapters import ARAdapter, DLMAdapter, handle_for
from lmaudit.models.served_model import ServedAdapter
from lmaudit.probes.ar import ARProbeConfig, ar_stats, probe_ar
from lmaudit.probes.masked import masked_stats, probe_masked
from lmaudit.probes.masks import MaskPlan
from lmaudit.runs.extract import TABLES, ExtractConfig, run_extraction
from lmaudit.runs.mia_groups import check_dlm_reference
from lmaudit.runs.pii_candidates import CANDIDATE_LOGP, SKEW_SCORING

TEXTS = TextSet.from_texts(make_texts(5, seed=11))


def test_every_way_of_scoring_has_its_entries():
    scorings = {ARAdapter.scoring, DLMAdapter.scoring, ServedAdapter.scoring}
    assert set(TABLES) == set(CANDIDATE_LOGP) == scorings
    assert set(SKEW_SCORING) <= scorings


def test_a_bare_model_gets_its_handle_from_models(tiny_model, tokenizer, tiny_dlm):
    ar = handle_for(tiny_model, tokenizer, fingerprint="fp")
    assert (ar.kind, ar.fingerprint, ar.adapter.scoring, ar.adapter.model) == ("ar", "fp", "left-to-right", tiny_model)
    dlm = handle_for(tiny_dlm, tokenizer)
    assert (dlm.kind, dlm.adapter, dlm.model) == ("dlm", tiny_dlm, tiny_dlm.model)


def test_the_ar_probe_runs_the_adapter_of_the_handle(tiny_model, tokenizer):
    handle = handle_for(tiny_model, tokenizer)
    calls = []
    rows = handle.adapter.output_rows
    handle.adapter.output_rows = lambda *a, **k: calls.append(1) or rows(*a, **k)
    stats = ar_stats(handle, TEXTS, ARProbeConfig(batch_size=2))
    assert len(calls) == 3  # five texts, two per forward
    bare = probe_ar(tiny_model, tokenizer, TEXTS, ARProbeConfig(batch_size=2))
    np.testing.assert_array_equal(stats.logp, bare.logp)
    np.testing.assert_array_equal(stats.sigma, bare.sigma)


def test_the_masked_probe_takes_handles_as_it_took_adapters(tiny_dlm, tokenizer):
    plan = MaskPlan("random", budget=2, rho=0.3)
    target = handle_for(tiny_dlm, tokenizer)
    whole = masked_stats(target, TEXTS, plan, reference=target, seed=1, batch_size=3)
    bare = probe_masked(tiny_dlm, tokenizer, TEXTS, plan, reference=tiny_dlm, seed=1, batch_size=3)
    for name in ("logp", "ref_logp", "sigma", "position", "offsets"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(bare, name))


def test_a_reference_of_another_kind_is_refused(tiny_model, tokenizer, tiny_dlm):
    with pytest.raises(LmauditError, match="a DLM target needs a DLM reference"):
        check_dlm_reference(handle_for(tiny_dlm, tokenizer), handle_for(tiny_model, tokenizer))


def test_a_setting_the_adapter_ignores_is_said(tiny_model, tokenizer):
    cfg = ExtractConfig(mask="suffix:3", steps=["1"], order="low_confidence")
    with pytest.warns(UserWarning, match="an AR model reads left to right; --order is ignored"):
        payload = run_extraction(handle_for(tiny_model, tokenizer), TEXTS, cfg, use_cache=False)
    assert list(payload["summary"]) == ["ar"]
