"""The report kinds: a results ``type`` maps to the function that builds its report, as an attack name maps to its
function. A module registers its kind with :func:`register_report`; :func:`~lmaudit.report.build.build_report`
looks the type up (an experiment folder, which holds its experiment, renders through its tables)."""

from __future__ import annotations

from collections.abc import Callable

from lmaudit.errors import LmauditError

# type → builder(run folder, results, *, where, show_pii) → Report
REPORTS: dict[str, Callable] = {}


def register_report(kind: str) -> Callable[[Callable], Callable]:
    """Register the decorated function as the report builder of results of type ``kind``."""
    def wrap(fn: Callable) -> Callable:
        if kind in REPORTS and REPORTS[kind] is not fn:
            raise LmauditError(f"report kind '{kind}' is registered twice")
        REPORTS[kind] = fn
        return fn
    return wrap
