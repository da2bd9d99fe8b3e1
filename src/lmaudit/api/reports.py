"""Reports, CLAIMS.md and what the terminal shows of a result, for the command line (through the interface, never
the report modules themselves). Not in ``lmaudit.api``'s ``__all__``: import them as
``from lmaudit.api.reports import ...``.

Also here, as their modules wrote them: ``ci_text`` (an interval as "[lo, hi]"); ``results_table`` and
``verdict_text`` (a membership result's table and its verdict in one line); ``audit_rows``, ``asr_rows``,
``summary_rows`` and ``check_table`` ((header, rows) of a set-level audit, a PII reconstruction, an extraction and an
unlearning check), ``comparison_rows`` (those of two runs compared); ``inference_summary``
(a dataset inference's verdict); ``redact`` and ``mask_value`` (PII shown as its kind and length).
"""

from __future__ import annotations

from pathlib import Path

from lmaudit import api as _api
from lmaudit.extraction.reconstruct import mask_value as mask_value
from lmaudit.report.build import build_report, verify_run
from lmaudit.report.build import write_report as _write_report
from lmaudit.report.cells import ci_text as ci_text
from lmaudit.report.claims import build_claims as _build_claims
from lmaudit.report.dataset_inference import inference_summary as inference_summary
from lmaudit.report.document import ReportView
from lmaudit.report.records import redact as redact
from lmaudit.report.summary import audit_summary as _audit_summary
from lmaudit.report.tables import asr_rows as asr_rows
from lmaudit.report.tables import audit_rows as audit_rows
from lmaudit.report.tables import check_table as check_table
from lmaudit.report.tables import summary_rows as summary_rows
from lmaudit.runs.compare import comparison_rows as comparison_rows
from lmaudit.runs.mia_notes import results_table as results_table
from lmaudit.runs.mia_notes import verdict_text as verdict_text


def write_report(run_dir: str | Path, *, show_pii: bool = False) -> Path:
    """Write ``report.html`` and ``report.md`` of a results folder (checked first); return the HTML path. The jobs
    are imported first: each declares the report of its results' type."""
    _api.load_jobs()
    return _write_report(run_dir, show_pii=show_pii)


def report_view(run_dir: str | Path, *, show_pii: bool = False) -> ReportView:
    """The report of a results folder (checked first, as ``lmaudit report`` reads one) to look at in a notebook:
    ``lmaudit.report(FOLDER)`` in a cell shows it; nothing is written."""
    _api.load_jobs()
    verify_run(Path(run_dir))
    return ReportView(build_report(run_dir, show_pii=show_pii))


def build_claims(root: str | Path, command: str = "lmaudit claims") -> str:
    """The Markdown of CLAIMS.md from the experiment folders under ``root``."""
    return _build_claims(Path(root), command=command)


def audit_caveats(payload: dict) -> list[str]:
    """The caveats of a set-level audit's verdict (texts the sets share)."""
    return [p for p in _audit_summary(payload).points if p.startswith("Caveat")]
