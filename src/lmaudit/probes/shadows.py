"""Statistics of shadow models (for LiRA and RMIA): φ of every text under every shadow."""

from __future__ import annotations

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.models.loading import load_causal_lm
from lmaudit.models.shadows import ShadowSet, text_key
from lmaudit.probes.ar import probe_ar_shards
from lmaudit.probes.records import ShadowStats
from lmaudit.probes.segments import segment_mean
from lmaudit.utils import cache_dir


def shadow_stats(shadows: ShadowSet, textset: TextSet, *, loader=None) -> ShadowStats:
    """φ (mean token log-probability) of every text under every shadow, and the IN/OUT matrix."""
    keys = [text_key(r) for r in textset.records]
    phi, is_in = [], []
    for j, (path, trained) in enumerate(zip(shadows.paths, shadows.trained)):
        m = (loader or load_causal_lm)(path)
        shards = probe_ar_shards(m, textset, cache_dir=cache_dir(),
                                 description=f"probe shadow {j + 1}/{len(shadows.paths)}")
        phi.append(np.concatenate([segment_mean(s.logp, s.offsets) for _, s in shards]))
        is_in.append([k in trained for k in keys])
    return ShadowStats(np.array(phi), np.array(is_in, dtype=bool))
