"""The DLM masked probe: statistics of masked tokens under target and reference.

For each sample, the plan's mask patterns are generated from a stable seed
(hash of sample content, plan and seed). Each pattern is one masked forward; the
statistics of the masked target tokens are kept — under the target model and, with
the same masks, under the reference model. Forwards are batched across samples
and patterns, length-bucketed and right-padded.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.probes.ar import head_stats, token_stats
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.records import ArrayRecord, NpzRecord
from lmaudit.probes.shards import run_sharded
from lmaudit.probes.tokenize import length_batches, tokenize_records
from lmaudit.progress import progress
from lmaudit.utils import stable_seed

PROBE_VERSION = 2  # 2: cached per shard of records
STAT_NAMES = ("logp", "top1_logp", "mu", "sigma")


@dataclass
class MaskedStats(NpzRecord):
    """Per masked (pattern, position) entry, flat and grouped by sample.

    Entries of sample i are ``offsets[i]:offsets[i+1]``, ordered by pattern then
    position. Per entry: ``pattern`` (index within the sample), ``position`` (index
    among the sample's L scorable tokens, in text order), ``ratio`` (|M|/L of its
    pattern), the target statistics ``logp``, ``top1_logp``, ``mu``, ``sigma`` and,
    when a reference was probed, ``ref_*`` of the same (else empty arrays). Per
    sample: ``n_positions`` (L), ``n_patterns`` and ``sample_keys``.
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

    @property
    def n_samples(self) -> int:
        return len(self.offsets) - 1

    @property
    def has_reference(self) -> bool:
        return len(self.ref_logp) == len(self.logp) and len(self.logp) > 0

    @property
    def segment_ids(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_samples), np.diff(self.offsets))

    def take(self, indices) -> "MaskedStats":
        indices = np.asarray(indices, dtype=np.int64)
        lengths = np.diff(self.offsets)[indices]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.repeat(self.offsets[indices] - offsets[:-1], lengths) + np.arange(offsets[-1])
        per_entry = {f.name: getattr(self, f.name) for f in fields(self)
                     if f.name not in ("offsets", "n_positions", "n_patterns", "sample_keys")}
        return MaskedStats(
            offsets=offsets,
            **{k: (v[flat] if len(v) else v) for k, v in per_entry.items()},
            n_positions=self.n_positions[indices],
            n_patterns=self.n_patterns[indices],
            sample_keys=self.sample_keys[indices],
        )

    @classmethod
    def concat(cls, parts: list["MaskedStats"]) -> "MaskedStats":
        base = np.cumsum([0] + [int(p.offsets[-1]) for p in parts[:-1]])
        offsets = np.concatenate([[0]] + [p.offsets[1:] + b for p, b in zip(parts, base)]).astype(np.int64)
        return cls(offsets=offsets, **{f.name: np.concatenate([getattr(p, f.name) for p in parts])
                                       for f in fields(cls) if f.name != "offsets"})


@dataclass
class _Jobs:
    """All (sample, pattern) forwards of a probe, with their masked positions."""

    sample: np.ndarray  # (J,)
    pattern: np.ndarray  # (J,)
    masks: list[np.ndarray]  # J arrays of token positions (in the full input) to mask
    scored_index: list[np.ndarray]  # J arrays: the same positions as indices 0..L-1
    ratio: np.ndarray  # (J,)


def plan_jobs(tok, plan: MaskPlan, seed: int) -> _Jobs:
    sample, pattern, masks, index, ratio = [], [], [], [], []
    for i, scored in enumerate(tok.scored):
        pos = np.flatnonzero(scored)  # token positions of the L scorable tokens
        L = len(pos)
        pats = plan.patterns(L, stable_seed("mask", int(tok.sample_keys[i]), plan.key(), seed))
        for j, p in enumerate(pats):
            p = np.sort(p)
            sample.append(i)
            pattern.append(j)
            masks.append(pos[p])
            index.append(p)
            ratio.append(len(p) / L)
    return _Jobs(np.array(sample), np.array(pattern), masks, index, np.array(ratio, dtype=np.float32))


def masked_batches(tok, jobs: _Jobs, batch_size: int, pad_id: int):
    """Yield (job indices, input_ids, attention_mask, masked) as (B, T) arrays, length-bucketed.

    ``input_ids`` are the clean tokens; ``masked`` marks the positions the job masks.
    """
    lengths = np.array([len(tok.ids[s]) for s in jobs.sample])
    for index in length_batches(lengths, batch_size):
        T = lengths[index].max()
        ids = np.full((len(index), T), pad_id, dtype=np.int64)
        attn = np.zeros((len(index), T), dtype=np.int64)
        sel = np.zeros((len(index), T), dtype=bool)
        for row, j in enumerate(index):
            x = tok.ids[jobs.sample[j]]
            ids[row, : len(x)] = x
            attn[row, : len(x)] = 1
            sel[row, jobs.masks[j]] = True
        yield index, ids, attn, sel


@torch.inference_mode()
def _masked_forward_stats(adapter, tok, jobs: _Jobs, batch_size: int, pad_id: int, description: str | None) -> np.ndarray:
    """(E, 4) float32 statistics at every masked position of every job, in job order."""
    device = next(adapter.parameters()).device
    counts = np.array([len(m) for m in jobs.masks])
    starts = np.concatenate([[0], np.cumsum(counts)])
    out = np.empty((starts[-1], 4), dtype=np.float32)
    fused = adapter.fused_head()
    with progress(description, total=len(jobs.sample)) as bar:
        for index, ids, attn, sel in masked_batches(tok, jobs, batch_size, pad_id):
            ids_t = torch.from_numpy(ids).to(device)
            sel_t = torch.from_numpy(sel).to(device)
            noisy = torch.where(sel_t, torch.full_like(ids_t, adapter.mask_token_id), ids_t)
            attn_t = torch.from_numpy(attn).to(device)
            if fused is not None:  # apply the output layer to masked rows only, in cache-sized chunks
                hidden = adapter.hidden(fused[0], noisy, attn_t)  # (B, T, d)
                stats = head_stats(hidden[sel_t], fused[1], ids_t[sel_t]).cpu().numpy()  # (n, 4), row-major order
            else:
                logits = adapter(noisy, attn_t)  # (B, T, V)
                stats = token_stats(logits[sel_t], ids_t[sel_t]).cpu().numpy()  # (n, 4), row-major order
            if not np.isfinite(stats).all():
                raise LmauditError("the model produced NaN or inf logits", hint="check the weights and dtype")
            bounds = np.concatenate([[0], np.cumsum(sel.sum(axis=1))])
            for row, j in enumerate(index):
                out[starts[j] : starts[j + 1]] = stats[bounds[row] : bounds[row + 1]]
            bar.advance(len(index))
    return out


def _check_vocab(target, reference) -> None:
    vt = target.model.get_output_embeddings().weight.shape[0]
    vr = reference.model.get_output_embeddings().weight.shape[0]
    if vt != vr or target.mask_token_id != reference.mask_token_id:
        raise LmauditError(
            f"target and reference DLMs differ in vocabulary ({vt} vs {vr} tokens, mask ids "
            f"{target.mask_token_id} vs {reference.mask_token_id})",
            hint="masked probes compare the two models on identical token masks: use a reference with the same tokenizer",
        )


@dataclass(frozen=True)
class MaskedSideTask:
    """One model's statistics on one shard's masked entries (picklable: runs here or on a Ray worker)."""

    plan: MaskPlan
    seed: int
    batch_size: int
    max_length: int

    def prepare(self, tokenizer, shard: TextSet):
        tok = tokenize_records(tokenizer, shard, max_length=self.max_length, first_scorable=0)
        return tok, plan_jobs(tok, self.plan, self.seed)

    def __call__(self, handle, shard: TextSet) -> ArrayRecord:
        tok, jobs = self.prepare(handle.tokenizer, shard)
        pad_id = handle.tokenizer.pad_token_id if handle.tokenizer.pad_token_id is not None else 0
        return ArrayRecord(_masked_forward_stats(handle.adapter, tok, jobs, self.batch_size, pad_id, None))


def _assemble(tok, jobs: _Jobs, tar: np.ndarray, ref: np.ndarray) -> MaskedStats:
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
    )


def probe_masked_shards(
    target,
    tokenizer,
    textset: TextSet,
    plan: MaskPlan,
    *,
    reference=None,
    seed: int = 0,
    batch_size: int = 64,
    fingerprints: tuple[str, str | None] | None = None,
    cache_dir=None,
    shard_size: int | None = None,
):
    """:func:`probe_masked` shard by shard: yields ``((start, stop), MaskedStats)`` in order.

    Every shard of each model is computed (or found in the cache) before the first
    one is yielded; the yielded statistics are read back one shard at a time.
    """
    from lmaudit.models.fingerprint import tokenizer_fingerprint
    from lmaudit.models.loading import LoadedModel

    if reference is not None:
        _check_vocab(target, reference)
    max_length = getattr(target.config, "max_position_embeddings", 512)
    task = MaskedSideTask(plan, seed, batch_size, max_length)
    data_key = (tokenizer_fingerprint(tokenizer), max_length, plan.key(), seed)

    def side(adapter, fingerprint, label):
        key = None
        if cache_dir is not None and fingerprint is not None:
            key = ("masked-side", PROBE_VERSION, fingerprint, adapter.mask_token_id, adapter.shift_logits, data_key)
        handle = LoadedModel(adapter.model, tokenizer, "", fingerprint or "", "dlm", adapter)
        return run_sharded(textset, task=task, handle=handle, key=key, load=ArrayRecord.load, cache_dir=cache_dir,
                           description=f"DLM probe ({plan.kind}) {label}", shard_size=shard_size, suffix=".npy")

    fps = fingerprints or (None, None)
    tar = side(target, fps[0], "target")
    ref = side(reference, fps[1], "reference") if reference is not None else None
    empty = np.empty((0, 4), dtype=np.float32)
    for i, (a, b) in enumerate(tar.bounds):
        tok, jobs = task.prepare(tokenizer, TextSet(textset.records[a:b], source=textset.source))
        yield (a, b), _assemble(tok, jobs, tar.get(i).array, empty if ref is None else ref.get(i).array)


def probe_masked(target, tokenizer, textset: TextSet, plan: MaskPlan, **kwargs) -> MaskedStats:
    """Probe ``textset`` with DLM adapters ``target`` (and ``reference``) under ``plan``.

    Both models see identical masked inputs: the masks depend only on the tokenised
    sample, the plan and ``seed``. With ``fingerprints`` (target, reference) and
    ``cache_dir``, each model's statistics are cached on disk separately and per
    shard of records, so a reference shared by several targets is probed once and a
    killed run resumes where it stopped. The work runs on the current backend.
    Keyword arguments as :func:`probe_masked_shards`.
    """
    return MaskedStats.concat([s for _, s in probe_masked_shards(target, tokenizer, textset, plan, **kwargs)])


__all__ = ["MaskedStats", "probe_masked", "probe_masked_shards"]
