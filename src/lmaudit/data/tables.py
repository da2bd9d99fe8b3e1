"""Tables as text sets: Parquet files and Hugging Face ``datasets`` folders, read with pyarrow alone.

Both give ``(path, columns, batches)`` (:func:`parquet_table`, :func:`datasets_table`),
and :func:`table_rows` turns them into the ``(where, default id, row)`` triples the
loaders (:mod:`lmaudit.data.loaders`) make records of. A ``datasets`` folder is one
written by ``save_to_disk``: its Arrow stream files are listed in ``state.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lmaudit.errors import DataError


def check_columns(path: Path, columns: list[str], text_field: str, label_field: str | None) -> None:
    """A table (CSV, Parquet, datasets folder) must have the text column (or prompt and response) and the label
    column."""
    listed = ", ".join(columns) or "none"
    if text_field not in columns and not {"prompt", "response"} <= set(columns):
        raise DataError(f"{path}: missing column '{text_field}' (columns: {listed})",
                        hint="choose the text column with --text-field, or give 'prompt' and 'response' columns")
    if label_field is not None and label_field not in columns:
        raise DataError(f"{path}: missing column '{label_field}' (columns: {listed})",
                        hint="choose the label column with --label-field")


DATASETS_MARKERS = ("state.json", "dataset_info.json", "dataset_dict.json")


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _guarded(path: Path, batches) -> Iterator[pa.RecordBatch]:
    """``batches``, with a read error on the way turned into a one-line DataError naming ``path``."""
    try:
        yield from batches
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: unreadable data ({_reason(exc)})") from None


def parquet_table(path: Path) -> tuple[Path, list[str], Iterator[pa.RecordBatch]]:
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({_reason(exc)})") from None
    return path, list(pf.schema_arrow.names), _guarded(path, pf.iter_batches())


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


def _arrow_stream(path: Path) -> Iterator[pa.RecordBatch]:
    with pa.OSFile(str(path)) as src:
        yield from pa.ipc.open_stream(src)


def datasets_table(path: Path, split: str | None) -> tuple[Path, list[str], Iterator[pa.RecordBatch]]:
    """A ``save_to_disk`` folder; ``split`` picks a split of a ``DatasetDict`` (ignored for a single ``Dataset``)."""
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
    return path, columns, (batch for f in files for batch in _guarded(f, _arrow_stream(f)))


def table_rows(table: tuple, text_field: str, label_field: str | None) -> Iterator[tuple[str, str, dict]]:
    """``(where, default id, row)`` for every row of a Parquet file or datasets folder (rows numbered from 1)."""
    source, columns, batches = table
    check_columns(source, columns, text_field, label_field)
    stem = source.name if source.is_dir() else source.stem
    i = 0
    for batch in batches:
        for row in batch.to_pylist():
            i += 1
            yield f"{source}: row {i}", f"{stem}:{i}", row
