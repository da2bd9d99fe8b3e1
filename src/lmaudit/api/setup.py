"""What the command line sets up before a job: pretrained models imported from GGUF files, the DP-SGD defaults, and
extraction's step counts. These import torch (:mod:`lmaudit.api.tools` holds what does not).

Not in ``lmaudit.api``'s ``__all__``: import them as ``from lmaudit.api.setup import ...``.
"""

from __future__ import annotations

from pathlib import Path

from lmaudit.models import dp as _dp
from lmaudit.models import gguf as _gguf
from lmaudit.models.sources import source_record as _source_record
from lmaudit.runs.extract import parse_steps as _parse_steps

DP_DELTA = _dp.DEFAULT_DELTA  # the δ of DP-SGD training when none is given
DP_MAX_GRAD_NORM = _dp.DEFAULT_MAX_GRAD_NORM  # the L2 norm each example's gradient is clipped to when none is given
NAMED_MODELS = _gguf.NAMED  # {name: (package, file, what)}: the pretrained models found in installed packages


def gguf_file(source: str | Path) -> Path | None:
    """The GGUF file ``source`` names (the file, a folder holding one, or a named model); None for a model folder."""
    return _gguf.gguf_file(source)


def import_gguf(source: str | Path, out: str | Path) -> Path:
    """Dequantize the GGUF file (or named model) ``source`` into the model folder ``out``; return the folder."""
    return _gguf.import_gguf(source, out)


def source_record(folder: str | Path) -> dict | None:
    """What a model folder imported from a GGUF file records of it (file, sha256, parameters); None otherwise."""
    return _source_record(folder)


def parse_steps(values) -> list[str]:
    """Extraction step counts from "1,2,4,max" (or a list): positive integers or 'max', duplicates dropped."""
    return _parse_steps(values)
