"""Memorisation metrics of the unlearning benchmarks, read from the AR probe (no forward pass of their own).

- ``exact_match`` — exact memorisation (TOFU, MUSE, OpenUnlearning): the share of a text's scored positions where
  the model's top-1 next token is the text's own token, under teacher forcing.
- ``extraction_strength`` — extraction strength (Carlini et al., 2021, as OpenUnlearning reports it):
  ES = 1 − k / L, where L is the number of scored tokens and k the shortest prefix after which greedy decoding
  reproduces the rest of the text. Greedy decoding from the true prefix x_≤k reproduces x_k+1..x_L exactly when
  every later position's top-1 token is the text's (each step then feeds the true token back), so k is the
  position of the last top-1 miss (0 when there is none: ES = 1; L when the last token is missed: ES = 0), read
  from the same teacher-forced pass.

A position counts as a top-1 hit when the text's token has the largest log-probability (``logp == top1_logp``:
both are read from the same logits row, so a hit is exact; a tie for the top counts as a hit).
"""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.probes.records import ARStats
from lmaudit.probes.segments import segment_mean


def top1_hits(stats: ARStats) -> np.ndarray:
    """(N,) bool: the text's token is the model's top-1 at each scored position."""
    return stats.logp >= stats.top1_logp


@register_attack("exact_match", kind="ar", access="top_k")
def exact_match(stats: ARStats) -> np.ndarray:
    """Exact memorisation: the share of positions whose top-1 next token is the text's.

    Shape (S,); higher = member."""
    return segment_mean(top1_hits(stats).astype(np.float64), stats.offsets)


@register_attack("extraction_strength", kind="ar", access="top_k")
def extraction_strength(stats: ARStats) -> np.ndarray:
    """Extraction strength: 1 − (shortest prefix after which greedy decoding reproduces the rest) / length.

    Shape (S,); higher = member."""
    hits = top1_hits(stats)
    starts = stats.offsets[:-1]
    position = np.arange(len(hits)) - np.repeat(starts, np.diff(stats.offsets)) + 1  # 1-based within its text
    last_miss = np.maximum.reduceat(np.where(hits, 0, position), starts)  # 0 when every position is a hit
    return 1.0 - last_miss / np.diff(stats.offsets)
