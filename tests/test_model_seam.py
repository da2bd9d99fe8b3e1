"""The model seam: a model's handle travels whole to the probes, which run its adapter; what differs between models
in a job is keyed by what the adapter can do (its ``scoring``), never by its kind."""

import numpy as np
import pytest

from helpers import causal, make_texts
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.adapters import ARAdapter, DLMAdapter, network_handle
from lmaudit.models.served_model import ServedAdapter
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.probes.masked import probe_masked
from lmaudit.probes.masks import MaskPlan
from lmaudit.runs.extract import TABLES, ExtractConfig, run_extraction
from lmaudit.runs.mia_groups import check_dlm_reference
from lmaudit.runs.pii_candidates import CANDIDATE_LOGP, SKEW_SCORING

TEXTS = TextSet.from_texts(make_texts(5, seed=11))


def test_every_way_of_scoring_has_its_entries():
    scorings = {ARAdapter.scoring, DLMAdapter.scoring, ServedAdapter.scoring}
    assert set(TABLES) == set(CANDIDATE_LOGP) == scorings
    assert set(SKEW_SCORING) <= scorings


def test_a_network_in_memory_gets_its_handle_from_its_adapter_or_its_config(tiny_model, tokenizer, tiny_dlm):
    ar = causal(tiny_model, tokenizer, "fp")
    assert (ar.kind, ar.fingerprint, ar.adapter.scoring, ar.adapter.model) == ("ar", "fp", "left-to-right", tiny_model)
    dlm = tiny_dlm.handle()
    assert (dlm.kind, dlm.adapter, dlm.model, dlm.fingerprint) == ("dlm", tiny_dlm, tiny_dlm.model, "")
    # a bare network (a training loop's) is of the kind its config declares, never read as causal by default
    bare = network_handle(tiny_dlm.model, tokenizer, path="in training")
    assert (bare.kind, bare.adapter.scoring, bare.path) == ("dlm", "masked", "in training")
    assert bare.adapter.mask_token_id == tiny_dlm.mask_token_id and bare.fingerprint == ""
    assert network_handle(tiny_model, tokenizer).kind == "ar"
    assert network_handle(tiny_dlm.model, tokenizer, kind="ar").kind == "ar"  # a kind given wins


def test_the_ar_probe_runs_the_adapter_of_the_handle(tiny_model, tokenizer):
    handle = causal(tiny_model, tokenizer)
    calls = []
    rows = handle.adapter.output_rows
    handle.adapter.output_rows = lambda *a, **k: calls.append(1) or rows(*a, **k)
    stats = probe_ar(handle, TEXTS, ARProbeConfig(batch_size=2))
    assert len(calls) == 3  # five texts, two per forward
    fresh = probe_ar(causal(tiny_model, tokenizer), TEXTS, ARProbeConfig(batch_size=2))
    np.testing.assert_array_equal(stats.logp, fresh.logp)
    np.testing.assert_array_equal(stats.sigma, fresh.sigma)


def test_the_masked_probe_runs_each_handles_adapter(tiny_dlm, tokenizer):
    plan = MaskPlan("random", budget=2, rho=0.3)
    target, reference = tiny_dlm.handle(), DLMAdapter(tiny_dlm.model, tiny_dlm.mask_token_id,
                                                                 tokenizer=tokenizer).handle()
    calls = []
    rows = reference.adapter.output_rows
    reference.adapter.output_rows = lambda *a, **k: calls.append(1) or rows(*a, **k)
    stats = probe_masked(target, TEXTS, plan, reference=reference, seed=1, batch_size=3)
    assert calls  # the reference's own adapter ran
    np.testing.assert_allclose(stats.logp, stats.ref_logp, atol=1e-5)  # the same weights read the same


def test_a_reference_of_another_kind_is_refused(tiny_model, tokenizer, tiny_dlm):
    with pytest.raises(LmauditError, match="a DLM target needs a DLM reference"):
        check_dlm_reference(tiny_dlm.handle(), causal(tiny_model, tokenizer))


def test_a_setting_the_adapter_ignores_is_said(tiny_model, tokenizer):
    cfg = ExtractConfig(mask="suffix:3", steps=["1"], order="low_confidence")
    with pytest.warns(UserWarning, match="an AR model reads left to right; --order is ignored"):
        payload = run_extraction(causal(tiny_model, tokenizer), TEXTS, cfg, use_cache=False)
    assert list(payload["summary"]) == ["ar"]
