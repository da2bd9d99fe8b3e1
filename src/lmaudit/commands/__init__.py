"""Command groups of the ``lmaudit`` CLI, registered onto the main app by :mod:`lmaudit.cli`."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import typer


def rich_table(title: str, header: list[str], rows: list[list[str]]):
    """A rich table: first column left-aligned, the others right-aligned."""
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table


def finish(results: Path, out: Path, no_report: bool) -> None:
    """Print where the results are and write the report unless ``no_report``."""
    from lmaudit.progress import stdout_console

    stdout_console.print(f"results: {results}")
    if not no_report:
        from lmaudit.report.build import write_report

        stdout_console.print(f"report: {write_report(out)}")


def backend_option():
    return typer.Option("local", help="Where probes run: local (this process) or ray (Ray actors, one model copy "
                                      "each; needs pip install 'lmaudit[ray]'). Results are identical.")


def address_option():
    return typer.Option(None, help="--backend ray: address of a running Ray cluster (default: start a local one).")


def workers_option():
    return typer.Option(None, help="--backend ray: number of actors (default: one per GPU, else one per CPU).")


def driver_device(backend: str) -> Optional[str]:
    """Where this process keeps a model: on the CPU when Ray workers hold the copies that compute."""
    return "cpu" if backend == "ray" else None


@contextmanager
def backend_from(name: str, address: Optional[str], workers: Optional[int]) -> Iterator:
    """Run the block's shard work on the chosen backend (closed afterwards)."""
    from lmaudit.distributed import make_backend, use_backend

    with use_backend(make_backend(name, address=address, workers=workers)) as backend:
        yield backend
