"""Batches of a model: ragged ids right-padded, the attention mask of full attention, how a batch made on the CPU
reaches the device, and how many padded tokens one forward holds by default (sized from the model's shapes and its
device).

An adapter's :meth:`~lmaudit.models.adapters.ARAdapter.batch_tokens` answers with that default when no batch size
is given.
"""

from __future__ import annotations

import numpy as np
import torch

# Padded tokens (texts × longest) one forward holds by default. On a CPU the fastest batches keep one layer's
# activations, tokens × (hidden + intermediate) float32 values, within a few MiB (python benchmarks/bench_probe_ar.py
# times the choice); logits that are materialised whole (no plain output layer to apply in chunks) are capped at
# CPU_LOGITS_BYTES. On a GPU a share of the free memory sets it. --batch-size or --max-batch-tokens override it.
CPU_BATCH_BYTES = 8 * 2**20
CPU_LOGITS_BYTES = 2**30
GPU_MEMORY_SHARE = 0.25
BATCH_TOKENS_RANGE = (256, 2**17)


def pad_sequences(seqs, pad_id: int, masks=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-pad 1-D id arrays into ``(ids, attention, mask)`` ``(B, T)`` arrays.

    ``masks`` (one bool array per sequence, same lengths) becomes the third array;
    without it, the third array is the attention mask as bool.
    """
    T = max((len(s) for s in seqs), default=0)
    B = len(seqs)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    attn = np.zeros((B, T), dtype=np.int64)
    mask = np.zeros((B, T), dtype=bool)
    for row, s in enumerate(seqs):
        n = len(s)
        ids[row, :n] = s
        attn[row, :n] = 1
        mask[row, :n] = True if masks is None else masks[row]
    return ids, attn, mask


def full_attention_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, dtype) -> torch.Tensor:
    """Additive (B, 1, T, T) mask letting every query see every non-padding key."""
    B, T = input_ids.shape
    keep = (torch.ones(B, T, dtype=torch.bool, device=input_ids.device) if attention_mask is None
            else attention_mask.bool())
    mask = torch.zeros(B, 1, T, T, dtype=dtype, device=input_ids.device)
    return mask.masked_fill(~keep[:, None, None, :], torch.finfo(dtype).min)


def to_device(tensors, device: torch.device) -> tuple[torch.Tensor, ...]:
    """CPU tensors on ``device``, without waiting for it: on a GPU through pinned memory, copied while the kernels
    queued before run (a copy from pageable memory would first wait for all of them). On the CPU, the tensors."""
    if device.type != "cuda":
        return tuple(t.to(device) for t in tensors)
    return tuple(t.pin_memory().to(device, non_blocking=True) for t in tensors)


def _config_int(cfg, names: tuple[str, ...], default: int) -> int:
    for name in names:
        val = getattr(cfg, name, None)
        if isinstance(val, int) and val > 0:
            return val
    return default


def default_batch_tokens(model, device: torch.device, *, fused: bool = True) -> int:
    """Padded tokens one forward of ``model`` on ``device`` may hold by default (see :data:`CPU_BATCH_BYTES`)."""
    cfg = model.config
    hidden = _config_int(cfg, ("hidden_size", "n_embd", "d_model"), 768)
    inner = _config_int(cfg, ("intermediate_size", "n_inner", "ffn_dim"), 4 * hidden)
    vocab = _config_int(cfg, ("vocab_size",), 50_000)
    logits = 0 if fused else 4 * vocab  # bytes of float32 logits per token when they exist whole
    if device.type == "cuda":
        per_token = next(model.parameters()).element_size() * (4 * hidden + 2 * inner) + logits
        tokens = int(GPU_MEMORY_SHARE * torch.cuda.mem_get_info(device)[0] / per_token)
        # a power of two: free memory moves between runs, and the budget sets the batches, whose padding moves a
        # text's float32 statistics in their last bits
        tokens = 1 << max(0, tokens.bit_length() - 1)
    else:
        tokens = CPU_BATCH_BYTES // (4 * (hidden + inner))
        if logits:
            tokens = min(tokens, CPU_LOGITS_BYTES // logits)
    low, high = BATCH_TOKENS_RANGE
    return int(min(max(tokens, low), high))
