"""Hostile inputs for every statistic: random, constant, length-1 and extreme values.

The rule: a statistic either returns finite numbers of the documented shape and
range, or raises :class:`~lmaudit.errors.LmauditError` naming the problem. A raw
numpy/scipy/torch exception or a silent NaN/inf is a failure.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import pdist
from scipy.stats import rankdata

from lmaudit.attacks import list_attacks
from lmaudit.attacks.gap_k import SMOOTHING, gap_k_scores
from lmaudit.attacks.q_skew import weighted_skew
from lmaudit.audit.smi import smi, smi_m
from lmaudit.errors import DataError, LmauditError
from lmaudit.extraction.discoverable import discoverable, gaussian_relaxed_rate, queries_needed, success_within
from lmaudit.extraction.masks import KINDS, MaskSpec
from lmaudit.metrics import auc, auc_bootstrap_ci, roc_curve, summarize, tpr_at_fpr
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.records import ARStats, MaskedStats, ShadowStats
from lmaudit.probes.segments import (
    bottom_k_mean,
    moving_average,
    segment_mean,
    segment_median,
    segment_ranks,
    segment_std,
)
from synthetic import records_for

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EPS = np.finfo(np.float64).eps
F32_MAX = float(np.finfo(np.float32).max)

# ---------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------

HUGE = st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False)  # includes 0, -0 and subnormals
EXTREME = st.one_of(
    HUGE,
    st.floats(-F32_MAX, F32_MAX, allow_nan=False, allow_infinity=False),  # anything a float32 record can hold
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 1e12, -1e12, F32_MAX, -F32_MAX, 1e-300]),
)
SMALL_INTS = st.integers(-100, 100).map(float)


@st.composite
def ragged(draw, elements, *, max_segments: int = 6, max_len: int = 12):
    """(values, offsets, constant) with a mix of random, constant and length-1 segments."""
    lengths = draw(st.lists(st.one_of(st.just(1), st.integers(1, max_len)), min_size=1, max_size=max_segments))
    values, constant = [], []
    for n in lengths:
        if draw(st.booleans()):
            values += [draw(elements)] * n
            constant.append(True)
        else:
            seg = draw(st.lists(elements, min_size=n, max_size=n))
            values += seg
            constant.append(len(set(seg)) == 1)
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    return np.array(values, dtype=np.float64), offsets, np.array(constant)


def segments_of(values, offsets):
    return [values[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


# ---------------------------------------------------------------------------------------------
# 1. Q-Skew: weighted_skew
# ---------------------------------------------------------------------------------------------

BANDWIDTH = st.one_of(st.just(0.1), st.floats(1e-4, 10.0))
WEIGHTING = st.sampled_from(["quantile", "none"])


@FEW
@given(data=ragged(EXTREME), h=BANDWIDTH, weighting=WEIGHTING)
def test_weighted_skew_finite_bounded_and_zero_on_constant_segments(data, h, weighting):
    values, offsets, constant = data
    out = weighted_skew(values, offsets, h=h, weighting=weighting)
    assert out.shape == (len(offsets) - 1,) and out.dtype == np.float64
    assert np.isfinite(out).all()
    # |m_W − median| ≤ max |x − median| ≤ (√n + 1)·std, so |skew| ≤ 3(√n + 1)
    lengths = np.diff(offsets)
    assert np.all(np.abs(out) <= 3 * (np.sqrt(lengths) + 1) * (1 + 1e-9))
    assert np.all(out[constant] == 0.0)  # includes every length-1 segment
    assert np.all(out[lengths == 1] == 0.0)


@FEW
@given(data=ragged(SMALL_INTS), shift=st.integers(-10**6, 10**6), scale=st.floats(1e-3, 1e9),
       h=BANDWIDTH, weighting=WEIGHTING)
def test_weighted_skew_shift_and_scale_invariant(data, shift, scale, h, weighting):
    values, offsets, _ = data
    base = weighted_skew(values, offsets, h=h, weighting=weighting)
    # integer values stay exact under the shift; positive scaling keeps every order and tie
    np.testing.assert_allclose(weighted_skew(values + shift, offsets, h=h, weighting=weighting), base,
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(weighted_skew(values * scale, offsets, h=h, weighting=weighting), base,
                               rtol=1e-6, atol=1e-6)


@FEW
@given(data=ragged(st.one_of(SMALL_INTS, HUGE)), h=BANDWIDTH, weighting=WEIGHTING)
def test_weighted_skew_mirroring_flips_the_sign(data, h, weighting):
    values, offsets, _ = data
    out = weighted_skew(values, offsets, h=h, weighting=weighting)
    mirrored = weighted_skew(-values, offsets, h=h, weighting=weighting)
    if weighting == "none":
        np.testing.assert_array_equal(mirrored, -out)  # sums, medians and stds negate exactly
    else:
        # mirrored mid-rank CDFs agree up to one rounding, which the bump exponent amplifies by 1/h²;
        # in skew units that error grows with max|x| / std
        std = segment_std(values, offsets)
        scale = np.array([np.abs(s).max() for s in segments_of(values, offsets)])
        lengths = np.diff(offsets)
        rel = 100 * EPS * (1 / h**2 + lengths)
        tol = 1e-9 + rel * np.divide(scale, std, out=np.zeros_like(std), where=std > 0)
        assert np.all(np.abs(mirrored + out) <= tol)


def test_weighted_skew_sign_on_a_known_right_skew():
    values = np.array([0.0, 0.0, 0.0, 1.0, 1.0, 10.0])
    offsets = np.array([0, 6])
    assert weighted_skew(values, offsets)[0] > 0 and weighted_skew(-values, offsets)[0] < 0


@pytest.mark.parametrize("h", [1e-6, 1e-200])
def test_weighted_skew_narrow_bandwidth_stays_finite(h):
    # every Gaussian bump underflows to 0 for such h; the weights must not become 0/0
    values = np.array([0.0, 1.0, 5.0, 1.0, 2.0, 3.0, 10.0])
    out = weighted_skew(values, np.array([0, 3, 7]), h=h)
    assert np.isfinite(out).all() and np.all(out > 0)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_weighted_skew_non_finite_value_is_a_clear_error(bad):
    with pytest.raises(LmauditError, match="NaN or infinite"):
        weighted_skew(np.array([0.0, 1.0, bad, 2.0]), np.array([0, 2, 4]))


@pytest.mark.parametrize("h", [0.0, -1.0, np.nan, np.inf, "0.1", None])
def test_weighted_skew_bad_bandwidth_is_a_clear_error(h):
    with pytest.raises(LmauditError, match="bandwidth h"):
        weighted_skew(np.array([0.0, 1.0, 2.0]), np.array([0, 3]), h=h)


def test_weighted_skew_bad_weighting_and_empty_segment():
    with pytest.raises(LmauditError, match="weighting"):
        weighted_skew(np.array([0.0, 1.0]), np.array([0, 2]), weighting="cubic")
    with pytest.raises(LmauditError, match="at least one"):
        weighted_skew(np.array([0.0, 1.0]), np.array([0, 2, 2]))


# ---------------------------------------------------------------------------------------------
# 2. Segment reductions, Gap-K and every registered AR attack
# ---------------------------------------------------------------------------------------------


@SOME
@given(data=ragged(EXTREME), k=st.floats(1e-6, 1.0), window=st.integers(1, 6))
def test_segment_reductions_match_numpy(data, k, window):
    values, offsets, _ = data
    segs = segments_of(values, offsets)
    mag = np.array([max(np.abs(s).max(), 1e-300) for s in segs])
    S = len(segs)
    mean, med, std = segment_mean(values, offsets), segment_median(values, offsets), segment_std(values, offsets)
    ranks, low = segment_ranks(values, offsets), bottom_k_mean(values, offsets, k)
    for arr in (mean, med, std, ranks, low):
        assert np.isfinite(arr).all()
    assert mean.shape == med.shape == std.shape == low.shape == (S,)
    assert np.all(np.abs(mean - [s.mean() for s in segs]) <= 1e-12 * mag)
    np.testing.assert_array_equal(med, [np.median(s) for s in segs])
    assert np.all(np.abs(std - [s.std() for s in segs]) <= 1e-12 * mag)
    np.testing.assert_array_equal(ranks, np.concatenate([rankdata(s) for s in segs]))
    keep = [max(1, math.floor(k * len(s) + 1e-9)) for s in segs]
    expected_low = [np.sort(s)[:m].mean() for s, m in zip(segs, keep)]
    assert np.all(np.abs(low - expected_low) <= 1e-12 * mag)
    smoothed, sm_off = moving_average(values, offsets, window)
    assert np.isfinite(smoothed).all() and sm_off[-1] == len(smoothed) and len(sm_off) == S + 1
    for s, v in zip(segs, segments_of(smoothed, sm_off)):
        w = min(window, len(s))
        expected = np.convolve(s, np.ones(w) / w, mode="valid")
        assert len(v) == len(expected) and np.all(np.abs(v - expected) <= 1e-12 * np.abs(s).max() + 1e-300)


def test_segment_helpers_reject_bad_parameters_clearly():
    values, offsets = np.array([0.0, 1.0, 2.0]), np.array([0, 1, 3])
    for k in (0.0, -0.5, 1.5, np.nan, "0.2", None):
        with pytest.raises(LmauditError, match="k must be"):
            bottom_k_mean(values, offsets, k)
    for window in (0, -1, 2.5, "3", None):
        with pytest.raises(LmauditError, match="window must be"):
            moving_average(values, offsets, window)
    with pytest.raises(LmauditError, match="at least one"):
        segment_mean(values, np.array([0, 0, 3]))


GAPS = st.one_of(st.floats(-50.0, 0.0), st.sampled_from([0.0, -0.0, -1e-300, -1e30, -F32_MAX]))


@SOME
@given(data=ragged(GAPS), k=st.floats(1e-6, 1.0), window=st.integers(1, 6), smooth=st.sampled_from(SMOOTHING),
       seed=st.integers(0, 2**63 - 1))
def test_gap_k_scores_finite_and_between_segment_extremes(data, k, window, smooth, seed):
    gaps, offsets, constant = data
    keys = np.random.default_rng(seed).integers(0, 2**63, size=len(offsets) - 1, dtype=np.uint64)
    out = gap_k_scores(gaps, offsets, keys, k=k, window=window, smooth=smooth)
    assert out.shape == (len(offsets) - 1,) and np.isfinite(out).all()
    segs = segments_of(gaps, offsets)
    lo = np.array([s.min() for s in segs])
    hi = np.array([s.max() for s in segs])
    tol = 1e-12 * np.maximum(np.abs(lo), 1e-300)
    assert np.all(out >= lo - tol) and np.all(out <= hi + tol)  # averages of averages of the segment
    np.testing.assert_allclose(out[constant], lo[constant], rtol=1e-12)


def test_gap_k_unknown_smoothing_is_a_clear_error():
    with pytest.raises(LmauditError, match="smooth must be one of"):
        gap_k_scores(np.zeros(3), np.array([0, 3]), np.zeros(1, dtype=np.uint64), k=0.2, window=3, smooth="wavy")


LOGP = st.one_of(st.floats(-50.0, 0.0, width=32), st.floats(-F32_MAX, 0.0, width=32),
                 st.sampled_from([0.0, -1e-30, -1e30, -F32_MAX]))


@st.composite
def ar_stats(draw, n_samples: int | None = None):
    """A valid ARStats: logp ≤ top1_logp ≤ 0, sigma ≥ 1e-8; length-1 samples and constant logp are common."""
    n = n_samples or draw(st.integers(1, 5))
    lengths = draw(st.one_of(st.just([1] * n), st.lists(st.integers(1, 6), min_size=n, max_size=n)))
    n_tok = sum(lengths)

    def column(elements):
        if draw(st.booleans()):
            return np.full(n_tok, draw(elements), dtype=np.float32)  # constant over every token
        return np.array(draw(st.lists(elements, min_size=n_tok, max_size=n_tok)), dtype=np.float32)

    logp = column(LOGP)
    top1 = np.maximum(logp, column(LOGP)) if draw(st.booleans()) else logp.copy()  # top-1 may be the token itself
    mu = column(LOGP)
    sigma = column(st.floats(float(np.float32(1e-8)), 1e4, width=32))  # probes clamp σ ≥ 1e-8
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    zlib_len = np.array(draw(st.lists(st.integers(1, 10**6), min_size=n, max_size=n)), dtype=np.int64)
    keys = np.array(draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n)), dtype=np.uint64)
    return ARStats(logp=logp, top1_logp=top1, mu=mu, sigma=sigma, entropy=-mu, offsets=offsets, zlib_len=zlib_len,
                   sample_keys=keys, n_tokens=np.asarray(lengths, dtype=np.int64) + 1)


@st.composite
def attack_inputs(draw):
    target = draw(ar_stats())
    reference = draw(ar_stats(target.n_samples))  # its own tokenizer: its own lengths
    k = draw(st.integers(2, 4))
    phi = np.array(draw(st.lists(st.one_of(st.floats(-50.0, 0.0), st.just(-1e30)),
                                 min_size=k * target.n_samples, max_size=k * target.n_samples))).reshape(k, -1)
    is_in = np.array(draw(st.lists(st.booleans(), min_size=phi.size, max_size=phi.size))).reshape(k, -1)
    is_in[0] = False  # every sample has an OUT shadow
    return target, reference, ShadowStats(phi, is_in)


AR_ATTACKS = list_attacks("ar")


@SOME
@given(inputs=attack_inputs())
def test_every_ar_attack_is_finite_on_hostile_stats(inputs):
    target, reference, shadows = inputs
    for spec in AR_ATTACKS:
        scores = spec(records_for(spec, target, reference, shadows))
        assert scores.shape == (target.n_samples,) and scores.dtype == np.float64, spec.name
        assert np.isfinite(scores).all(), spec.name


@FEW
@given(c=st.floats(-1e4, 0.0, width=32), lengths=st.lists(st.integers(1, 5), min_size=1, max_size=5))
def test_constant_logp_gives_known_scores(c, lengths):
    n_tok, n = sum(lengths), len(lengths)
    flat = np.full(n_tok, c, dtype=np.float32)
    stats = ARStats(logp=flat, top1_logp=flat.copy(), mu=flat.copy(), sigma=np.ones(n_tok, np.float32), entropy=-flat,
                    offsets=np.r_[0, np.cumsum(lengths)].astype(np.int64), zlib_len=np.full(n, 7),
                    sample_keys=np.arange(n, dtype=np.uint64), n_tokens=np.asarray(lengths, dtype=np.int64) + 1)
    by_name = {s.name: s for s in AR_ATTACKS}
    np.testing.assert_allclose(by_name["loss"](stats), float(c), rtol=1e-12)
    np.testing.assert_allclose(by_name["min_k"](stats), float(c), rtol=1e-12)
    np.testing.assert_array_equal(by_name["gap_k"](stats), 0.0)  # every token is the top-1 token
    np.testing.assert_array_equal(by_name["min_k_pp"](stats), 0.0)  # log p = μ
    np.testing.assert_array_equal(by_name["reference"](stats.with_companions(reference=stats)), 0.0)


@pytest.mark.parametrize("name,params,needle", [
    ("min_k", {"k": 0.0}, "k must be"), ("min_k", {"k": 2.0}, "k must be"),
    ("min_k_pp", {"k": float("nan")}, "k must be"),
    ("gap_k", {"window": 0}, "window must be"), ("gap_k", {"window": 2.5}, "window must be"),
    ("gap_k", {"k": -1.0}, "k must be"),
])
def test_bad_attack_parameters_are_clear_errors(name, params, needle):
    from lmaudit.attacks import get_attack

    stats = ARStats(logp=np.zeros(3, np.float32), top1_logp=np.zeros(3, np.float32), mu=np.zeros(3, np.float32),
                    sigma=np.ones(3, np.float32), entropy=np.zeros(3, np.float32), offsets=np.array([0, 3]),
                    zlib_len=np.array([5]), sample_keys=np.array([1], dtype=np.uint64), n_tokens=np.array([4]))
    with pytest.raises(LmauditError, match=needle):
        get_attack(name, "ar")(stats, **params)


def test_rmia_nan_gamma_is_a_clear_error():
    from lmaudit.attacks import get_attack

    stats = ARStats(logp=np.array([-1.0, -2.0], np.float32), top1_logp=np.zeros(2, np.float32),
                    mu=np.zeros(2, np.float32), sigma=np.ones(2, np.float32), entropy=np.zeros(2, np.float32),
                    offsets=np.array([0, 1, 2]), zlib_len=np.array([5, 5]), sample_keys=np.array([1, 2], np.uint64),
                    n_tokens=np.array([2, 2]))
    shadows = ShadowStats(np.array([[-1.5, -1.5], [-1.0, -1.0]]), np.array([[False, False], [True, True]]))
    with pytest.raises(LmauditError):
        get_attack("rmia", "ar")(stats.with_companions(shadows=shadows), gamma=float("nan"))


# ---------------------------------------------------------------------------------------------
# 2b. Every registered DLM attack on hostile masked-probe records
# ---------------------------------------------------------------------------------------------

DLM_ATTACKS = list_attacks("dlm")  # read from the registry: a new DLM attack is covered without editing this file
SIGMA = st.floats(float(np.float32(1e-8)), 1e4, width=32)  # probes clamp σ ≥ 1e-8


@st.composite
def masked_stats(draw, plan: MaskPlan):
    """A valid MaskedStats laid out by ``plan`` (as the probe would): 1-4 samples of 1-10 scorable tokens,
    log p ≤ top-1 log p ≤ 0 (float32, from 0 down to -F32_MAX), σ ≥ 1e-8, for target and reference.

    A column is constant (over every entry) or drawn from a small pool of hostile values."""
    n = draw(st.integers(1, 4))
    lengths = draw(st.one_of(st.just([1] * n), st.lists(st.integers(1, 10), min_size=n, max_size=n)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    cols = {k: [] for k in ("pattern", "position", "ratio")}
    offsets, n_patterns = [0], []
    for i, L in enumerate(lengths):
        pats = plan.patterns(L, seed=seed + i)
        for j, pos in enumerate(pats):
            cols["pattern"].append(np.full(len(pos), j))
            cols["position"].append(np.sort(pos))
            cols["ratio"].append(np.full(len(pos), len(pos) / L))
        offsets.append(offsets[-1] + sum(len(p) for p in pats))
        n_patterns.append(len(pats))
    n_entries = offsets[-1]

    def column(elements):
        pool = draw(st.lists(elements, min_size=1, max_size=5))
        return np.asarray(pool, dtype=np.float32)[rng.integers(0, len(pool), n_entries)]

    def side():
        logp = column(LOGP)
        top1 = np.maximum(logp, column(LOGP)) if draw(st.booleans()) else logp.copy()
        return logp, top1, column(LOGP), column(SIGMA)

    (logp, top1, mu, sigma), (r_logp, r_top1, r_mu, r_sigma) = side(), side()
    return MaskedStats(
        offsets=np.asarray(offsets, dtype=np.int64), pattern=np.concatenate(cols["pattern"]).astype(np.int32),
        position=np.concatenate(cols["position"]).astype(np.int32),
        ratio=np.concatenate(cols["ratio"]).astype(np.float32), logp=logp, top1_logp=top1, mu=mu, sigma=sigma,
        ref_logp=r_logp, ref_top1_logp=r_top1, ref_mu=r_mu, ref_sigma=r_sigma,
        n_positions=np.asarray(lengths, dtype=np.int64), n_patterns=np.asarray(n_patterns, dtype=np.int64),
        sample_keys=rng.integers(0, 2**63, n, dtype=np.uint64), n_tokens=np.asarray(lengths, dtype=np.int64),
    )


@st.composite
def dlm_attack_inputs(draw):
    spec = draw(st.sampled_from(DLM_ATTACKS))
    budget = draw(st.integers(3, 6))  # a cyclic round of Q-Skew's default ρ needs 3 forwards
    return spec, draw(masked_stats(spec.probe(spec.params, budget)))


def test_dlm_attacks_are_read_from_the_registry():
    assert len(DLM_ATTACKS) >= 8 and all(s.kind == "dlm" for s in DLM_ATTACKS)
    assert {"q_skew", "loss", "calibration", "sama", "secmi_dlm"} <= {s.name for s in DLM_ATTACKS}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs=dlm_attack_inputs())
def test_every_dlm_attack_is_finite_on_hostile_masked_stats(inputs):
    """Valid records (as a probe writes them, however extreme the values) are scored, never refused:
    an LmauditError here is a failure too, so an attack that refuses everything cannot pass."""
    spec, stats = inputs
    scores = spec(stats)
    assert isinstance(scores, np.ndarray), spec.name
    assert scores.shape == (stats.n_samples,) and scores.dtype == np.float64, (spec.name, scores.shape, scores.dtype)
    assert np.isfinite(scores).all(), (spec.name, scores)


@pytest.mark.parametrize("spec", DLM_ATTACKS, ids=lambda s: s.name)
def test_every_dlm_attack_scores_a_one_token_sample(spec):
    """A sample with a single scorable token (every plan masks it in every pattern) still gets a finite score."""
    plan = spec.probe(spec.params, 16)
    pats = plan.patterns(1, seed=0)
    e = sum(len(p) for p in pats)
    flat = np.full(e, -2.0, np.float32)
    stats = MaskedStats(
        offsets=np.array([0, e]),
        pattern=np.concatenate([np.full(len(p), j) for j, p in enumerate(pats)]).astype(np.int32),
        position=np.zeros(e, np.int32), ratio=np.ones(e, np.float32), logp=flat, top1_logp=flat.copy(),
        mu=flat.copy(), sigma=np.ones(e, np.float32), ref_logp=flat - 1, ref_top1_logp=flat.copy(), ref_mu=flat.copy(),
        ref_sigma=np.ones(e, np.float32), n_positions=np.array([1]), n_patterns=np.array([len(pats)]),
        sample_keys=np.array([7], np.uint64), n_tokens=np.array([1]))
    scores = spec(stats)
    assert scores.shape == (1,) and scores.dtype == np.float64 and np.isfinite(scores).all(), spec.name


# ---------------------------------------------------------------------------------------------
# 3. Metrics
# ---------------------------------------------------------------------------------------------


@st.composite
def labelled_scores(draw, scores=None):
    labels = draw(st.lists(st.integers(0, 1), min_size=2, max_size=40).filter(lambda y: 0 < sum(y) < len(y)))
    elements = scores or st.one_of(
        st.integers(-3, 3).map(float),  # many ties
        st.floats(allow_nan=False, allow_infinity=False),  # the whole float range
        st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 1.7e308, -1.7e308]),
    )
    s = draw(st.lists(elements, min_size=len(labels), max_size=len(labels)))
    return np.array(labels), np.array(s, dtype=np.float64)


def brute_force_tpr_at_fpr(y, s, fpr):
    pos, neg = s[y == 1], s[y == 0]
    best = 0.0
    for t in np.r_[np.inf, s]:
        if (neg >= t).mean() <= fpr + 1e-12:
            best = max(best, (pos >= t).mean())
    return best


@SOME
@given(data=labelled_scores())
def test_auc_and_roc_match_scikit_learn(data):
    from sklearn.metrics import roc_auc_score
    from sklearn.metrics import roc_curve as sk_roc_curve

    y, s = data
    a = auc(y, s)
    assert 0.0 <= a <= 1.0
    fpr, tpr, thr = roc_curve(y, s)
    with np.errstate(all="ignore"):  # scikit-learn's fast finiteness check sums the scores, which may overflow
        expected = roc_auc_score(y, s)
        sk_fpr, sk_tpr, sk_thr = sk_roc_curve(y, s, drop_intermediate=False)
    assert a == pytest.approx(expected, abs=1e-12)
    np.testing.assert_allclose(fpr, sk_fpr, atol=1e-15)
    np.testing.assert_allclose(tpr, sk_tpr, atol=1e-15)
    np.testing.assert_array_equal(thr[1:], sk_thr[1:])
    assert np.isfinite(fpr).all() and np.isfinite(tpr).all() and np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)


@SOME
@given(data=labelled_scores(), fprs=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5))
def test_tpr_at_fpr_matches_brute_force_and_is_monotone(data, fprs):
    y, s = data
    fprs = sorted(fprs)
    tprs = [tpr_at_fpr(y, s, fpr=f) for f in fprs]
    assert all(0.0 <= t <= 1.0 for t in tprs) and tprs == sorted(tprs)
    for f, t in zip(fprs, tprs):
        assert t == pytest.approx(brute_force_tpr_at_fpr(y, s, f), abs=1e-12)
    assert tpr_at_fpr(y, s, fpr=1.0) == 1.0


@FEW
@given(data=labelled_scores(), value=st.floats(allow_nan=False, allow_infinity=False))
def test_all_equal_scores_are_chance(data, value):
    y, _ = data
    s = np.full(len(y), value)
    assert auc(y, s) == 0.5
    fpr, tpr, _ = roc_curve(y, s)
    np.testing.assert_array_equal(fpr, [0.0, 1.0])
    np.testing.assert_array_equal(tpr, [0.0, 1.0])
    assert tpr_at_fpr(y, s, fpr=0.5) == 0.0
    out = summarize(y, s, n_resamples=20)
    assert out["auc"] == 0.5 and out["auc_ci95"] == [0.5, 0.5]


@FEW
@given(data=labelled_scores(), seed=st.integers(0, 2**32 - 1))
def test_summarize_is_finite_and_in_range(data, seed):
    y, s = data
    out = summarize(y, s, n_resamples=30, seed=seed)
    lo, hi = out["auc_ci95"]
    assert 0.0 <= lo <= hi <= 1.0
    assert math.isfinite(out["auc"]) and 0.0 <= out["auc"] <= 1.0
    n_neg = int((np.asarray(y) == 0).sum())
    tprs = []
    for key, fpr in (("tpr@10%fpr", 0.1), ("tpr@1%fpr", 0.01), ("tpr@0.1%fpr", 0.001)):
        if fpr * n_neg < 1:  # finer than 1/n_nonmembers: not measured, and said why
            assert out[key] is None and "non-members" in out["unresolved"][key]
        else:
            assert math.isfinite(out[key]) and 0.0 <= out[key] <= 1.0
            tprs.append(out[key])
    assert tprs == sorted(tprs, reverse=True)


ALL_METRICS = [
    lambda y, s: auc(y, s), lambda y, s: roc_curve(y, s), lambda y, s: tpr_at_fpr(y, s, fpr=0.1),
    lambda y, s: auc_bootstrap_ci(y, s, n_resamples=10), lambda y, s: summarize(y, s, n_resamples=10),
]


@pytest.mark.parametrize("metric", ALL_METRICS)
@pytest.mark.parametrize("y", [[1, 1, 1], [0, 0, 0, 0], [1]])
def test_single_class_is_a_clear_error(metric, y):
    with pytest.raises(LmauditError, match="single class"):
        metric(np.array(y), np.arange(len(y), dtype=float))


@pytest.mark.parametrize("metric", ALL_METRICS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_score_is_a_clear_error(metric, bad):
    with pytest.raises(LmauditError, match="NaN or infinite"):
        metric(np.array([0, 1, 0, 1]), np.array([0.1, bad, 0.3, 0.4]))


@pytest.mark.parametrize("metric", ALL_METRICS)
@pytest.mark.parametrize("y,s,needle", [
    ([0, 1], ["a", "b"], "scores must be numbers"),
    ([0, 1], [None, 1.0], "NaN or infinite"),
    ([0, 1, 2], [1.0, 2.0, 3.0], "labels must be"),
    ([0.0, 0.5], [1.0, 2.0], "labels must be"),
    ([0, 1], [1.0, 2.0, 3.0], "equal length"),
    ([[0, 1]], [[1.0, 2.0]], "1-D"),
])
def test_malformed_labels_and_scores_are_clear_errors(metric, y, s, needle):
    with pytest.raises(LmauditError, match=needle):
        metric(y, s)


@pytest.mark.parametrize("kwargs,needle", [
    ({"n_resamples": 0}, "n_resamples"), ({"n_resamples": -5}, "n_resamples"), ({"n_resamples": 2.5}, "n_resamples"),
    ({"level": 0.0}, "level"), ({"level": 1.5}, "level"), ({"level": float("nan")}, "level"),
])
def test_bootstrap_bad_parameters_are_clear_errors(kwargs, needle):
    with pytest.raises(LmauditError, match=needle):
        auc_bootstrap_ci([0, 1, 0, 1], [0.1, 0.2, 0.3, 0.4], **kwargs)


@pytest.mark.parametrize("fpr", [-0.1, 1.1, float("nan"), "0.1", None])
def test_tpr_at_bad_fpr_is_a_clear_error(fpr):
    with pytest.raises(LmauditError, match="fpr must be"):
        tpr_at_fpr([0, 1], [0.1, 0.2], fpr=fpr)


# ---------------------------------------------------------------------------------------------
# 4. Set-level audits
# ---------------------------------------------------------------------------------------------


@st.composite
def audit_sets(draw):
    d = draw(st.integers(1, 5))
    elements = st.one_of(st.integers(-3, 3).map(float), st.floats(-1e3, 1e3))
    scale = 10.0 ** draw(st.integers(-6, 12))
    sets = []
    for _ in range(3):
        n = draw(st.integers(2, 6))
        x = np.array(draw(st.lists(elements, min_size=n * d, max_size=n * d))).reshape(n, d)
        if draw(st.booleans()):
            x = np.repeat(x[:1], n, axis=0)  # every row duplicated
        sets.append(x)
    if draw(st.booleans()):
        j = draw(st.integers(0, d - 1))
        for x in sets:
            x[:, j] = 2.5  # a constant column
    if draw(st.integers(0, 5)) == 0:
        sets[1] = sets[0].copy()  # identical reference sets
    return [x * scale for x in sets]


INVALID = {  # a way to break a valid input -> what the error must say
    "nan": "NaN or infinite", "inf": "NaN or infinite", "one-row": "at least 2 rows",
    "dims": "feature dimensions differ",
}


@st.composite
def audit_inputs(draw):
    """(sets, problem): valid sets (problem None) or sets broken in one of the ways of ``INVALID``."""
    sets = draw(audit_sets())
    problem = draw(st.one_of(st.none(), st.none(), st.sampled_from(sorted(INVALID))))
    which = draw(st.integers(0, 2))
    if problem in ("nan", "inf"):
        x = sets[which].copy()
        x[draw(st.integers(0, len(x) - 1)),
          draw(st.integers(0, x.shape[1] - 1))] = np.nan if problem == "nan" else -np.inf
        sets[which] = x
    elif problem == "one-row":
        sets[which] = sets[which][:1]
    elif problem == "dims":
        sets[which] = np.hstack([sets[which], sets[which][:, :1]])
    return sets, problem


def _normalised_references(sets):
    """Members and non-members divided by their largest |value| (ρ and the checks below are scale-free)."""
    M, N = (np.asarray(x, dtype=np.float64) for x in sets[:2])
    top = max(np.abs(M).max(), np.abs(N).max())
    return (M / top, N / top) if top > 0 else (M, N)


def far_beyond_references(sets) -> bool:
    """A suspect set more than 1e40 times the reference sets' largest |value| (the estimators refuse beyond 1e50
    after their own scaling): fourth powers of its features cannot be formed."""
    top = max(np.abs(np.asarray(x, dtype=np.float64)).max() for x in sets[:2])
    return float(np.abs(np.asarray(sets[2], dtype=np.float64)).max()) > 1e40 * top


def smi_refusal_is_justified(sets, message="") -> bool:
    """Naive check, with a wide margin over the estimator's own tolerance (1e-10): SMI may call the reference
    sets indistinguishable only when their means and covariances (nearly) agree: ‖d‖⁴ and ‖G‖² tiny next to
    ‖Σ_m‖² + ‖Σ_n‖²; it may refuse a suspect set on another scale altogether."""
    if "times larger" in message:
        return far_beyond_references(sets)
    M, N = _normalised_references(sets)
    Sm, Sn = (np.atleast_2d(np.cov(X, rowvar=False)) for X in (M, N))
    d = N.mean(axis=0) - M.mean(axis=0)
    G = Sn - Sm + np.outer(d, d)
    scale = float(np.sum(Sm * Sm) + np.sum(Sn * Sn))
    tol = 1e-6 * scale + 1e-24  # features are at most 1 here: rounding alone stays far below 1e-24
    return float(d @ d) ** 2 <= tol and float(np.sum(G * G)) <= tol


def smi_m_refusal_is_justified(sets, kernel, factor, message) -> bool:
    """Naive kernel means from full matrices: SMI-M may refuse only when the median distance of m ∪ n is
    (nearly) 0 (no bandwidth) or the U-statistic MMD² of the reference sets is (nearly) 0 or negative."""
    if "times larger" in message:
        return far_beyond_references(sets)
    M, N = _normalised_references(sets)
    dist = pdist(np.vstack([M, N]))
    if kernel != "linear" and float(np.median(dist)) <= 1e-6:  # no bandwidth: either refusal is right
        return True
    if "median pairwise distance" in message:
        return False
    if kernel == "linear":
        k, scale = (lambda X, Y: X @ Y.T), float(np.mean(np.sum(M * M, 1)) + np.mean(np.sum(N * N, 1)))
    else:
        h = float(np.median(dist)) * factor
        sq = lambda X, Y: np.maximum(np.sum((X[:, None, :] - Y[None, :, :]) ** 2, -1), 0.0)  # noqa: E731
        k = (lambda X, Y: np.exp(-sq(X, Y) / (2 * h * h))) if kernel == "rbf" else (
            lambda X, Y: np.exp(-np.sqrt(sq(X, Y)) / h))
        scale = 1.0

    def within(X):  # U-statistic: i = j left out
        K = k(X, X)
        return (K.sum() - np.trace(K)) / (len(X) * (len(X) - 1))

    return within(M) + within(N) - 2 * float(k(N, M).mean()) <= 1e-6 * scale + 1e-12


def check_estimate(call, bootstrap, *, problem=None, justified=lambda message: False):
    """A finite, consistent estimate; or the LmauditError that ``problem`` (an ``INVALID`` key) calls for; or,
    on valid input, a refusal ``justified(message)`` accepts. Any other outcome fails."""
    try:
        r = call()
    except LmauditError as exc:
        message = str(exc)
        if problem is not None:
            assert INVALID[problem] in message, (problem, message)
        else:
            assert any(m in message for m in ("indistinguishable", "median pairwise distance", "times larger")), message
            assert justified(message), f"refused valid input: {message}"
        return None
    assert problem is None, f"accepted invalid input ({problem})"
    assert math.isfinite(r.rho) and 0.0 <= r.rho <= 1.0
    assert math.isfinite(r.rho_unclipped)
    assert r.anomaly == (r.rho_unclipped < -r.details["anomaly_tol"] or r.rho_unclipped > 1 + r.details["anomaly_tol"])
    lo, hi = r.ci90
    if bootstrap:
        assert 0.0 <= lo <= hi <= 1.0
    else:
        assert math.isnan(lo) and math.isnan(hi)
    return r


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs=audit_inputs(), bootstrap=st.sampled_from([0, 5]))
def test_smi_finite_or_clear_error(inputs, bootstrap):
    sets, problem = inputs
    check_estimate(lambda: smi(*sets, bootstrap=bootstrap), bootstrap, problem=problem,
                   justified=lambda message: smi_refusal_is_justified(sets, message))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs=audit_inputs(), bootstrap=st.sampled_from([0, 5]),
       kernel=st.sampled_from(["rbf", "laplacian", "linear"]), factor=st.floats(0.1, 10.0))
def test_smi_m_finite_or_clear_error(inputs, bootstrap, kernel, factor):
    sets, problem = inputs
    r = check_estimate(lambda: smi_m(*sets, bootstrap=bootstrap, kernel=kernel, bandwidth_factor=factor), bootstrap,
                       problem=problem,
                       justified=lambda message: smi_m_refusal_is_justified(sets, kernel, factor, message))
    if r is not None:
        assert r.rho == min(max(r.rho_unclipped, 0.0), 1.0)  # smi-m clips its closed form


def test_an_estimator_that_refuses_valid_input_fails_the_check():
    """The check itself: a refusal of clearly distinguishable reference sets is not accepted."""
    sets = [x.astype(float) for x in SCALE_SETS]

    def refuse():
        raise LmauditError("the reference sets (members, non-members) are indistinguishable")

    assert not smi_refusal_is_justified(sets)
    with pytest.raises(AssertionError, match="refused valid input"):
        check_estimate(refuse, 0, justified=lambda message: smi_refusal_is_justified(sets))
    for kernel in ("rbf", "laplacian", "linear"):
        assert not smi_m_refusal_is_justified(sets, kernel, 1.0, "indistinguishable")
    same = [sets[0], sets[0].copy(), sets[2]]
    assert smi_refusal_is_justified(same) and smi_m_refusal_is_justified(same, "linear", 1.0, "indistinguishable")


def test_smi_identical_reference_sets_say_indistinguishable():
    m = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]])
    for call in (lambda: smi(m, m.copy(), m, bootstrap=0), lambda: smi_m(m, m.copy(), m, bootstrap=0, kernel="linear")):
        with pytest.raises(LmauditError, match="indistinguishable"):
            call()


SCALE_SETS = (np.array([[0.0], [1.0]]), np.array([[3.0], [5.0]]), np.array([[1.0], [4.0]]))


def test_smi_huge_feature_scale_is_finite():
    sets = [x * 1e100 for x in SCALE_SETS]
    with np.errstate(all="ignore"):
        r = check_estimate(lambda: smi(*sets, bootstrap=0), 0, justified=lambda message: smi_refusal_is_justified(sets))
    assert r is not None and r.rho == pytest.approx(smi(*SCALE_SETS, bootstrap=0).rho, abs=1e-9)


def test_smi_tiny_feature_scale_matches_unit_scale():
    expected = smi(*SCALE_SETS, bootstrap=0).rho
    assert smi(*(x * 1e-100 for x in SCALE_SETS), bootstrap=0).rho == pytest.approx(expected, abs=1e-9)


# ---------------------------------------------------------------------------------------------
# 5. (n, p)-discoverable arithmetic
# ---------------------------------------------------------------------------------------------

P_HAT = st.one_of(
    st.floats(0.0, 1.0),  # includes subnormals
    st.sampled_from([0.0, 1.0, 5e-324, 2.2250738585072014e-308, 1e-300, 1e-12, 0.5, 1 - 2**-53]),
)
N_QUERIES = st.one_of(st.integers(1, 10**12), st.floats(1.0, 1e12), st.sampled_from([1, 10**12]))
TARGET_P = st.floats(1e-9, 1 - 1e-9)


@SOME
@given(p_hat=P_HAT, n1=N_QUERIES, n2=N_QUERIES)
def test_success_within_in_unit_interval_and_monotone_in_n(p_hat, n1, n2):
    n1, n2 = sorted((n1, n2))
    s1, s2 = float(success_within(p_hat, n1)), float(success_within(p_hat, n2))
    assert 0.0 <= s1 <= 1.0 and 0.0 <= s2 <= 1.0
    assert s1 <= s2 * (1 + 4 * EPS)
    assert float(success_within(p_hat, 1)) == pytest.approx(p_hat, rel=1e-12, abs=0)
    if p_hat == 0.0:
        assert s2 == 0.0
    if p_hat == 1.0:
        assert s1 == 1.0


@SOME
@given(p1=P_HAT, p2=P_HAT, n=N_QUERIES)
def test_success_within_monotone_in_p_hat(p1, p2, n):
    p1, p2 = sorted((p1, p2))
    assert float(success_within(p1, n)) <= float(success_within(p2, n)) * (1 + 1e-15)


@SOME
@given(p_hat=P_HAT, n=st.one_of(st.integers(1, 10**12), st.sampled_from([1, 2, 10**12])), p=TARGET_P)
def test_discoverable_agrees_with_success_within(p_hat, n, p):
    reached = float(success_within(p_hat, n))
    flag = bool(discoverable(p_hat, n=n, p=p))
    if flag != (reached >= p):
        assert abs(reached - p) <= 1e-9, (p_hat, n, p, reached)  # only at the floating-point boundary
    need = float(queries_needed(p_hat, p))
    assert need >= 1.0 and not math.isnan(need)
    if p_hat == 0.0:
        assert need == math.inf and not flag
    if math.isfinite(need) and need <= 1e15:
        assert float(success_within(p_hat, need)) >= p - 1e-9
        if need > 1:
            assert float(success_within(p_hat, need - 1)) < p + 1e-9


BAD_P_HAT = st.one_of(st.floats(max_value=-5e-324), st.floats(min_value=1.0 + 2**-52), st.just(float("nan")))


@FEW
@given(bad=BAD_P_HAT)
def test_invalid_p_hat_is_a_clear_error(bad):
    for call in (lambda: success_within([0.5, bad], 10), lambda: queries_needed([bad, 0.1], 0.5),
                 lambda: discoverable(np.array([bad]), n=10, p=0.5)):
        with pytest.raises(LmauditError, match=r"\[0, 1\]"):
            call()


@pytest.mark.parametrize("n", [0, 0.5, -3, float("nan"), "ten", [1, float("nan")]])
def test_invalid_query_budget_is_a_clear_error(n):
    with pytest.raises(LmauditError, match="query budget n"):
        success_within(0.5, n)
    with pytest.raises(LmauditError, match="query budget n"):
        discoverable([0.5], n=n, p=0.5)


@pytest.mark.parametrize("p", [0.0, 1.0, -0.5, float("nan"), "0.5"])
def test_invalid_target_probability_is_a_clear_error(p):
    with pytest.raises(LmauditError, match="p must be in"):
        queries_needed(0.5, p)


def test_unbounded_budget_on_a_zero_probability_record():
    # p̂ = 0 with n = inf is 0·inf inside the formula; the answer is still 0
    assert float(success_within(0.0, np.inf)) == 0.0
    assert float(success_within(1e-300, np.inf)) == 1.0


@SOME
@given(d=st.lists(st.integers(0, 1000), min_size=2, max_size=30), eps=st.lists(st.integers(-5, 1100), min_size=1,
                                                                                max_size=6))
def test_gaussian_relaxed_rate_in_range_and_monotone(d, eps):
    eps = sorted(eps)
    predicted, empirical, mu, sigma = gaussian_relaxed_rate(d, eps)
    for arr in (predicted, empirical):
        assert arr.shape == (len(eps),) and np.isfinite(arr).all() and np.all((arr >= 0) & (arr <= 1))
        assert np.all(np.diff(arr) >= 0)
    assert math.isfinite(mu) and sigma >= 1e-6
    if len(set(d)) == 1:  # constant distance: a step at that value
        np.testing.assert_array_equal(predicted, [1.0 if e >= d[0] else 0.0 for e in eps])
        np.testing.assert_array_equal(empirical, predicted)


@pytest.mark.parametrize("d,eps", [([1.0, float("nan")], [1]), ([1.0, 2.0], [float("nan")]), ([1.0, np.inf], [1]),
                                   ([1.0, 2.0], [0, -np.inf])])
def test_gaussian_relaxed_rate_non_finite_is_a_clear_error(d, eps):
    with pytest.raises(LmauditError, match="finite"):
        gaussian_relaxed_rate(d, eps)


def test_gaussian_relaxed_rate_too_few_generations():
    for d in ([], [3.0], [[1.0, 2.0]]):
        with pytest.raises(LmauditError, match="at least 2"):
            gaussian_relaxed_rate(d, [1])


# ---------------------------------------------------------------------------------------------
# 6. Mask specs
# ---------------------------------------------------------------------------------------------

SPEC_TEXT = st.one_of(
    st.text(max_size=30),
    st.builds(lambda k, sep, arg: k + sep + arg, st.sampled_from(KINDS + ("", "Span", " suffix")),
              st.sampled_from([":", "", "::", " : "]),
              st.one_of(st.text(max_size=20), st.text(alphabet="0123456789-,.:+e _", max_size=20),
                        st.sampled_from(["nan", "inf", "-1", "0", "1e999", "9" * 5000, "1_0", "0x10", "١٢"]))),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=SPEC_TEXT, n_tokens=st.integers(0, 40), text=st.text(max_size=40), seed=st.integers(0, 2**32))
def test_mask_spec_on_random_text_raises_only_lmaudit_errors(spec, n_tokens, text, seed):
    try:
        mask = MaskSpec.parse(spec)
    except LmauditError:
        return
    assert mask.kind in KINDS
    offsets = [(min(i, len(text)), min(i + 1, len(text))) for i in range(n_tokens)]
    try:
        pos = mask.resolve(n_tokens, record_id="r", text=text, fields={"email": text[:3]}, offsets=offsets, seed=seed)
    except LmauditError as exc:
        assert isinstance(exc, DataError) and "record 'r'" in str(exc)
        return
    assert pos.dtype == np.int64 and 1 <= len(pos) < n_tokens
    assert np.all(np.diff(pos) > 0) and pos[0] >= 0 and pos[-1] < n_tokens


@st.composite
def disjoint_spans(draw):
    spans, start = [], 0
    for gap, width in draw(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 6)), min_size=1, max_size=6)):
        a = start + gap
        spans.append((a, a + width))
        start = a + width
    return spans


@SOME
@given(spans=disjoint_spans(), extra=st.integers(0, 5), order=st.randoms(use_true_random=False),
       sep=st.sampled_from([",", ", ", " ,"]))
def test_valid_span_lists_resolve_to_sorted_unique_in_range_positions(spans, extra, order, sep):
    shuffled = list(spans)
    order.shuffle(shuffled)
    spec = "span:" + sep.join(f"{a}-{b}" for a, b in shuffled)
    mask = MaskSpec.parse(spec)
    assert mask.spans == tuple(spans)
    n_tokens = spans[-1][1] + extra
    expected = [i for a, b in spans for i in range(a, b)]
    if len(expected) == n_tokens:
        with pytest.raises(DataError, match="covers every token"):
            mask.resolve(n_tokens, record_id="r")
        return
    pos = mask.resolve(n_tokens, record_id="r")
    assert pos.tolist() == expected
    assert len(set(expected)) == len(expected) and all(0 <= i < n_tokens for i in expected)
    if spans[-1][1] > 1:
        with pytest.raises(DataError, match="ends at token"):
            mask.resolve(spans[-1][1] - 1, record_id="r")


@FEW
@given(spans=disjoint_spans())
def test_overlapping_spans_are_a_clear_error(spans):
    a, b = spans[-1]
    spec = "span:" + ",".join(f"{x}-{y}" for x, y in spans + [(b - 1, b + 2)])
    with pytest.raises(LmauditError, match="overlap"):
        MaskSpec.parse(spec)


@pytest.mark.parametrize("spec", ["suffix:1", "prefix:1", "random:0.5", "span:0-1", "pii"])
def test_record_without_tokens_is_a_clear_error(spec):
    with pytest.raises(DataError, match="record 'r'"):
        MaskSpec.parse(spec).resolve(0, record_id="r", text="", fields={"email": "a", "phone": "b"}, offsets=[])


def test_a_suspect_set_on_another_scale_is_refused_not_overflowed():
    """Found by the property test above: references of size 1e-308 against a suspect set of size 1."""
    sets = [np.array([[0.0], [0.0]]), np.array([[0.0], [1.11253693e-308]]), np.array([[0.0], [1.0]])]
    for estimate in (smi, smi_m):
        with pytest.raises(LmauditError, match="1e50 times larger than the reference sets"):
            estimate(*sets, bootstrap=0)
