"""Vectorised per-sample reductions over flat ragged arrays (values + offsets)."""

from __future__ import annotations

import numpy as np

from lmaudit.errors import LmauditError


def _lengths(offsets: np.ndarray) -> np.ndarray:
    """Segment lengths; an empty segment is an error (reduceat would return a neighbour's value)."""
    lengths = np.diff(offsets)
    if np.any(lengths < 1):
        raise LmauditError("every sample needs at least one scored value (found an empty segment)")
    return lengths


def _is_real(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float, np.integer, np.floating))


def segment_mean(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Mean of each segment, (S,) float64. Segments must be non-empty."""
    sums = np.add.reduceat(values.astype(np.float64), offsets[:-1])
    return sums / _lengths(offsets)


def bottom_k_mean(values: np.ndarray, offsets: np.ndarray, k: float) -> np.ndarray:
    """Mean of the lowest ``max(1, floor(k * n))`` values of each segment of length n."""
    if not _is_real(k) or not 0.0 < k <= 1.0:
        raise LmauditError(f"k must be a number in (0, 1], got {k!r}")
    lengths = _lengths(offsets)
    seg = np.repeat(np.arange(len(lengths)), lengths)
    order = np.lexsort((values, seg))  # sorted by value within each segment
    rank = np.arange(len(values)) - np.repeat(offsets[:-1], lengths)
    keep_n = np.maximum(1, np.floor(k * lengths + 1e-9).astype(np.int64))
    keep = rank < keep_n[seg]
    sums = np.bincount(seg[keep], weights=values[order][keep].astype(np.float64), minlength=len(lengths))
    return sums / keep_n


def moving_average(values: np.ndarray, offsets: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Valid-mode moving average of width ``window`` within each segment.

    A segment shorter than ``window`` yields one value, its plain mean. Returns the
    smoothed flat values and their offsets.
    """
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise LmauditError(f"window must be an integer ≥ 1, got {window!r}")
    lengths = _lengths(offsets)
    out_len = np.where(lengths >= window, lengths - window + 1, 1)
    out_off = np.concatenate([[0], np.cumsum(out_len)]).astype(np.int64)
    v = values.astype(np.float64)
    seg = np.repeat(np.arange(len(lengths)), out_len)
    start = offsets[:-1][seg] + (np.arange(out_off[-1]) - out_off[:-1][seg])
    full = (lengths >= window)[seg]
    out = np.repeat(segment_mean(v, offsets), out_len)  # a short segment: its plain mean
    if full.any():
        # every window summed on its own: a running cumsum over the flat array would carry the
        # rounding error of other samples' (possibly huge) values into this sample's averages
        sums = np.lib.stride_tricks.sliding_window_view(v, window).sum(axis=1)
        out[full] = sums[start[full]] / window
    return out, out_off


def splitmix64(x: np.ndarray) -> np.ndarray:
    """Counter-based pseudo-random uint64 hash (SplitMix64 finaliser), vectorised."""
    z = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def shuffle_within(values: np.ndarray, offsets: np.ndarray, keys: np.ndarray, seed: int) -> np.ndarray:
    """Permute values within each segment by a hash of (segment key, position, seed).

    The permutation of a sample depends only on its own key, never on its index in
    the set, so scores stay permutation-invariant across samples.
    """
    lengths = np.diff(offsets)
    seg = np.repeat(np.arange(len(lengths)), lengths)
    pos = (np.arange(len(values)) - np.repeat(offsets[:-1], lengths)).astype(np.uint64)
    with np.errstate(over="ignore"):
        rand = splitmix64(keys[seg].astype(np.uint64) ^ splitmix64(pos + np.uint64(seed) * np.uint64(0x100000001)))
    return values[np.lexsort((rand, seg))]


def segment_ranks(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Rank (1..n, ties averaged) of every value within its segment, flat float64."""
    lengths = _lengths(offsets)
    seg = np.repeat(np.arange(len(lengths)), lengths)
    order = np.lexsort((values, seg))
    sv, ss = values[order], seg[order]
    # a new tie group starts where the segment or the value changes
    start = np.r_[True, (ss[1:] != ss[:-1]) | (sv[1:] != sv[:-1])]
    group = np.cumsum(start) - 1
    pos = np.arange(len(values)) - np.repeat(offsets[:-1], lengths) + 1  # 1-based rank in sorted order
    mean_rank = np.bincount(group, weights=pos) / np.bincount(group)
    ranks = np.empty(len(values))
    ranks[order] = mean_rank[group]
    return ranks


def segment_median(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Median of each segment (mean of the two middle values for even lengths)."""
    lengths = _lengths(offsets)
    seg = np.repeat(np.arange(len(lengths)), lengths)
    sv = values[np.lexsort((values, seg))].astype(np.float64)
    lo = offsets[:-1] + (lengths - 1) // 2
    hi = offsets[:-1] + lengths // 2
    return (sv[lo] + sv[hi]) / 2


def segment_std(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Population standard deviation of each segment."""
    lengths = np.diff(offsets)
    mean = segment_mean(values, offsets)
    dev = values.astype(np.float64) - np.repeat(mean, lengths)
    return np.sqrt(np.add.reduceat(dev * dev, offsets[:-1]) / lengths)
