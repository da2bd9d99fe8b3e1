"""Forward passes in batches that shrink on out-of-memory instead of failing.

:func:`run_batches` runs ``compute(index)`` on each batch of sample indices. When a
batch runs out of memory (CUDA's ``OutOfMemoryError``, the CPU allocator's "can't
allocate memory", or a ``MemoryError``), it is split in halves that are run in its
place, and every later batch is capped at that size: the run continues with smaller
batches. Each sample's statistics are those of its own rows (padding is masked), so
the results equal an uninterrupted run's up to float rounding. A single sample that
does not fit is a clear error.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable

import numpy as np
import torch

from lmaudit.errors import LmauditError
from lmaudit.utils import fault_point


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says a device (GPU or CPU) ran out of memory."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and ("out of memory" in str(exc) or "can't allocate memory" in str(exc))


def run_batches(batches: list[np.ndarray], compute: Callable[[np.ndarray], None], *, lengths: np.ndarray) -> int:
    """Run ``compute`` on every batch, halving batches that run out of memory; return the final batch cap.

    ``lengths[i]`` is sample i's length in tokens (for the error on a single sample).
    The fault hook's stage ``probe-batch`` (``LMAUDIT_FAULT=probe-batch:K:oom``)
    simulates an out-of-memory error at the K-th batch.
    """
    queue = deque(batches)
    cap = max((len(b) for b in batches), default=1)
    while queue:
        index = queue.popleft()
        if len(index) > cap:
            queue.extendleft(reversed([index[i : i + cap] for i in range(0, len(index), cap)]))
            continue
        try:
            fault_point("probe-batch")
            compute(index)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            if len(index) == 1:
                raise LmauditError(f"out of memory on a single text of {int(lengths[index[0]])} tokens",
                                   hint="lower --max-tokens, load the model with --dtype bfloat16, or use a "
                                        "device with more memory") from None
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            cap = len(index) // 2
            warnings.warn(f"out of memory on a batch of {len(index)} texts: continuing with batches of {cap}",
                          stacklevel=2)
            queue.extendleft([index[cap:], index[:cap]])
    return cap
