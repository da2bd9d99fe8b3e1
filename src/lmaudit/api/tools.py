"""What every command needs beside the jobs, and nothing heavy: attack listing, config files, the code's commit and
output folders. The commands reach these through the interface, never the modules below it; this module (like
``import lmaudit.api``, which imports its jobs on first use) imports neither torch nor the report stack, so a light
command such as ``lmaudit attacks`` stays light. :mod:`lmaudit.api.reports` holds the reports and what the terminal
shows of a result, :mod:`lmaudit.api.data` the corpus, synthetic PII and canaries, :mod:`lmaudit.api.setup` model
imports and training defaults. Not in ``lmaudit.api``'s ``__all__``: import them as
``from lmaudit.api.tools import ...``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lmaudit.attacks import list_attacks as _list_attacks
from lmaudit.folders import check_replaceable, with_cache
from lmaudit.folders import disk_error as _disk_error
from lmaudit.folders import output_folder as _output_folder
from lmaudit.models.sources import DTYPE_NAMES as _DTYPE_NAMES
from lmaudit.models.sources import model_folders as _model_folders
from lmaudit.utils import atomic_path as _atomic_path
from lmaudit.utils import git_state as _git_state
from lmaudit.utils import read_toml as _read_toml

DTYPE_NAMES = _DTYPE_NAMES  # the precisions a model may be loaded in (``dtype=``)


def list_attacks(kind: str | None = None) -> list:
    """The registered attacks (all, or those of model ``kind``), each with ``describe()``."""
    return _list_attacks(kind)


def read_toml(path: str | Path, what: str = "file") -> dict:
    """A TOML file's keys; a missing, unreadable or malformed file is one error naming it as ``what``."""
    return _read_toml(path, what)


def git_state() -> dict:
    """``{"commit", "dirty"}`` of the code this process runs, read once: results name it."""
    return _git_state()


def check_output(out: str | Path, what: str = "--out", *, kind: str | None = None, inputs: dict | None = None) -> Path:
    """``out`` may receive a ``kind`` folder: new, empty or one lmaudit wrote as ``kind`` (replaced whole), and none
    of ``inputs`` ({name: path or paths}) or the cache. Said before any work; returns the folder to write."""
    return check_replaceable(out, what, kind=kind, inputs=with_cache(inputs))


def model_folders(path: str | Path, base: str | Path | None = None) -> list[Path]:
    """The folders loading the model ``path`` reads: itself and, for an adapter, its bases (nothing is loaded)."""
    return _model_folders(path, base)


@contextmanager
def output_folder(out: str | Path, *, what: str = "run") -> Iterator[Path]:
    """An empty temporary folder, swapped into place as ``out`` (a folder of kind ``what``) when the block ends."""
    with _output_folder(out, what=what) as tmp:
        yield tmp


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path renamed over ``path`` when the block ends: a reader never sees half a file."""
    with _atomic_path(path) as tmp:
        yield tmp


def disk_error(exc: OSError):
    """A full, read-only or forbidden disk as one error naming the path and what to do; None for other errors."""
    return _disk_error(exc)
