"""Arrow-backed tables: Parquet files and folders written by ``datasets``' ``save_to_disk``.

Only pyarrow reads them (``datasets`` is not needed at run time). A ``save_to_disk``
folder holds ``state.json``, whose ``_data_files`` lists Arrow IPC *stream* files, and
``dataset_info.json``; a ``DatasetDict`` folder holds ``dataset_dict.json`` and one such
folder per split. A table is read one Parquet row group or one Arrow batch at a time,
so loading holds the records, not also the whole table. Unreadable input is a
:class:`~lmaudit.errors.DataError` naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lmaudit.errors import DataError

DATASETS_MARKERS = ("state.json", "dataset_info.json", "dataset_dict.json")


@dataclass
class Table:
    """The column names of a table at ``source`` (a file, or a split's folder) and its rows, batch by batch."""

    source: Path
    columns: list[str]
    batches: Iterator[pa.RecordBatch]

    def rows(self) -> Iterator[tuple[int, dict]]:
        """``(row number from 1, row as a dict)`` for every row, in order."""
        i = 0
        for batch in self.batches:
            for row in batch.to_pylist():
                i += 1
                yield i, row


def is_datasets_folder(path: Path) -> bool:
    """A folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk`` (not a folder of ``.txt`` files)."""
    return path.is_dir() and any((path / name).is_file() for name in DATASETS_MARKERS)


def _reason(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _guarded(path: Path, batches) -> Iterator[pa.RecordBatch]:
    """``batches``, with a read error on the way turned into a one-line DataError naming ``path``."""
    try:
        yield from batches
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: unreadable data ({_reason(exc)})") from None


def open_parquet(path: Path) -> Table:
    """A ``.parquet`` file, streamed by row group."""
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({_reason(exc)})") from None
    return Table(path, list(pf.schema_arrow.names), _guarded(path, pf.iter_batches()))


def _read_json(path: Path) -> object:
    if not path.is_file():
        raise DataError(f"{path}: missing (a datasets folder written by save_to_disk has one)")
    try:
        return json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise DataError(f"{path}: malformed JSON ({_reason(exc)})") from None


def _pick_split(path: Path, split: str | None) -> Path:
    """The folder of the chosen split of a ``DatasetDict`` folder (the only one when ``split`` is None)."""
    meta = _read_json(path / "dataset_dict.json")
    splits = meta.get("splits") if isinstance(meta, dict) else None
    if not isinstance(splits, list) or not splits or not all(isinstance(s, str) and Path(s).name == s for s in splits):
        raise DataError(f"{path / 'dataset_dict.json'}: field 'splits' must be a non-empty list of folder names")
    if split is None and len(splits) > 1:
        raise DataError(f"{path}: a datasets folder with splits {', '.join(splits)}; choose one with --split NAME")
    if split is not None and split not in splits:
        raise DataError(f"{path}: no split '{split}' (splits: {', '.join(splits)})")
    return path / (split or splits[0])


def _stream(path: Path) -> Iterator[pa.RecordBatch]:
    with pa.OSFile(str(path)) as src:
        yield from pa.ipc.open_stream(src)


def open_datasets_folder(path: Path, split: str | None = None) -> Table:
    """A ``save_to_disk`` folder; ``split`` picks a split of a ``DatasetDict`` folder (ignored for a single ``Dataset``).

    A ``DatasetDict`` with several splits needs ``split``; with one split, that split is read.
    """
    if (path / "dataset_dict.json").is_file():
        path = _pick_split(path, split)
    state = _read_json(path / "state.json")
    entries = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(entries, list) or not entries or not all(
            isinstance(e, dict) and isinstance(e.get("filename"), str) and Path(e["filename"]).name == e["filename"]
            for e in entries):
        raise DataError(f"{path / 'state.json'}: field '_data_files' must list the folder's .arrow files by name")
    files = [path / e["filename"] for e in entries]
    for f in files:
        if not f.is_file():
            raise DataError(f"{f}: missing (listed in {path / 'state.json'})")
    try:
        with pa.OSFile(str(files[0])) as src:
            columns = list(pa.ipc.open_stream(src).schema.names)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{files[0]}: not a readable Arrow stream file ({_reason(exc)})") from None
    return Table(path, columns, (batch for f in files for batch in _guarded(f, _stream(f))))
