"""Set-level membership audits: what fraction ρ of a suspect set behaves like non-members.

From per-sample features of members ``m`` (retained training data), non-members ``n`` (held out) and a suspect
set ``u`` (e.g. a forget set), both estimators fit ``F_u ≈ (1 − ρ) F_m + ρ F_n``: ρ = 0 looks like members, ρ = 1
like non-members. :func:`smi` matches the mixture covariance ``Σ_u = (1−ρ)Σ_m + ρΣ_n + ρ(1−ρ)ddᵀ`` (``d = μ_n −
μ_m``, unbiased covariances; a pure shift of the suspect mean is invisible to it); :func:`smi_m` projects the
suspect kernel mean embedding on the segment from ``m`` to ``n`` (within-set means are U-statistics). Both give a
percentile-bootstrap 90% interval over resamples of the suspect set and flag an anomaly when the unclipped
estimate falls well outside [0, 1].

Precision: the one-off products (covariances or Gram matrices for SMI, the kernel blocks for SMI-M) run in
float32 on features centred and rescaled in float64 first (centring keeps a large common offset from eating the
float32 mantissa), so ρ moves by well under 1e-4; the small solves, ratios and the bootstrap stay float64.
``precision="auto"`` takes that path once the products are large enough to gain from it and float64 below;
``"float32"`` and ``"float64"`` force one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from lmaudit.audit.kernels import float32_conditioned, kernel_means, lowered, pow2_near_rms, use_float32
from lmaudit.audit.sets import as_sets, unit_scale
from lmaudit.errors import LmauditError

KERNELS = ("rbf", "laplacian", "linear")
PRECISIONS = ("auto", "float32", "float64")
_CHUNK = 1 << 21  # bootstrap weights per chunk
_Replicate = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class SetEstimate:
    """One set-level audit. ``rho`` is the fraction of the suspect set that behaves like non-members."""

    method: str  # "smi" or "smi-m"
    rho: float  # in [0, 1]
    rho_unclipped: float
    ci90: tuple[float, float]  # 5th and 95th bootstrap percentiles of the clipped estimate
    ci90_unclipped: tuple[float, float]  # the same of the unclipped estimate (its width, where ci90 hits 0 or 1)
    n_suspect: int
    n_members: int
    n_nonmembers: int
    anomaly: bool  # rho_unclipped outside [-anomaly_tol, 1 + anomaly_tol]
    details: dict
    timings_ms: dict  # "fit" and "bootstrap"
    # the clipped estimate of every bootstrap replicate, in resample order: the resamples depend only on the suspect
    # set's size, ``bootstrap`` and ``seed``, so two audits of one suspect set under two models are paired
    replicates: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (a NaN interval, from ``bootstrap=0``, becomes ``None``; no replicates)."""
        out = asdict(self)
        out.pop("replicates")
        for name in ("ci90", "ci90_unclipped"):
            out[name] = [None if math.isnan(x) else x for x in getattr(self, name)]
        return out


def _bootstrap_batches(n: int, n_boot: int, seed: int) -> Iterator[np.ndarray]:
    """Resample indices (b, n) in chunks, all drawn from ``default_rng(seed)`` in order."""
    rng = np.random.default_rng(seed)
    step = max(1, _CHUNK // n)
    for s in range(0, n_boot, step):
        yield rng.integers(0, n, size=(min(step, n_boot - s), n))


def _resample_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """All bootstrap resamples (n_boot, n) that an estimator with this ``seed`` uses."""
    return np.vstack(list(_bootstrap_batches(n, n_boot, seed)))


def _counts(idx: np.ndarray, n: int) -> np.ndarray:
    """Resample indices (k, n) -> float count weights (k, n)."""
    k = len(idx)
    flat = (idx + n * np.arange(k)[:, None]).ravel()
    return np.bincount(flat, minlength=k * n).reshape(k, n).astype(np.float64)


def _minimise(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimisers of the quartic f with f'(ρ)/2 = c3ρ³ + c2ρ² + c1ρ + c0, one row of ``c`` (k, 4) each.

    Returns ``(on [0, 1], over the real line)``. Candidates are the real parts of all
    roots, raw and Newton-polished (an extra candidate never beats a true minimiser).
    """
    c3, c2, c1, c0 = c[:, :1], c[:, 1:2], c[:, 2:3], c[:, 3:]
    with np.errstate(all="ignore"):
        if np.all(c3 > 0):
            comp = np.zeros((len(c), 3, 3))
            comp[:, 0, :] = -c[:, 1:] / c3
            comp[:, 1, 0] = comp[:, 2, 1] = 1.0
            r = np.linalg.eigvals(comp).real
        else:  # equal means: c3 = c2 = 0 and f is quadratic
            r = -c0 / np.where(c1 > 0, c1, np.inf)
        p, dp = ((c3 * r + c2) * r + c1) * r + c0, (3 * c3 * r + 2 * c2) * r + c1
        polished = np.where(dp != 0, r - p / dp, r)
        cand = np.nan_to_num(np.concatenate([r, polished], axis=1), nan=0.0, posinf=0.0, neginf=0.0)

        def argmin(x: np.ndarray) -> np.ndarray:
            f = np.nan_to_num((((c3 / 4 * x + c2 / 3) * x + c1 / 2) * x + c0) * x, nan=np.inf)
            return x[np.arange(len(x)), np.argmin(f, axis=1)]

        ends = np.broadcast_to([0.0, 1.0], (len(c), 2))
        return argmin(np.concatenate([np.clip(cand, 0.0, 1.0), ends], axis=1)), argmin(cand)


def _smi_fit(M: np.ndarray, N: np.ndarray, U: np.ndarray, *, float32: bool = False) -> tuple[_Replicate, dict]:
    """Precompute what does not depend on suspect weights: ``(replicate, details)``.

    ``replicate(W)`` maps count weights (k, n_u) to ``(clipped, unclipped)`` estimates (k,).
    With ``float32`` the covariance or Gram products (and the suspect rows' quadratic
    forms) run in float32 on the centred features divided by a power of two near their
    scale; the per-replicate work stays float64.
    """
    nm, nn = len(M), len(N)
    mu_m, mu_n = M.mean(axis=0), N.mean(axis=0)
    U0 = U - U.mean(axis=0)
    d = mu_n - mu_m
    dd = float(d @ d)
    dxd = M.shape[1] <= nm + nn
    Mc, Nc = (None, None) if dxd and float32 else (M - mu_m, N - mu_n)  # float32 d×d: no float64 copies
    mB, nB = (float(np.sum((X @ d - mu @ d if Xc is None else Xc @ d) ** 2)) / (len(X) - 1)
              for X, Xc, mu in ((M, Mc, mu_m), (N, Nc, mu_n)))
    if float32:
        p = pow2_near_rms(M[:256] - mu_m, N[:256] - mu_n, U0)  # products of X/p, rescaled by powers of p
        Mf, Nf, Uf = (lowered(X, mu, 1.0 / p, np.float32) for X, mu in ((M, mu_m), (N, mu_n), (U0, None)))
    else:
        p, (Mf, Nf, Uf) = 1.0, (Mc, Nc, U0)
    if dxd:  # d×d path: D = Σ_n − Σ_m formed once
        Sm = (Mf.T @ Mf).astype(np.float64, copy=False) / ((nm - 1) / (p * p))
        Sn = (Nf.T @ Nf).astype(np.float64, copy=False) / ((nn - 1) / (p * p))
        D = Sn - Sm
        DD, mD, scale = float(np.sum(D * D)), float(np.sum(Sm * D)), float(np.sum(Sm * Sm) + np.sum(Sn * Sn))
        quad = lambda V: np.einsum("ij,ij->i", V @ D, V)  # noqa: E731
        if float32:
            T = Uf @ (D * (1.0 / (p * p))).astype(np.float32)  # uᵀDu = p⁴·(u/p)ᵀ(D/p²)(u/p)
            qD = np.einsum("ij,ij->i", T, Uf).astype(np.float64) * p**4
        else:
            qD = quad(U0)
        path = "dxd"
    else:  # Gram path: ⟨XᵀX, YᵀY⟩ = ‖X Yᵀ‖²
        def sq_sum(A: np.ndarray) -> float:
            return float(np.sum(np.square(A, out=A), dtype=np.float64)) * p**4

        gm, gn = sq_sum(Mf @ Mf.T) / (nm - 1) ** 2, sq_sum(Nf @ Nf.T) / (nn - 1) ** 2
        gx = sq_sum(Nf @ Mf.T) / ((nm - 1) * (nn - 1))
        DD, mD, scale = float(max(gn - 2 * gx + gm, 0.0)), float(gx - gm), float(gm + gn)

        def quad(V: np.ndarray, Mv: np.ndarray = Mc, Nv: np.ndarray = Nc, p2: float = 1.0) -> np.ndarray:
            qn, qm = np.sum(np.square(V @ Nv.T), axis=1), np.sum(np.square(V @ Mv.T), axis=1)
            return (qn.astype(np.float64) / (nn - 1) - qm.astype(np.float64) / (nm - 1)) * p2

        qD = quad(Uf, Mf, Nf, p**4) if float32 else quad(U0)
        path = "gram"
    GG = DD + 2 * (nB - mB) + dd * dd  # ‖G‖²
    if dd * dd <= 1e-10 * scale and GG <= 1e-10 * scale:
        raise LmauditError(
            "the reference sets (members, non-members) are indistinguishable: same mean and covariance, "
            "so ρ is not identifiable",
            hint="check that the reference sets are different data and the features separate them",
        )
    c3, c2 = 2 * dd * dd, -3 * (nB - mB + dd * dd)
    c1, c0 = GG - 2 * mB, mD + mB
    qB = (U0 @ d) ** 2

    def replicate(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = W.sum(axis=1)
        P = (W @ U0) / s[:, None]  # resampled means, centred frame
        aD = (W @ qD - s * quad(P)) / (s - 1)  # ⟨Σ_u, Σ_n − Σ_m⟩
        aB = (W @ qB - s * (P @ d) ** 2) / (s - 1)  # dᵀ Σ_u d
        coefs = np.column_stack([np.full(len(W), c3), np.full(len(W), c2), c1 + 2 * aB, c0 - aD - aB])
        return _minimise(coefs)

    details = {"covariance": "unbiased (n-1)", "path": path, "precision": "float32" if float32 else "float64",
               "mean_gap_sq": dd, "cov_gap_fro": math.sqrt(DD)}
    return replicate, details


def _smim_fit(
    M: np.ndarray, N: np.ndarray, U: np.ndarray, *, kernel: str, bandwidth_factor: float, seed: int,
    float32: bool = False,
) -> tuple[_Replicate, dict]:
    """Precompute kernel means: ``(replicate, details)`` as in :func:`_smi_fit`.

    Rows are centred on the mean of m ∪ n (distances do not change) and divided by h in
    float64, then rounded once to float32 with ``float32`` (the linear kernel, O(n·d),
    stays float64); products, exponentials and row sums run in that precision per
    block, and the block sums are accumulated in float64.
    """
    nm, nn = len(M), len(N)
    precision = "float64"
    if kernel == "linear":
        mu_m, mu_n = M.mean(axis=0), N.mean(axis=0)
        kmm = (nm * nm * (mu_m @ mu_m) - np.einsum("ij,ij->", M, M)) / (nm * (nm - 1))
        knn = (nn * nn * (mu_n @ mu_n) - np.einsum("ij,ij->", N, N)) / (nn * (nn - 1))
        knm, rm, rn, h = float(mu_n @ mu_m), U @ mu_m, U @ mu_n, None
        scale = float(np.einsum("ij,ij->", M, M) / nm + np.einsum("ij,ij->", N, N) / nn)
    else:
        means = kernel_means(M, N, U, kernel=kernel, bandwidth_factor=bandwidth_factor, seed=seed, float32=float32)
        if means is None or not float32_conditioned(*means[:5]):  # float32 would cost accuracy: float64
            means = kernel_means(M, N, U, kernel=kernel, bandwidth_factor=bandwidth_factor, seed=seed)
        kmm, knn, knm, rm, rn, h, precision = means
        scale = 1.0
    denom = float(knn - 2 * knm + kmm)  # MMD² (U-statistic)
    if denom <= 1e-9 * scale:
        raise LmauditError(
            f"the reference sets (members, non-members) are indistinguishable under the {kernel} kernel "
            f"(MMD² = {denom:.3g}), so ρ is not identifiable",
            hint="check that the reference sets differ, or try another kernel or bandwidth_factor",
        )
    r, base = rn - rm, float(kmm - knm)

    def replicate(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rho = ((W @ r) / W.sum(axis=1) + base) / denom
        return np.clip(rho, 0.0, 1.0), rho

    details = {"kernel": kernel, "bandwidth": h, "bandwidth_factor": bandwidth_factor, "statistic": "U", "mmd2": denom,
               "precision": precision,
               "kernel_means": {"mm": float(kmm), "nn": float(knn), "nm": knm, "um": float(rm.mean()),
                                "un": float(rn.mean())}}  # um, un ≈ 0: suspect far from both references
    return replicate, details


def _estimate(method: str, sets: list[np.ndarray], fit: Callable[[], tuple[_Replicate, dict]], *,
              bootstrap: int, seed: int, anomaly_tol: float) -> SetEstimate:
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, (int, np.integer)) or bootstrap < 0:
        raise LmauditError(f"bootstrap must be a non-negative integer, got {bootstrap!r}")
    if not (isinstance(anomaly_tol, (int, float)) and anomaly_tol >= 0):
        raise LmauditError(f"anomaly_tol must be >= 0, got {anomaly_tol!r}")
    M, N, U = sets
    t0 = time.perf_counter()
    replicate, details = fit()
    (rho,), (rho_u,) = replicate(np.ones((1, len(U))))
    t1 = time.perf_counter()
    boot = [replicate(_counts(idx, len(U))) for idx in _bootstrap_batches(len(U), bootstrap, seed)]
    clipped = np.concatenate([b[0] for b in boot]) if boot else np.empty(0)
    lo, hi, lo_u, hi_u = ((*np.percentile(clipped, [5, 95]),
                           *np.percentile(np.concatenate([b[1] for b in boot]), [5, 95])) if boot else (math.nan,) * 4)
    t2 = time.perf_counter()
    return SetEstimate(
        method=method, rho=float(rho), rho_unclipped=float(rho_u), ci90=(float(lo), float(hi)),
        ci90_unclipped=(float(lo_u), float(hi_u)),
        n_suspect=len(U), n_members=len(M), n_nonmembers=len(N),
        anomaly=bool(rho_u < -anomaly_tol or rho_u > 1 + anomaly_tol),
        details={**details, "bootstrap": int(bootstrap), "seed": seed, "anomaly_tol": anomaly_tol},
        timings_ms={"fit": (t1 - t0) * 1e3, "bootstrap": (t2 - t1) * 1e3}, replicates=clipped,
    )


def _check_precision(precision) -> None:
    if precision not in PRECISIONS:
        raise LmauditError(f"unknown precision {precision!r}", hint=f"choose one of: {', '.join(PRECISIONS)}")


def smi(members, nonmembers, suspect, *, bootstrap: int = 200, seed: int = 0, anomaly_tol: float = 0.1,
        precision: str = "auto") -> SetEstimate:
    """Second-moment matching: ρ minimising f(ρ) = ‖A − ρG + ρ²B‖_F² on [0, 1].

    ``A = Σ_u − Σ_m``, ``B = ddᵀ`` (``d = μ_n − μ_m``), ``G = Σ_n − Σ_m + B``, unbiased
    covariances. Roots of the cubic f' = 0 and the endpoints are compared;
    ``rho_unclipped`` minimises f over the real line. Cost O((n_m + n_n + n_u)·d·k),
    k = min(d, n_m + n_n) (no d×d matrix when d > n_m + n_n), plus O(n_u·d + d·k) per
    bootstrap replicate.

    Parameters
    ----------
    members, nonmembers, suspect : array_like, shape (n_m, d), (n_n, d), (n_u, d)
        Per-sample features; at least 2 rows per set, all finite.
    bootstrap : int
        Resamples of the suspect set (with replacement) for ``ci90``; 0 skips it.
    seed : int
        Seed of ``numpy.random.default_rng`` for the resamples.
    anomaly_tol : float
        ``anomaly`` is set when ``rho_unclipped`` is outside ``[-tol, 1 + tol]``.
    precision : {"auto", "float32", "float64"}
        Precision of the one-off products (see the module docstring): "auto" uses float32
        from about 6.7e7 multiply-adds on (ρ within 1e-4 of float64), float64 below.

    Returns
    -------
    SetEstimate
        ``rho``: fraction of the suspect set behaving like non-members (0: members).
    """
    _check_precision(precision)
    tops: list[float] = []
    sets = unit_scale(as_sets({"members": members, "nonmembers": nonmembers, "suspect": suspect}, tops), tops)
    nm, nn, d = len(sets[0]), len(sets[1]), sets[0].shape[1]
    f32 = use_float32(precision, (nm + nn + len(sets[2])) * d * min(d, nm + nn))
    return _estimate("smi", sets, lambda: _smi_fit(*sets, float32=f32), bootstrap=bootstrap, seed=seed,
                     anomaly_tol=anomaly_tol)


def smi_m(members, nonmembers, suspect, *, kernel: str = "rbf", bandwidth_factor: float = 1.0,
          bootstrap: int = 200, seed: int = 0, anomaly_tol: float = 0.1, precision: str = "auto") -> SetEstimate:
    """Kernel mean-embedding matching: ρ = (K̄_un − K̄_um − K̄_mn + K̄_mm) / (K̄_nn − 2K̄_nm + K̄_mm).

    K̄_xy is the mean kernel value over pairs; K̄_mm and K̄_nn leave out i = j
    (U-statistics). Cost O((n_m + n_n)·(n_m + n_n + n_u)·d) kernel work (linear:
    O(n·d)), plus O(n_u) per bootstrap replicate.

    Parameters
    ----------
    members, nonmembers, suspect : array_like, shape (n_m, d), (n_n, d), (n_u, d)
        Per-sample features; at least 2 rows per set, all finite.
    kernel : {"rbf", "laplacian", "linear"}
        ``exp(−‖x−y‖²/(2h²))``, ``exp(−‖x−y‖₂/h)`` or ``xᵀy``; ``h`` is the median
        pairwise distance of members ∪ non-members (a seeded subsample of 1,000
        points when larger) times ``bandwidth_factor``.
    bandwidth_factor : float
        Multiplies the median-heuristic bandwidth (ignored by "linear").
    bootstrap, seed, anomaly_tol
        As in :func:`smi`.
    precision : {"auto", "float32", "float64"}
        As in :func:`smi`, for the kernel blocks (the linear kernel always uses float64);
        float32 gives way to float64 when far outliers, or MMD² tiny next to the kernel
        means (a wide bandwidth), would cost it accuracy. ``details["precision"]`` says
        which one ran.

    Returns
    -------
    SetEstimate
        ``rho``: fraction of the suspect set behaving like non-members, i.e.
        ``rho_unclipped`` clipped to [0, 1].
    """
    if kernel not in KERNELS:
        raise LmauditError(f"unknown kernel {kernel!r}", hint=f"choose one of: {', '.join(KERNELS)}")
    if not (isinstance(bandwidth_factor, (int, float)) and math.isfinite(bandwidth_factor) and bandwidth_factor > 0):
        raise LmauditError(f"bandwidth_factor must be a positive number, got {bandwidth_factor!r}")
    _check_precision(precision)
    tops: list[float] = []
    sets = unit_scale(as_sets({"members": members, "nonmembers": nonmembers, "suspect": suspect}, tops), tops)
    nr = len(sets[0]) + len(sets[1])
    f32 = kernel != "linear" and use_float32(precision, (nr * nr // 2 + nr * len(sets[2])) * sets[0].shape[1])
    fit = lambda: _smim_fit(*sets, kernel=kernel, bandwidth_factor=bandwidth_factor, seed=seed,  # noqa: E731
                            float32=f32)
    return _estimate("smi-m", sets, fit, bootstrap=bootstrap, seed=seed, anomaly_tol=anomaly_tol)
