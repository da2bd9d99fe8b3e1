"""Kernel and Gram computations of the set-level estimators, in float32 where that keeps ρ exact to 1e-4.

Features are centred (on the reference sets) and scaled before the cast to float32,
so products of large-offset features stay accurate; RBF blocks are computed as
exp(xᵀy)·e^{−a}·e^{−b} (no subtraction pass); within-set kernel sums use the upper
triangle of square tiles. Callers fall back to float64 where a check here says
float32 would not hold (overflow, far outliers, a tiny MMD² next to the kernel means).
"""

from __future__ import annotations

import math

import numpy as np

from lmaudit.errors import LmauditError

_BANDWIDTH_SAMPLE = 1000  # points of m ∪ n used by the median heuristic
_BLOCK = 1 << 22  # values per kernel block (16 MiB in float32)
_TILE = 1024  # side of the square tiles of a within-set kernel matrix
_FLOAT32_MAX_HALF_NORM = 1e15  # float32 kernel blocks: largest ‖x − c‖²/(2h²) (else float64)
_FLOAT32_MAX_MEDIAN_HALF_NORM = 16.0  # ... and largest median of it over m ∪ n (ordinary data: about 1/4)
_FLOAT32_MIN_MMD_RATIO = 3e-3  # float32 kernel blocks: smallest MMD² / (K̄·(1 + |ρ|)) (else float64)
_EXP_SPLIT_MAX = 30.0  # rbf blocks factor exp(xᵀy − a − b) = exp(xᵀy)·e^{−a}·e^{−b} while a, b stay below this
FLOAT32_MIN_WORK = 1 << 26  # precision="auto": float32 products from this many multiply-adds on


def pow2_near_rms(*xs: np.ndarray, rows: int = 256) -> float:
    """A power of two near the root mean square of the arrays' first ``rows`` rows, 1.0 when that is 0.

    Only a range normaliser for float32 products (dividing by a power of two is exact).
    """
    xs = tuple(x[:rows] for x in xs)
    rms = math.sqrt(sum(float(np.einsum("ij,ij->", x, x)) for x in xs) / sum(x.size for x in xs))
    return math.ldexp(1.0, math.frexp(rms)[1]) if 0 < rms < math.inf else 1.0


def lowered(X: np.ndarray, shift: np.ndarray | None, factor: float, dtype) -> np.ndarray:
    """``(X − shift)·factor`` computed in float64, then rounded once to ``dtype``."""
    out = np.empty(X.shape, dtype)
    with np.errstate(over="ignore"):
        return np.multiply(X if shift is None else X - shift, factor, out=out, casting="same_kind")


def _sqdist(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    S = X @ Y.T
    S *= -2.0
    S += np.einsum("ij,ij->i", X, X)[:, None]
    S += np.einsum("ij,ij->i", Y, Y)[None, :]
    return np.maximum(S, 0.0, out=S)


def _half_norms(X: np.ndarray) -> np.ndarray:
    return 0.5 * np.einsum("ij,ij->i", X, X)


class _Side:
    """Rows already centred and divided by h, with what kernel blocks need of them.

    ``a`` holds the half squared norms; for the rbf kernel with ``a`` small enough,
    ``e = exp(−a)`` lets a block be ``exp(X Yᵀ)`` scaled by ``e`` on both sides (no
    broadcast subtractions); otherwise ``e`` is None.
    """

    def __init__(self, X: np.ndarray, kernel: str):
        self.X, self.a = X, _half_norms(X)
        split = kernel == "rbf" and float(self.a.max()) <= _EXP_SPLIT_MAX
        self.e = np.exp(-self.a) if split else None


def _float32_holds(Ms: _Side, Ns: _Side, Us: _Side, bandwidth_factor: float) -> bool:
    """Whether float32 kernel blocks stay accurate: no overflow, and the bulk of m ∪ n near the centre.

    The rounding of ``xᵀy − a − b`` grows with the half squared norms ``a`` (in units of
    h²), about 1/4 for ordinary data and ``bandwidth_factor`` 1; far outliers move the
    centre away from the bulk and inflate them.
    """
    tops = [float(S.a.max()) for S in (Ms, Ns, Us)]
    if not all(t < _FLOAT32_MAX_HALF_NORM for t in tops):  # NaN or inf from an overflow fails too
        return False
    bulk = float(np.median(np.concatenate([Ms.a, Ns.a]))) * bandwidth_factor**2
    return bulk <= _FLOAT32_MAX_MEDIAN_HALF_NORM


def _exp_block(X: _Side, Y: _Side, rows: slice, cols: slice, kernel: str) -> tuple[np.ndarray, np.ndarray | None]:
    """``(B, w)``: a kernel block k(x_i, y_j) = f_i·B_ij·w_j with ``w``, ``f`` = e (split rbf) or 1 (``w`` None)."""
    E = X.X[rows] @ Y.X[cols].T
    if X.e is not None and Y.e is not None:
        return np.exp(E, out=E), Y.e[cols]
    E -= X.a[rows, None]
    E -= Y.a[None, cols]  # E = −‖x − y‖²/2 (up to rounding)
    if kernel == "laplacian":
        E *= -2.0
        np.sqrt(np.maximum(E, 0.0, out=E), out=E)
        np.negative(E, out=E)
    return np.exp(E, out=E), None


def _weighted_rows(B: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    return (B.sum(axis=1) if w is None else B @ w).astype(np.float64, copy=False)


def _row_sums(X: _Side, Y: _Side, kernel: str) -> np.ndarray:
    """Σ_j k(x_i, y_j) for every row of X, in float64, in blocks of rows."""
    n, step = len(X.X), max(1, _BLOCK // len(Y.X))
    out = np.empty(n)
    for i in range(0, n, step):
        rows = slice(i, min(i + step, n))
        B, w = _exp_block(X, Y, rows, slice(None), kernel)
        out[rows] = _weighted_rows(B, w)
    if X.e is not None and Y.e is not None:
        out *= X.e
    return out


def _self_sum(X: _Side, kernel: str) -> float:
    """Σ_{i≠j} k(x_i, x_j) over square tiles on and above the diagonal (diagonal tiles: X Xᵀ by syrk)."""
    n, total = len(X.X), 0.0
    b = -(-n // -(-n // _TILE))  # tiles of at most _TILE rows, evened out
    for i in range(0, n, b):
        rows = slice(i, min(i + b, n))
        for j in range(i, n, b):
            cols = slice(j, min(j + b, n))
            B, w = _exp_block(X, X, rows, cols, kernel)
            if j == i:
                B[np.arange(len(B)), np.arange(len(B))] = 0.0
            s = _weighted_rows(B, w)
            total += (1.0 if j == i else 2.0) * (float(s @ X.e[rows]) if w is not None else float(s.sum()))
    return total


def median_distance(M: np.ndarray, N: np.ndarray, seed: int, dtype=np.float64) -> float:
    """Median pairwise Euclidean distance of m ∪ n, or of a seeded subsample of it.

    The sample is centred (and, in float32, divided by a power of two) before its Gram product.
    """
    idx = np.arange(len(M) + len(N))
    if len(idx) > _BANDWIDTH_SAMPLE:
        idx = np.sort(np.random.default_rng([seed, 1]).choice(len(idx), _BANDWIDTH_SAMPLE, replace=False))
    R = np.vstack([M[idx[idx < len(M)]], N[idx[idx >= len(M)] - len(M)]])
    R -= R.mean(axis=0)
    low = dtype == np.float32
    p = pow2_near_rms(R) if low else 1.0
    Rl = lowered(R, None, 1.0 / p, dtype) if low else R
    S = _sqdist(Rl, Rl)
    # the Gram identity leaves rounding noise of a few ulps of |x|² + |y|²: identical rows are at distance 0
    q = np.einsum("ij,ij->i", Rl, Rl).astype(np.float64)
    S[S <= 64 * np.finfo(Rl.dtype).eps * (q[:, None] + q[None, :])] = 0.0
    v = np.concatenate([S[i, i + 1 :] for i in range(len(S) - 1)])
    k = len(v) // 2  # the median: v[k] of the sorted v, averaged with v[k − 1] when len(v) is even
    v = np.partition(v, k)  # one kth: numpy's vectorised selection
    mid = np.array([v[k] if len(v) % 2 else v[:k].max(), v[k]], dtype=np.float64)
    if low and not np.median(_half_norms(Rl)) <= _FLOAT32_MAX_MEDIAN_HALF_NORM * mid[1]:
        return median_distance(M, N, seed)  # bulk far from the sample mean (or a zero median): float64
    med = float(np.sqrt(mid).mean()) * p
    if not med > 0:
        raise LmauditError("median pairwise distance of the reference sets is 0", hint="are most rows duplicates?")
    return med


def kernel_means(M: np.ndarray, N: np.ndarray, U: np.ndarray, *, kernel: str, bandwidth_factor: float, seed: int,
                  float32: bool = False) -> tuple | None:
    """``(K̄_mm, K̄_nn, K̄_nm, K̄_u·m rows, K̄_u·n rows, h, precision)``; None when float32 would not hold."""
    nm, nn = len(M), len(N)
    dtype = np.float32 if float32 else np.float64
    h = median_distance(M, N, seed, dtype) * bandwidth_factor
    c = (M.sum(axis=0) + N.sum(axis=0)) / (nm + nn)
    Ms, Ns, Us = (_Side(lowered(X, c, 1.0 / h, dtype), kernel) for X in (M, N, U))
    if float32 and not _float32_holds(Ms, Ns, Us, bandwidth_factor):
        return None
    kmm, knn = _self_sum(Ms, kernel) / (nm * (nm - 1)), _self_sum(Ns, kernel) / (nn * (nn - 1))
    knm = float(_row_sums(Ns, Ms, kernel).sum()) / (nm * nn)
    rm, rn = _row_sums(Us, Ms, kernel) / nm, _row_sums(Us, Ns, kernel) / nn
    return kmm, knn, knm, rm, rn, h, Ms.X.dtype.name


def float32_conditioned(kmm: float, knn: float, knm: float, rm: np.ndarray, rn: np.ndarray) -> bool:
    """Whether float32 kernel means pin ρ down to well within 1e-4.

    Their rounding is relative to the kernel means, ρ divides by MMD²: the error in ρ
    measured at most ~3e-8·(1 + |ρ|)·K̄/MMD² (K̄ = max(K̄_mm, K̄_nn)); wide bandwidths
    make every kernel value ≈ 1 and MMD² ≪ K̄.
    """
    denom, top = knn - 2 * knm + kmm, max(kmm, knn)
    if not (denom > 0 and top > 0):
        return False
    rho = (float(np.mean(rn - rm)) + kmm - knm) / denom
    return denom >= _FLOAT32_MIN_MMD_RATIO * (1 + abs(rho)) * top


def use_float32(precision: str, work: float) -> bool:
    """Whether the one-off products run in float32: ``work`` is their multiply-add count."""
    return precision == "float32" or (precision == "auto" and work >= FLOAT32_MIN_WORK)
