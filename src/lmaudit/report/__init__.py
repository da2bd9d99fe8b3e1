"""Reports: plots, a self-contained HTML page and Markdown for any run folder.

In a notebook, ``lmaudit.report(FOLDER)`` shows a results folder's report where the cell's output goes (a
:class:`~lmaudit.report.document.ReportView`); the package is callable for that, and its modules stay importable
as they are.
"""

import importlib as _importlib
import sys as _sys
import types as _types


class _CallableReports(_types.ModuleType):
    def __call__(self, folder, *, show_pii: bool = False):
        """The report of the results folder ``folder`` (checked against its manifest), to look at in a notebook."""
        return _importlib.import_module("lmaudit.api.reports").report_view(folder, show_pii=show_pii)


_sys.modules[__name__].__class__ = _CallableReports
