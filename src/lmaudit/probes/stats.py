"""Per-row statistics of next-token distributions, computed on the device in float32.

Only these statistics leave the device: the (N, V) logits are reduced in row chunks
that stay in cache, and with a fused output head the logits of a chunk exist only
while it is reduced. On a CPU a reduction chunk holds about :data:`CACHE_ELEMENTS` values
(:func:`reduction_rows`): each of its passes (max, exp, sums, moments) then reads cache rather
than memory, which at a 49k vocabulary makes the statistics about three times faster than
256-row chunks (the output layer's matrix product still runs on 256 rows at a time). Every
row is reduced on its own, so the statistics are bit-identical whatever the chunking.
"""

from __future__ import annotations

import torch


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


CACHE_ELEMENTS = 1 << 19  # float32 values of one reduction chunk on a CPU (2 MiB)
DEVICE_ELEMENTS = 1 << 25  # float32 values of one reduction chunk on an accelerator (128 MiB): few, large kernels
DEVICE_HEAD_ROWS = 4096  # rows of hidden states through a fused output layer at once on an accelerator


def reduction_rows(vocab: int, device: torch.device) -> int:
    """Rows of logits reduced at once: on a CPU as many as :data:`CACHE_ELEMENTS` values hold, elsewhere as many as
    :data:`DEVICE_ELEMENTS` hold (at least one; every row is reduced alone, so the statistics do not depend on it)."""
    budget = CACHE_ELEMENTS if device.type == "cpu" else DEVICE_ELEMENTS
    return max(1, budget // max(1, vocab))


def device_rows(row_chunk: int, device: torch.device) -> int:
    """Rows a fused output layer multiplies at once: ``row_chunk`` on a CPU (the product stays in cache), at least
    :data:`DEVICE_HEAD_ROWS` on an accelerator (each chunk is one launch of a few kernels)."""
    return row_chunk if device.type == "cpu" else max(row_chunk, DEVICE_HEAD_ROWS)


def token_stats(logits: torch.Tensor, targets: torch.Tensor, *, row_chunk: int | None = None) -> torch.Tensor:
    """Per-row statistics of next-token distributions.

    Parameters
    ----------
    logits : (N, V) tensor, any float dtype; reduced in float32.
    targets : (N,) int64 tensor of the observed tokens.

    Returns
    -------
    (N, 4) float32 tensor with columns ``logp``, ``top1_logp``, ``mu``, ``sigma``
    (``sigma`` clamped ≥ 1e-8). ``entropy`` is ``-mu``. ``row_chunk``: rows reduced at once (default
    :func:`reduction_rows`).
    """
    row_chunk = row_chunk or reduction_rows(logits.shape[-1], logits.device)
    out = torch.empty((logits.shape[0], 4), dtype=torch.float32, device=logits.device)
    for s in range(0, logits.shape[0], row_chunk):
        _chunk_stats(logits[s : s + row_chunk], targets[s : s + row_chunk], out[s : s + row_chunk])
    return out


def head_stats(hidden: torch.Tensor, head: torch.nn.Linear, targets: torch.Tensor, *,
               row_chunk: int = 256) -> torch.Tensor:
    """:func:`token_stats` of ``head(hidden)`` without materialising the (N, V) logits.

    ``hidden`` (N, d) rows go through the output layer ``row_chunk`` at a time, and each
    chunk's logits are reduced :func:`reduction_rows` rows at a time, while still in cache.
    """
    out = torch.empty((hidden.shape[0], 4), dtype=torch.float32, device=hidden.device)
    step = reduction_rows(head.weight.shape[0], hidden.device)
    for s in range(0, hidden.shape[0], row_chunk):
        logits = torch.nn.functional.linear(hidden[s : s + row_chunk], head.weight, head.bias)  # (n, V)
        n = logits.shape[0]
        for r in range(0, n, step):
            e = min(r + step, n)
            _chunk_stats(logits[r:e], targets[s + r : s + e], out[s + r : s + e])
    return out


def rows_stats(rows: torch.Tensor, head: torch.nn.Linear | None, targets: torch.Tensor, **kwargs) -> torch.Tensor:
    """:func:`head_stats` of hidden rows with their output layer, or :func:`token_stats` of logits rows (``head`` None).

    ``rows`` and ``head`` as returned by an adapter's ``output_rows``; keyword arguments go to the function used.
    """
    return head_stats(rows, head, targets, **kwargs) if head is not None else token_stats(rows, targets, **kwargs)
