"""DC-PDD (Zhang et al., 2024, "Pretraining Data Detection for Large Language Models: A Divergence-based
Calibration Method").

A token's probability is calibrated by how common the token is in a reference corpus: for each distinct token of
the text, at its first occurrence, α = p(x_t | x_<t) · log(1 / f(x_t)), the cross-entropy term of the token
distribution against the corpus frequencies f (Laplace-smoothed counts, :mod:`lmaudit.probes.frequencies`); α is
clipped above at ``a`` (0.01, the authors' value) so that a few confident rare tokens do not decide alone; the
score is the mean of the clipped α over those first occurrences. A member's tokens are more probable than their
corpus frequency predicts: higher = member.

The corpus: ``--param dc_pdd.corpus=FILE`` (texts, or a ``.npy`` of counts per token id), or by default the
embedded docstring corpus' pretraining pool, counted once per tokenizer and cached. No forward of its own: the
AR pass, and the scored tokens' ids from the same tokenisation. Opt-in (named in the attacks, or given a
parameter): counting a corpus is work a run should not do unasked.
"""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.probes.records import TokenStats
from lmaudit.probes.requests import FrequencyRequest
from lmaudit.settings import positive


def _probe(params: dict, budget: int) -> FrequencyRequest:
    return FrequencyRequest(corpus=str(params.get("corpus") or ""))


def first_occurrences(ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(N,) bool: the token is the first of its id within its text."""
    seg = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    order = np.lexsort((np.arange(len(ids)), ids, seg))  # by text, then id, then position
    first = np.ones(len(ids), dtype=bool)
    same = (seg[order][1:] == seg[order][:-1]) & (ids[order][1:] == ids[order][:-1])
    first[order[1:][same]] = False
    return first


@register_attack("dc_pdd", kind="ar", probe=_probe,
                 opt_in="it counts a reference corpus' token frequencies first (--param dc_pdd.corpus=FILE; the "
                        "embedded corpus by default)", checks={"a": positive()})
def dc_pdd(records: TokenStats, *, corpus: str = "", a: float = 0.01) -> np.ndarray:
    """DC-PDD: mean over a text's distinct tokens of min(p · log(1/f), a), f their corpus frequency.

    Shape (S,); higher = member."""
    stats = records.stats
    first = first_occurrences(records.token_ids, stats.offsets)
    alpha = np.exp(stats.logp.astype(np.float64)) * -np.log(records.frequencies[records.token_ids])
    alpha = np.minimum(alpha, a)
    seg = np.repeat(np.arange(stats.n_samples), np.diff(stats.offsets))
    total = np.bincount(seg[first], weights=alpha[first], minlength=stats.n_samples)
    count = np.bincount(seg[first], minlength=stats.n_samples)
    return total / count
