"""What every run shares: the provenance block of ``results.json`` and folder writing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lmaudit.errors import LmauditError
from lmaudit.folders import output_folder, with_cache
from lmaudit.report.build import write_report
from lmaudit.report.dataset_inference import inference_summary
from lmaudit.report.records import redact
from lmaudit.report.summary import audit_summary, extraction_summary, pii_summary
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


SUMMARIES = {"set-audit": audit_summary, "extraction": extraction_summary, "pii-reconstruction": pii_summary,
             "dataset-inference": inference_summary}


@dataclass
class RunResult:
    """A finished audit-set, extract or pii run: the ``results.json`` payload and how to write it.

    ``payload`` is the dict ``results.json`` holds (without the provenance block);
    index it directly (``result["methods"]``). ``write(folder)`` writes the run's
    files as the command does.
    """

    payload: dict
    writer: object = field(repr=False, default=None)  # (payload, folder, report=) -> path of results.json
    source: Path | None = None  # the folder a result read back with lmaudit.load_results came from

    def __getitem__(self, key: str):
        return self.payload[key]

    @property
    def type(self) -> str:
        """``set-audit``, ``extraction`` or ``pii-reconstruction``."""
        return self.payload.get("type", "run")

    def to_frame(self) -> pd.DataFrame:
        """A set-level audit: one row per method (ρ, its 90% interval, the unclipped ρ); extraction and PII
        reconstruction: one row per record (as ``records.csv``)."""
        if self.type == "epsilon-lower-bound":
            return pd.DataFrame([{"attack": name, **bound} for name, bound in self.payload["attacks"].items()])
        if self.type == "dataset-inference":
            return pd.DataFrame([{"attack": name, **m} for name, m in self.payload["attacks"].items()])
        if "methods" in self.payload:
            return pd.DataFrame([{"method": name, "rho": est["rho"], "rho_low": est["ci90"][0],
                                  "rho_high": est["ci90"][1], "rho_unclipped": est.get("rho_unclipped")}
                                 for name, est in self.payload["methods"].items()])
        return pd.DataFrame(self.payload["records"])

    def __repr__(self) -> str:
        if self.type == "epsilon-lower-bound":
            name, best = max(self.payload["attacks"].items(), key=lambda kv: kv[1]["epsilon"])
            return (f"<RunResult epsilon-lower-bound: largest ε_lb {best['epsilon']:.3f} ({name}) at δ = "
                    f"{self.payload['delta']:g}, {self.payload['confidence']:g} confidence per attack>")
        summary = SUMMARIES.get(self.type)
        verdict = f" {summary(self.payload).headline}" if summary else ""
        return f"<RunResult {self.type}:{verdict}>"

    def write(self, out: str | Path, *, report: bool = False) -> Path:
        """Write the run's folder (as one unit); ``report`` adds ``report.html``/``report.md``."""
        if self.source is not None:
            raise LmauditError(f"this result was read from {self.source}: its folder is what the run wrote",
                               hint="copy that folder instead of writing the result again")
        if self.writer:
            return self.writer(self.payload, Path(out), report=report)
        return write_results(out, self.payload, kind=self.type, report=report)
