"""What each kind of model ("ar", "dlm") needs from the code that builds and compares models of several kinds.

An experiment trains models by kind and lays its rows out by kind. What differs between the kinds (which base a kind
is built from, how its rows are named, which step counts its extraction runs, what it can be audited with) is
answered here, beside the adapters, so that code above ``models/`` passes a kind on as data and never branches on it.
A loaded model is asked through its adapter instead (:mod:`lmaudit.models.adapters`).
"""

from __future__ import annotations

from lmaudit.models.adapters import adapter_for
from lmaudit.models.dlm import dlm_from_ar
from lmaudit.models.handle import ModelHandle
from lmaudit.models.loading import load_model
from lmaudit.models.lora import full_model

LABELS = {"ar": "AR", "dlm": "DLM"}  # how tables and figures name a model of each kind
# a base of this kind is the other kind's base adapted (LLaDA/Dream-style); a kind not here is pretrained from
# scratch on the corpus, or, when the experiment names a pretrained model, is that model itself
ADAPTED_FROM = {"dlm": "ar"}
# The step counts an extraction runs with a model of each kind. An AR model's span probability is exact (one
# left-to-right pass, one row whatever the steps, which stay in the cache key); a DLM's is estimated along unmasking
# trajectories of one step and of one step per masked token, one row each.
EXTRACTION_STEPS = {"ar": ("1",), "dlm": ("1", "max")}
EXACT_EXTRACTION = ("ar",)
STEP_ROWS = {"1": "one-step", "max": "max-step"}  # the row of each step count of an estimated extraction
# the kinds the unlearning audit runs on: its score features (zlib, reference) and LiRA's shadow statistics are read
# with the AR probe
UNLEARNING_AUDITED = ("ar",)
# the run settings a model of each kind does not read (a report leaves them out of its configuration)
UNREAD_SETTINGS = {"ar": ("budget",)}


def label(kind: str) -> str:
    """The name of a model of ``kind`` in tables and figures: ``"AR"``, ``"DLM"``."""
    return LABELS[kind]


def adapted_from(kind: str) -> str | None:
    """The kind whose base a base of ``kind`` is adapted from (a DLM: the AR base), or None for a base pretrained
    from scratch (or the pretrained model an experiment names)."""
    return ADAPTED_FROM.get(kind)


def lineage(kind: str) -> tuple[str, ...]:
    """The kinds of the models a ``kind`` base is built through, that base last: ``("ar",)``, ``("ar", "dlm")``."""
    source = adapted_from(kind)
    return (lineage(source) if source else ()) + (kind,)


def extraction_steps(kind: str) -> list[str]:
    """The step counts an extraction with a model of ``kind`` runs (a new list: ``ExtractConfig`` keeps it)."""
    return list(EXTRACTION_STEPS[kind])


def exact_extraction(kind: str) -> bool:
    """Whether a model of ``kind`` gives a span's probability exactly (no sampled orders, nothing to converge)."""
    return kind in EXACT_EXTRACTION


def extraction_row(kind: str, step: str) -> str:
    """The name of the row of step count ``step`` (a label of the extraction's summary) of a model of ``kind``:
    ``"AR"`` (its one exact row), ``"DLM one-step"``, ``"DLM max-step"``."""
    return label(kind) if exact_extraction(kind) else f"{label(kind)} {STEP_ROWS[step]}"


def unlearning_audited(kind: str) -> bool:
    """Whether the unlearning audit runs on models of ``kind`` (see :data:`UNLEARNING_AUDITED`)."""
    return kind in UNLEARNING_AUDITED


def dlm_before_adaptation(folder) -> ModelHandle:
    """The handle of the AR model of ``folder`` read as a DLM as its adaptation starts
    (:func:`~lmaudit.models.dlm.dlm_from_ar`: full attention, shifted logits, its mask token untrained, added when the
    tokenizer has none): the baseline a DLM adapted from that model is compared with."""
    handle = load_model(folder, kind="ar")
    model = dlm_from_ar(full_model(handle.model), handle.tokenizer)
    return adapter_for(model.eval(), handle.tokenizer).handle(path=f"{handle.path} (read as a DLM, not adapted)")
