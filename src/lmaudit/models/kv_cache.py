"""A prefix's keys and values, reused by the batches that continue from it: cut to some rows and positions, or
repeated for a batch, always as new tensors (a forward appends to what it is given, never to the cache other batches
reuse). The AR adapter offers them as its methods (:class:`~lmaudit.models.adapters.ARAdapter`)."""

from __future__ import annotations

import copy

import torch


def cache_selectable(cache) -> bool:
    """Whether :func:`select_cache` can cut ``cache``: each layer keeps every position (no sliding window)."""
    return bool(getattr(cache, "layers", None)) and all(type(x).__name__ == "DynamicLayer" for x in cache.layers)


def select_cache(cache, rows: torch.Tensor, length: int):
    """Rows ``rows`` of a prefix cache cut to its first ``length`` positions, as new tensors (a forward appends to
    them, never to the cache other batches reuse)."""
    out = copy.copy(cache)
    out.layers = [copy.copy(layer) for layer in cache.layers]
    for layer in out.layers:
        if layer.get_seq_length() > 0:
            layer.keys, layer.values = layer.keys[rows, :, :length], layer.values[rows, :, :length]
    return out


def expand_cache(cache, batch: int):
    """A copy of a one-row prefix cache repeated for ``batch`` rows (a forward appends to the copy, never to
    the cache other batches reuse)."""
    out = copy.deepcopy(cache)
    out.batch_repeat_interleave(batch)
    return out
