"""What an attack asks the probes for (numpy-free declarations, importable without torch).

An attack declares a probe request; ``runs.mia`` groups attacks by equal requests,
so attacks that read the same records share one probe pass.

- :class:`ARRequest` — one causal forward pass per text (:class:`~lmaudit.probes.records.ARStats`).
- :class:`PrefixRequest` — the AR pass of every text, and again with a prefix of other texts before it
  (:class:`~lmaudit.probes.records.PrefixedStats`; ReCaLL).
- :class:`FrequencyRequest` — the AR pass with each scored token's id and its frequency in a reference corpus
  (:class:`~lmaudit.probes.records.TokenStats`; DC-PDD).
- :class:`GradientRequest` — a forward and a backward pass over batches of texts: norms of each text's loss gradient
  (:class:`~lmaudit.probes.records.GradientStats`; GradNorm).
- :class:`NeighbourRequest` — the AR pass of every text and of its neighbours, made by a masked model
  (:class:`~lmaudit.probes.records.NeighbourStats`; the neighbourhood attack).
- :class:`SampleRequest` — ``n`` continuations of every text sampled from the model after a prefix of it
  (:class:`~lmaudit.probes.records.SampleStats`; SaMIA).
- :class:`~lmaudit.probes.masks.MaskPlan` — masked forwards under a mask plan
  (:class:`~lmaudit.probes.records.MaskedStats`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ARRequest:
    """One causal forward pass per text; every AR attack reads its statistics."""

    kind: str = "ar"


AR_PROBE = ARRequest()


def ar_probe(params: dict, budget: int) -> ARRequest:
    """The probe of every AR attack: the same single forward pass, whatever the parameters."""
    return AR_PROBE


@dataclass(frozen=True)
class PrefixRequest:
    """Each text's AR pass, plain and with ``shots`` (texts known not to be members) joined before it; the prefix
    keeps as many of the last shots as fit in the context beside the longest text."""

    shots: tuple[str, ...]
    kind: str = "ar-prefixed"


@dataclass(frozen=True)
class FrequencyRequest:
    """The AR pass of every text, with each scored token's id and its smoothed frequency in ``corpus`` (a file, or
    "" for the embedded corpus) under the model's tokenizer."""

    corpus: str = ""
    kind: str = "ar-frequencies"


GRADIENT_NORMS = ("l2", "tensor_l1", "tensor_l2", "tensor_inf")  # ‖g‖₂ of the whole subset; means of per-tensor p-norms


@dataclass(frozen=True)
class GradientRequest:
    """Each text's loss gradient with respect to the ``subset`` of the model's parameters (``all``, ``embeddings``,
    ``adapter`` or ``last:N``), as norms (:mod:`lmaudit.probes.gradients`)."""

    subset: str = "all"
    kind: str = "ar-gradients"


@dataclass(frozen=True)
class NeighbourRequest:
    """The AR pass of every text and of ``n`` neighbours of it, each replacing a ``fraction`` of its tokens (at
    least one) with one of a masked model's ``top`` likeliest alternatives; ``model``: the masked model's folder
    ("" for the embedded diffusion LM)."""

    model: str = ""
    n: int = 25
    fraction: float = 0.0
    top: int = 5
    kind: str = "ar-neighbours"


@dataclass(frozen=True)
class SampleRequest:
    """``n`` continuations of every text sampled from the model at ``temperature`` after the first ``prefix`` share
    of its target tokens, each as many tokens long as the rest of the text (its remainder)."""

    n: int = 10
    prefix: float = 0.5
    temperature: float = 1.0
    kind: str = "samples"
