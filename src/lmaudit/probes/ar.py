"""The AR probe: one causal forward pass per text → :class:`ARStats`.

Batched and length-bucketed; right padding with an attention mask, so padding does
not change any statistic. Only the per-token statistics leave the device; the
(B, T, V) logits are reduced in row chunks in float32.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.probes.records import ARStats
from lmaudit.probes.shards import Sharded, run_sharded
from lmaudit.probes.tokenize import length_batches, pad_batch, tokenize_records
from lmaudit.progress import progress

PROBE_VERSION = 2  # 2: cached per shard of records


@dataclass(frozen=True)
class ARProbeConfig:
    max_length: int | None = None  # None: the model's context length
    batch_size: int = 32
    row_chunk: int = 256  # rows per output-layer chunk when the head is fused
    fused_head: bool = True  # apply a plain output layer in row chunks instead of materialising all logits


def _chunk_stats(x: torch.Tensor, targets: torch.Tensor, out: torch.Tensor) -> None:
    """Write (logp, top1_logp, mu, sigma) of logits rows ``x`` (n, V) into ``out`` (n, 4)."""
    x = x.float()
    y = x - x.amax(dim=-1, keepdim=True)  # (n, V), ≤ 0, max = 0
    e = torch.exp(y)  # (n, V)
    z = e.sum(dim=-1)  # (n,)
    log_z = torch.log(z)
    ey = e.mul_(y)  # e·y, in place
    m1 = ey.sum(dim=-1) / z  # E_p[y]
    m2 = ey.mul_(y).sum(dim=-1) / z  # E_p[y^2]
    out[:, 0] = y.gather(1, targets[:, None]).squeeze(1) - log_z
    out[:, 1] = -log_z
    out[:, 2] = m1 - log_z
    out[:, 3] = torch.sqrt(torch.clamp(m2 - m1 * m1, min=1e-16))


def token_stats(logits: torch.Tensor, targets: torch.Tensor, *, row_chunk: int = 48) -> torch.Tensor:
    """Per-row statistics of next-token distributions.

    Parameters
    ----------
    logits : (N, V) tensor, any float dtype; reduced in float32.
    targets : (N,) int64 tensor of the observed tokens.

    Returns
    -------
    (N, 4) float32 tensor with columns ``logp``, ``top1_logp``, ``mu``, ``sigma``
    (``sigma`` clamped ≥ 1e-8). ``entropy`` is ``-mu``.
    """
    out = torch.empty((logits.shape[0], 4), dtype=torch.float32, device=logits.device)
    for s in range(0, logits.shape[0], row_chunk):
        _chunk_stats(logits[s : s + row_chunk], targets[s : s + row_chunk], out[s : s + row_chunk])
    return out


# Architectures whose logits are exactly ``lm_head(last_hidden_state)`` (no scaling or soft-capping),
# so the head can be applied in row chunks that stay in cache.
_PLAIN_HEAD = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "GPT2LMHeadModel",
               "GPTNeoXForCausalLM", "OPTForCausalLM", "PhiForCausalLM"}


def head_stats(hidden: torch.Tensor, head: torch.nn.Linear, targets: torch.Tensor, *, row_chunk: int = 256) -> torch.Tensor:
    """:func:`token_stats` of ``head(hidden)`` without materialising the (N, V) logits.

    ``hidden`` (N, d) rows go through the output layer ``row_chunk`` at a time, and each
    chunk's logits are reduced while still in cache.
    """
    out = torch.empty((hidden.shape[0], 4), dtype=torch.float32, device=hidden.device)
    for s in range(0, hidden.shape[0], row_chunk):
        logits = torch.nn.functional.linear(hidden[s : s + row_chunk], head.weight, head.bias)  # (n, V)
        _chunk_stats(logits, targets[s : s + row_chunk], out[s : s + row_chunk])
    return out


def fused_head(model):
    """(base model, output layer) when logits are a plain linear head on the base model's output, else None."""
    if type(model).__name__ not in _PLAIN_HEAD:
        return None
    head, base = model.get_output_embeddings(), getattr(model, "base_model", None)
    if not isinstance(head, torch.nn.Linear) or base is None or base is model:
        return None
    return base, head


def _pad_id(tokenizer) -> int:
    for tok_id in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if tok_id is not None:
            return int(tok_id)
    return 0


def model_context_length(model, tokenizer=None) -> int:
    cfg = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        val = getattr(cfg, name, None)
        if isinstance(val, int) and val > 0:
            return val
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < 10**7:
        return limit
    return 2048


@torch.inference_mode()
def _run_ar_probe(model, tokenizer, textset: TextSet, config: ARProbeConfig, description: str | None) -> ARStats:
    max_length = config.max_length or model_context_length(model, tokenizer)
    tok = tokenize_records(tokenizer, textset, max_length=max_length)
    lengths = np.array([len(x) for x in tok.ids])
    per_sample: list[np.ndarray | None] = [None] * len(textset)
    device = next(model.parameters()).device
    pad_id = _pad_id(tokenizer)
    batches = length_batches(lengths, config.batch_size)
    fused = fused_head(model) if config.fused_head else None
    with progress(description, total=len(textset)) as bar:
        for index in batches:
            input_ids, attn, mask = pad_batch(tok.ids, tok.scored, index, pad_id)
            ids_t = torch.from_numpy(input_ids).to(device)
            attn_t = torch.from_numpy(attn).to(device)
            sel = torch.from_numpy(mask[:, 1:]).to(device)  # (B, T-1): position t+1 predicted from row t
            targets = ids_t[:, 1:][sel]  # (n,)
            if fused is not None:
                hidden = fused[0](input_ids=ids_t, attention_mask=attn_t, use_cache=False).last_hidden_state  # (B, T, d)
                stats = head_stats(hidden[:, :-1][sel], fused[1], targets, row_chunk=config.row_chunk)
            else:
                logits = model(input_ids=ids_t, attention_mask=attn_t, use_cache=False).logits  # (B, T, V)
                stats = token_stats(logits[:, :-1][sel], targets, row_chunk=config.row_chunk)
            if not torch.isfinite(stats).all():
                raise LmauditError(
                    f"the model produced NaN or inf logits on {textset.source}",
                    hint="check the model weights and dtype (try float32)",
                )
            stats = stats.cpu().numpy()
            bounds = np.concatenate([[0], np.cumsum(mask[:, 1:].sum(axis=1))])
            for row, i in enumerate(index):
                per_sample[i] = stats[bounds[row] : bounds[row + 1]]
            bar.advance(len(index))
    flat = np.concatenate(per_sample)  # (N, 4)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in per_sample])]).astype(np.int64)
    return ARStats(
        logp=flat[:, 0].copy(),
        top1_logp=flat[:, 1].copy(),
        mu=flat[:, 2].copy(),
        sigma=flat[:, 3].copy(),
        entropy=(-flat[:, 2]).copy(),
        offsets=offsets,
        zlib_len=tok.zlib_len,
        sample_keys=tok.sample_keys,
    )


@dataclass(frozen=True)
class ARProbeTask:
    """The AR probe of one shard (picklable: it runs in this process or on a Ray worker)."""

    config: ARProbeConfig

    def __call__(self, handle, shard: TextSet) -> ARStats:
        return _run_ar_probe(handle.model, handle.tokenizer, shard, self.config, None)


def probe_ar_shards(
    model,
    tokenizer,
    textset: TextSet,
    config: ARProbeConfig = ARProbeConfig(),
    *,
    model_fingerprint: str | None = None,
    cache_dir=None,
    description: str = "AR probe",
    shard_size: int | None = None,
) -> Sharded:
    """:func:`probe_ar` shard by shard: a :class:`~lmaudit.probes.shards.Sharded` of ARStats.

    With ``cache_dir`` and ``model_fingerprint``, each shard is cached under (model,
    tokenizer, the shard's records, probe settings): a second call, or a run resumed
    after being killed, does no forward pass for the shards already on disk.
    """
    from lmaudit.models.fingerprint import tokenizer_fingerprint
    from lmaudit.models.loading import LoadedModel

    key = None
    if cache_dir is not None and model_fingerprint is not None:
        key_cfg = asdict(config)
        for name in ("batch_size", "row_chunk", "fused_head"):  # speed settings: the statistics do not depend on them
            key_cfg.pop(name)
        key = ("ar", PROBE_VERSION, model_fingerprint, tokenizer_fingerprint(tokenizer), key_cfg)
    handle = LoadedModel(model, tokenizer, getattr(model, "name_or_path", ""), model_fingerprint or "", "ar")
    return run_sharded(textset, task=ARProbeTask(config), handle=handle, key=key, load=ARStats.load,
                       cache_dir=cache_dir, description=description, shard_size=shard_size)


def probe_ar(model, tokenizer, textset: TextSet, config: ARProbeConfig = ARProbeConfig(), **kwargs) -> ARStats:
    """Score ``textset`` with a causal LM and return its :class:`ARStats`.

    The work is done (and, with ``cache_dir`` and ``model_fingerprint``, cached) in
    shards of records, on the current backend (:mod:`lmaudit.distributed`); keyword
    arguments as :func:`probe_ar_shards`.
    """
    return ARStats.concat(probe_ar_shards(model, tokenizer, textset, config, **kwargs).all())
