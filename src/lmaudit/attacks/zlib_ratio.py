"""Zlib attack (Carlini et al., 2021): NLL calibrated by the text's zlib entropy."""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.probes.records import ARStats
from lmaudit.probes.segments import segment_mean


@register_attack("zlib", kind="ar")
def zlib(stats: ARStats) -> np.ndarray:
    """−(mean NLL) / zlib-compressed byte length of the text.

    Shape (S,); higher = member."""
    return segment_mean(stats.logp, stats.offsets) / stats.zlib_len
