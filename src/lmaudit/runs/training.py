"""What a training job of the Python interface returns, and the check every one makes before it trains.

:func:`lmaudit.finetune`, :func:`lmaudit.unlearn`, :func:`lmaudit.pretrain` and
:func:`lmaudit.shadows` (in :mod:`lmaudit.api`; the commands call them) refuse an ``out``
that is one of their inputs, the cache, or a folder of another kind, before any work
(:func:`check_training_out`), and return a :class:`TrainedModel`: the folder, what
``lmaudit_training.json`` (or ``shadows.json``) records, ``load()``, ``to_frame()`` and a
repr that says what was trained and how the loss moved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lmaudit.errors import LmauditError
from lmaudit.folders import check_replaceable, with_cache
from lmaudit.models.loading import load_model
from lmaudit.models.lora import TRAINING_FILE
from lmaudit.models.shadows import MANIFEST as SHADOWS_FILE
from lmaudit.models.shadows import ShadowSet
from lmaudit.models.sources import model_folders


def check_training_out(out: str | Path, kind: str, inputs: dict) -> Path:
    """``out`` may receive a ``kind`` folder ("model" or "shadows"): none of ``inputs`` ({parameter: a model source,
    a data path, or None}; a model's adapter bases count) and not the cache. Raised before any work."""
    paths = {}
    for name, value in inputs.items():
        if isinstance(value, (str, Path)):
            paths[name] = model_folders(value) if name in ("model", "base", "adapter_base", "init_from") else Path(value)
    return check_replaceable(out, "out", kind=kind, inputs=with_cache(paths))


@dataclass
class TrainedModel:
    """A folder a training job wrote: a model (or adapter) folder, or with ``type`` "shadows" a set of shadow models."""

    path: Path
    training: dict  # lmaudit_training.json, or shadows.json for a shadow set
    type: str = "model"

    @classmethod
    def read(cls, folder: str | Path, type: str = "model") -> "TrainedModel":
        folder = Path(folder)
        f = folder / (SHADOWS_FILE if type == "shadows" else TRAINING_FILE)
        try:
            record = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise LmauditError(f"{f}: unreadable training record ({exc})", hint="train the model again") from None
        return cls(folder, record if isinstance(record, dict) else {}, type)

    def load(self, **options):
        """The model (:func:`~lmaudit.models.loading.load_model` with ``options``), or the :class:`ShadowSet`."""
        if self.type == "shadows":
            return ShadowSet.load(self.path)
        return load_model(self.path, **options)

    def _what(self) -> str:
        t = self.training
        if self.type == "shadows":
            return f"{t.get('k', '?')} shadow models"
        lora = t.get("lora")
        how = f", LoRA rank {lora['rank']}" if lora else ""
        mode = f" {t['mode']}" if t.get("mode") else f" {t['method']}" if t.get("method") else ""
        return f"{t.get('stage', 'model')} {t.get('kind', '')}{mode}{how}".replace("  ", " ")

    def to_frame(self) -> pd.DataFrame:
        """One row: what was trained, its settings and how the training loss moved."""
        t = self.training
        cfg = t.get("train_config") or {}
        return pd.DataFrame([{"path": str(self.path), "what": self._what(), "epochs": cfg.get("epochs"),
                              "lr": cfg.get("lr"), "batch_size": cfg.get("batch_size"), "steps": t.get("steps"),
                              "loss_start": t.get("loss_start"), "loss_end": t.get("loss_end")}])

    def __repr__(self) -> str:
        t = self.training
        loss = (f", training loss {t['loss_start']:.3f} → {t['loss_end']:.3f} over {t['steps']} steps"
                if isinstance(t.get("loss_start"), float) and isinstance(t.get("loss_end"), float) else "")
        return f"<TrainedModel {self.path}: {self._what()}{loss}>"
