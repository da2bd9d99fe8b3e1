"""Each AR attack on hand-built ARStats equals hand-computed numbers."""

import numpy as np
import pytest

from lmaudit.attacks import get_attack
from lmaudit.probes.records import ARStats


def stats(logp, top1, mu, sigma, offsets, zlib_len):
    f = lambda x: np.asarray(x, dtype=np.float32)  # noqa: E731
    return ARStats(logp=f(logp), top1_logp=f(top1), mu=f(mu), sigma=f(sigma), entropy=-f(mu),
                   offsets=np.asarray(offsets, dtype=np.int64), zlib_len=np.asarray(zlib_len, dtype=np.int64),
                   sample_keys=np.array([11, 22], dtype=np.uint64), n_tokens=np.diff(offsets) + 1)


# sample A: 5 tokens; sample B: 2 tokens
S = stats(
    logp=[-1, -2, -3, -4, -5, -0.5, -1.5],
    top1=[-1, -1, -1, -2, -2, -0.5, -0.5],
    mu=[-2, -2, -2, -2, -2, -1, -1],
    sigma=[1, 2, 1, 2, 1, 1, 1],
    offsets=[0, 5, 7],
    zlib_len=[10, 20],
)
REF = stats(logp=[-4] * 5 + [-2, -2], top1=[-1] * 7, mu=[-2] * 7, sigma=[1] * 7, offsets=[0, 5, 7], zlib_len=[10, 20])

# A: gaps g = [0, -0.5, -2, -1, -3]; windows of 3 → [-5/6, -7/6, -2]. B: g = [0, -1], shorter than 3 → mean -0.5
# A: z = (logp - mu)/sigma = [1, 0, -1, -1, -3]
CASES = [
    ("loss", {}, [-3.0, -1.0]),
    ("zlib", {}, [-0.3, -0.05]),
    ("min_k", {"k": 0.2}, [-5.0, -1.5]),
    ("min_k", {"k": 0.4}, [-4.5, -1.5]),
    ("min_k", {"k": 1.0}, [-3.0, -1.0]),
    ("min_k_pp", {"k": 0.4}, [-2.0, -0.5]),
    ("gap_k", {"k": 0.2}, [-2.0, -0.5]),
    ("gap_k", {"k": 0.7}, [(-2 - 7 / 6) / 2, -0.5]),
    ("gap_k", {"k": 1.0, "window": 2}, [np.mean([-0.25, -1.25, -1.5, -2.0]), -0.5]),
    ("gap_k", {"k": 0.4, "smooth": "none"}, [-2.5, -1.0]),
]


@pytest.mark.parametrize("name, params, expected", CASES)
def test_golden(name, params, expected):
    np.testing.assert_allclose(get_attack(name, "ar")(S, **params), expected, rtol=1e-6)


def test_reference_golden():
    # ref NLL − target NLL: A: 4 − 3 = 1; B: 2 − 1 = 1
    np.testing.assert_allclose(get_attack("reference", "ar")(S.with_companions(reference=REF)), [1.0, 1.0])


def test_shuffled_smoothing_is_a_permutation_then_smoothing():
    # with window 1 smoothing is the identity, so shuffling cannot change bottom-k
    a = get_attack("gap_k", "ar")
    np.testing.assert_allclose(a(S, window=1, smooth="shuffled"), a(S, smooth="none"))
    # with a full-length window the mean is order-free too
    np.testing.assert_allclose(a(S, window=5, k=1.0, smooth="shuffled"), a(S, window=5, k=1.0))


@pytest.mark.parametrize("tau, counts", [(1.5, [2, 0]), (0.75, [3, 1]), (3.0, [0, 0])])
def test_large_gap_counts_count_each_texts_tokens_whose_top1_gap_exceeds_tau(tau, counts):
    from lmaudit.attacks.gap_k import large_gap_counts

    large, totals = large_gap_counts(S, tau)  # A's gaps [0, -0.5, -2, -1, -3], B's [0, -1] (above)
    assert large.tolist() == counts and totals.tolist() == [5, 2]
