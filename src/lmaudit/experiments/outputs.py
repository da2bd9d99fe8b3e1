"""An experiment folder: ``results.json`` with the built tables and figures, the PNG files, and ``table.md``.

``results.json`` holds the record (configuration, command, provenance, the type's
payload) plus ``tables`` (``[{caption, header, rows}]``) and ``figures``
(``[{file, caption}]``, PNG files beside it), so that a report renders any experiment
from those keys alone; ``table.md`` is written from them, whatever the type.
:func:`rebuild_outputs` rebuilds the tables, figures and ``table.md`` of a folder from
its stored ``results.json`` (and array files) without running anything.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from lmaudit.errors import LmauditError
from lmaudit.experiments.registry import ExperimentType, get_experiment_type
from lmaudit.folders import output_folder, verify_folder
from lmaudit.report.build import write_report
from lmaudit.utils import write_json_atomic

BUILT = ("tables", "figures")  # the keys of results.json that are built from the others


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def markdown(record: dict) -> str:
    """``table.md`` of a record with built ``tables`` and ``figures``: heading, description, setting, tables, images."""
    exp = record["experiment"]
    seeds = ", ".join(map(str, exp["seeds"]))
    head = (f"# {exp['name']}\n\n{exp['description']}\n\n"
            f"Command: `{record['command']}` — run time {record['runtime_s'] / 60:.1f} min; seeds {seeds}; "
            + get_experiment_type(exp["type"]).setting(exp))
    parts = [head]
    for t in record["tables"]:
        parts += [t["caption"]] if t["caption"] else []
        parts.append(_md_table(t["header"], t["rows"]))
    parts += [f"![{f['caption']}]({f['file']})" for f in record["figures"]]
    return "\n\n".join(parts) + "\n"


def _array_file(folder: Path, key: str) -> Path:
    return folder / f"{key}.npz"


def _load_arrays(folder: Path, spec: ExperimentType) -> dict[str, dict[str, np.ndarray]]:
    """The type's array payload keys read back from their ``.npz`` files (keys without a file are left out)."""
    out = {}
    for key, prefix in spec.arrays.items():
        if _array_file(folder, key).exists():
            with np.load(_array_file(folder, key)) as z:
                out[key] = {name.removeprefix(prefix): z[name] for name in z.files}
    return out


def _write(folder: Path, record: dict, spec: ExperimentType, arrays: dict, *, report: bool, shown_as: Path) -> Path:
    """Build the tables and figures of ``record`` (with ``arrays`` beside it) and write the folder's files."""
    full = {**record, **arrays}
    tables = [{"caption": caption, "header": list(header), "rows": [list(map(str, r)) for r in rows]}
              for caption, header, rows in spec.tables(full)]
    figures = []
    for stem, caption, png in spec.figures(full):
        (folder / f"{stem}.png").write_bytes(png)
        figures.append({"file": f"{stem}.png", "caption": caption})
    record = {**record, "tables": tables, "figures": figures}
    write_json_atomic(folder / "results.json", record)
    (folder / "table.md").write_text(markdown(record), encoding="utf-8")
    if report:
        write_report(folder, shown_as=shown_as, verify=False)
    return folder


def write_outputs(folder: str | Path, record: dict, *, report: bool = False) -> Path:
    """Write a finished experiment's folder: array files, results.json (with tables and figures), PNGs, table.md.

    Parameters
    ----------
    folder : str or Path
        The experiment's folder (created if needed).
    record : dict
        ``experiment`` (the configuration, whose ``type`` names the experiment type), ``command``,
        provenance and the type's payload; the payload keys the type declares as ``arrays`` go to
        ``KEY.npz`` (float32) instead of ``results.json``.
    report : bool
        Also write ``report.html`` and ``report.md``.

    The folder is built beside its place and swapped in whole (:mod:`lmaudit.folders`).

    Returns
    -------
    Path
        The folder.
    """
    folder = Path(folder)
    spec = get_experiment_type(record["experiment"]["type"])
    record = {k: v for k, v in record.items() if k not in BUILT}
    with output_folder(folder, what="experiment") as tmp:
        for key, prefix in spec.arrays.items():
            values = record.pop(key, None)
            if values is not None:
                np.savez_compressed(_array_file(tmp, key),
                                    **{f"{prefix}{label}": np.asarray(v, dtype=np.float32)
                                       for label, v in values.items()})
        _write(tmp, record, spec, _load_arrays(tmp, spec), report=report, shown_as=folder)
    return folder


def rebuild_outputs(folder: str | Path, *, report: bool = False) -> Path:
    """Rebuild the tables, figures and ``table.md`` of an experiment folder from its ``results.json``; no re-run.

    Every stored value stays as it is; only ``tables`` and ``figures`` are (re)written,
    with the PNG files and ``table.md`` (and the report when ``report``); the folder is
    replaced whole. Raises :class:`LmauditError` for a folder that holds no
    experiment's ``results.json``, or whose array files do not match its manifest.
    """
    folder = Path(folder)
    path = folder / "results.json"
    if not path.exists():
        raise LmauditError(f"{folder}: no results.json", hint="pass a folder written by 'lmaudit run'")
    record = json.loads(path.read_text(encoding="utf-8"))
    if "experiment" not in record:
        raise LmauditError(f"{path}: not the results of an experiment (no 'experiment' key)",
                           hint="pass a folder written by 'lmaudit run'")
    verify_folder(folder, suffixes=(".npz",))  # the stored arrays; results.json is what is rebuilt
    spec = get_experiment_type(record["experiment"]["type"])
    record = {k: v for k, v in record.items() if k not in BUILT}
    arrays = _load_arrays(folder, spec)
    with output_folder(folder, what="experiment") as tmp:
        for key in spec.arrays:
            if _array_file(folder, key).exists():
                shutil.copy2(_array_file(folder, key), _array_file(tmp, key))
        _write(tmp, record, spec, arrays, report=report, shown_as=folder)
    return folder
