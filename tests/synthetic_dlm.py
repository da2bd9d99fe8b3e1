"""Synthetic masked-probe records with a known member signal, laid out by a real mask plan."""

from __future__ import annotations

import numpy as np

from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.records import MaskedStats


def synthetic_masked(plan: MaskPlan, n_members: int = 40, n_nonmembers: int = 40, *, seed: int = 0):
    """(MaskedStats, labels). Members' target log p exceed the reference's by right-skewed
    (exponential) gains; non-members' by symmetric noise. Entries follow ``plan``'s patterns."""
    rng = np.random.default_rng(seed)
    labels = np.r_[np.ones(n_members, dtype=np.int64), np.zeros(n_nonmembers, dtype=np.int64)]
    cols = {k: [] for k in ("pattern", "position", "ratio", "logp", "ref_logp")}
    n_pos, n_pat, counts = [], [], []
    for i, lab in enumerate(labels):
        L = int(rng.integers(12, 40))
        ref_tok = -rng.uniform(2.0, 7.0, L)
        gain = rng.exponential(1.0, L) if lab else rng.normal(0.0, 0.4, L)
        pats = plan.patterns(L, seed=1000 * seed + i)
        for j, p in enumerate(pats):
            p = np.sort(p)
            noise = rng.normal(0, 0.05, len(p))
            cols["pattern"].append(np.full(len(p), j))
            cols["position"].append(p)
            cols["ratio"].append(np.full(len(p), len(p) / L))
            cols["ref_logp"].append(ref_tok[p] + noise)
            cols["logp"].append(np.minimum(ref_tok[p] + gain[p] + noise, -1e-3))
        n_pos.append(L)
        n_pat.append(len(pats))
        counts.append(sum(len(p) for p in pats))
    c = {k: np.concatenate(v) for k, v in cols.items()}
    f32 = lambda x: np.asarray(x, dtype=np.float32)  # noqa: E731
    logp, ref = f32(c["logp"]), f32(c["ref_logp"])
    stats = MaskedStats(
        offsets=np.r_[0, np.cumsum(counts)].astype(np.int64),
        pattern=c["pattern"].astype(np.int32), position=c["position"].astype(np.int32), ratio=f32(c["ratio"]),
        logp=logp, top1_logp=np.maximum(logp, f32(-0.5)), mu=np.full_like(logp, -3.0), sigma=np.full_like(logp, 1.5),
        ref_logp=ref, ref_top1_logp=np.maximum(ref, f32(-0.5)), ref_mu=np.full_like(ref, -3.0),
        ref_sigma=np.full_like(ref, 1.5),
        n_positions=np.array(n_pos, dtype=np.int64), n_patterns=np.array(n_pat, dtype=np.int64),
        sample_keys=rng.integers(0, 2**63, len(labels), dtype=np.uint64), n_tokens=np.array(n_pos, dtype=np.int64),
    )
    return stats, labels
