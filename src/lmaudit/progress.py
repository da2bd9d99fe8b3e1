"""Progress bars and console output in one place.

Long operations call :func:`progress` and advance it; ``--quiet`` (or
``LMAUDIT_QUIET=1``) silences bars and informational messages. Warnings go through
:mod:`warnings`/logging so that tests and libraries can capture them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

_state = {"quiet": os.environ.get("LMAUDIT_QUIET", "") not in ("", "0")}

console = Console(stderr=True, highlight=False)
stdout_console = Console(highlight=False)


def set_quiet(quiet: bool) -> None:
    _state["quiet"] = bool(quiet)


def is_quiet() -> bool:
    return _state["quiet"]


def info(message: str) -> None:
    """An informational line on stderr (silenced by ``--quiet``)."""
    if not _state["quiet"]:
        console.print(message, soft_wrap=True)


class _Bar:
    def __init__(self, progress: Progress | None, task: int | None) -> None:
        self._progress = progress
        self._task = task

    def advance(self, n: float = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def update(self, **fields: object) -> None:
        if self._progress is not None:
            self._progress.update(self._task, **fields)


@contextmanager
def progress(description: str | None, total: float | None) -> Iterator[_Bar]:
    """A rich progress bar with ETA; a no-op when quiet or not attached to a terminal
    that wants one (``LMAUDIT_PROGRESS=0`` disables it too), and for ``description=None``
    (work whose caller shows the progress)."""
    disabled = description is None or _state["quiet"] or os.environ.get("LMAUDIT_PROGRESS") == "0"
    if disabled:
        yield _Bar(None, None)
        return
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[extra]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, transient=not sys.stderr.isatty(), refresh_per_second=4) as prog:
        task = prog.add_task(description, total=total, extra="")
        yield _Bar(prog, task)
