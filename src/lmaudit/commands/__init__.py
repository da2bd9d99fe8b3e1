"""Command groups of the ``lmaudit`` CLI, registered onto the main app by :mod:`lmaudit.cli`."""

from __future__ import annotations

from pathlib import Path


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
