"""Tests that run over every registered attack."""

import inspect
import json
import pkgutil

import numpy as np
import pytest

from lmaudit.attacks import get_attack, list_attacks, register_attack
from lmaudit.errors import LmauditError
from lmaudit.metrics import auc
from synthetic import SYNTHETIC_PARAMS, records_for, synthetic_shadows, synthetic_stats

TARGET, REFERENCE, LABELS = synthetic_stats(seed=0)
SHADOWS = synthetic_shadows(REFERENCE)
AR_ATTACKS = [s.name for s in list_attacks("ar")]


def run(name, target=TARGET, reference=REFERENCE, shadows=SHADOWS):
    spec = get_attack(name, "ar")
    return spec(records_for(spec, target, reference, shadows))


@pytest.mark.parametrize("spec", list_attacks(), ids=lambda s: f"{s.kind}:{s.name}")
def test_every_attack_keeps_the_contract(spec):
    # the registry's contract, for every attack it found (none is listed by hand)
    assert spec.summary.endswith(".") and len(spec.summary) > 10
    assert spec.direction == "higher = member"
    assert spec.kind in ("ar", "dlm")
    json.dumps(spec.describe())  # parameters and metadata are JSON-serialisable
    params = list(inspect.signature(spec.fn).parameters.values())
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:])
    # every attack says which probe it reads (given what it needs to know it: ReCaLL its prefix texts)
    assert spec.probe({**spec.params, **SYNTHETIC_PARAMS.get(spec.name, {})}, 16) is not None


def test_attack_modules_are_found_without_a_list():
    import lmaudit.attacks as package

    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    registered = {s.fn.__module__.rsplit(".", 1)[1] for s in list_attacks()}
    assert registered <= modules and len(registered) >= 5


def test_positional_hyper_parameters_are_rejected():
    with pytest.raises(ValueError, match="keyword-only"):
        @register_attack("bad_positional", kind="ar")
        def bad(stats, k=0.2):
            return stats.zlib_len
    with pytest.raises(ValueError, match="needs a default"):
        @register_attack("bad_required", kind="ar")
        def bad2(stats, *, k):
            return stats.zlib_len


@pytest.mark.parametrize("name", AR_ATTACKS)
def test_shape_and_finiteness(name):
    s = run(name)
    assert s.shape == (TARGET.n_samples,) and s.dtype == np.float64
    assert np.isfinite(s).all()


@pytest.mark.parametrize("name", AR_ATTACKS)
def test_determinism(name):
    np.testing.assert_array_equal(run(name), run(name))


@pytest.mark.parametrize("name", AR_ATTACKS)
def test_permutation_invariance(name):
    perm = np.random.default_rng(7).permutation(TARGET.n_samples)
    np.testing.assert_allclose(run(name, TARGET.take(perm), REFERENCE.take(perm), SHADOWS.take(perm)), run(name)[perm],
                               rtol=1e-12)


@pytest.mark.parametrize("name", [s.name for s in list_attacks("ar") if s.per_sample])
def test_per_sample_attacks_score_a_shard_as_the_whole_set(name):
    # run_mia scores these attacks one shard of records at a time
    part = np.arange(3, 11)
    whole = run(name)
    alone = run(name, TARGET.take(part), REFERENCE.take(part), SHADOWS.take(part))
    np.testing.assert_allclose(alone, whole[part], rtol=1e-12)


def test_lira_pools_its_variance_over_the_set():
    spec = get_attack("lira", "ar")
    part = np.arange(3, 11)
    assert not spec.per_sample
    alone = spec(TARGET.take(part).with_companions(shadows=SHADOWS.take(part)))
    assert not np.allclose(alone, run("lira")[part], rtol=1e-6)  # so it is scored on the whole set


# attacks whose score is 0 for every text unless its tail is reproduced token for token: the synthetic members
# (top-3 tokens 60% of the time) never are; tests/test_memorization.py checks their direction on members that are
# and ReCaLL, whose signal is the change a non-member prefix makes (synthetic statistics have none): checked there on
# a fine-tuned model
# and DC-PDD, whose signal is probability against corpus frequency (synthetic token ids are random)
SPARSE = {"extraction_strength", "recall", "dc_pdd"}


@pytest.mark.parametrize("name", [n for n in AR_ATTACKS if n not in SPARSE])
def test_direction_higher_means_member(name):
    assert auc(LABELS, run(name)) > 0.75


@pytest.mark.parametrize("smooth", ["none", "sequential", "shuffled"])
def test_gap_k_ablations_permutation_invariant(smooth):
    spec = get_attack("gap_k", "ar")
    perm = np.random.default_rng(3).permutation(TARGET.n_samples)
    np.testing.assert_allclose(spec(TARGET.take(perm), smooth=smooth), spec(TARGET, smooth=smooth)[perm])


def test_duplicate_registration_rejected():
    with pytest.raises(ValueError, match="already registered"):
        register_attack("loss", kind="ar")(lambda stats: stats)


def test_typo_suggests_close_name():
    with pytest.raises(LmauditError, match="did you mean min_k"):
        get_attack("min_kk", "ar")


def test_unknown_parameter_and_missing_reference():
    with pytest.raises(LmauditError, match="has no parameter"):
        get_attack("loss", "ar")(TARGET, k=0.1)
    with pytest.raises(LmauditError, match="needs a reference"):
        get_attack("reference", "ar")(TARGET)
    with pytest.raises(LmauditError, match="needs shadow models"):
        get_attack("lira", "ar")(TARGET)


def test_lira_and_rmia_against_hand_computed_values():
    from lmaudit.probes.records import ShadowStats
    from lmaudit.probes.segments import segment_mean

    phi = segment_mean(TARGET.logp, TARGET.offsets)
    shadow_phi = np.stack([phi - 1.0, phi - 3.0, phi + 5.0])  # the third shadow trained on everything
    shadows = ShadowStats(shadow_phi, np.array([[False] * len(phi), [False] * len(phi), [True] * len(phi)]))
    # OUT mean φ − 2, pooled σ = sqrt((1 + 1) · S / (2S − S)) = sqrt(2)
    np.testing.assert_allclose(get_attack("lira", "ar")(TARGET.with_companions(shadows=shadows)), 2 / np.sqrt(2),
                               rtol=1e-9)
    lr = phi - np.log(0.5 * (1.3 * (np.exp(phi - 1) + np.exp(phi - 3)) / 2 + 0.7))
    expected = (np.argsort(np.argsort(lr)) + 1) / len(lr)  # rank share, no ties
    np.testing.assert_allclose(get_attack("rmia", "ar")(TARGET.with_companions(shadows=shadows)), expected)
    with pytest.raises(LmauditError, match="IN every shadow"):
        get_attack("lira", "ar")(TARGET.with_companions(
            shadows=ShadowStats(shadow_phi, np.ones_like(shadow_phi, dtype=bool))))


def test_defaults_are_read_from_the_signature():
    assert get_attack("gap_k", "ar").params == {"k": 0.2, "window": 3, "smooth": "sequential"}


def test_probe_kinds_are_registered_by_request_type():
    from lmaudit.errors import LmauditError
    from lmaudit.probes.masks import MaskPlan
    from lmaudit.probes.requests import AR_PROBE
    from lmaudit.runs.mia_groups import ar_group, masked_group, probe_kind

    assert probe_kind(AR_PROBE).group is ar_group and probe_kind(AR_PROBE).check is None
    assert probe_kind(MaskPlan("nested")).group is masked_group and probe_kind(MaskPlan("nested")).check is not None
    with pytest.raises(LmauditError, match="no probe is registered for str requests"):
        probe_kind("ar")


def test_a_new_plan_kind_is_one_registered_function():
    import numpy as np

    from lmaudit.probes.masks import PLAN_KINDS, MaskPlan, plan_kind

    @plan_kind("first-half", count=lambda plan: 1)
    def _first_half(plan, L, rng):
        return [np.arange(L // 2)], np.array([0.5])

    try:
        plan = MaskPlan("first-half", budget=3)
        pats, ratios = plan.draw(10, seed=0)
        assert plan.n_patterns == 1 and plan.masks and pats[0].tolist() == [0, 1, 2, 3, 4] and ratios.tolist() == [0.5]
    finally:
        del PLAN_KINDS["first-half"]
    # 2 whole rounds of ⌈1/0.35⌉ = 3 chunks, and one chunk
    assert MaskPlan("cyclic", budget=7, rho=0.35).n_patterns == 7


BEYOND = {"logprob": ("top1_logp", "mu", "sigma", "entropy"), "top_k": ("mu", "sigma", "entropy")}


def garbled(stats, fields, seed=7):
    """``stats`` with ``fields`` replaced by other values of the same shape (what an endpoint cannot give)."""
    from dataclasses import replace

    rng = np.random.default_rng(seed)
    other = {f: (getattr(stats, f) + rng.normal(1.0, 0.5, getattr(stats, f).shape)).astype(np.float32)
             for f in fields}
    return replace(stats, **other)


def reads_only_its_access(spec) -> bool:
    """Whether ``spec``'s scores stay the same when the statistics beyond its declared access are garbled."""
    fields = BEYOND.get(spec.access)
    if fields is None:
        return True  # it may read everything
    params = SYNTHETIC_PARAMS.get(spec.name, {})
    plain = spec(records_for(spec, TARGET, REFERENCE, SHADOWS), **params)
    garbled_records = records_for(spec, garbled(TARGET, fields), garbled(REFERENCE, fields), SHADOWS)
    return np.allclose(plain, spec(garbled_records, **params), equal_nan=True)


@pytest.mark.parametrize("spec", [s for s in list_attacks("ar") if s.access in BEYOND], ids=lambda s: s.name)
def test_an_attack_reads_nothing_beyond_the_access_it_declares(spec):
    """A served model gives each token's log-probability and the top-k: an attack declared to need only those
    scores the same whatever the rest of the distribution is."""
    assert reads_only_its_access(spec)


def test_the_access_check_catches_an_attack_that_reads_more_than_it_declares():
    from dataclasses import replace

    declared_too_low = replace(get_attack("min_k_pp", "ar"), access="logprob")  # it reads μ and σ
    assert not reads_only_its_access(declared_too_low)
    assert {s.access for s in list_attacks("dlm")} == {"weights"}  # masked forwards need the model
    with pytest.raises(ValueError, match="access must be one of"):
        register_attack("bad_access", kind="ar", access="api")(lambda stats: stats.zlib_len)
