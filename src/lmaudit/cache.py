"""The cache of built things (models, tokenizers, frequency tables): a folder per key, built once and then read.

A build runs in a temporary folder beside its place and is renamed into place whole, so a reader never sees a
half-built folder; a training inside a build saves its state while it runs, so a build stopped part way resumes.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path

from lmaudit.utils import cache_dir, remove_stale_temps, stable_hash, temp_prefix

# Where a build's training keeps its state while the build runs (:func:`lmaudit.models.train.train` saves it there
# every few minutes and resumes from it): a build stopped part way, killed or interrupted, resumes where it stopped.
TRAINING_STATE: ContextVar[Path | None] = ContextVar("lmaudit_training_state", default=None)


def cached_build(kind: str, key: object, build: Callable[[Path], None]) -> Path:
    """Return the cache folder for ``key``, running ``build(tmp_folder)`` first if absent.

    While it builds, a training inside saves its state in ``checkpoints/KIND/HASH`` of the cache
    (:data:`TRAINING_STATE`), removed once the folder is in place: a build stopped part way resumes
    from its last saved step.

    Two processes building one key both build; the first rename wins and the other
    keeps that folder (the same deterministic build), so no process ever deletes a
    folder another may be reading. The temporary folders of killed builds beside it are
    removed first (:func:`~lmaudit.utils.remove_stale_temps`); a running build's never are.
    """
    folder = cache_dir() / kind / stable_hash(key)
    state = cache_dir() / "checkpoints" / kind / folder.name
    if folder.exists():  # only ever created by the atomic rename below
        if state.exists():  # left by a second build of the same key, killed after the first one finished
            shutil.rmtree(state, ignore_errors=True)
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(folder.parent, name=folder.name, legacy=(r"\.[0-9a-f]{32}\.[a-z0-9_]{8}",))
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(folder.name), suffix=".build", dir=folder.parent))
    token = TRAINING_STATE.set(state)
    try:
        build(tmp)
        try:
            os.rename(tmp, folder)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not folder.exists():
                raise
    finally:
        TRAINING_STATE.reset(token)
        if tmp.exists():
            shutil.rmtree(tmp)
    shutil.rmtree(state, ignore_errors=True)  # the folder is in place: its training's state is done with
    return folder
