"""Loss attack (Yeom et al., 2018): members have lower average NLL."""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.probes.records import ARStats
from lmaudit.probes.segments import segment_mean


@register_attack("loss", kind="ar")
def loss(stats: ARStats) -> np.ndarray:
    """Negated mean token NLL: score = mean_t log p(x_t | x_<t).

    Shape (S,); higher = member."""
    return segment_mean(stats.logp, stats.offsets)
