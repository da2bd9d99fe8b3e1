"""Helpers of the commands that run probes and write results (kept apart so that light commands stay light)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from lmaudit.probes.backends import make_backend, use_backend
from lmaudit.progress import stdout_console


@contextmanager
def backend_from(name: str, address: Optional[str], workers: Optional[int]) -> Iterator:
    """Run the block's shard work on the chosen backend (closed afterwards)."""
    with use_backend(make_backend(name, address=address, workers=workers)) as backend:
        yield backend


def finish(results: Path, out: Path, no_report: bool) -> None:
    """Print where the results and (unless ``no_report``) the report written with them are."""
    stdout_console.print(f"results: {results}")
    if not no_report:
        stdout_console.print(f"report: {out / 'report.html'}")
