"""DLM attacks: the Q-Skew statistic, mask plans, and registry-wide checks."""

import math

import numpy as np
import pytest

from lmaudit.attacks import get_attack, list_attacks
from lmaudit.attacks.q_skew import weighted_skew
from lmaudit.errors import LmauditError
from lmaudit.metrics import auc
from lmaudit.probes.masks import MaskPlan
from synthetic_dlm import synthetic_masked

DLM_ATTACKS = [s.name for s in list_attacks("dlm")]
# every attack with its defaults, and once with each other value of a parameter with choices (a variant)
DLM_CASES = [(s.name, {}) for s in list_attacks("dlm")] + [
    (s.name, {key: v}) for s in list_attacks("dlm") for key, values in s.choices.items() for v in values
    if v != s.params[key]]
CASE_IDS = [f"{n}-{'-'.join(map(str, p.values())) or 'default'}" for n, p in DLM_CASES]


def skew(x, **kw):
    x = np.asarray(x, dtype=np.float64)
    return weighted_skew(x, np.array([0, len(x)]), **kw)[0]


@pytest.mark.parametrize("weighting", ["quantile", "none"])
def test_q_skew_sign_follows_the_skew(weighting):
    rng = np.random.default_rng(0)
    right = rng.exponential(1.0, 4000)
    sym = rng.normal(0.0, 1.0, 4000)
    assert skew(right, weighting=weighting) > 0.3
    assert abs(skew(sym, weighting=weighting)) < 0.1
    assert skew(-right, weighting=weighting) == pytest.approx(-skew(right, weighting=weighting))


def test_q_skew_shift_and_scale_invariant():
    x = np.random.default_rng(1).gamma(2.0, 1.0, 500)
    base = skew(x)
    assert skew(x + 17.0) == pytest.approx(base, rel=1e-9)
    assert skew(x * 0.01) == pytest.approx(base, rel=1e-9)
    assert skew(np.full(10, 3.0)) == 0.0  # no spread: defined as 0, not NaN


def test_q_skew_hand_computed_unweighted():
    x = np.array([0.0, 0.0, 1.0, 5.0])  # mean 1.5, median 0.5, population std sqrt(4.25)
    assert skew(x, weighting="none") == pytest.approx(3 * (1.5 - 0.5) / math.sqrt(4.25))


@pytest.mark.parametrize("L", [1, 2, 7, 20, 64])
def test_cyclic_covers_every_position_once_per_round(L):
    plan = MaskPlan("cyclic", budget=16, rho=0.35)
    pats = plan.patterns(L, seed=3)
    chunks = math.ceil(1 / 0.35)
    rounds, extra = divmod(16, chunks)  # 5 whole rounds of 3 chunks, then 1 chunk of a sixth
    counts = np.bincount(np.concatenate(pats), minlength=L)
    if L < chunks:  # empty chunks are dropped: every position still once per round
        assert set(counts.tolist()) <= {rounds, rounds + 1}
        return
    assert len(pats) == 16 == plan.n_patterns  # the same forwards as every other plan's budget
    for r in range(rounds):
        flat = np.concatenate(pats[r * chunks:(r + 1) * chunks])
        assert sorted(flat.tolist()) == list(range(L))  # disjoint chunks covering 0..L-1
        assert max(len(c) for c in pats[r * chunks:(r + 1) * chunks]) \
            - min(len(c) for c in pats[r * chunks:(r + 1) * chunks]) <= 1
    last = pats[rounds * chunks:]
    assert len(last) == extra and len(set(last[0].tolist())) == len(last[0]) == len(pats[0])
    assert sorted(counts.tolist()) == [rounds] * (L - len(last[0])) + [rounds + 1] * len(last[0])


def test_other_plans_shapes():
    L = 40
    rnd = MaskPlan("random", budget=15, rho=0.35).patterns(L, seed=1)
    assert len(rnd) == 15 and all(len(p) == 14 and len(set(p)) == 14 for p in rnd)
    elbo = MaskPlan("elbo", budget=16).patterns(L, seed=1)
    sizes = [len(p) for p in elbo]
    assert len(elbo) == 16 and sizes == sorted(sizes) and 1 <= sizes[0] <= 4 and sizes[-1] >= 36
    nested = MaskPlan("nested", budget=16, r_start=0.05, r_end=0.5).patterns(L, seed=1)
    assert len(nested[0]) == 2 and len(nested[-1]) == 20
    assert all(set(a) <= set(b) for a, b in zip(nested, nested[1:]))
    assert [p.tolist() for p in MaskPlan("elbo").patterns(L, seed=1)] == [p.tolist() for p in elbo]


def test_plan_validation():
    with pytest.raises(LmauditError, match="cyclic round needs 3"):
        MaskPlan("cyclic", budget=2, rho=0.35)
    with pytest.raises(LmauditError, match="unknown mask plan"):
        MaskPlan("spiral")


def fixture_for(name, params=None):
    spec = get_attack(name, "dlm")
    run = lambda stats: spec(stats, **(params or {}))  # noqa: E731
    return run, synthetic_masked(spec.probe({**spec.params, **(params or {})}, 16), seed=0)


def test_variants_are_covered():
    assert ("loss", {"variant": "sum"}) in DLM_CASES and ("calibration", {"variant": "unmasked_ratio"}) in DLM_CASES


def test_registry_lists_the_dlm_attacks():
    assert DLM_ATTACKS == [s.name for s in list_attacks("dlm")]


@pytest.mark.parametrize("name, params", DLM_CASES, ids=CASE_IDS)
def test_dlm_shape_finite_deterministic(name, params):
    spec, (stats, labels) = fixture_for(name, params)
    s = spec(stats)
    assert s.shape == (len(labels),) and np.isfinite(s).all()
    np.testing.assert_array_equal(s, spec(stats))


@pytest.mark.parametrize("name, params", DLM_CASES, ids=CASE_IDS)
def test_dlm_permutation_invariance(name, params):
    spec, (stats, labels) = fixture_for(name, params)
    perm = np.random.default_rng(5).permutation(len(labels))
    np.testing.assert_allclose(spec(stats.take(perm)), spec(stats)[perm], rtol=1e-12)


@pytest.mark.parametrize("name, params", DLM_CASES, ids=CASE_IDS)
def test_dlm_attacks_score_a_shard_as_the_whole_set(name, params):
    # run_mia scores per-sample attacks one shard of records at a time
    spec, (stats, labels) = fixture_for(name, params)
    assert get_attack(name, "dlm").per_sample
    part = np.arange(4, 13)
    np.testing.assert_allclose(spec(stats.take(part)), spec(stats)[part], rtol=1e-12)


@pytest.mark.parametrize("name, params", DLM_CASES, ids=CASE_IDS)
def test_dlm_direction_higher_means_member(name, params):
    spec, (stats, labels) = fixture_for(name, params)
    # loss.variant=sum is not length-normalised: the fixture's lengths (12 to 40 tokens) blur it
    assert auc(labels, spec(stats)) > (0.65 if params.get("variant") == "sum" else 0.75)


@pytest.mark.parametrize("params", [{"sampling": "random"}, {"statistic": "mean"}, {"weighting": "none"}])
def test_q_skew_ablations_run_on_their_plans(params):
    spec = get_attack("q_skew", "dlm")
    plan = spec.probe({**spec.params, **params}, 16)
    assert plan.n_patterns == 16  # the ablations, like Q-Skew itself, spend the whole budget
    stats, labels = synthetic_masked(plan, seed=2)
    assert auc(labels, spec(stats, **params)) > 0.75


def test_skew_separates_where_the_mean_cannot():
    """Members and non-members with equal mean gain but different shape: only the skew tells them apart."""
    rng = np.random.default_rng(4)
    member = [rng.exponential(1.0, 60) - 1.0 for _ in range(30)]  # mean 0, right-skewed
    nonmember = [rng.normal(0.0, 1.0, 60) for _ in range(30)]  # mean 0, symmetric
    values = np.concatenate(member + nonmember)
    offsets = np.arange(0, 60 * 61, 60)
    labels = np.r_[np.ones(30), np.zeros(30)].astype(int)
    assert auc(labels, weighted_skew(values, offsets)) > 0.9
    means = np.add.reduceat(values, offsets[:-1]) / 60
    assert auc(labels, means) < 0.75


def test_sama_score_of_a_sample_does_not_depend_on_the_others():
    spec = get_attack("sama", "dlm")
    stats, labels = synthetic_masked(spec.probe(spec.params, 16), seed=3)
    alone = spec(stats.take([0]))[0]
    assert spec(stats)[0] == alone
    assert spec(stats.take([0, 5, 17]))[0] == alone


def test_cyclic_extra_chunk_extends_the_whole_rounds():
    # a budget of whole rounds draws what it drew before the partial round existed; 16 adds one chunk to 15's draws
    whole = MaskPlan("cyclic", budget=15, rho=0.35).draw(20, seed=5)[0]
    more = MaskPlan("cyclic", budget=16, rho=0.35).draw(20, seed=5)[0]
    assert [p.tolist() for p in more[:15]] == [p.tolist() for p in whole] and len(more) == 16
    assert MaskPlan("cyclic", budget=16).cache_key()["version"] == 2  # probes cached from 15 forwards are not read
    assert "version" not in MaskPlan("elbo").cache_key()  # other kinds keep their cached probes
