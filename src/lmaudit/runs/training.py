"""What a training job of the Python interface returns, and the check every one makes before it trains.

:func:`lmaudit.finetune`, :func:`lmaudit.unlearn`, :func:`lmaudit.pretrain` and
:func:`lmaudit.shadows` (in :mod:`lmaudit.api`; the commands call them) refuse an ``out``
that is one of their inputs, the cache, or a folder of another kind, before any work
(:func:`check_training_out`), and return a :class:`TrainedModel`: the folder, what
``lmaudit_training.json`` records (:class:`TrainedShadows`: ``shadows.json``), ``load()``, ``to_frame()`` and a
repr that says what was trained and how the loss moved. Each is declared as a :class:`~lmaudit.runs.common.Job`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pandas as pd

from lmaudit.errors import LmauditError
from lmaudit.folders import check_replaceable, with_cache
from lmaudit.models import build, shadows
from lmaudit.models import unlearn as unlearning
from lmaudit.models.loading import load_model
from lmaudit.models.shadows import MANIFEST as SHADOWS_FILE
from lmaudit.models.shadows import ShadowsConfig, ShadowSet
from lmaudit.models.sources import TRAINING_FILE, model_folders
from lmaudit.models.train import FinetuneConfig, PretrainConfig
from lmaudit.models.unlearn import UnlearnConfig
from lmaudit.runs.common import Job, register_job


def check_training_out(out: str | Path, kind: str, inputs: dict) -> Path:
    """``out`` may receive a ``kind`` folder ("model" or "shadows"): none of ``inputs`` ({parameter: a model source,
    a data path, or None}; a model's adapter bases count) and not the cache. Raised before any work, naming ``out``
    and the inputs as the caller spells them (``out``, ``model``; ``--out``, ``--model`` on the command line)."""
    paths = {}
    for name, value in inputs.items():
        if isinstance(value, (str, Path)):
            paths["{" + name + "}"] = (model_folders(value) if name in ("model", "base", "adapter_base", "init_from")
                                       else Path(value))
    spelled = {name: (name, "--" + name.replace("_", "-")) for name in ("out", *inputs)}
    return check_replaceable(out, "{out}", kind=kind, inputs=with_cache(paths), options=spelled)


@dataclass(repr=False)
class TrainedModel:
    """A model (or adapter) folder a training job wrote: its ``lmaudit_training.json`` record."""

    path: Path
    training: dict  # the folder's training record
    type: ClassVar[str] = "model"
    RECORD: ClassVar[str] = TRAINING_FILE

    @classmethod
    def read(cls, folder: str | Path) -> "TrainedModel":
        folder = Path(folder)
        f = folder / cls.RECORD
        try:
            record = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise LmauditError(f"{f}: unreadable training record ({exc})", hint="train the model again") from None
        return cls(folder, record if isinstance(record, dict) else {})

    def load(self, **options):
        """The model (:func:`~lmaudit.models.loading.load_model` with ``options``)."""
        return load_model(self.path, **options)

    def _what(self) -> str:
        t = self.training
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
        return f"<{type(self).__name__} {self.path}: {self._what()}{loss}>"


class TrainedShadows(TrainedModel):
    """A set of shadow models a ``shadows`` job wrote: its ``shadows.json`` record; ``load()`` gives the
    :class:`~lmaudit.models.shadows.ShadowSet`."""

    type: ClassVar[str] = "shadows"
    RECORD: ClassVar[str] = SHADOWS_FILE

    def load(self, **options) -> ShadowSet:
        return ShadowSet.load(self.path)

    def _what(self) -> str:
        return f"{self.training.get('k', '?')} shadow models"


def typed(body, result: type[TrainedModel]):
    """The training function ``body`` of ``models/`` (it returns the folder it wrote) returning ``result`` read from
    that folder: its job's typed result, as every other job's body returns its own. It keeps the body's name and
    module (what the test that nothing above the interface runs a body looks for)."""
    @functools.wraps(body)
    def run(*args, **kwargs) -> TrainedModel:
        return result.read(body(*args, **kwargs))

    run.__annotations__ = {**body.__annotations__, "return": result}
    return run


# the training jobs' bodies, as the interface runs them
finetune = typed(build.finetune, TrainedModel)
unlearn = typed(unlearning.unlearn, TrainedModel)
pretrain = typed(build.pretrain, TrainedModel)
train_shadows = typed(shadows.train_shadows, TrainedShadows)

for _job in (Job("finetune", "model", "finetune", TrainedModel, finetune, FinetuneConfig),
             Job("unlearn", "model", "unlearn", TrainedModel, unlearn, UnlearnConfig),
             Job("pretrain", "model", "pretrain", TrainedModel, pretrain, PretrainConfig),
             Job("shadows", "shadows", "shadows", TrainedShadows, train_shadows, ShadowsConfig)):
    register_job(_job)
