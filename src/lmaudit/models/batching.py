"""How many padded tokens one forward of a model holds by default: sized from the model's shapes and its device.

An adapter's :meth:`~lmaudit.models.adapters.ARAdapter.batch_tokens` answers with it when no batch size is given.
"""

from __future__ import annotations

import torch

# Padded tokens (texts × longest) one forward holds by default. On a CPU the fastest batches keep one layer's
# activations, tokens × (hidden + intermediate) float32 values, within a few MiB (python benchmarks/bench_probe_ar.py
# times the choice); logits that are materialised whole (no plain output layer to apply in chunks) are capped at
# CPU_LOGITS_BYTES. On a GPU a share of the free memory sets it. --batch-size or --max-batch-tokens override it.
CPU_BATCH_BYTES = 8 * 2**20
CPU_LOGITS_BYTES = 2**30
GPU_MEMORY_SHARE = 0.25
BATCH_TOKENS_RANGE = (256, 2**17)


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
