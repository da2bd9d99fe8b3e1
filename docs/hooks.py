"""The reference page's job sections, written from the job registry when the site is built (a mkdocs hook): the
interface's job families, and each job's settings and result types, so a new job is documented by declaring it."""

from __future__ import annotations

MARKERS = {"<!-- job families -->": "families", "<!-- job settings -->": "settings", "<!-- job results -->": "results"}


def job_entries() -> dict[str, list[str]]:
    """The dotted paths of the job families' modules, and of every declared job's settings and result types (each
    once, in the order the jobs are declared)."""
    import lmaudit.api as api
    from lmaudit.runs.common import JOBS

    api.load_jobs()
    entries: dict[str, list[str]] = {"families": list(api.FAMILIES), "settings": [], "results": []}
    for job in JOBS.values():
        for part, cls in (("settings", job.settings), ("results", job.result)):
            if cls is not None and (path := f"{cls.__module__}.{cls.__qualname__}") not in entries[part]:
                entries[part].append(path)
    return entries


def expand(markdown: str) -> str:
    """``markdown`` with each marker replaced by one mkdocstrings entry (``::: PATH``) per path of its part."""
    if not any(marker in markdown for marker in MARKERS):
        return markdown
    entries = job_entries()
    for marker, part in MARKERS.items():
        markdown = markdown.replace(marker, "\n\n".join(f"::: {path}" for path in entries[part]))
    return markdown


def on_page_markdown(markdown: str, page, config, files) -> str:  # the mkdocs hook
    return expand(markdown)
