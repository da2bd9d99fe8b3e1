"""Sampled continuations of every text (SaMIA's probe): what the model writes in place of the rest of the text.

Each text is tokenised as the AR probe tokenises it (its context, a pair's prompt, then its target; truncated to
the model's context or ``max_length``). Of its L target tokens the first ⌊prefix × L⌋ stay as the prefix (at most
L − 1: at least one token is left to sample), after the context; the rest are the remainder. The model's adapter
draws ``n`` continuations of the remainder's length after the prefix (:meth:`~lmaudit.models.adapters.ARAdapter.fill`:
left to right at ``temperature``; a served model asks its endpoint), and both the remainder and every draw are
decoded to text without special tokens. The draws of a text are seeded by its content (its sample key) and the run's
seed, never by its position in the set, so a text gets the same draws in any set, shard or order. Cost: ``n``
generations of the remainder per text; cached per shard under (model, tokenizer, settings, the shard's texts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.records import SampleStats
from lmaudit.probes.requests import SampleRequest
from lmaudit.probes.shards import Sharded, run_sharded
from lmaudit.probes.tokenize import tokenize_records
from lmaudit.progress import progress
from lmaudit.utils import stable_hash

SAMPLE_VERSION = 2  # 2: each text's tokens before any cut


def text_seed(key: int, seed: int) -> int:
    """The sampling seed of the text whose sample key is ``key`` in a run seeded ``seed`` (31 bits: an endpoint
    takes it, and the seeds of the draws after it, as a signed 32-bit integer)."""
    return int(stable_hash("samples", int(key), int(seed), digest_size=4), 16) >> 1


def remainder_positions(scored: np.ndarray, prefix: float) -> np.ndarray:
    """The positions (in the text's ids) of its remainder: its scored tokens after the first ⌊prefix × L⌋ of
    them, and at least the last one."""
    positions = np.flatnonzero(scored)
    keep = min(int(np.floor(prefix * len(positions))), len(positions) - 1)
    return positions[keep:]


def draw_samples(handle: ModelHandle, textset: TextSet, request: SampleRequest, *, seed: int = 0,
                 max_length: int | None = None, description: str | None = None) -> SampleStats:
    """The :class:`SampleStats` of ``textset`` under the model of ``handle`` (see the module docstring)."""
    adapter, tokenizer = handle.adapter, handle.tokenizer
    tok = tokenize_records(tokenizer, textset, max_length=max_length or adapter.context_length)
    truth, samples, prefix, remainder = [], [], [], []
    with progress(description, total=len(textset)) as bar:
        for ids, scored, key in zip(tok.ids, tok.scored, tok.sample_keys):
            masked = remainder_positions(scored, request.prefix)
            drawn = adapter.fill(ids, masked, samples=request.n, temperature=request.temperature,
                                 seed=text_seed(key, seed))
            truth.append(tokenizer.decode(ids[masked].tolist(), skip_special_tokens=True))
            samples.append([tokenizer.decode(np.asarray(row).tolist(), skip_special_tokens=True) for row in drawn])
            prefix.append(int(masked[0]))
            remainder.append(len(masked))
            bar.advance(1)
    return SampleStats(truth=np.array(truth, dtype=str), samples=np.array(samples, dtype=str).reshape(-1, request.n),
                       prefix=np.array(prefix, dtype=np.int64), remainder=np.array(remainder, dtype=np.int64),
                       sample_keys=tok.sample_keys, n_tokens=tok.n_tokens)


@dataclass(frozen=True)
class SampleTask:
    """The draws of one shard (picklable: it runs in this process or on a Ray worker)."""

    request: SampleRequest
    seed: int
    max_length: int | None

    def __call__(self, handle: ModelHandle, shard: TextSet) -> SampleStats:
        return draw_samples(handle, shard, self.request, seed=self.seed, max_length=self.max_length)


def sample_shards(handle: ModelHandle, textset: TextSet, request: SampleRequest, *, seed: int = 0,
                  max_length: int | None = None, cache_dir=None, description: str = "samples",
                  shard_size: int | None = None) -> Sharded:
    """:func:`draw_samples` shard by shard: a :class:`~lmaudit.probes.shards.Sharded` of SampleStats, each shard
    cached (with ``cache_dir`` and a handle with a fingerprint) under (model, tokenizer, request, seed, max_length,
    the shard's texts)."""
    key = None
    if cache_dir is not None and handle.fingerprint:
        key = ("samples", SAMPLE_VERSION, handle.fingerprint, tokenizer_fingerprint(handle.tokenizer), request.n,
               request.prefix, request.temperature, int(seed), max_length)
    return run_sharded(textset, task=SampleTask(request, int(seed), max_length), handle=handle, key=key,
                       load=SampleStats.load, cache_dir=cache_dir if key else None, description=description,
                       shard_size=shard_size)
