"""A prefix's keys and values, reused by the batches that continue from it: cut to some rows and positions, or
repeated for a batch, always as new tensors (a forward appends to what it is given, never to the cache other batches
reuse). The AR adapter offers them as its methods (:class:`~lmaudit.models.adapters.ARAdapter`)."""

from __future__ import annotations

import copy
import inspect

import torch

# what transformers calls a forward's key-value cache, argument and output: ``cache`` in recent releases (5.24),
# ``past_key_values`` in older ones (5.23 and before); this module speaks to either
_NAMES = ("cache", "past_key_values")


def cache_argument(model) -> str:
    """The keyword ``model``'s forward takes a key-value cache by: the one its signature names, or its base model's
    for a wrapper that passes ``**kwargs`` on (a PEFT model); else ``past_key_values``, which the releases that say
    ``cache`` still accept."""
    while True:
        params = inspect.signature(model.forward).parameters
        named = next((n for n in _NAMES if n in params), None)
        base = getattr(model, "get_base_model", None)
        if named is not None or base is None or base() is model:
            return named or _NAMES[1]
        model = base()


def cache_kwargs(model, past) -> dict:
    """A forward's cache arguments: none kept without a prefix cache, else continue after ``past``."""
    return {"use_cache": False} if past is None else {cache_argument(model): past, "use_cache": True}


def cache_of(out):
    """The key-value cache a forward returned (``out.cache`` or ``out.past_key_values``, as its version names it)."""
    found = getattr(out, _NAMES[0], None)
    return found if found is not None else getattr(out, _NAMES[1], None)


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
