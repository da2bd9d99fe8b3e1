"""Load texts from JSONL, CSV, Parquet, ``datasets`` folders or a folder of ``.txt`` files, validating at the edge.

Each record is either a plain text (``text``) or an instruction pair
(``prompt`` + ``response``). For a pair, the prompt is a visible, unscored context
and the response is the scored target (see DESIGN.md, "Core records").

Files are read as a stream (line by line, or Parquet row group / Arrow batch by batch),
so loading a large file holds its records, not also its raw bytes and a decoded copy.
Nothing is silently dropped or changed: an empty text, undecodable bytes, a
malformed line or a missing field is a :class:`~lmaudit.errors.DataError` whose
message names the file and the line (or row, or file in a folder).
"""

from __future__ import annotations

import csv
import json
import reprlib
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lmaudit.data.tables import DATASETS_MARKERS, check_columns, datasets_table, parquet_table, table_rows
from lmaudit.errors import DataError, SettingError, warn
from lmaudit.utils import stable_hash


@dataclass(frozen=True)
class Record:
    """One sample: ``target`` is scored; ``context`` (may be empty) stays visible and unscored."""

    id: str
    target: str
    context: str = ""
    # Other string columns of the row (e.g. the true value of a PII field), kept as given.
    fields: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def text(self) -> str:
        return self.context + self.target


@dataclass
class TextSet:
    """An ordered list of records loaded from ``source``."""

    records: list[Record]
    source: str = "<memory>"
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.records)

    @property
    def texts(self) -> list[str]:
        return [r.text for r in self.records]

    @property
    def has_context(self) -> bool:
        return any(r.context for r in self.records)

    @property
    def form(self) -> str:
        """``pairs`` (every record a prompt and a response), ``plain`` (no record has a prompt) or ``mixed``."""
        prompts = sum(bool(r.context) for r in self.records)
        return "pairs" if prompts and prompts == len(self.records) else ("mixed" if prompts else "plain")

    def fingerprint(self) -> str:
        return stable_hash([(r.context, r.target) for r in self.records])

    def describe(self) -> str:
        """The source, with the record range when this set is a shard of a larger one."""
        start = self.meta.get("shard_start")
        if start is None:
            return self.source
        return f"{self.source} (records {start + 1}–{start + len(self.records)})"

    @classmethod
    def from_texts(cls, texts: list[str], *, prefix: str = "s", source: str = "<memory>") -> "TextSet":
        records = []
        for i, t in enumerate(texts):
            _check_text(t, where=f"{source}: item {i}", name="text")
            records.append(Record(id=f"{prefix}{i}", target=t))
        return cls(records, source=source)


def _check_text(value: object, *, where: str, name: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: field '{name}' must be a string, got {type(value).__name__}")
    if not value.strip():
        raise DataError(
            f"{where}: field '{name}' is empty or whitespace-only",
            hint="remove the record or give it text; lmaudit does not drop records silently",
        )
    return _check_unicode(value, where=where, name=name)


def _check_unicode(value: str, *, where: str, name: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate, e.g. a JSON escape "\ud800" without its pair
        raise DataError(f"{where}: field '{name}' holds an unpaired surrogate {value[exc.start]!r} at character "
                        f"{exc.start}, which is not valid Unicode") from None
    return value


def _decode(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(
            f"{path}: line {line}: bytes at offset {exc.start} are not valid UTF-8",
            hint="re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None


def _record_from_mapping(row: dict, *, where: str, default_id: str, text_field: str) -> Record:
    rid = row.get("id", default_id)
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise DataError(f"{where}: field 'id' must be a string or an integer, got {type(rid).__name__}")
    rid = str(rid)
    extra = {str(k): v for k, v in row.items()
             if k not in ("id", text_field, "prompt", "response") and isinstance(v, str)}
    if text_field in row:
        return Record(id=rid, target=_check_text(row[text_field], where=where, name=text_field), fields=extra)
    if "prompt" in row and "response" in row:
        prompt = row["prompt"]
        if not isinstance(prompt, str):
            raise DataError(f"{where}: field 'prompt' must be a string, got {type(prompt).__name__}")
        _check_unicode(prompt, where=where, name="prompt")
        return Record(id=rid, context=prompt, target=_check_text(row["response"], where=where, name="response"),
                      fields=extra)
    raise DataError(
        f"{where}: missing field '{text_field}' (found: {', '.join(sorted(map(str, row))) or 'none'})",
        hint=f"each record needs '{text_field}', or 'prompt' and 'response'",
    )


@contextmanager
def _open_text(path: Path, newline: str | None):
    """The file as UTF-8 text, read as it is consumed (never whole in memory).

    Undecodable bytes are reported with their line number (found by re-reading the raw file).
    """
    try:
        with open(path, encoding="utf-8-sig", newline=newline) as fh:
            yield fh
    except UnicodeDecodeError:
        _decode(path.read_bytes(), path)  # raises a DataError naming the line
        raise


def _jsonl_rows(path: Path) -> Iterator[tuple[str, str, dict]]:
    """``(where, default id, row)`` for every non-blank line of a JSONL file."""
    # newline=None: only \n, \r\n and \r end a line (str.splitlines() would also split at U+2028, U+0085, ...)
    with _open_text(path, newline=None) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}: line {lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None
            except (ValueError, RecursionError) as exc:  # e.g. an integer of > 4300 digits, or nesting too deep
                reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(":")[0]
                raise DataError(f"{where}: unreadable JSON ({reason})") from None
            if not isinstance(row, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
            yield where, f"{path.stem}:{lineno}", row


def _csv_rows(path: Path, text_field: str, label_field: str | None) -> Iterator[tuple[str, str, dict]]:
    """``(where, default id, row)`` for every row of a CSV (or, by suffix, TSV) file."""
    limit = csv.field_size_limit()
    # a long text is one field: never cut it at the default 128 KiB
    csv.field_size_limit(max(limit, path.stat().st_size))
    try:
        with _open_text(path, newline="") as fh:
            yield from _read_csv(path, fh, text_field, label_field)
    finally:
        csv.field_size_limit(limit)


def _read_csv(path: Path, fh, text_field: str, label_field: str | None) -> Iterator[tuple[str, str, dict]]:
    kind = path.suffix[1:].upper()
    # strict: an unclosed quote is an error, not a field that swallows the rest of the file
    reader = csv.DictReader(fh, delimiter="\t" if path.suffix == ".tsv" else ",", strict=True)
    try:
        fieldnames = reader.fieldnames
    except csv.Error as exc:
        raise DataError(f"{path}: line {reader.reader.line_num}: malformed {kind} header ({exc})") from None
    if fieldnames is None:
        raise DataError(f"{path}: empty {kind} file (no header row)")
    dupes = sorted({c for c in fieldnames if fieldnames.count(c) > 1})
    if dupes:
        raise DataError(f"{path}: line 1: duplicate column(s) {', '.join(map(repr, dupes))} in the header")
    check_columns(path, fieldnames, text_field, label_field)
    try:
        for row in reader:
            where = f"{path}: line {reader.line_num}"
            if None in row:
                raise DataError(f"{where}: more fields than header columns")
            if None in row.values():
                raise DataError(f"{where}: fewer fields than header columns")
            yield where, f"{path.stem}:{reader.line_num}", row
    except csv.Error as exc:  # DictReader.line_num is the previous row's; the inner reader counts what it consumed
        raise DataError(f"{path}: line {reader.reader.line_num}: malformed {kind} ({exc})") from None


# Arrow-backed tables, read with pyarrow alone (``datasets`` is not needed at run time). A folder written by
# ``Dataset.save_to_disk`` holds state.json, whose _data_files lists Arrow IPC *stream* files; one written by
# ``DatasetDict.save_to_disk`` holds dataset_dict.json and one such folder per split. A table is
# (source, column names, record batches), read one Parquet row group or one Arrow batch at a time.
def _skip_reason(p: Path) -> str | None:
    """Why a folder entry is not read as a text (None: it is read). ``.txt`` in any case counts."""
    if p.suffix.lower() != ".txt":
        return "a folder" if p.is_dir() else "not a .txt file"
    if p.is_symlink() and not p.exists():  # exists() follows the link: False for a dangling or looping one
        return "a broken or looping link"
    if not p.is_file():
        return "not a regular file"
    return None


def _load_folder(path: Path) -> list[Record]:
    """Every ``*.txt`` file of the folder (the suffix in any case); every other entry is reported, never dropped
    silently."""
    files, skipped = [], []
    for p in sorted(path.iterdir()):
        reason = _skip_reason(p)
        if reason is None:
            files.append(p)
        else:
            skipped.append(f"{p.name} ({reason})")
    if skipped:
        more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        warn(f"{path}: skipped {len(skipped)} entr{'y' if len(skipped) == 1 else 'ies'} that are not .txt "
                      f"files: {', '.join(skipped[:5])}{more}")
    if not files:
        raise DataError(f"{path}: folder has no .txt files")
    return [Record(id=f.stem, target=_check_text(_decode(f.read_bytes(), f), where=str(f), name="text")) for f in files]


def _label(value: object, *, where: str, name: str) -> int:
    """A membership label: 1 (member) or 0 (non-member), given as an integer, a boolean or the string "1"/"0"."""
    if (isinstance(value, int) and value in (0, 1)) or value in ("0", "1"):
        return int(value)
    raise DataError(f"{where}: field '{name}' must be 0 or 1 (or true/false), got {reprlib.repr(value)}")


def _rows(path: Path, text_field: str, label_field: str | None, split: str | None) -> Iterator[tuple[str, str, dict]]:
    if path.is_dir():
        return table_rows(datasets_table(path, split), text_field, label_field)
    if path.suffix in (".jsonl", ".json", ".ndjson"):
        return _jsonl_rows(path)
    if path.suffix in (".csv", ".tsv"):
        return _csv_rows(path, text_field, label_field)
    if path.suffix == ".parquet":
        return table_rows(parquet_table(path), text_field, label_field)
    raise DataError(f"{path}: unsupported file type '{path.suffix}'",
                    hint="use .jsonl, .csv, .parquet, a datasets save_to_disk folder or a folder of .txt files")


def _load(path: Path, text_field: str, split: str | None,
          label_field: str | None = None) -> tuple[list[Record], list[int]]:
    """The records of ``path`` and (with ``label_field``) their labels, checked for emptiness and duplicate ids."""
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    if not path.is_dir() and not path.is_file():  # reading a FIFO with no writer would wait for ever
        raise DataError(f"{path}: not a regular file or folder (a named pipe, socket or device)",
                        hint="write the texts to a file first and pass that file")
    records, labels = [], []
    if path.is_dir() and not any((path / name).is_file() for name in DATASETS_MARKERS):
        if label_field is not None:
            raise DataError(f"{path}: a folder of .txt files has no field '{label_field}'",
                            hint="give a labelled JSONL, CSV or Parquet file, or a datasets folder")
        records = _load_folder(path)
    else:
        with closing(_rows(path, text_field, label_field, split)) as rows:
            for where, default_id, row in rows:
                if label_field is not None:
                    if label_field not in row:
                        raise DataError(f"{where}: missing field '{label_field}' "
                                        f"(found: {', '.join(sorted(map(str, row))) or 'none'})")
                    labels.append(_label(row.pop(label_field), where=where, name=label_field))
                records.append(_record_from_mapping(row, where=where, default_id=default_id, text_field=text_field))
    if not records:
        raise DataError(f"{path}: no records found")
    seen: dict[str, int] = {}
    for i, r in enumerate(records):
        if r.id in seen:
            raise DataError(f"{path}: duplicate id '{r.id}' (records {seen[r.id] + 1} and {i + 1})")
        seen[r.id] = i
    return records, labels


def load_texts(path: str | Path, *, text_field: str = "text", split: str | None = None) -> TextSet:
    """Load a text set from a JSONL, CSV or Parquet file, a ``datasets`` folder or a folder of ``.txt`` files.

    Parameters
    ----------
    path
        ``*.jsonl`` (one JSON object per line), ``*.csv`` / ``*.tsv`` (header row),
        ``*.parquet``, a folder written by ``Dataset.save_to_disk`` or
        ``DatasetDict.save_to_disk`` (read with pyarrow alone), or a folder of ``.txt`` files.
    text_field
        Name of the text field/column (default ``text``). Records may instead carry
        ``prompt`` and ``response``; the prompt then becomes unscored context. An ``id``
        field gives the record's id; otherwise it is ``STEM:LINE`` (``STEM:ROW`` for
        Parquet and datasets folders, rows numbered from 1).
    split
        The split of a ``DatasetDict`` folder; required when it has several, ignored
        by every other input.

    Raises
    ------
    DataError
        Naming the file and line (or row) for malformed input, a missing field, an empty
        text or undecodable bytes, and for an empty set or duplicate ids.
    """
    path = Path(path)
    return TextSet(_load(path, text_field, split)[0], source=str(path))


def load_labelled(path: str | Path, *, label_field: str, text_field: str = "text",
                  split: str | None = None) -> tuple[TextSet, TextSet]:
    """Members and non-members from one labelled file, as WikiMIA and MIMIR ship them.

    Rows whose ``label_field`` is 1 (``true``, ``"1"``) are members, 0 (``false``,
    ``"0"``) non-members, each set in file order; the label is not kept among the
    record's fields. Every format and option of :func:`load_texts` except a folder of
    ``.txt`` files (which has no labels).

    Raises
    ------
    DataError
        As :func:`load_texts`; also for a missing label, a label other than 0/1 (naming
        the first such line or row) and a file holding only one of the two classes.
    """
    path = Path(path)
    records, labels = _load(path, text_field, split, label_field)
    members, nonmembers = (TextSet([r for r, y in zip(records, labels) if y == label],
                                   source=f"{path} [{label_field}={label}]")
                           for label in (1, 0))
    if not members or not nonmembers:
        raise DataError(f"{path}: field '{label_field}' is {1 if members else 0} in all {len(records)} rows "
                        "(one class only)",
                        hint="membership inference needs members (1) and non-members (0)")
    return members, nonmembers


def load_member_sets(members, nonmembers, *, data=None, label_field: str | None = None, text_field: str = "text",
                     split: str | None = None) -> tuple[TextSet, TextSet]:
    """Members and non-members: two files (or text sets), or one labelled ``data`` file with ``label_field``.

    A wrong combination is a :class:`~lmaudit.errors.SettingError` that names the arguments as Python spells them
    (``members=``) and, on the command line, as options (``--members``).
    """
    names = ("members", "nonmembers", "data", "label_field")
    pair = "give {members} and {nonmembers}, or one labelled file with {data} FILE {label_field} NAME"
    if data is not None and (members is not None or nonmembers is not None):
        raise SettingError("data", "{data} and {members}/{nonmembers} are mutually exclusive", hint=pair, also=names)
    if data is not None:
        if label_field is None:
            raise SettingError("data", "{data} needs {label_field} (the column that is 1 for members, 0 for "
                                       "non-members)", also=names)
        return load_labelled(data, label_field=label_field, text_field=text_field, split=split)
    if label_field is not None:
        raise SettingError("label_field", "{label_field} applies to {data} only", hint=pair, also=names)
    if members is None or nonmembers is None:
        missing = "members" if members is None else "nonmembers"
        raise SettingError(missing, "missing option {" + missing + "}", hint=pair, also=names)
    return tuple(s if isinstance(s, TextSet) else load_texts(s, text_field=text_field, split=split)
                 for s in (members, nonmembers))
