"""Compact per-token records produced by probes and read by every attack.

Ragged per-sample data is stored flat (float32 arrays plus ``offsets``), never as
a T×V matrix. Sample ``i`` owns tokens ``offsets[i]:offsets[i+1]``. How they are
saved: :mod:`lmaudit.probes.stored`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from lmaudit.errors import LmauditError
from lmaudit.probes.stored import NpzRecord, companion, saved_fields

TOKEN_FIELDS = ("logp", "top1_logp", "mu", "sigma", "entropy")


@dataclass
class ShadowStats:
    """φ of every scored sample under K shadow models, and which shadows trained on it."""

    phi: np.ndarray  # (K, S) mean token log-probability
    is_in: np.ndarray  # (K, S) bool: shadow k trained on sample s

    def take(self, indices) -> "ShadowStats":
        return ShadowStats(self.phi[:, indices], self.is_in[:, indices])

    def out_mask(self, n_samples: int) -> np.ndarray:
        if self.phi.shape[1] != n_samples:
            raise LmauditError(f"shadow statistics cover {self.phi.shape[1]} samples, the target {n_samples}")
        out = ~self.is_in
        if not out.any(axis=0).all():
            raise LmauditError(f"{int((~out.any(axis=0)).sum())} sample(s) are IN every shadow model",
                               hint="offline attacks need shadows that did not train on each sample: use more shadows")
        return out


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
    zlib-compressed byte length of the scored text — ``sample_keys`` (S,)
    uint64, a stable content hash used to seed per-sample randomness so that
    scores never depend on a sample's position in the set, and ``n_tokens`` (S,)
    int64, the text's tokens (context and target) before any cut to the token limit.

    Companions (in memory only, never saved): ``reference``, the ARStats of the same
    samples under a reference model (its own tokenisation), and ``shadows``, the
    :class:`ShadowStats` of the same samples. Attacks that need them read them here.
    """

    logp: np.ndarray
    top1_logp: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    entropy: np.ndarray
    offsets: np.ndarray
    zlib_len: np.ndarray
    sample_keys: np.ndarray
    n_tokens: np.ndarray
    reference: "ARStats | None" = companion()
    shadows: ShadowStats | None = companion()

    def __post_init__(self) -> None:
        n_tok = int(self.offsets[-1]) if len(self.offsets) else 0
        for name in TOKEN_FIELDS:
            arr = getattr(self, name)
            if arr.shape != (n_tok,):
                raise LmauditError(f"ARStats.{name} has shape {arr.shape}, expected ({n_tok},)")
        if np.any(np.diff(self.offsets) < 1):
            raise LmauditError("ARStats: every sample needs at least one scored token")
        if any(getattr(self, name).shape != (self.n_samples,) for name in ("zlib_len", "sample_keys", "n_tokens")):
            raise LmauditError("ARStats: per-sample arrays do not match the number of samples")
        if self.reference is not None and self.reference.n_samples != self.n_samples:
            raise LmauditError(f"ARStats: the reference covers {self.reference.n_samples} samples, the target "
                               f"{self.n_samples}")

    @property
    def has_reference(self) -> bool:
        return self.reference is not None

    def with_companions(self, *, reference: "ARStats | None" = None, shadows: ShadowStats | None = None) -> "ARStats":
        """These statistics with a reference model's and shadow models' statistics of the same samples attached."""
        return replace(self, reference=reference, shadows=shadows)

    def as_reference(self) -> "ARStats | None":
        """The reference's statistics as a target's (what a reference-free attack reads of the reference); None
        without a reference."""
        return self.reference

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
            n_tokens=self.n_tokens[indices],
            reference=None if self.reference is None else self.reference.take(indices),
            shadows=None if self.shadows is None else self.shadows.take(indices),
        )

    @classmethod
    def concat(cls, parts: list["ARStats"]) -> "ARStats":
        """The samples of ``parts`` in order (companions are not carried: attach them to the result)."""
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
            n_tokens=np.concatenate([p.n_tokens for p in parts]),
        )


PER_TEXT = ("n_positions", "n_patterns", "sample_keys", "n_tokens")  # MaskedStats' arrays of one value per text


@dataclass
class MaskedStats(NpzRecord):
    """Per masked (pattern, position) entry, flat and grouped by sample.

    Entries of sample i are ``offsets[i]:offsets[i+1]``, ordered by pattern then
    position. Per entry: ``pattern`` (index within the sample), ``position`` (index
    among the sample's L scorable tokens, in text order), ``ratio`` (|M|/L of its
    pattern; for a ``bernoulli`` plan the masking probability, for the ``unmasked``
    plan 0), the target statistics ``logp``, ``top1_logp``, ``mu``, ``sigma`` and,
    when a reference was probed, ``ref_*`` of the same (else empty arrays). Per
    sample: ``n_positions`` (L), ``n_patterns``, ``sample_keys`` and ``n_tokens``
    (the text's tokens before any cut to the token limit).
    """

    offsets: np.ndarray
    pattern: np.ndarray
    position: np.ndarray
    ratio: np.ndarray
    logp: np.ndarray
    top1_logp: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    ref_logp: np.ndarray
    ref_top1_logp: np.ndarray
    ref_mu: np.ndarray
    ref_sigma: np.ndarray
    n_positions: np.ndarray
    n_patterns: np.ndarray
    sample_keys: np.ndarray
    n_tokens: np.ndarray

    @property
    def n_samples(self) -> int:
        return len(self.offsets) - 1

    @property
    def has_reference(self) -> bool:
        return len(self.ref_logp) == len(self.logp) and len(self.logp) > 0

    @property
    def segment_ids(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_samples), np.diff(self.offsets))

    def as_reference(self) -> "MaskedStats | None":
        """The reference's statistics as a target's, on the same masks (what a reference-free attack reads of the
        reference); None without a reference."""
        if not self.has_reference:
            return None
        empty = self.ref_logp[:0]
        return replace(self, logp=self.ref_logp, top1_logp=self.ref_top1_logp, mu=self.ref_mu, sigma=self.ref_sigma,
                       ref_logp=empty, ref_top1_logp=empty, ref_mu=empty, ref_sigma=empty)

    def take(self, indices) -> "MaskedStats":
        indices = np.asarray(indices, dtype=np.int64)
        lengths = np.diff(self.offsets)[indices]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.repeat(self.offsets[indices] - offsets[:-1], lengths) + np.arange(offsets[-1])
        per_entry = {f.name: getattr(self, f.name) for f in saved_fields(self)
                     if f.name not in ("offsets", *PER_TEXT)}
        return MaskedStats(
            offsets=offsets,
            **{k: (v[flat] if len(v) else v) for k, v in per_entry.items()},
            **{name: getattr(self, name)[indices] for name in PER_TEXT},
        )

    @classmethod
    def concat(cls, parts: list["MaskedStats"]) -> "MaskedStats":
        base = np.cumsum([0] + [int(p.offsets[-1]) for p in parts[:-1]])
        offsets = np.concatenate([[0]] + [p.offsets[1:] + b for p, b in zip(parts, base)]).astype(np.int64)
        return cls(offsets=offsets, **{f.name: np.concatenate([getattr(p, f.name) for p in parts])
                                       for f in saved_fields(cls) if f.name != "offsets"})


@dataclass
class PrefixedStats:
    """The AR statistics of the same texts without (``plain``) and with (``prefixed``) a prefix before them, and
    how many of the prefix's shots were kept (``shots``)."""

    plain: ARStats
    prefixed: ARStats
    shots: int

    @property
    def n_samples(self) -> int:
        return self.plain.n_samples

    @property
    def n_tokens(self) -> np.ndarray:
        """Each text's tokens before any cut, without the prefix (the plain pass's)."""
        return self.plain.n_tokens

    def as_reference(self) -> "PrefixedStats | None":
        """Both passes of the reference, as a target's; None without a reference."""
        if self.plain.reference is None or self.prefixed.reference is None:
            return None
        return PrefixedStats(self.plain.reference, self.prefixed.reference, self.shots)


@dataclass
class TokenStats:
    """AR statistics with each scored token's id (``token_ids``, aligned with ``stats.logp``) and the smoothed
    corpus frequency of every id of the vocabulary (``frequencies``); ``reference``: the same of the reference
    model, under its own tokenizer."""

    stats: ARStats
    token_ids: np.ndarray
    frequencies: np.ndarray
    reference: "TokenStats | None" = None

    @property
    def n_samples(self) -> int:
        return self.stats.n_samples

    @property
    def n_tokens(self) -> np.ndarray:
        return self.stats.n_tokens

    def as_reference(self) -> "TokenStats | None":
        return self.reference


@dataclass
class GradientStats(NpzRecord):
    """Per text, the norms of its loss gradient (``norms``, (S, 4) in the order of
    :data:`lmaudit.probes.requests.GRADIENT_NORMS`) and its tokens before any cut (``n_tokens``, (S,));
    ``reference``: the same of the reference model (in memory only)."""

    norms: np.ndarray
    n_tokens: np.ndarray
    reference: "GradientStats | None" = companion()

    @property
    def n_samples(self) -> int:
        return len(self.norms)

    @property
    def has_reference(self) -> bool:
        return self.reference is not None

    def as_reference(self) -> "GradientStats | None":
        return self.reference


@dataclass
class NeighbourStats:
    """The AR statistics of the texts (``plain``) and of their neighbours (``neighbours``, each owned by the text
    ``owner`` indexes); ``reference``: the same under the reference model."""

    plain: ARStats
    neighbours: ARStats
    owner: np.ndarray
    reference: "NeighbourStats | None" = None

    @property
    def n_samples(self) -> int:
        return self.plain.n_samples

    @property
    def n_tokens(self) -> np.ndarray:
        return self.plain.n_tokens

    def as_reference(self) -> "NeighbourStats | None":
        return self.reference


@dataclass
class SampleStats(NpzRecord):
    """Per text: the rest of it after its prefix (``truth``, (S,) str), ``samples`` the model drew in its place
    ((S, n) str, each as many tokens long), both decoded without special tokens; the tokens of the ``prefix``
    (context included) and of the ``remainder`` ((S,) int64); ``sample_keys`` (S,) uint64; ``n_tokens`` (S,) int64,
    the text's tokens before any cut to the token limit. ``reference``: the same drawn from the reference model (in
    memory only)."""

    truth: np.ndarray
    samples: np.ndarray
    prefix: np.ndarray
    remainder: np.ndarray
    sample_keys: np.ndarray
    n_tokens: np.ndarray
    reference: "SampleStats | None" = companion()

    @property
    def n_samples(self) -> int:
        return len(self.truth)

    def as_reference(self) -> "SampleStats | None":
        return self.reference
