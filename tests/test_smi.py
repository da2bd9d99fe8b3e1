"""Set-level estimators SMI and SMI-M: accuracy, exactness of the fast paths, intervals, validation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import pdist

from lmaudit.audit.sets import standardise
from lmaudit.audit.smi import (
    KERNELS,
    SetEstimate,
    _counts,
    _minimise,
    _resample_indices,
    _smi_fit,
    _smim_fit,
    smi,
    smi_m,
)
from lmaudit.errors import LmauditError

D = 16
MU = np.full(D, 0.7)  # non-member mean shift
SCALE = np.linspace(0.5, 2.0, D)  # non-member standard deviations (members: 1)


def mixture(rho: float, n: int, *, seed: int, d: int = D) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Members ~ N(0, I), non-members ~ N(μ, diag(s²)); suspect: round(ρn) fresh non-member draws, rest members."""
    rng = np.random.default_rng(seed)
    mu, scale = MU[:d], SCALE[:: D // d][:d]
    members = rng.standard_normal((n, d))
    nonmembers = mu + scale * rng.standard_normal((n, d))
    k = round(rho * n)
    suspect = np.vstack([mu + scale * rng.standard_normal((k, d)), rng.standard_normal((n - k, d))])
    return members, nonmembers, suspect


# ---- naive references: every quantity formed explicitly -------------------------------------------


def naive_smi(M: np.ndarray, N: np.ndarray, U: np.ndarray) -> tuple[float, float]:
    """(clipped, unclipped) from explicit d×d matrices and numpy's polynomial roots."""
    Sm, Sn, Su = np.cov(M, rowvar=False), np.cov(N, rowvar=False), np.cov(U, rowvar=False)
    d = N.mean(axis=0) - M.mean(axis=0)
    B = np.outer(d, d)
    A, G = Su - Sm, Sn - Sm + B
    return naive_argmin(A, G, B)


def naive_argmin(A, G, B) -> tuple[float, float]:
    dot = lambda X, Y: float(np.sum(X * Y))  # noqa: E731
    f = lambda r: dot(A - r * G + r * r * B, A - r * G + r * r * B)  # noqa: E731
    roots = np.roots([2 * dot(B, B), -3 * dot(G, B), dot(G, G) + 2 * dot(A, B), -dot(A, G)])
    real = [r.real for r in roots if abs(r.imag) < 1e-9 * max(1.0, abs(r))]
    inside = [r for r in real if 0.0 <= r <= 1.0] + [0.0, 1.0]
    return min(inside, key=f), min(real, key=f)


def naive_smi_m(M, N, U, *, kernel: str, h: float | None) -> float:
    """Unclipped SMI-M from full kernel matrices built from explicit differences."""
    def k(X, Y):
        if kernel == "linear":
            return X @ Y.T
        dist = np.sqrt(((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1))
        return np.exp(-(dist**2) / (2 * h * h)) if kernel == "rbf" else np.exp(-dist / h)

    def within(X):  # U-statistic: i = j left out
        K = k(X, X)
        return (K.sum() - np.trace(K)) / (len(X) * (len(X) - 1))

    kmm, knn, knm = within(M), within(N), k(N, M).mean()
    return (k(U, N).mean() - k(U, M).mean() - knm + kmm) / (knn - 2 * knm + kmm)


@pytest.fixture(scope="module")
def mixtures() -> dict[float, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return {rho: mixture(rho, 2000, seed=int(rho * 100)) for rho in (0.0, 0.25, 0.5, 0.75, 1.0)}


# ---- accuracy on synthetic mixtures ------------------------------------------------------------


@pytest.mark.parametrize("rho", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_recovers_known_mixture_fraction(mixtures, rho):
    M, N, U = mixtures[rho]
    for est in (smi(M, N, U, bootstrap=50), smi_m(M, N, U, bootstrap=50)):
        assert isinstance(est, SetEstimate)
        assert abs(est.rho - rho) <= 0.05, (est.method, est.rho, rho)
        assert 0.0 <= est.ci90[0] <= est.ci90[1] <= 1.0
        assert not est.anomaly
        assert (est.n_members, est.n_nonmembers, est.n_suspect) == (2000, 2000, 2000)


@pytest.mark.parametrize("kernel", ["linear", "laplacian"])
def test_other_kernels_recover_mixture_fraction(mixtures, kernel):
    M, N, U = mixtures[0.25]
    est = smi_m(M, N, U, kernel=kernel, bootstrap=20)
    assert abs(est.rho - 0.25) <= 0.05
    assert est.details["kernel"] == kernel
    assert (est.details["bandwidth"] is None) == (kernel == "linear")


# ---- the cubic solution ------------------------------------------------------------------------


def _random_case(rng, rho0: float, d: int = 5):
    X, Y = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    Sm, Sn = X @ X.T / d + np.eye(d), Y @ Y.T / d + 0.5 * np.eye(d)
    v = rng.standard_normal(d) * rng.uniform(0.1, 1.5)
    B = np.outer(v, v)
    G = Sn - Sm + B
    E = rng.standard_normal((d, d))
    A = rho0 * G - rho0**2 * B + 0.3 * (E + E.T)  # noisy mixture with a chosen ρ
    return A, G, B


def _coefs(A, G, B) -> np.ndarray:
    dot = lambda X, Y: float(np.sum(X * Y))  # noqa: E731
    return np.array([[2 * dot(B, B), -3 * dot(G, B), dot(G, G) + 2 * dot(A, B), -dot(A, G)]])


@pytest.mark.parametrize("case", range(8))
def test_cubic_matches_grid_minimisation(case):
    rng = np.random.default_rng(100 + case)
    rho0 = [-0.6, 0.1, 0.4, 0.7, 0.95, 1.6, 2.5, -2.0][case]  # includes minima at both endpoints
    A, G, B = _random_case(rng, rho0)
    clipped, unclipped = (float(x[0]) for x in _minimise(_coefs(A, G, B)))

    def f(r: np.ndarray) -> np.ndarray:
        R = A[None] - r[:, None, None] * G[None] + (r**2)[:, None, None] * B[None]
        return np.sum(R * R, axis=(1, 2))

    grid = np.linspace(0.0, 1.0, 100001)
    assert abs(clipped - grid[np.argmin(f(grid))]) <= 1e-4
    wide = np.linspace(-10.0, 10.0, 200001)
    assert f(np.array([unclipped]))[0] <= f(wide).min() + 1e-9
    if not 0.0 <= rho0 <= 1.0:  # f need not be unimodal: the nearer endpoint is not always the answer
        assert clipped in (0.0, 1.0) and not 0.0 <= unclipped <= 1.0
    if rho0 == -0.6:
        assert clipped == 0.0
    if rho0 > 1.5:
        assert clipped == 1.0


def test_cubic_endpoints_from_data():
    rng = np.random.default_rng(7)
    M, N, _ = mixture(0.5, 300, seed=7, d=8)
    shrunk = 0.3 * rng.standard_normal((300, 8))  # smaller spread than members: minimiser below 0
    est = smi(M, N, shrunk, bootstrap=0)
    assert est.rho == 0.0 and est.rho_unclipped < 0
    assert (est.rho, est.rho_unclipped) == pytest.approx(naive_smi(M, N, shrunk), abs=1e-10)


@pytest.mark.parametrize("gap", [0.0, 1e-7])
def test_equal_means_fall_back_to_quadratic(gap):
    rng = np.random.default_rng(3)
    X, Y = rng.integers(-4, 5, (200, 4)).astype(float), rng.integers(-4, 5, (200, 4)).astype(float)
    M, N = np.vstack([X, -X]), np.vstack([2 * Y, -2 * Y]) + gap  # integer rows: means exactly 0 (and gap)
    U = np.vstack([M[:100], M[200:300], N[:100], N[200:300]])
    est = smi(M, N, U, bootstrap=10)
    assert est.details["mean_gap_sq"] == pytest.approx(4 * gap**2, abs=1e-20)
    Sm, Sn, Su = np.cov(M, rowvar=False), np.cov(N, rowvar=False), np.cov(U, rowvar=False)
    grid = np.linspace(0.0, 1.0, 100001)
    f = [np.sum((Su - Sm - r * (Sn - Sm)) ** 2) for r in grid]  # B ≈ 0
    assert est.rho == pytest.approx(grid[np.argmin(f)], abs=1e-4)
    assert est.rho == pytest.approx(0.5, abs=0.05)


# ---- the fast bootstrap equals per-replicate recomputation ------------------------------------


@pytest.mark.parametrize(("nm", "nn", "nu", "d", "path"), [(50, 40, 60, 6, "dxd"), (20, 25, 30, 64, "gram")])
def test_smi_fast_bootstrap_matches_naive(nm, nn, nu, d, path):
    rng = np.random.default_rng(11)
    M = rng.standard_normal((nm, d))
    N = 0.5 + rng.standard_normal((nn, d)) * np.linspace(0.5, 1.5, d)
    U = np.vstack([M[: nu // 2] + 0.1, N[: nu - nu // 2] - 0.1])
    replicate, details = _smi_fit(M, N, U)
    assert details["path"] == path
    idx = _resample_indices(nu, 20, seed=5)
    clipped, unclipped = replicate(_counts(idx, nu))
    naive = np.array([naive_smi(M, N, U[i]) for i in idx])
    np.testing.assert_allclose(clipped, naive[:, 0], atol=1e-8)
    np.testing.assert_allclose(unclipped, naive[:, 1], atol=1e-8)
    est = smi(M, N, U, bootstrap=20, seed=5)  # the public call uses the same resamples
    np.testing.assert_allclose(est.ci90, np.percentile(naive[:, 0], [5, 95]), atol=1e-8)
    np.testing.assert_allclose(est.ci90_unclipped, np.percentile(naive[:, 1], [5, 95]), atol=1e-8)
    assert est.rho_unclipped == pytest.approx(naive_smi(M, N, U)[1], abs=1e-8)


@pytest.mark.parametrize("kernel", KERNELS)
def test_smi_m_fast_bootstrap_matches_naive(kernel):
    rng = np.random.default_rng(12)
    M, N = rng.standard_normal((70, 5)), 0.8 + 1.3 * rng.standard_normal((60, 5))
    U = np.vstack([M[:30] * 1.1, N[:25]])
    replicate, details = _smim_fit(M, N, U, kernel=kernel, bandwidth_factor=1.5, seed=0)
    h = None if kernel == "linear" else 1.5 * np.median(pdist(np.vstack([M, N])))
    assert details["bandwidth"] == (None if h is None else pytest.approx(h, rel=1e-12))
    idx = _resample_indices(len(U), 25, seed=9)
    clipped, unclipped = replicate(_counts(idx, len(U)))
    naive = np.array([naive_smi_m(M, N, U[i], kernel=kernel, h=h) for i in idx])
    np.testing.assert_allclose(unclipped, naive, atol=1e-8)
    np.testing.assert_allclose(clipped, np.clip(naive, 0, 1), atol=1e-8)
    est = smi_m(M, N, U, kernel=kernel, bandwidth_factor=1.5, bootstrap=25, seed=9)
    assert est.rho_unclipped == pytest.approx(naive_smi_m(M, N, U, kernel=kernel, h=h), abs=1e-8)
    np.testing.assert_allclose(est.ci90, np.percentile(np.clip(naive, 0, 1), [5, 95]), atol=1e-8)
    np.testing.assert_allclose(est.ci90_unclipped, np.percentile(naive, [5, 95]), atol=1e-8)


# ---- the float32 fast path agrees with float64 ------------------------------------------------


def bench_like(n: int, d: int, *, seed: int, offset: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The benchmark's sets (members N(0, I), non-members shifted and rescaled, 30% of the suspects) + ``offset``."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.5, 2.0, d)
    M, N = rng.standard_normal((n, d)), 0.2 + scale * rng.standard_normal((n, d))
    k = int(0.3 * n)
    U = np.vstack([0.2 + scale * rng.standard_normal((k, d)), rng.standard_normal((n - k, d))])
    return M + offset, N + offset, U + offset


FAST_CASES = [("smi", None), ("smi-m", "rbf"), ("smi-m", "laplacian"), ("smi-m", "linear")]


@pytest.mark.parametrize("offset", [0.0, 1e3])  # a large common offset: centring keeps float32 accurate
@pytest.mark.parametrize(("method", "kernel"), FAST_CASES)
def test_float32_path_matches_float64(method, kernel, offset):
    M, N, U = bench_like(400, 64, seed=21, offset=offset)
    run = (lambda p: smi(M, N, U, bootstrap=100, seed=3, precision=p)) if method == "smi" else (
        lambda p: smi_m(M, N, U, kernel=kernel, bootstrap=100, seed=3, precision=p))
    fast, exact = run("float32"), run("float64")
    assert fast.details["precision"] == ("float64" if kernel == "linear" else "float32")
    assert exact.details["precision"] == "float64"
    assert abs(fast.rho_unclipped - exact.rho_unclipped) <= 1e-4
    np.testing.assert_allclose(fast.ci90, exact.ci90, rtol=0, atol=1e-4)
    assert abs(exact.rho - 0.3) <= 0.1 and fast.anomaly == exact.anomaly
    if offset == 0.0:  # and the float64 path is the exact computation
        ref = naive_smi(M, N, U)[1] if method == "smi" else naive_smi_m(
            M, N, U, kernel=kernel, h=exact.details["bandwidth"])
        assert exact.rho_unclipped == pytest.approx(ref, abs=1e-8)


def test_float32_gram_path_matches_float64():
    M, N, U = bench_like(40, 128, seed=22)  # d > n_m + n_n: Gram products
    replicate, details = _smi_fit(M, N, U, float32=True)
    assert details["path"] == "gram" and details["precision"] == "float32"
    W = _counts(_resample_indices(len(U), 50, seed=1), len(U))
    fast, exact = replicate(W)[1], _smi_fit(M, N, U)[0](W)[1]
    np.testing.assert_allclose(fast, exact, rtol=0, atol=1e-4)
    np.testing.assert_allclose(exact, [naive_smi(M, N, U[i])[1] for i in _resample_indices(len(U), 50, seed=1)],
                               atol=1e-8)


@pytest.mark.parametrize("magnitude", [1e-30, 1e30, 1e45])  # beyond float32's range unless rescaled
def test_float32_path_rescales_extreme_features(magnitude):
    M, N, U = bench_like(200, 16, seed=23)
    for call in (smi, smi_m, lambda *a, **k: smi_m(*a, kernel="laplacian", **k)):
        ref = call(M, N, U, bootstrap=0, precision="float64").rho_unclipped
        est = call(M * magnitude, N * magnitude, U * magnitude, bootstrap=0, precision="float32")
        assert est.details["precision"] == "float32"
        assert est.rho_unclipped == pytest.approx(ref, abs=1e-4)


@pytest.mark.parametrize("where", ["member", "suspect"])
def test_float32_kernel_blocks_fall_back_to_float64_for_far_outliers(where):
    M, N, U = bench_like(200, 16, seed=24)
    if where == "member":
        M[0] += 1e6  # one far row: every other row ends up far from the mean of m ∪ n
    else:
        U[0] = 1e39  # beyond float32's range
    fast, exact = (smi_m(M, N, U, bootstrap=20, precision=p) for p in ("float32", "float64"))
    assert fast.details["precision"] == "float64"
    assert fast.rho_unclipped == exact.rho_unclipped and fast.ci90 == exact.ci90


def test_float32_kernel_blocks_fall_back_to_float64_when_mmd_is_tiny():
    M, N, U = bench_like(300, 2, seed=26)  # a wide bandwidth: every kernel value ≈ 1, MMD² ≪ the kernel means
    fast, exact = (smi_m(M, N, U, bandwidth_factor=10.0, bootstrap=20, precision=p) for p in ("float32", "float64"))
    assert fast.details["precision"] == "float64"
    assert fast.details["mmd2"] < 3e-3 * fast.details["kernel_means"]["mm"]
    assert fast.rho_unclipped == exact.rho_unclipped and fast.ci90 == exact.ci90
    assert smi_m(M, N, U, bootstrap=0, precision="float32").details["precision"] == "float32"  # bandwidth factor 1


def test_auto_precision_uses_float32_only_for_large_products(mixtures):
    M, N, U = mixtures[0.25]  # 2000 rows, 16 features
    assert smi_m(M, N, U, bootstrap=0).details["precision"] == "float32"  # ~2.6e8 kernel multiply-adds
    assert smi(M, N, U, bootstrap=0).details["precision"] == "float64"  # ~1.5e6: nothing to gain
    assert smi_m(M[:300], N[:300], U[:300], bootstrap=0).details["precision"] == "float64"
    assert smi_m(M, N, U, bootstrap=0, precision="float64").details["precision"] == "float64"
    big = bench_like(2000, 512, seed=25)
    assert smi(*big, bootstrap=0).details["precision"] == "float32"


def test_bandwidth_uses_seeded_subsample_of_large_reference_sets():
    rng = np.random.default_rng(0)
    M, N = rng.standard_normal((700, 3)), 1 + rng.standard_normal((700, 3))
    a, b = (smi_m(M, N, M[:50], bootstrap=0, seed=s).details["bandwidth"] for s in (0, 1))
    assert a != b and a == pytest.approx(np.median(pdist(np.vstack([M, N]))), rel=0.05)
    assert a == smi_m(M, N, M[:50], bootstrap=0, seed=0).details["bandwidth"]


# ---- anomalies, intervals, determinism ---------------------------------------------------------


def test_forged_suspect_set_is_flagged(mixtures):
    M, N, U = mixtures[0.5]
    forged = 3 * MU + 6 * np.random.default_rng(99).standard_normal((2000, D))  # far from both references
    for est in (smi(M, N, forged, bootstrap=10), smi_m(M, N, forged, bootstrap=10),
                smi_m(M, N, forged, kernel="linear", bootstrap=10)):
        assert est.anomaly, est.method
        assert not 0.0 <= est.rho_unclipped <= 1.0
        assert 0.0 <= est.rho <= 1.0
    assert not smi(M, N, U, bootstrap=10).anomaly and not smi_m(M, N, U, bootstrap=10).anomaly
    assert not smi(M, N, forged, bootstrap=10, anomaly_tol=1.0).anomaly  # the tolerance is a knob


@pytest.mark.parametrize("method", [smi, smi_m])
def test_interval_coverage(method):
    covered = 0
    for rep in range(100):
        M, N, U = mixture(0.3, 300, seed=1000 + rep, d=8)
        lo, hi = method(M, N, U, bootstrap=200, seed=rep).ci90
        covered += lo <= 0.3 <= hi
    assert covered >= 80, covered


@pytest.mark.parametrize("method", [smi, smi_m])
def test_same_seed_same_result(mixtures, method):
    M, N, U = (x[:300] for x in mixtures[0.25])
    strip = lambda e: {k: v for k, v in e.to_dict().items() if k != "timings_ms"}  # noqa: E731
    a, b, c = (method(M, N, U, bootstrap=50, seed=s) for s in (4, 4, 5))
    assert strip(a) == strip(b)
    assert a.ci90 != c.ci90
    assert set(a.timings_ms) == {"fit", "bootstrap"}
    assert a.to_dict()["ci90"] == list(a.ci90)
    assert method(M, N, U, bootstrap=0).to_dict()["ci90"] == [None, None]


def test_standardise():
    rng = np.random.default_rng(0)
    M, N, U = 5 + 3 * rng.standard_normal((50, 3)), 2 + rng.standard_normal((40, 3)), rng.standard_normal((10, 3))
    M[:, 2] = N[:, 2] = 7.0
    Ms, Ns, Us = standardise(M, N, U)
    ref = np.vstack([Ms, Ns])
    np.testing.assert_allclose(ref[:, :2].mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(ref[:, :2].std(0), 1, atol=1e-12)
    np.testing.assert_allclose(ref[:, 2], 0, atol=1e-12)  # constant column: centred, std 1
    np.testing.assert_allclose(Us[:, 2], U[:, 2] - 7.0)
    assert len(standardise(M, N)) == 2


# ---- validation --------------------------------------------------------------------------------

GOOD = np.random.default_rng(0).standard_normal((20, 3))


@pytest.mark.parametrize(
    ("members", "nonmembers", "suspect", "message"),
    [
        (GOOD[0], GOOD + 1, GOOD, "members must be a 2-D array"),
        (GOOD, GOOD[None] + 1, GOOD, "nonmembers must be a 2-D array"),
        (GOOD, GOOD + 1, GOOD[:, :2], "feature dimensions differ"),
        (GOOD, GOOD[:1] + 1, GOOD, "nonmembers has 1 row"),
        (GOOD, GOOD + 1, np.where(np.eye(20, 3) > 0, np.nan, GOOD), "suspect contains 3 NaN or infinite"),
        (np.where(np.eye(20, 3) > 0, np.inf, GOOD), GOOD + 1, GOOD, "members contains 3 NaN or infinite"),
        (GOOD, GOOD.copy(), GOOD, "indistinguishable"),
        ([["a", "b", "c"]] * 3, GOOD, GOOD, "members is not a numeric array"),
    ],
)
@pytest.mark.parametrize("method", [smi, smi_m])
def test_bad_inputs_raise(method, members, nonmembers, suspect, message):
    with pytest.raises(LmauditError, match=message):
        method(members, nonmembers, suspect, bootstrap=5)


def test_bad_hyperparameters_raise():
    with pytest.raises(LmauditError, match="unknown kernel 'poly'") as err:
        smi_m(GOOD, GOOD + 1, GOOD, kernel="poly")
    assert "rbf, laplacian, linear" in err.value.hint
    with pytest.raises(LmauditError, match="bandwidth_factor"):
        smi_m(GOOD, GOOD + 1, GOOD, bandwidth_factor=0.0)
    with pytest.raises(LmauditError, match="bootstrap"):
        smi(GOOD, GOOD + 1, GOOD, bootstrap=-1)
    with pytest.raises(LmauditError, match="anomaly_tol"):
        smi(GOOD, GOOD + 1, GOOD, anomaly_tol=-0.1)
    for method in (smi, smi_m):
        with pytest.raises(LmauditError, match="unknown precision 'float16'") as err:
            method(GOOD, GOOD + 1, GOOD, precision="float16")
        assert "auto, float32, float64" in err.value.hint
    with pytest.raises(LmauditError, match="others\\[0\\] must be a 2-D"):
        standardise(GOOD, GOOD + 1, GOOD[0])


@pytest.mark.parametrize("kernel", KERNELS)
def test_indistinguishable_message_names_identifiability(kernel):
    with pytest.raises(LmauditError, match="reference sets .* are indistinguishable.*not identifiable"):
        smi_m(GOOD, GOOD.copy(), GOOD + 1, kernel=kernel)
    with pytest.raises(LmauditError, match="reference sets .* are indistinguishable.*not identifiable"):
        smi(GOOD, GOOD.copy(), GOOD + 1)


def test_mostly_duplicate_references_have_a_zero_median_distance():
    # five identical rows and one other: most pairwise distances are exactly 0,
    # whatever the rounding of the Gram product
    M = np.zeros((5, 5))
    N = np.vstack([np.zeros((4, 5)), [[0, 0, 0, 1, 372]]])
    with pytest.raises(LmauditError, match="median pairwise distance"):
        smi_m(M, N, N[:3], bootstrap=0)
