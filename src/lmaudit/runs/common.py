"""What every run shares: the provenance block of ``results.json`` and folder writing."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from lmaudit import __version__
from lmaudit.utils import atomic_path, git_commit, package_versions, write_json_atomic


def provenance() -> dict:
    """Version, commit, package versions and creation time: the first keys of every ``results.json``."""
    return {
        "lmaudit_version": __version__,
        "git_commit": git_commit(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "packages": package_versions(),
    }


def write_results(out: str | Path, payload: dict, *, tables: dict[str, pd.DataFrame] | None = None,
                  extra_json: dict[str, dict] | None = None) -> Path:
    """Write ``OUT/results.json`` (provenance first, then ``payload``) and the named tables.

    ``tables`` maps a file name (``*.parquet`` or ``*.csv``) to a frame; ``extra_json``
    a file name to a JSON object. Every file is written atomically. Returns the
    path of ``results.json``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in (tables or {}).items():
        with atomic_path(out / name) as tmp:
            if name.endswith(".parquet"):
                frame.to_parquet(tmp, index=False)
            else:
                frame.to_csv(tmp, index=False)
    for name, obj in (extra_json or {}).items():
        write_json_atomic(out / name, obj)
    write_json_atomic(out / "results.json", {**provenance(), **payload})
    return out / "results.json"


@dataclass
class RunResult:
    """A finished audit-set, extract or pii run: the ``results.json`` payload and how to write it.

    ``payload`` is the dict ``results.json`` holds (without the provenance block);
    index it directly (``result["methods"]``). ``write(folder)`` writes the run's
    files as the command does.
    """

    payload: dict
    writer: object = field(repr=False, default=None)  # (payload, folder) -> path of results.json

    def __getitem__(self, key: str):
        return self.payload[key]

    def write(self, out: str | Path) -> Path:
        return self.writer(self.payload, Path(out)) if self.writer else write_results(out, self.payload)
