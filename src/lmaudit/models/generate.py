"""Sampling generations: LLaDA-style iterative unmasking for DLMs, left-to-right sampling for AR models.

DLM schedule: the positions to fill are split into blocks (left to right); each
block gets an equal share of the steps, and each step of a block unmasks an equal
share of its masked positions (the remainder goes to the first steps). At each
step every masked position of the block is sampled at the temperature (argmax at
T = 0); the positions kept are the most confident (``low_confidence``: probability
of the sampled token) or random ones (``random``); the rest are masked again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lmaudit.errors import LmauditError
from lmaudit.models.kv_cache import cache_kwargs, cache_of
from lmaudit.settings import check_settings, integer, non_negative, one_of, seed_value, setting

REMASKING = ("low_confidence", "random")


@dataclass(frozen=True)
class GenerateConfig:
    """What :func:`lmaudit.generate` is asked for, checked on construction, before the model loads."""

    gen_length: int = setting(32, check=integer(1))  # tokens generated per prompt
    steps: int = setting(32, check=integer(1))  # DLM: denoising steps in total
    block_length: int | None = setting(None, check=integer(1, optional=True))  # DLM: semi-autoregressive blocks
    temperature: float = setting(1.0, check=non_negative())  # 0: greedy
    remasking: str = setting("low_confidence", check=one_of(REMASKING, noun="remasking"))  # DLM
    seed: int = setting(0, check=seed_value())

    def __post_init__(self) -> None:
        check_settings(self)


def transfer_counts(n_masked: int, steps: int) -> np.ndarray:
    """(steps,) tokens unmasked per step: an even split, the remainder to the first steps."""
    base, extra = divmod(n_masked, steps)
    return np.array([base + (1 if i < extra else 0) for i in range(steps)], dtype=np.int64)


def _masked_logits(adapter, ids: torch.Tensor, attn: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
    """Logits at the selected positions only. → (n, V) float32."""
    rows, head = adapter.output_rows(ids, attn, lambda out: out[sel])
    return (torch.nn.functional.linear(rows, head.weight, head.bias) if head is not None else rows).float()


def _sample(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    """One token per row of ``logits`` (n, V): argmax at T = 0, else a draw from softmax(logits / T)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.cpu() / temperature, dim=-1)  # the generator lives on the CPU
    return torch.multinomial(probs, 1, generator=generator).squeeze(1).to(logits.device)


@torch.inference_mode()
def denoise(adapter, ids: np.ndarray, attn: np.ndarray, *, steps: int, temperature: float = 1.0,
            remasking: str = "low_confidence", block_length: int | None = None, seed: int = 0) -> np.ndarray:
    """Fill every mask token of ``ids`` (B, T) by iterative unmasking; return the filled (B, T) ids.

    ``block_length`` splits the masked positions of each row, left to right, into
    blocks of that many positions (default: one block); ``steps`` is the total
    number of steps, shared equally by the blocks.
    """
    if remasking not in REMASKING:
        raise LmauditError(f"unknown remasking '{remasking}'", hint=f"use one of {', '.join(REMASKING)}")
    if temperature < 0:
        raise LmauditError("temperature must be ≥ 0")
    device = next(adapter.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    x = torch.from_numpy(np.array(ids, dtype=np.int64)).to(device)
    attn_t = torch.from_numpy(np.asarray(attn, dtype=np.int64)).to(device)
    todo = (x == adapter.mask_token_id).cpu().numpy()  # (B, T)
    n_fill = todo.sum(axis=1)
    blocks_per_row = np.ceil(n_fill / (block_length or max(int(n_fill.max()), 1))).astype(int)
    n_blocks = int(blocks_per_row.max()) if len(n_fill) else 0
    if n_blocks == 0:
        return x.cpu().numpy()
    if steps < n_blocks:
        raise LmauditError(f"{steps} steps for {n_blocks} blocks", hint="give at least one step per block")
    rank = np.cumsum(todo, axis=1) - 1  # order of each masked position within its row
    width = block_length or max(int(n_fill.max()), 1)
    block_of = np.where(todo, rank // width, -1)
    per_block = transfer_counts(steps, n_blocks)  # steps per block
    for b in range(n_blocks):
        in_block = block_of == b
        counts = np.stack([transfer_counts(int(c), int(per_block[b])) for c in in_block.sum(axis=1)])  # (B, S_b)
        for k in range(int(per_block[b])):
            sel_np = (x == adapter.mask_token_id).cpu().numpy() & todo
            if not sel_np.any():
                break
            sel = torch.from_numpy(sel_np).to(device)
            logits = _masked_logits(adapter, x, attn_t, sel)  # (n, V)
            sampled = _sample(logits, temperature, generator)  # (n,)
            if remasking == "low_confidence":
                conf = torch.softmax(logits, dim=-1).gather(1, sampled[:, None]).squeeze(1).cpu().numpy()
            else:
                conf = torch.rand(len(sampled), generator=generator).numpy()
            rows, cols = np.nonzero(sel_np)
            conf = np.where(in_block[rows, cols], conf, -np.inf)
            order = np.lexsort((-conf, rows))
            r = rows[order]
            rank_in_row = np.arange(len(r)) - np.searchsorted(r, r, side="left")
            keep = order[(rank_in_row < counts[r, k]) & np.isfinite(conf[order])]
            x[torch.from_numpy(rows[keep]).to(device), torch.from_numpy(cols[keep]).to(device)] = \
                sampled[torch.from_numpy(keep).to(device)]
    return x.cpu().numpy()


@torch.inference_mode()
def ar_sample(model, prefix: np.ndarray, n_tokens: int, *, samples: int, temperature: float = 1.0,
              seed: int = 0) -> np.ndarray:
    """``samples`` continuations of ``n_tokens`` tokens after ``prefix`` (1-D ids). → (samples, n_tokens)."""
    if temperature < 0:
        raise LmauditError("temperature must be ≥ 0")

    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    x = torch.from_numpy(np.tile(np.asarray(prefix, dtype=np.int64), (samples, 1))).to(device)
    out = model(input_ids=x, use_cache=True)
    new = []
    for _ in range(n_tokens):
        tok = _sample(out.logits[:, -1].float(), temperature, generator)  # (S,)
        new.append(tok)
        out = model(input_ids=tok[:, None], **cache_kwargs(model, cache_of(out)))
    return torch.stack(new, dim=1).cpu().numpy()
