"""Load texts from JSONL, CSV or a folder of ``.txt`` files, validating at the edge.

Each record is either a plain text (``text``) or an instruction pair
(``prompt`` + ``response``). For a pair, the prompt is a visible, unscored context
and the response is the scored target (see DESIGN.md, "Core records").

Nothing is silently dropped or changed: an empty text, undecodable bytes, a
malformed line or a missing field is a :class:`~lmaudit.errors.DataError` whose
message names the file and the line (or row, or file in a folder).
"""

from __future__ import annotations

import csv
import io
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from lmaudit.errors import DataError
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

    def fingerprint(self) -> str:
        return stable_hash([(r.context, r.target) for r in self.records])

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
    rid = str(row.get("id", default_id))
    extra = {str(k): v for k, v in row.items() if k not in ("id", text_field, "prompt", "response") and isinstance(v, str)}
    if text_field in row:
        return Record(id=rid, target=_check_text(row[text_field], where=where, name=text_field), fields=extra)
    if "prompt" in row and "response" in row:
        prompt = row["prompt"]
        if not isinstance(prompt, str):
            raise DataError(f"{where}: field 'prompt' must be a string, got {type(prompt).__name__}")
        return Record(id=rid, context=prompt, target=_check_text(row["response"], where=where, name="response"),
                      fields=extra)
    raise DataError(
        f"{where}: missing field '{text_field}' (found: {', '.join(sorted(map(str, row))) or 'none'})",
        hint=f"each record needs '{text_field}', or 'prompt' and 'response'",
    )


def _load_jsonl(path: Path, text_field: str) -> list[Record]:
    content = _decode(path.read_bytes(), path)
    records = []
    for lineno, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}: line {lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        records.append(_record_from_mapping(row, where=where, default_id=f"{path.stem}:{lineno}", text_field=text_field))
    return records


def _load_csv(path: Path, text_field: str) -> list[Record]:
    content = _decode(path.read_bytes(), path)
    reader = csv.DictReader(io.StringIO(content, newline=""), delimiter="\t" if path.suffix == ".tsv" else ",")
    if reader.fieldnames is None:
        raise DataError(f"{path}: empty CSV file (no header row)")
    if text_field not in reader.fieldnames and not {"prompt", "response"} <= set(reader.fieldnames):
        raise DataError(
            f"{path}: missing column '{text_field}' (columns: {', '.join(reader.fieldnames)})",
            hint=f"name the text column '{text_field}'",
        )
    records = []
    try:
        for row in reader:
            where = f"{path}: line {reader.line_num}"
            if None in row:
                raise DataError(f"{where}: more fields than header columns")
            records.append(_record_from_mapping(row, where=where, default_id=f"{path.stem}:{reader.line_num}", text_field=text_field))
    except csv.Error as exc:
        raise DataError(f"{path}: line {reader.line_num}: malformed {path.suffix[1:].upper()} ({exc})") from None
    return records


def _load_folder(path: Path) -> list[Record]:
    files = sorted(p for p in path.iterdir() if p.suffix == ".txt" and p.is_file())
    if not files:
        raise DataError(f"{path}: folder has no .txt files")
    return [Record(id=f.stem, target=_check_text(_decode(f.read_bytes(), f), where=str(f), name="text")) for f in files]


def load_texts(path: str | Path, *, text_field: str = "text") -> TextSet:
    """Load a text set from a JSONL file, a CSV file or a folder of ``.txt`` files.

    Parameters
    ----------
    path
        ``*.jsonl`` (one JSON object per line), ``*.csv`` (header row), or a folder.
    text_field
        Name of the text field/column (default ``text``). Records may instead carry
        ``prompt`` and ``response``; the prompt then becomes unscored context.

    Raises
    ------
    DataError
        Naming the file and line for malformed input, a missing field, an empty text
        or undecodable bytes, and for an empty set or duplicate ids.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    if path.is_dir():
        records = _load_folder(path)
    elif path.suffix in (".jsonl", ".json", ".ndjson"):
        records = _load_jsonl(path, text_field)
    elif path.suffix in (".csv", ".tsv"):
        records = _load_csv(path, text_field)
    else:
        raise DataError(f"{path}: unsupported file type '{path.suffix}'", hint="use .jsonl, .csv or a folder of .txt files")
    if not records:
        raise DataError(f"{path}: no records found")
    seen: dict[str, int] = {}
    for i, r in enumerate(records):
        if r.id in seen:
            raise DataError(f"{path}: duplicate id '{r.id}' (records {seen[r.id] + 1} and {i + 1})")
        seen[r.id] = i
    return TextSet(records, source=str(path))


def check_overlap(members: TextSet, nonmembers: TextSet) -> int:
    """Warn (with the count) when the same text appears in both sets; return the count."""
    member_texts = {r.text for r in members.records}
    n = sum(1 for r in nonmembers.records if r.text in member_texts)
    if n:
        warnings.warn(
            f"{n} text(s) appear in both members ({members.source}) and non-members ({nonmembers.source}); "
            "they are kept and scored in both sets, which caps the achievable AUC",
            stacklevel=2,
        )
    return n
