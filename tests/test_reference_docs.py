"""The reference page lists every job from the registry: its family module, its settings and its result type."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import lmaudit.api
from lmaudit.runs.common import JOBS, Job, RunResult

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _resolves(path: str) -> bool:
    module, _, name = path.rpartition(".")
    return hasattr(importlib.import_module(module), name)


def test_the_reference_page_lists_every_declared_job_its_settings_and_result():
    page = _hooks().expand((DOCS / "reference.md").read_text())
    lmaudit.api.load_jobs()
    for job in JOBS.values():
        for cls in (job.settings, job.result):
            if cls is not None:
                assert f"::: {cls.__module__}.{cls.__qualname__}\n" in page + "\n", (job.name, cls)
    for family in lmaudit.api.FAMILIES:
        assert f"::: {family}\n" in page
    entries = [line[4:] for line in page.splitlines() if line.startswith("::: ")]
    assert len(entries) == len(set(entries)) and all(_resolves(e) or importlib.import_module(e) for e in entries)
    assert "<!--" not in page  # every marker expanded


def test_a_job_declared_later_is_listed_without_editing_the_page(monkeypatch):
    class LateResult(RunResult):
        pass

    monkeypatch.setitem(JOBS, "late", Job("late", "late", "late", LateResult, print))
    page = _hooks().expand((DOCS / "reference.md").read_text())
    assert f"::: {LateResult.__module__}.{LateResult.__qualname__}" in page
