"""GradNorm: the norm of the gradient of a text's loss with respect to the model's parameters.

A model trained on a text sits near a minimum of that text's loss, so the gradient there is small: the score is
the negated norm, higher = member. Published reading (``variant="l2"``): the Euclidean norm of the whole gradient
over the differentiated parameters. MIMIR's implementation (``variant="tensor_mean"``): the mean over parameter
tensors of each tensor's p-norm, p = ∞ by default as there (``p=1`` or ``p=2`` as its options). The loss is the
mean negative log-likelihood of the tokens the AR probe scores.

``parameters``: ``all`` (the default; an adapter's base and LoRA weights alike), ``embeddings`` (the input embedding,
which a tied output head shares), ``adapter`` (the LoRA weights only) or ``last:N`` (the last N transformer
blocks). Frozen weights are differentiated anyway (and the run says how many values). Cost: one forward and one
backward pass per batch of texts, each text's gradient formed and reduced layer by layer
(:mod:`lmaudit.probes.gradients`): 2.8 to 3.1 times the AR probe's time on SmolLM2-135M, every parameter
(``python benchmarks/bench_gradnorm.py``); opt-in for that reason.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from lmaudit.attacks.registry import register_attack
from lmaudit.probes.records import GradientStats
from lmaudit.probes.requests import GRADIENT_NORMS, GradientRequest


def _probe(params: dict, budget: int) -> GradientRequest:
    return GradientRequest(subset=str(params.get("parameters") or "all"))


@register_attack("gradnorm", kind="ar", probe=_probe, access="weights",
                 opt_in="it needs a backward pass (about three times the AR probe's time)")
def gradnorm(stats: GradientStats, *, parameters: str = "all", variant: Literal["l2", "tensor_mean"] = "l2",
             p: Literal[1, 2, "inf"] = "inf") -> np.ndarray:
    """GradNorm: −‖∇θ loss(x)‖ over the chosen parameters.

    Shape (S,); higher = member."""
    column = "l2" if variant == "l2" else f"tensor_{'inf' if p == 'inf' else f'l{p}'}"
    return -stats.norms[:, GRADIENT_NORMS.index(column)]
