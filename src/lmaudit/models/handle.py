"""The model handle: what every layer above ``models/`` holds of a model (a leaf module)."""

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
