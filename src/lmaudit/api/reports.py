"""Reports, CLAIMS.md and what the terminal shows of a result, for the command line (through the interface, never
the report modules themselves). Not in ``lmaudit.api``'s ``__all__``: import them as
``from lmaudit.api.reports import ...``.

Also here, as their modules wrote them: ``ci_text`` (an interval as "[lo, hi]"); ``results_table`` and
``verdict_text`` (a membership result's table and its verdict in one line); ``audit_rows``, ``asr_rows``,
``summary_rows`` and ``check_table`` ((header, rows) of a set-level audit, a PII reconstruction, an extraction and an
unlearning check), ``comparison_rows`` (those of two runs compared); ``inference_summary``
(a dataset inference's verdict); ``redact`` and ``mask_value`` (PII shown as its kind and length). Each is
imported when first called: the module is light.
"""

from __future__ import annotations

from pathlib import Path

from lmaudit import api as _api
from lmaudit.utils import deferred

# light: each is imported (with the report stack) when first called, so the commands that import them start at once
mask_value = deferred("lmaudit.extraction.reconstruct", "mask_value")
ci_text = deferred("lmaudit.report.cells", "ci_text")
inference_summary = deferred("lmaudit.report.dataset_inference", "inference_summary")
redact = deferred("lmaudit.report.records", "redact")
asr_rows = deferred("lmaudit.report.tables", "asr_rows")
audit_rows = deferred("lmaudit.report.tables", "audit_rows")
check_table = deferred("lmaudit.report.tables", "check_table")
summary_rows = deferred("lmaudit.report.tables", "summary_rows")
comparison_rows = deferred("lmaudit.runs.compare", "comparison_rows")
results_table = deferred("lmaudit.runs.mia_notes", "results_table")
verdict_text = deferred("lmaudit.runs.mia_notes", "verdict_text")
_write_report = deferred("lmaudit.report.build", "write_report")
_build_report = deferred("lmaudit.report.build", "build_report")
_verify_run = deferred("lmaudit.report.build", "verify_run")
_build_claims = deferred("lmaudit.claims.table", "build_claims")
_audit_summary = deferred("lmaudit.report.summary", "audit_summary")
_report_view = deferred("lmaudit.report.document", "ReportView")


def write_report(run_dir: str | Path, *, show_pii: bool = False) -> Path:
    """Write ``report.html`` and ``report.md`` of a results folder (checked first); return the HTML path. The jobs
    are imported first: each declares the report of its results' type."""
    _api.load_jobs()
    return _write_report(run_dir, show_pii=show_pii)


def report_view(run_dir: str | Path, *, show_pii: bool = False):
    """The report of a results folder (checked first, as ``lmaudit report`` reads one) to look at in a notebook
    (a :class:`~lmaudit.report.document.ReportView`): ``lmaudit.report(FOLDER)`` in a cell shows it; nothing is
    written."""
    _api.load_jobs()
    _verify_run(Path(run_dir))
    return _report_view(_build_report(run_dir, show_pii=show_pii))


def build_claims(root: str | Path, command: str = "lmaudit claims") -> str:
    """The Markdown of CLAIMS.md from the experiment folders under ``root``."""
    return _build_claims(Path(root), command=command)


def audit_caveats(payload: dict) -> list[str]:
    """The caveats of a set-level audit's verdict (texts the sets share)."""
    return [p for p in _audit_summary(payload).points if p.startswith("Caveat")]
