"""The model handle: what every layer above ``models/`` holds of a model (a leaf module).

The handle travels whole, from loading to the probes, which ask its adapter how to run the model; ``kind`` is
what a results file reports, never what code above ``models/`` branches on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ModelHandle:
    """A loaded model with its tokenizer, folder, content fingerprint, kind and adapter.

    ``adapter`` (an :class:`~lmaudit.models.adapters.ARAdapter` or
    :class:`~lmaudit.models.adapters.DLMAdapter`) answers every question about how
    to run the model: padding, context length, output head, logit alignment, masks.
    """

    model: Any
    tokenizer: Any
    path: str
    fingerprint: str
    kind: str  # "ar" or "dlm"
    adapter: Any = None
    dtype: str | None = None  # of the weights (default: read from them); probe statistics are float32 whatever it is
    device: str | None = None
    dp: dict | None = None  # the differential-privacy record of the model's training (lmaudit_training.json), if any
    source: dict | None = None  # the GGUF file the folder was imported from (lmaudit_source.json), if any

    def __post_init__(self) -> None:
        params = getattr(self.model, "parameters", None)
        first = next(params(), None) if callable(params) else None
        if first is not None:
            self.dtype = self.dtype or str(first.dtype).removeprefix("torch.")
            self.device = self.device or str(first.device)

    def __repr__(self) -> str:
        """One line: where the model is from, its kind, precision and device, and its fingerprint (not the module
        tree of its weights)."""
        fingerprint = str(self.fingerprint or "")
        short = fingerprint[:20] + ("…" if len(fingerprint) > 20 else "")
        return (f"ModelHandle({self.path!r}, kind={self.kind!r}, dtype={self.dtype!r}, device={self.device!r}, "
                f"fingerprint={short!r}, adapter={type(self.adapter).__name__})")

    @property
    def access(self) -> str:
        """What the model gives an attack (a key of :data:`~lmaudit.attacks.registry.ACCESS`): a served model what
        its adapter says, a model in memory or on disk everything."""
        return getattr(self.adapter, "access", "weights")

    def same_kind(self, other: ModelHandle) -> bool:
        """Whether ``other`` is a model of this one's kind (a reference must be of its target's)."""
        return other.kind == self.kind

    def facts(self) -> dict:
        """What a results file records of the model: folder, fingerprint, kind, dtype and device; for a model
        trained with differential privacy, its ``dp`` record (ε and δ spent, noise multiplier, sampling rate, steps);
        for a model imported from a GGUF file, its ``source`` (the file, its SHA-256, size and quantization types);
        for a served model, ``served`` (the URL without credentials, its model's name, capabilities and alignment);
        for a model loaded through a PEFT adapter folder, its ``adapter`` (rank, targets, base)."""
        facts = {"path": self.path, "fingerprint": self.fingerprint, "kind": self.kind, "dtype": self.dtype,
                 "device": self.device}
        if self.dp is not None:
            facts["dp"] = self.dp
        if self.source is not None and "served" in self.source:  # an endpoint: what it offers, how it was checked
            facts["served"] = self.source["served"]
        elif self.source is not None:
            facts["source"] = {k: self.source.get(k) for k in ("gguf", "sha256", "bytes", "architecture",
                                                                "tensor_types")}
        adapter = getattr(self.model, "lmaudit_adapter", None)  # set where an adapter folder was loaded
        if adapter:
            facts["adapter"] = adapter
        return facts
