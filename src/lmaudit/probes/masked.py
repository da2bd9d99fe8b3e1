"""The DLM masked probe: statistics of masked tokens under target and reference.

For each sample, the plan's mask patterns are generated from a stable seed
(hash of sample content, plan and seed). Each pattern is one masked forward; the
statistics of the masked target tokens are kept — under the target model and, with
the same masks, under the reference model. Forwards are batched across samples
and patterns, length-bucketed and right-padded.

The ``unmasked`` plan (the authors' way of running DLM Calibration) feeds the clean
text and reads the network's raw logits with an AR shift: the raw output at
position t scores token t + 1 (``model(ids).logits[:, :-1]`` against ``ids[:, 1:]``),
whatever the DLM's own logit convention, with the attention the DLM adapter gives
the model (full attention for bidirectional networks, never a causal mask). A
text's first token has no row to predict it and is not read.

:func:`probe_masked` (and :func:`probe_masked_shards`, shard by shard) take the models' handles whole (each
side runs its own adapter on the target's token ids); a DLM in memory gets its handle from its adapter
(``adapter.handle()``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.adapters import DLMAdapter
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.batching import run_batches
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.records import MaskedStats
from lmaudit.probes.shards import run_sharded
from lmaudit.probes.stats import DEVICE_HEAD_ROWS, rows_stats
from lmaudit.probes.stored import ArrayRecord
from lmaudit.probes.tokenize import model_batches, tokenize_records
from lmaudit.progress import progress
from lmaudit.utils import stable_seed

PROBE_VERSION = 2  # 2: cached per shard of records
STAT_NAMES = ("logp", "top1_logp", "mu", "sigma")


@dataclass
class MaskJobs:
    """All (sample, pattern) forwards of a probe, with their masked positions."""

    sample: np.ndarray  # (J,)
    pattern: np.ndarray  # (J,)
    masks: list[np.ndarray]  # J arrays of token positions (in the full input) to mask
    scored_index: list[np.ndarray]  # J arrays: the same positions as indices 0..L-1
    ratio: np.ndarray  # (J,)


def plan_jobs(tok, plan: MaskPlan, seed: int) -> MaskJobs:
    sample, pattern, masks, index, ratio = [], [], [], [], []
    for i, scored in enumerate(tok.scored):
        pos = np.flatnonzero(scored)  # token positions of the L scorable tokens
        L = len(pos)
        pats, ratios = plan.draw(L, stable_seed("mask", int(tok.sample_keys[i]), plan.key(), seed))
        for j, (p, r) in enumerate(zip(pats, ratios)):
            p = np.sort(p)
            if not plan.masks:
                p = p[pos[p] > 0]  # read with an AR shift: no row predicts the input's first token
            sample.append(i)
            pattern.append(j)
            masks.append(pos[p])
            index.append(p)
            ratio.append(r)
    return MaskJobs(np.array(sample), np.array(pattern), masks, index, np.array(ratio, dtype=np.float32))


def masked_batch(ids: list[np.ndarray], jobs: MaskJobs, index: np.ndarray, adapter: DLMAdapter):
    """(input_ids, attention_mask, masked) as (B, T) arrays of the jobs ``index``.

    ``ids[s]`` are sample s's clean tokens; ``masked`` marks the positions the job masks.
    """
    seqs = [ids[jobs.sample[j]] for j in index]
    sels = []
    for j, x in zip(index, seqs):
        sel = np.zeros(len(x), dtype=bool)
        sel[jobs.masks[j]] = True
        sels.append(sel)
    return adapter.pad(seqs, sels)


@torch.inference_mode()
def masked_forward_stats(adapter: DLMAdapter, ids: list[np.ndarray], jobs: MaskJobs, *, batch_size: int | None = None,
                         max_batch_tokens: int | None = None, description: str | None = None,
                         unmasked: bool = False) -> np.ndarray:
    """Statistics of every masked position of every job: ``(E, 4)`` float32, in job order.

    Columns ``logp``, ``top1_logp``, ``mu``, ``sigma`` (:data:`STAT_NAMES`); ``ids[s]``
    are sample s's clean token ids and job j masks ``jobs.masks[j]`` of sample
    ``jobs.sample[j]``. Jobs are batched by length (:func:`~lmaudit.probes.tokenize.model_batches`: without
    ``batch_size`` or ``max_batch_tokens``, as many padded tokens as the model's budget holds); a batch
    that runs out of memory is halved (:func:`run_batches`); a job that masks nothing
    runs no forward. With ``unmasked``, nothing is masked: the clean text goes in and
    the positions ``jobs.masks[j]`` (all > 0) are read from the raw logits with an AR
    shift (module docstring).
    """
    device = adapter.device
    counts = np.array([len(m) for m in jobs.masks])
    starts = np.concatenate([[0], np.cumsum(counts)])
    out = np.empty((starts[-1], 4), dtype=np.float32)
    lengths = np.array([len(ids[s]) for s in jobs.sample])
    # the adapter's rows predict the token at their position; the raw network row t is the
    # adapter's row t + 1 when it realigns shifted logits, else row t
    shift = 1 if adapter.shift_logits else 0
    row_chunk = {} if device.type == "cpu" else {"row_chunk": DEVICE_HEAD_ROWS}  # a fused head: fewer launches
    pending: list[tuple[np.ndarray, np.ndarray, torch.Tensor]] = []  # (jobs, rows per job, stats on the device)
    with progress(description, total=len(jobs.sample)) as bar:

        def compute(index: np.ndarray) -> None:
            batch_ids, attn, sel = masked_batch(ids, jobs, index, adapter)
            ids_t = torch.from_numpy(batch_ids).to(device)
            sel_t = torch.from_numpy(sel).to(device)
            attn_t = torch.from_numpy(attn).to(device)
            # the read rows as (sample, position) pairs computed here, in row-major order: picking them on the device
            # by index needs no count back from it (a boolean mask would wait for one every batch)
            b, t = np.nonzero(sel[:, 1:] if unmasked else sel)
            b_t, t_t = torch.from_numpy(b).to(device), torch.from_numpy(t).to(device)
            width = batch_ids.shape[1]
            if unmasked:  # token t+1, scored from the raw row t (+ the adapter's shift)
                rows, head = adapter.output_rows(ids_t, attn_t, lambda out: out.reshape(-1, out.shape[-1]).index_select(
                    0, b_t * out.shape[1] + t_t + shift))
                targets = ids_t.reshape(-1).index_select(0, b_t * width + t_t + 1)  # (n,)
            else:
                noisy = adapter.insert_masks(ids_t, sel_t)
                rows, head = adapter.output_rows(noisy, attn_t, lambda out: out.reshape(-1, out.shape[-1]).index_select(
                    0, b_t * out.shape[1] + t_t))  # the masked rows only
                targets = ids_t.reshape(-1).index_select(0, b_t * width + t_t)  # (n,)
            pending.append((index, (sel[:, 1:] if unmasked else sel).sum(axis=1),
                            rows_stats(rows, head, targets, **(row_chunk if head is not None else {}))))
            bar.advance(len(index))

        if (counts == 0).any():  # nothing to read: no forward (a Bernoulli draw that masked no position)
            bar.advance(int((counts == 0).sum()))
        todo = np.flatnonzero(counts > 0)
        batches = [todo[b] for b in model_batches(lengths[todo], adapter, batch_size, max_batch_tokens)]
        run_batches(batches, compute, lengths=lengths)
    # one read-back for every batch (each batch's own would make the device wait on the host)
    stats = torch.cat([t for _, _, t in pending]).cpu().numpy() if pending else np.zeros((0, 4), np.float32)
    if not np.isfinite(stats).all():
        raise LmauditError("the model produced NaN or inf logits", hint="check the weights and dtype")
    start = 0
    for index, per_job, _ in pending:  # rows are row-major: each job's rows in a run, the batch's jobs in order
        for j, n in zip(index, per_job):
            out[starts[j] : starts[j + 1]] = stats[start : start + n]
            start += n
    return out


def masked_window_stats(handle: ModelHandle, windows: list[np.ndarray], allowed: list[np.ndarray], plan: MaskPlan,
                        seeds: list[int], *, batch_size: int | None = None,
                        description: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Masked statistics of token windows whose masks may only cover some of their positions.

    ``windows[i]`` are token ids; ``allowed[i]`` the positions in it that ``plan``
    may mask (its L); the patterns come from ``plan.patterns(L, seeds[i])``. Returns
    the ``(E, 4)`` statistics (:data:`STAT_NAMES`), per window ordered by pattern then
    position, and the ``(n + 1,)`` offsets of each window's entries. Used by PII
    reconstruction to score candidate values in their context.
    """
    sample, pattern, masks, index, ratio = [], [], [], [], []
    for i, (allow, seed) in enumerate(zip(allowed, seeds)):
        for j, p in enumerate(plan.patterns(len(allow), seed)):
            p = np.sort(p)
            sample.append(i)
            pattern.append(j)
            masks.append(allow[p])
            index.append(p)
            ratio.append(len(p) / len(allow))
    jobs = MaskJobs(np.array(sample), np.array(pattern), masks, index, np.array(ratio, dtype=np.float32))
    stats = masked_forward_stats(handle.adapter, windows, jobs, batch_size=batch_size, description=description)
    counts = np.bincount(jobs.sample, weights=[len(m) for m in masks], minlength=len(windows))
    return stats, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _check_vocab(target, reference) -> None:
    vt = target.model.get_output_embeddings().weight.shape[0]
    vr = reference.model.get_output_embeddings().weight.shape[0]
    if vt != vr or target.mask_token_id != reference.mask_token_id:
        raise LmauditError(
            f"target and reference DLMs differ in vocabulary ({vt} vs {vr} tokens, mask ids "
            f"{target.mask_token_id} vs {reference.mask_token_id})",
            hint="masked probes compare the two models on identical token masks: use a reference with the same "
                 "tokenizer",
        )


@dataclass(frozen=True)
class MaskedSideTask:
    """One model's statistics on one shard's masked entries (picklable: runs here or on a Ray worker)."""

    plan: MaskPlan
    seed: int
    batch_size: int | None
    max_length: int
    max_batch_tokens: int | None = None

    def prepare(self, tokenizer, shard: TextSet):
        tok = tokenize_records(tokenizer, shard, max_length=self.max_length, first_scorable=0)
        return tok, plan_jobs(tok, self.plan, self.seed)

    def __call__(self, handle, shard: TextSet) -> ArrayRecord:
        tok, jobs = self.prepare(handle.tokenizer, shard)
        return ArrayRecord(masked_forward_stats(handle.adapter, tok.ids, jobs, batch_size=self.batch_size,
                                                max_batch_tokens=self.max_batch_tokens, unmasked=not self.plan.masks))


def _assemble(tok, jobs: MaskJobs, tar: np.ndarray, ref: np.ndarray) -> MaskedStats:
    n = len(tok.ids)
    counts = np.array([len(m) for m in jobs.masks], dtype=np.int64)
    per_sample = np.bincount(jobs.sample, weights=counts, minlength=n).astype(np.int64)
    return MaskedStats(
        offsets=np.concatenate([[0], np.cumsum(per_sample)]).astype(np.int64),
        pattern=np.repeat(jobs.pattern, counts).astype(np.int32),
        position=np.concatenate(jobs.scored_index).astype(np.int32),
        ratio=np.repeat(jobs.ratio, counts),
        **{name: tar[:, k].copy() for k, name in enumerate(STAT_NAMES)},
        **{f"ref_{name}": ref[:, k].copy() for k, name in enumerate(STAT_NAMES)},
        n_positions=np.array([s.sum() for s in tok.scored], dtype=np.int64),
        n_patterns=np.bincount(jobs.sample, minlength=n).astype(np.int64),
        sample_keys=tok.sample_keys,
        n_tokens=tok.n_tokens,
    )


def probe_masked_shards(
    target: ModelHandle,
    textset: TextSet,
    plan: MaskPlan,
    *,
    reference: ModelHandle | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    max_batch_tokens: int | None = None,
    max_length: int | None = None,
    cache_dir=None,
    shard_size: int | None = None,
):
    """The masked probe of ``textset`` under ``plan``, shard by shard: yields ``((start, stop), MaskedStats)`` in order.

    Both models read the target's token ids (its tokenizer); each side is cached on its own, under its handle's
    fingerprint (with ``cache_dir``). Every shard of each model is computed (or found in the cache) before the
    first one is yielded; the yielded statistics are read back one shard at a time.
    """
    if reference is not None:
        _check_vocab(target.adapter, reference.adapter)
    tokenizer = target.tokenizer
    max_length = max_length or target.adapter.context_length
    task = MaskedSideTask(plan, seed, batch_size, max_length, max_batch_tokens)
    # the batching settings belong to the key: a job's float32 statistics change in the last bits with its batch
    data_key = (tokenizer_fingerprint(tokenizer), max_length, plan.cache_key(), seed, batch_size, max_batch_tokens)

    def side(handle: ModelHandle, label: str):
        adapter, key = handle.adapter, None
        if cache_dir is not None and handle.fingerprint:
            key = ("masked-side", PROBE_VERSION, handle.fingerprint, adapter.mask_token_id, adapter.shift_logits,
                   data_key)
        if handle.tokenizer is not tokenizer:  # the reference tokenises as the target does
            handle = replace(handle, tokenizer=tokenizer)
        return run_sharded(textset, task=task, handle=handle, key=key, load=ArrayRecord.load, cache_dir=cache_dir,
                           description=f"DLM probe ({plan.kind}) {label}", shard_size=shard_size, suffix=".npy")

    tar = side(target, "target")
    ref = side(reference, "reference") if reference is not None else None
    empty = np.empty((0, 4), dtype=np.float32)
    for i, (a, b) in enumerate(tar.bounds):
        tok, jobs = task.prepare(tokenizer, TextSet(textset.records[a:b], source=textset.source))
        yield (a, b), _assemble(tok, jobs, tar.get(i).array, empty if ref is None else ref.get(i).array)


def probe_masked(target: ModelHandle, textset: TextSet, plan: MaskPlan, **kwargs) -> MaskedStats:
    """The :class:`MaskedStats` of ``textset`` under ``plan`` (keyword arguments as :func:`probe_masked_shards`)."""
    return MaskedStats.concat([s for _, s in probe_masked_shards(target, textset, plan, **kwargs)])


__all__ = ["MaskJobs", "MaskedStats", "masked_forward_stats", "masked_window_stats", "plan_jobs", "probe_masked",
           "probe_masked_shards"]
