"""Compact per-token records produced by probes and read by every attack.

Ragged per-sample data is stored flat (float32 arrays plus ``offsets``), never as
a T×V matrix. Sample ``i`` owns tokens ``offsets[i]:offsets[i+1]``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from lmaudit.errors import LmauditError
from lmaudit.utils import atomic_path

TOKEN_FIELDS = ("logp", "top1_logp", "mu", "sigma", "entropy")


class NpzRecord:
    """Save/load for dataclass records of numpy arrays: one uncompressed ``.npz``, written atomically."""

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, **{f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def load(cls, path: str | Path):
        with np.load(path, allow_pickle=False) as z:
            return cls(**{f.name: z[f.name] for f in fields(cls)})


@dataclass
class ArrayRecord:
    """One numpy array, saved as an uncompressed ``.npy`` atomically (a shard of features or statistics)."""

    array: np.ndarray

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, self.array)

    @classmethod
    def load(cls, path: str | Path) -> "ArrayRecord":
        with open(path, "rb") as fh:
            return cls(np.load(fh, allow_pickle=False))


class ArrayDict(dict):
    """Named numpy arrays, saved as one uncompressed ``.npz`` atomically (no pickled objects)."""

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, **self)

    @classmethod
    def load(cls, path: str | Path) -> "ArrayDict":
        with np.load(path, allow_pickle=False) as z:
            return cls({k: z[k] for k in z.files})


@dataclass
class ARStats(NpzRecord):
    """Per-token statistics of one causal forward pass per text.

    For every scored position t (ragged per sample, flat arrays of length N):

    - ``logp``      log p(x_t | x_<t)                              (N,) float32
    - ``top1_logp`` max_v log p(v | x_<t)                          (N,) float32
    - ``mu``        E_{v~p}[log p(v)]                              (N,) float32
    - ``sigma``     sqrt(E_{v~p}[(log p(v) - mu)^2]), clamped ≥ 1e-8 (N,) float32
    - ``entropy``   -E_{v~p}[log p(v)] = -mu                       (N,) float32

    Per sample (length S): ``offsets`` (S+1,) int64, ``zlib_len`` (S,) int64 — the
    zlib-compressed byte length of the scored text — and ``sample_keys`` (S,)
    uint64, a stable content hash used to seed per-sample randomness so that
    scores never depend on a sample's position in the set.
    """

    logp: np.ndarray
    top1_logp: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    entropy: np.ndarray
    offsets: np.ndarray
    zlib_len: np.ndarray
    sample_keys: np.ndarray

    def __post_init__(self) -> None:
        n_tok = int(self.offsets[-1]) if len(self.offsets) else 0
        for name in TOKEN_FIELDS:
            arr = getattr(self, name)
            if arr.shape != (n_tok,):
                raise LmauditError(f"ARStats.{name} has shape {arr.shape}, expected ({n_tok},)")
        if np.any(np.diff(self.offsets) < 1):
            raise LmauditError("ARStats: every sample needs at least one scored token")
        if self.zlib_len.shape != (self.n_samples,) or self.sample_keys.shape != (self.n_samples,):
            raise LmauditError("ARStats: per-sample arrays do not match the number of samples")

    @property
    def n_samples(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Number of scored tokens per sample, (S,) int64."""
        return np.diff(self.offsets)

    @property
    def segment_ids(self) -> np.ndarray:
        """Sample index of every flat token, (N,) int64."""
        return np.repeat(np.arange(self.n_samples), self.lengths)

    def take(self, indices: np.ndarray) -> "ARStats":
        """A new ARStats with samples reordered/selected by ``indices``."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.lengths[indices]
        starts = self.offsets[indices]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        return ARStats(
            **{name: getattr(self, name)[flat] for name in TOKEN_FIELDS},
            offsets=offsets,
            zlib_len=self.zlib_len[indices],
            sample_keys=self.sample_keys[indices],
        )

    @classmethod
    def concat(cls, parts: list["ARStats"]) -> "ARStats":
        offsets = [np.zeros(1, dtype=np.int64)]
        base = 0
        for p in parts:
            offsets.append(p.offsets[1:] + base)
            base += int(p.offsets[-1])
        return cls(
            **{name: np.concatenate([getattr(p, name) for p in parts]) for name in TOKEN_FIELDS},
            offsets=np.concatenate(offsets),
            zlib_len=np.concatenate([p.zlib_len for p in parts]),
            sample_keys=np.concatenate([p.sample_keys for p in parts]),
        )
