"""The neighbourhood attack (Mattern et al., 2023, "Membership Inference Attacks against Language Models via
Neighbourhood Comparison").

score(x) = mean_j L(x̃_j) − L(x): the mean token loss of a text's neighbours minus its own, under the audited model.
A neighbour is the text with a few tokens replaced by a masked model's likeliest alternatives
(:mod:`lmaudit.probes.neighbours`), so it reads as fluently as the text to a model that never saw either; a model
trained on the text finds the text itself easier than its neighbours: higher = member. The comparison calibrates
each text by texts like it, without a reference model.

Parameters: ``n`` neighbours per text (25), ``fraction`` of the text's tokens a neighbour replaces (0: one token,
the authors' setting), ``top`` candidates per position (5), ``model``: a diffusion LM folder that makes them (the
embedded diffusion LM by default; its tokenizer may differ from the audited model's, as the neighbours are texts).
Cost: the audited model scores 1 + n texts per text, but a neighbour runs only from the token before its first
difference from its text on, attending the text's keys and values, computed once (:mod:`lmaudit.probes.neighbour_ar`:
the statistics of scoring it whole, to float32 rounding); the texts' own statistics come from that same pass, so the
attack needs no plain pass of its own. On SmolLM2-135M (8 numpy docstrings of 500 characters,
n = 25 single swaps, one CPU thread of a busy machine) the attack's AR scoring took 16.7× the plain AR probe's time,
where scoring every neighbour whole took 25.4× (the neighbours' pass 1.55× faster, feeding 1.77× fewer tokens;
``python benchmarks/bench_neighbourhood.py``). Making the neighbours adds one masked forward of the masked model per
scored token (with the embedded diffusion LM, about the plain AR probe's time again). Opt-in for that reason.
"""

from __future__ import annotations

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.errors import DataError
from lmaudit.probes.records import NeighbourStats
from lmaudit.probes.requests import NeighbourRequest
from lmaudit.probes.segments import segment_mean
from lmaudit.settings import fraction, integer


def _probe(params: dict, budget: int) -> NeighbourRequest:
    """The request of checked parameters (the registry checks them first:
    :class:`~lmaudit.attacks.registry.AttackSpec`)."""
    return NeighbourRequest(model=str(params.get("model") or ""), n=int(params.get("n", 25)),
                            fraction=float(params.get("fraction", 0.0)), top=int(params.get("top", 5)))


@register_attack("neighbourhood", kind="ar", probe=_probe,
                 opt_in="it scores n neighbours of every text, made by a masked model (1 + n forwards per text)",
                 checks={"n": integer(1), "fraction": fraction(), "top": integer(1)})
def neighbourhood(stats: NeighbourStats, *, n: int = 25, fraction: float = 0.0, top: int = 5,
                  model: str = "") -> np.ndarray:
    """Neighbourhood: mean loss of the text's neighbours minus its own loss.

    Shape (S,); higher = member."""
    own = -segment_mean(stats.plain.logp, stats.plain.offsets)
    theirs = -segment_mean(stats.neighbours.logp, stats.neighbours.offsets)
    count = np.bincount(stats.owner, minlength=stats.n_samples)
    if np.any(count == 0):
        raise DataError(f"neighbourhood: {int((count == 0).sum())} text(s) have no neighbour (no token to replace)")
    return np.bincount(stats.owner, weights=theirs, minlength=stats.n_samples) / count - own
