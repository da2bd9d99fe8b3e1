"""Per-row statistics of next-token distributions, computed on the device in float32.

Only these statistics leave the device: the (N, V) logits are reduced in row chunks
that stay in cache, and with a fused output head the logits of a chunk exist only
while it is reduced.
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


def rows_stats(rows: torch.Tensor, head: torch.nn.Linear | None, targets: torch.Tensor, **kwargs) -> torch.Tensor:
    """:func:`head_stats` of hidden rows with their output layer, or :func:`token_stats` of logits rows (``head`` None).

    ``rows`` and ``head`` as returned by an adapter's ``output_rows``; keyword arguments go to the function used.
    """
    return head_stats(rows, head, targets, **kwargs) if head is not None else token_stats(rows, targets, **kwargs)
