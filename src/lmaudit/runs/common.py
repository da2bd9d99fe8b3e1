"""What every run shares: the provenance block of ``results.json`` and folder writing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lmaudit.errors import LmauditError
from lmaudit.folders import output_folder, with_cache
from lmaudit.report.build import read_results, write_report
from lmaudit.report.document import notebook_html
from lmaudit.report.kinds import register_report
from lmaudit.report.records import redact
from lmaudit.utils import provenance, write_json_atomic

PROVENANCE_KEYS = ("lmaudit_version", "git_commit", "git_dirty", "created", "packages")


def payload_inputs(payload: dict) -> dict:
    """The model folders a run's payload names (target or model, reference): its output folder must be none."""
    found = {}
    for key in ("target", "model", "reference"):
        value = payload.get(key)
        path = value.get("path") if isinstance(value, dict) else value
        if isinstance(path, (str, Path)) and Path(path).exists():
            found[f"the {key} model"] = path
    return found


def shown_ids(records: dict, show_pii: bool) -> dict:
    """``records`` (columns, ``id`` among them) with ids that look like e-mail addresses or phone numbers masked as
    texts are (:func:`~lmaudit.report.records.redact`), unless ``show_pii``."""
    return records if show_pii else {**records, "id": [redact(str(i)) for i in records["id"]]}


def write_results(out: str | Path, payload: dict, *, kind: str, tables: dict[str, pd.DataFrame] | None = None,
                  extra_json: dict[str, dict] | None = None, files: Callable[[Path], None] | None = None,
                  report: bool = False) -> Path:
    """Write the folder ``out`` as one unit: ``results.json`` (provenance first, then ``payload``) and the rest.

    ``kind`` is what the manifest records the folder as (``mia``, ``audit-set``, ``extract``,
    ``pii``, ``demo``): a folder of another kind is never replaced, nor one of the models the
    payload names. ``tables`` maps a file name (``*.parquet`` or ``*.csv``) to a frame;
    ``extra_json`` a file name to a JSON object; ``files(folder)`` writes any other file into
    the folder being built; ``report`` adds ``report.html``/``report.md``. The folder is built
    beside ``out`` and swapped into place whole (:mod:`lmaudit.folders`), so it never mixes
    files of two runs. Returns the path of ``results.json``.
    """
    out = Path(out)
    with output_folder(out, what=kind, inputs=with_cache(payload_inputs(payload))) as tmp:
        for name, frame in (tables or {}).items():
            if name.endswith(".parquet"):
                frame.to_parquet(tmp / name, index=False)
            else:
                frame.to_csv(tmp / name, index=False)
        for name, obj in (extra_json or {}).items():
            write_json_atomic(tmp / name, obj)
        if files is not None:
            files(tmp)
        write_json_atomic(tmp / "results.json", {**provenance(), **payload})
        if report:
            write_report(tmp, shown_as=out, verify=False)
    return out / "results.json"


@dataclass(frozen=True)
class Job:
    """A job of :mod:`lmaudit.api`, declared once beside its body: ``name`` (the interface function), ``type`` (what
    ``results.json``'s ``type`` and the folder's manifest say it wrote), ``command``, its ``result`` type (which
    writes, reads back, tabulates and describes itself), its ``body`` (the function the interface function runs, and
    nothing above the interface calls), its ``settings`` type and ``report`` (the builder of its report, or None).
    ``also`` names other types its results are written under (the demo writes a membership run as ``demo``). The
    folder kinds, :func:`lmaudit.load_results` and the report lookup derive from it."""

    name: str
    type: str
    command: str
    result: type
    body: Callable
    settings: type | None = None
    report: Callable | None = None
    also: tuple[str, ...] = ()

    @property
    def types(self) -> tuple[str, ...]:
        """Every type its results are written under, its own first."""
        return (self.type, *self.also)


JOBS: dict[str, Job] = {}  # name -> job


def register_job(job: Job) -> Job:
    """Declare ``job`` (once): its report builder is then found by the types of its results."""
    if JOBS.get(job.name, job) != job:
        raise LmauditError(f"job '{job.name}' is declared twice")
    if not callable(job.body):
        raise LmauditError(f"job '{job.name}' names no body: declare the function its interface function runs")
    JOBS[job.name] = job
    if job.report is not None:
        for written in job.types:
            register_report(written)(job.report)
    return job


def job_of_type(written: str | None) -> Job | None:
    """The job whose results are of type ``written`` (the first declared when several write one), or None."""
    return next((job for job in JOBS.values() if written in job.types), None)


def _cell(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@dataclass(repr=False)
class RunResult:
    """A finished run: the ``results.json`` payload, what the job returns and :func:`lmaudit.load_results` reads back.

    ``payload`` is the dict ``results.json`` holds (without the provenance block); index it directly
    (``result["methods"]``). ``write(folder)`` writes the run's files as the command does. Each job's result type
    (a subclass, declared with its :class:`Job`) says how it tabulates, describes and writes itself.
    """

    payload: dict
    source: Path | None = None  # the folder a result read back with lmaudit.load_results came from

    def __getitem__(self, key: str):
        return self.payload[key]

    def __contains__(self, key: str) -> bool:
        return key in self.payload

    @property
    def type(self) -> str:
        """What ``results.json`` says the run is (its job's kind)."""
        return self.payload.get("type", "run")

    def to_frame(self) -> pd.DataFrame:
        """One row per record (as ``records.csv``)."""
        return pd.DataFrame(self.payload["records"])

    def headline(self) -> str:
        """One sentence: what the run found."""
        return ""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.type}: {self.headline()}>".replace(": >", ">")

    def _repr_html_(self) -> str:
        """A notebook shows the headline and the table ``to_frame()`` gives."""
        try:
            frame = self.to_frame()
        except (KeyError, ValueError, TypeError):  # a payload without per-record rows: the headline alone
            frame = None
        table = None if frame is None or frame.empty else (
            [str(c) for c in frame.columns], [[_cell(v) for v in row] for row in frame.itertuples(index=False)])
        return notebook_html(f"{type(self).__name__} ({self.type})", [self.headline()], table)

    def _write(self, out: Path, report: bool) -> Path:
        return write_results(out, self.payload, kind=self.type, report=report)

    def write(self, out: str | Path, *, report: bool = False) -> Path:
        """Write the run's folder (as one unit); ``report`` adds ``report.html``/``report.md``."""
        if self.source is not None:
            raise LmauditError(f"this result was read from {self.source}: its folder is what the run wrote",
                               hint="copy that folder instead of writing the result again")
        return self._write(Path(out), report)

    @classmethod
    def load(cls, folder: str | Path) -> "RunResult":
        """The result a run wrote to ``folder``: its payload (``results.json``) and ``records.csv``."""
        folder = Path(folder)
        payload = {k: v for k, v in read_results(folder / "results.json").items() if k not in PROVENANCE_KEYS}
        if (folder / "records.csv").is_file():
            payload["records"] = pd.read_csv(folder / "records.csv").to_dict("list")
        return cls(payload, source=folder)
