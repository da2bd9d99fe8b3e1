"""Per-text gradient norms reduced piece by piece: L1, squared L2 and max |·| of each (parameter, text) gradient,
summed over the pieces it arrives in, and the :data:`~lmaudit.probes.requests.GRADIENT_NORMS` they give
(:mod:`lmaudit.probes.sample_gradients` and the per-text path of :mod:`lmaudit.probes.gradients` both reduce here)."""

from __future__ import annotations

import numpy as np
import torch

PIECE = 1 << 20  # values of a per-text gradient piece reduced at once (4 MiB in float32: it stays in cache)
ROW = 4096  # values of a row whose L2 norm one float32 reduction takes (longer rows are cut)


def _blocks(g: torch.Tensor):
    """``g`` as 2-D blocks of whole rows, at most :data:`PIECE` values each: rows of its last dimension, or of
    :data:`ROW` values of it flattened when that is longer (the last partial row its own block)."""
    if g.dim() < 2 or g.shape[-1] > ROW:
        flat = g.reshape(-1)
        cut = flat.numel() - flat.numel() % ROW if flat.numel() > ROW else 0
        if cut:
            yield from _blocks(flat[:cut].view(-1, ROW))
        if cut < flat.numel():
            yield flat[cut:].view(1, -1)
        return
    g = g.reshape(-1, g.shape[-1])
    step = max(1, PIECE // g.shape[1])
    for s in range(0, g.shape[0], step):
        yield g[s : s + step]


class Sums:
    """Per (parameter, text): L1, squared L2 and max |·| of its gradient, summed (max taken) over the pieces."""

    def __init__(self, rows: int, texts: int, device):
        self.shape, self.device = (rows, texts), device
        self.index, self.l1, self.sq, self.mx = [], [], [], []  # per reduced block: where, and its three sums
        self.scratch = None
        self.buffers: dict[str, torch.Tensor] = {}

    def buffer(self, name: str, shape: tuple[int, ...], dtype, device) -> torch.Tensor:
        """A tensor of ``shape`` for an operation's output, its memory reused from call to call: an allocation of a
        few MiB costs a CPU more than the product written into it (the pages are mapped afresh each time)."""
        size = int(np.prod(shape))
        buf = self.buffers.get(name)
        if buf is None or buf.numel() < size or buf.dtype != dtype or buf.device != torch.device(device):
            buf = self.buffers[name] = torch.empty(size, dtype=dtype, device=device)
        return buf[:size].view(shape)

    def add(self, row: int, text: int, g: torch.Tensor, *, owned: bool = False) -> None:
        """Reduce the gradient piece ``g`` of parameter ``row`` for text ``text``, a block of rows of at most
        :data:`PIECE` values at a time: ``|g|`` once (in place when ``owned``: the caller does not read ``g``
        again), then its sum and max, and the L2 norm of each row of at most :data:`ROW` values (their squares
        summed in float64). Sums are torch's blocked ones, in float32 (float64 for a float64 gradient; a
        half-precision block is widened first), so their error stays near float32 rounding."""
        dtype = torch.float64 if g.dtype == torch.float64 else torch.float32
        for x in _blocks(g):
            if owned and x.dtype == dtype:
                x = x.abs_()
            else:
                if self.scratch is None or self.scratch.dtype != dtype or self.scratch.device != x.device:
                    self.scratch = torch.empty(PIECE, dtype=dtype, device=x.device)
                x = self.scratch[: x.numel()].view(x.shape).copy_(x).abs_()
            self.l1.append(x.sum())
            self.sq.append(torch.linalg.vector_norm(x, 2, dim=1).double().square().sum())
            self.mx.append(x.max())
            self.index.append(row * self.shape[1] + text)

    def totals(self) -> torch.Tensor:
        """(rows, texts, 3) float64: L1, squared L2, max |·| (0 for a parameter that got no gradient)."""
        out = torch.zeros((self.shape[0] * self.shape[1], 3), dtype=torch.float64, device=self.device)
        if self.index:
            i = torch.tensor(self.index, device=self.device)
            out[:, 0].index_add_(0, i, torch.stack(self.l1).double())
            out[:, 1].index_add_(0, i, torch.stack(self.sq))
            out[:, 2].scatter_reduce_(0, i, torch.stack(self.mx).double(), "amax")
        return out.view(*self.shape, 3)


def combine(totals: torch.Tensor) -> np.ndarray:
    """(texts, 4) GRADIENT_NORMS from per-(parameter, text) totals: ‖g‖₂ of the whole, means of per-tensor norms."""
    l1, sq, mx = totals.unbind(-1)  # (rows, texts)
    return torch.stack([sq.sum(0).sqrt(), l1.mean(0), sq.sqrt().mean(0), mx.mean(0)], 1).cpu().numpy()
