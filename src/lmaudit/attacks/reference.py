"""Reference-model calibration (Carlini et al., 2021; Mireshghallah et al., 2022)."""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.errors import LmauditError
from lmaudit.probes.records import ARStats
from lmaudit.probes.segments import segment_mean


@register_attack("reference", kind="ar", needs_reference=True)
def reference(stats: ARStats) -> np.ndarray:
    """Reference mean NLL − target mean NLL.

    Shape (S,); higher = member. Reads the reference model's statistics from
    ``stats.reference``. Each model scores the text with its own tokenizer, so only
    per-sample means are compared; the sample sets must match one to one.
    """
    ref = stats.reference
    if ref.n_samples != stats.n_samples:
        raise LmauditError(f"reference scored {ref.n_samples} samples, target {stats.n_samples}")
    return segment_mean(stats.logp, stats.offsets) - segment_mean(ref.logp, ref.offsets)
