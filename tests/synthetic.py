"""Synthetic probe records with a known member/non-member signal, built from real logits."""

from __future__ import annotations

import numpy as np
import torch

from lmaudit.probes.records import ARStats
from lmaudit.probes.stats import token_stats


def synthetic_stats(n_members: int = 40, n_nonmembers: int = 40, *, vocab: int = 50, seed: int = 0):
    """(target ARStats, reference ARStats, labels).

    Every sample has its own random logits. Under the target model members' tokens
    are drawn mostly from the top of the distribution, non-members' uniformly; the
    reference model sees both like non-members.
    """
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    labels = np.r_[np.ones(n_members, dtype=np.int64), np.zeros(n_nonmembers, dtype=np.int64)]
    lengths = rng.integers(3, 30, size=len(labels))
    logits = torch.randn(int(lengths.sum()), vocab, generator=gen) * 2.0  # (N, V)
    seg = np.repeat(np.arange(len(labels)), lengths)
    member_tok = torch.from_numpy(labels[seg] == 1)
    top = logits.topk(3, dim=-1).indices[torch.arange(len(seg)), torch.from_numpy(rng.integers(0, 3, len(seg)))]
    uniform = torch.from_numpy(rng.integers(0, vocab, len(seg)))
    targets = torch.where(member_tok & torch.from_numpy(rng.random(len(seg)) < 0.6), top, uniform)
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    zlib_len = rng.integers(40, 120, size=len(labels))
    keys = rng.integers(0, 2**63, size=len(labels), dtype=np.uint64)

    def pack(stats: torch.Tensor) -> ARStats:
        s = stats.numpy()
        return ARStats(logp=s[:, 0].copy(), top1_logp=s[:, 1].copy(), mu=s[:, 2].copy(), sigma=s[:, 3].copy(),
                       entropy=-s[:, 2].copy(), offsets=offsets, zlib_len=zlib_len, sample_keys=keys,
                       n_tokens=np.asarray(lengths, dtype=np.int64) + 1)

    target = pack(token_stats(logits, targets))
    ref_logits = logits + torch.randn(logits.shape, generator=gen) * 0.5
    reference = pack(token_stats(ref_logits, uniform))
    return target, reference, labels


def synthetic_shadows(reference, k: int = 8, *, seed: int = 0):
    """ShadowStats for ``k`` shadows: each sample IN for a random half; IN raises φ by 0.8 nats, OUT is φ_ref +
    noise."""
    from lmaudit.probes.records import ShadowStats
    from lmaudit.probes.segments import segment_mean

    rng = np.random.default_rng(seed + 99)
    phi_ref = segment_mean(reference.logp, reference.offsets)
    is_in = rng.random((k, len(phi_ref))) < 0.5
    is_in[0], is_in[1] = False, True  # every sample has OUT and IN shadows
    phi = phi_ref[None, :] + rng.normal(0, 0.1, (k, len(phi_ref))) + 0.8 * is_in
    return ShadowStats(phi, is_in)


# parameters an attack needs before it can say which probe it reads (ReCaLL: prefix texts)
SYNTHETIC_PARAMS = {"recall": {"prefix_texts": ["a text known not to be a member"]}}


def records_for(spec, target, reference=None, shadows=None):
    """The records ``spec`` reads, built from synthetic ARStats: the target with the companions it needs; for an
    attack that reads a prefixed pass (ReCaLL) the target's own statistics stand in for that pass (the same tokens
    scored, as the probe guarantees)."""
    from lmaudit.probes.records import PrefixedStats
    from lmaudit.probes.requests import (
        FrequencyRequest,
        GradientRequest,
        NeighbourRequest,
        PrefixRequest,
        SampleRequest,
    )

    plain = target.with_companions(reference=reference if spec.needs_reference else None,
                                   shadows=shadows if spec.needs_shadows else None)
    request = spec.probe({**spec.params, **SYNTHETIC_PARAMS.get(spec.name, {})}, 16)
    if isinstance(request, PrefixRequest):
        return PrefixedStats(plain, target, 1)
    if isinstance(request, FrequencyRequest):
        return token_records(plain, reference)
    if isinstance(request, GradientRequest):
        return gradient_records(plain, reference)
    if isinstance(request, NeighbourRequest):
        return neighbour_records(plain, reference)
    if isinstance(request, SampleRequest):
        return sample_records(plain, reference)
    return plain


def token_records(target, reference=None, *, vocab: int = 50, seed: int = 0):
    """TokenStats over synthetic ARStats: random token ids and corpus frequencies (DC-PDD's records)."""
    from lmaudit.probes.records import TokenStats

    freq = np.random.default_rng(seed + 7).dirichlet(np.ones(vocab))

    def wrap(stats):  # a token's id follows from its own statistics, so reordering the samples moves it along
        return TokenStats(stats, (np.abs(stats.logp.astype(np.float64)) * 1e4).astype(np.int64) % vocab, freq)

    return TokenStats(target, wrap(target).token_ids, freq, None if reference is None else wrap(reference))


def gradient_records(target, reference=None):
    """GradientStats over synthetic ARStats: every norm grows with the text's mean loss (a member's gradient is
    smaller where its loss is lower)."""
    from lmaudit.probes.records import GradientStats
    from lmaudit.probes.segments import segment_mean

    def norms(stats):
        loss = -segment_mean(stats.logp.astype(np.float64), stats.offsets)
        return np.stack([loss, 2 * loss, 3 * loss, loss / 2], axis=1)

    return GradientStats(norms(target), target.n_tokens,
                         None if reference is None else GradientStats(norms(reference), reference.n_tokens))


def neighbour_records(target, reference=None, *, per_text: int = 2, loss: float = 3.0):
    """NeighbourStats over synthetic ARStats: ``per_text`` neighbours of every text, each a copy of it whose tokens
    all have log-probability −``loss`` (texts like it, which the model did not see)."""
    from dataclasses import replace

    from lmaudit.probes.records import NeighbourStats

    def wrap(stats):
        owner = np.repeat(np.arange(stats.n_samples), per_text)
        copies = stats.take(owner)
        return NeighbourStats(stats, replace(copies, logp=np.full_like(copies.logp, -loss)), owner)

    found = wrap(target)
    found.reference = None if reference is None else wrap(reference)
    return found


def sample_records(target, reference=None, *, n: int = 4):
    """SampleStats over synthetic ARStats: text i's remainder is one word per scored token, and draw k of n writes
    word j when that token's probability exceeds (k + 1) / (2n) (the rest another word): a member, whose tokens are
    likelier, has more of its words reproduced."""
    from lmaudit.probes.records import SampleStats

    def wrap(stats):
        truth, samples = [], []
        for i in range(stats.n_samples):
            p = np.exp(stats.logp[stats.offsets[i]:stats.offsets[i + 1]].astype(np.float64))
            words = [f"w{j}" for j in range(len(p))]
            truth.append(" ".join(words))
            samples.append([" ".join(w if p[j] > (k + 1) / (2 * n) else "x" for j, w in enumerate(words))
                            for k in range(n)])
        return SampleStats(np.array(truth, dtype=str), np.array(samples, dtype=str).reshape(-1, n),
                           np.zeros(stats.n_samples, dtype=np.int64), stats.lengths, stats.sample_keys, stats.n_tokens)

    found = wrap(target)
    found.reference = None if reference is None else wrap(reference)
    return found
