"""The AR probe: one causal forward pass per text → :class:`ARStats`.

Batched and length-bucketed; right padding with an attention mask, so padding does
not change any statistic. Only the per-token statistics leave the device; the
(B, T, V) logits are reduced in row chunks in float32.

:func:`probe_ar` (and :func:`probe_ar_shards`, shard by shard) take the model's handle whole and run its
adapter; a network in memory gets its handle from ``models/``
(:func:`~lmaudit.models.adapters.network_handle`, or its adapter's ``handle()``).
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
import torch

from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.adapters import ARAdapter
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.batching import run_batches
from lmaudit.probes.records import ARStats
from lmaudit.probes.shards import Sharded, run_sharded
from lmaudit.probes.stats import device_rows, rows_stats
from lmaudit.probes.tokenize import model_batches, tokenize_records, windows
from lmaudit.progress import progress
from lmaudit.settings import boolean, check_settings, integer, one_of, setting

PROBE_VERSION = 3  # 2: cached per shard of records; 3: each text's tokens before any cut


@dataclass(frozen=True)
class ARProbeConfig:
    """How the AR probe runs (every setting is part of a probe's cache key: a text's float32 statistics change in the
    last bits with the texts padded beside it)."""

    max_length: int | None = setting(None, check=integer(2, optional=True))  # None: the model's context length
    # texts per forward (None: as many as the model's token budget holds)
    batch_size: int | None = setting(None, check=integer(1, optional=True))
    # cap a batch's padded tokens (samples × longest); None: the model's budget
    max_batch_tokens: int | None = setting(None, check=integer(1, optional=True))
    # or "window": overlapping windows of max_length, every token scored
    long_texts: str = setting("truncate", check=one_of(("truncate", "window")))
    stride: int | None = setting(None, check=integer(1, optional=True))  # window stride (default: half the window)
    row_chunk: int = setting(256, check=integer(1))  # rows per output-layer chunk when the head is fused
    # apply a plain output layer in row chunks instead of materialising all logits
    fused_head: bool = setting(True, check=boolean())
    # the texts of a shard share a leading run of tokens (ReCaLL's prefix): its keys and values are computed once
    # and every batch continues from them (off: every text runs whole)
    reuse_prefix: bool = setting(False, check=boolean())

    def __post_init__(self) -> None:
        check_settings(self)


MIN_SHARED = 16  # fewest shared leading tokens worth computing once


def shared_run(ids: list[np.ndarray], scored: list[np.ndarray]) -> int:
    """How many leading tokens every text shares that no text scores (each position after them is still predicted
    by a row the batch computes): 0 when that is fewer than :data:`MIN_SHARED`."""
    shortest = min(len(x) for x in ids)
    first = np.stack([x[:shortest] for x in ids])
    same = np.all(first == first[0], axis=0)
    run = int(shortest if same.all() else np.argmin(same))
    unscored = min(int(np.argmax(m)) if m.any() else len(m) for m in scored)
    cut = min(run, unscored - 1)  # the token before the first scored one is fed, so its row predicts that one
    return cut if cut >= MIN_SHARED else 0


def _run_served_probe(adapter, textset: TextSet, config: ARProbeConfig, description: str | None) -> ARStats:
    """The AR probe of a served model: one request per text (the endpoint caches each answer), the statistics its
    adapter reads from the answer (``mu`` and ``sigma`` approximate: :mod:`lmaudit.models.served_model`)."""
    if config.long_texts == "window":
        raise LmauditError("a served model scores whole texts: --long-texts window needs the weights",
                           hint="use --long-texts truncate (texts longer than the context are refused)")
    limit = config.max_length or adapter.context_length
    tok = tokenize_records(adapter.tokenizer, textset, max_length=sys.maxsize)
    for rec, ids in zip(textset.records, tok.ids):  # all checked before the first request
        if len(ids) > limit:
            raise LmauditError(f"{textset.source}: record '{rec.id}' has {len(ids)} tokens, more than the served "
                               f"model's {limit}", hint="shorten the texts (a served model scores them whole)")
    per_sample = []
    with progress(description, total=len(textset)) as bar, ThreadPoolExecutor(adapter.concurrency) as pool:
        # in the records' order, whatever order the answers come in
        for rows in pool.map(lambda rec: adapter.token_stats(rec.target, rec.context or ""), textset.records):
            per_sample.append(rows)
            bar.advance(1)
    flat = np.concatenate(per_sample)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in per_sample])]).astype(np.int64)
    return ARStats(logp=flat[:, 0].copy(), top1_logp=flat[:, 1].copy(), mu=flat[:, 2].copy(),
                   sigma=flat[:, 3].copy(), entropy=(-flat[:, 2]).copy(), offsets=offsets, zlib_len=tok.zlib_len,
                   sample_keys=tok.sample_keys, n_tokens=tok.n_tokens)


@torch.inference_mode()
def _run_ar_probe(adapter: ARAdapter, textset: TextSet, config: ARProbeConfig, description: str | None) -> ARStats:
    if adapter.scoring == "served":  # its endpoint answers, there is no forward to run
        return _run_served_probe(adapter, textset, config, description)
    max_length = config.max_length or adapter.context_length
    if config.long_texts == "window":  # every token scored, in windows of the context length
        tok = tokenize_records(adapter.tokenizer, textset, max_length=sys.maxsize)
        ids, scored, owner = windows(tok, max_length, config.stride or max(1, max_length // 2))
    else:
        tok = tokenize_records(adapter.tokenizer, textset, max_length=max_length)
        ids, scored, owner = tok.ids, tok.scored, np.arange(len(textset))
    device = adapter.device
    reuse = config.reuse_prefix and config.long_texts != "window" and hasattr(adapter, "prefix_cache")
    cut = shared_run(ids, scored) if reuse and len(ids) > 1 else 0
    cache = None
    if cut:  # the shared leading tokens once; the texts are fed from there on
        cache = adapter.prefix_cache(torch.from_numpy(np.asarray(ids[0][:cut], dtype=np.int64))[None].to(device))
        ids, scored = [x[cut:] for x in ids], [m[cut:] for m in scored]
    lengths = np.array([len(x) for x in ids])
    per_sample: list[np.ndarray | None] = [None] * len(ids)
    batches = model_batches(lengths, adapter, config.batch_size, config.max_batch_tokens)
    pending: list[tuple[np.ndarray, np.ndarray, torch.Tensor]] = []  # (records, rows per record, stats on device)
    with progress(description, total=len(ids)) as bar:

        def compute(index: np.ndarray) -> None:
            input_ids, attn, mask = adapter.pad([ids[i] for i in index], [scored[i] for i in index])
            ids_t = torch.from_numpy(input_ids).to(device)
            attn_t = torch.from_numpy(attn).to(device)
            # the scored positions as flat indices into the batch's (B·T) rows, computed here: selecting them on the
            # device needs no count back from it (a boolean mask would wait for one); token t+1 is predicted by row t
            b, t = np.nonzero(mask[:, 1:])
            rows_at = torch.from_numpy(b * mask.shape[1] + t).to(device)  # (n,)
            targets = ids_t.reshape(-1).index_select(0, rows_at + 1)  # (n,)
            extra = {}
            if cache is not None:  # the batch continues after the shared tokens: they are attended, not fed
                attn_t = torch.cat([torch.ones((len(index), cut), dtype=attn_t.dtype, device=device), attn_t], 1)
                extra["past"] = adapter.expand_cache(cache, len(index))
            rows, head = adapter.output_rows(
                ids_t, attn_t, lambda out, at=rows_at: out.reshape(-1, out.shape[-1]).index_select(0, at),
                fuse=config.fused_head, **extra)
            pending.append((index, mask[:, 1:].sum(axis=1), rows_stats(rows, head, targets, row_chunk=row_chunk)))
            bar.advance(len(index))

        row_chunk = device_rows(config.row_chunk, device)
        run_batches(batches, compute, lengths=lengths)
    # one read-back for the whole shard (each batch's would make the device wait on the host)
    stats = torch.cat([t for _, _, t in pending]).cpu().numpy() if pending else np.zeros((0, 4), np.float32)
    if not np.isfinite(stats).all():
        raise LmauditError(f"the model produced NaN or inf logits on {textset.source}",
                           hint="check the model weights and dtype (try float32)")
    start = 0
    for index, counts, _ in pending:
        for i, n in zip(index, counts):
            per_sample[i] = stats[start : start + n]
            start += n
    flat = np.concatenate(per_sample)  # (N, 4), windows of a sample are consecutive: stitched in order
    counts = np.bincount(owner, weights=[len(p) for p in per_sample], minlength=len(textset))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return ARStats(
        logp=flat[:, 0].copy(),
        top1_logp=flat[:, 1].copy(),
        mu=flat[:, 2].copy(),
        sigma=flat[:, 3].copy(),
        entropy=(-flat[:, 2]).copy(),
        offsets=offsets,
        zlib_len=tok.zlib_len,
        sample_keys=tok.sample_keys,
        n_tokens=tok.n_tokens,
    )


@dataclass(frozen=True)
class ARProbeTask:
    """The AR probe of one shard (picklable: it runs in this process or on a Ray worker)."""

    config: ARProbeConfig
    description: str | None = None  # the shard's own progress, inside the whole set's (None: the set's alone)

    def __call__(self, handle: ModelHandle, shard: TextSet) -> ARStats:
        return _run_ar_probe(handle.adapter, shard, self.config, self.description)


def probe_ar_shards(handle: ModelHandle, textset: TextSet, config: ARProbeConfig = ARProbeConfig(), *,
                    cache_dir=None, description: str = "AR probe", shard_size: int | None = None) -> Sharded:
    """The AR probe of ``textset`` under the model of ``handle``, shard by shard: a
    :class:`~lmaudit.probes.shards.Sharded` of ARStats.

    With ``cache_dir`` (and a handle with a fingerprint), each shard is cached under (model,
    tokenizer, the shard's records, probe settings): a second call, or a run resumed
    after being killed, does no forward pass for the shards already on disk.
    """
    key = None
    if cache_dir is not None and handle.fingerprint:
        # every setting, the batching ones too: a text's float32 statistics change in the last bits with the texts
        # padded beside it, so a shard cached at one batch size is not the value another batch size computes
        settings = {k: v for k, v in asdict(config).items() if k != "reuse_prefix" or v}  # older keys stay valid
        key = ("ar", PROBE_VERSION, handle.fingerprint, tokenizer_fingerprint(handle.tokenizer), settings)
    # a served model answers a few texts a minute: its shard's texts are reported as they come (every 30 s without a
    # terminal), where a local shard takes seconds and the set's progress says enough
    inner = f"{description} (this shard)" if description and handle.adapter.scoring == "served" else None
    return run_sharded(textset, task=ARProbeTask(config, inner), handle=handle, key=key, load=ARStats.load,
                       cache_dir=cache_dir, description=description, shard_size=shard_size)


def probe_ar(handle: ModelHandle, textset: TextSet, config: ARProbeConfig = ARProbeConfig(), **kwargs) -> ARStats:
    """Score ``textset`` with the causal LM of ``handle`` (its weights, or the endpoint it serves from) and return its
    :class:`ARStats`: in shards of records on the current backend (:mod:`lmaudit.probes.backends`), cached with
    ``cache_dir`` under the handle's fingerprint (keyword arguments as :func:`probe_ar_shards`)."""
    return ARStats.concat(probe_ar_shards(handle, textset, config, **kwargs).all())
