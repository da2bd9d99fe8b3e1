"""What every command needs beside the jobs, and nothing heavy: attack listing, config files, the code's commit and
output folders. The commands reach these through the interface, never the modules below it; this module (like
``import lmaudit.api``, which imports its jobs on first use) imports neither torch nor the report stack, so a light
command such as ``lmaudit attacks`` stays light. :mod:`lmaudit.api.reports` holds the reports and what the terminal
shows of a result, :mod:`lmaudit.api.data` the corpus, synthetic PII and canaries, :mod:`lmaudit.api.setup` model
imports and training defaults. Not in ``lmaudit.api``'s ``__all__``: import them as
``from lmaudit.api.tools import ...``.

Re-exported as their modules define them: ``list_attacks`` (the registered attacks), ``read_toml`` (a TOML file's
keys, one error naming a bad file), ``git_state`` (the commit of the running code), ``model_folders`` (the folders
loading a model reads), ``output_folder`` (a folder written whole), ``atomic_path`` (a file written whole),
``disk_error`` (a full or read-only disk as one error), ``DTYPE_NAMES`` (the precisions a model loads in),
``is_endpoint`` (whether a model source is a served model's URL), ``COMMAND_LINE`` (the command results record),
``mask_secrets`` (a text with its keys masked), ``deferred`` (a function imported when first called);
:func:`training_record` reads what made a model folder.
"""

from __future__ import annotations

from pathlib import Path

from lmaudit.attacks import list_attacks as list_attacks
from lmaudit.credentials import mask_secrets as mask_secrets
from lmaudit.folders import check_replaceable, with_cache
from lmaudit.folders import disk_error as disk_error
from lmaudit.folders import output_folder as output_folder
from lmaudit.models.endpoint import is_endpoint as is_endpoint
from lmaudit.models.sources import DTYPE_NAMES as DTYPE_NAMES
from lmaudit.models.sources import TRAINING_FILE, read_record
from lmaudit.models.sources import model_folders as model_folders
from lmaudit.utils import COMMAND_LINE as COMMAND_LINE
from lmaudit.utils import atomic_path as atomic_path
from lmaudit.utils import deferred as deferred
from lmaudit.utils import git_state as git_state
from lmaudit.utils import read_toml as read_toml


def check_output(out: str | Path, what: str = "--out", *, kind=None, inputs: dict | None = None) -> Path:
    """``out`` may receive a ``kind`` folder: new, empty or one lmaudit wrote as ``kind`` (replaced whole), and none
    of ``inputs`` ({name: path or paths}) or the cache. Said before any work; returns the folder to write. ``kind``
    may be a function giving it, called only when ``out`` holds a folder lmaudit wrote."""
    return check_replaceable(out, what, kind=kind, inputs=with_cache(inputs))


def training_record(folder: str | Path) -> dict:
    """What made the model folder ``folder`` (its ``lmaudit_training.json``); {} when it has none."""
    return read_record(folder, TRAINING_FILE) or {}
