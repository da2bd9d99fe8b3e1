"""Malformed and unusual input files for ``load_texts``.

Every problem is a :class:`~lmaudit.errors.DataError` whose message names the file
(and the line, where there is one); everything that loads comes back exactly as
written: nothing dropped, trimmed or re-encoded.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lmaudit.data.loaders import load_texts
from lmaudit.errors import DataError


def write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def data_error(path: Path, *needles: str, named: Path | None = None) -> str:
    """Load ``path``, expect a DataError naming ``named`` (default: ``path``) and every needle."""
    with pytest.raises(DataError) as info:
        load_texts(path)
    message = str(info.value)
    assert str(named or path) in message, message
    for needle in needles:
        assert needle in message, message
    return message


def to_csv(rows: list[dict], delimiter: str = ",") -> str:
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), delimiter=delimiter)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# JSONL
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line,needle", [
    ('{"text": "a"', "malformed JSON"),
    ("{text: 'a'}", "malformed JSON"),
    ('{"text": "a"} {"text": "b"}', "malformed JSON"),
    ('{"text": "a",}', "malformed JSON"),
    ("\ufeff{\"text\": \"a\"}", "malformed JSON"),  # a BOM in the middle of a file is not whitespace
    ('{"text": "a\x00b"}', "malformed JSON"),  # a raw NUL inside a JSON string
    ('{"text": "a", "n": ' + "1" * 5000 + "}", "unreadable JSON"),  # beyond Python's int conversion limit
    ('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('"text"', "expected a JSON object, got str"),
    ("3", "expected a JSON object, got int"),
    ("null", "expected a JSON object, got NoneType"),
    ("true", "expected a JSON object, got bool"),
    ('{"body": "x"}', "missing field 'text' (found: body)"),
    ('{"prompt": "x"}', "missing field 'text'"),
    ("{}", "found: none"),
    ('{"text": ""}', "empty or whitespace-only"),
    ('{"text": "  \\n\\t\\u3000 "}', "empty or whitespace-only"),
    ('{"text": 5}', "must be a string, got int"),
    ('{"text": null}', "must be a string, got NoneType"),
    ('{"text": ["a"]}', "must be a string, got list"),
    ('{"text": {"a": 1}}', "must be a string, got dict"),
    ('{"text": true}', "must be a string, got bool"),
    ('{"prompt": 5, "response": "x"}', "'prompt' must be a string"),
    ('{"prompt": "x", "response": null}', "'response' must be a string"),
    ('{"prompt": "x", "response": " "}', "'response' is empty"),
    ('{"id": null, "text": "a"}', "'id' must be a string or an integer, got NoneType"),
    ('{"id": [1], "text": "a"}', "'id' must be a string or an integer, got list"),
    ('{"id": 1.5, "text": "a"}', "'id' must be a string or an integer, got float"),
    ('{"id": true, "text": "a"}', "'id' must be a string or an integer, got bool"),
    ('{"text": "a\\ud800b"}', "unpaired surrogate"),
    ('{"prompt": "\\udfff", "response": "b"}', "unpaired surrogate"),
])
def test_bad_jsonl_line_names_file_and_line(tmp_path, line, needle):
    path = write(tmp_path / "data.jsonl", '{"text": "fine"}\n\n' + line + '\n{"text": "after"}\n')
    assert data_error(path, "line 3", needle)


@pytest.mark.parametrize("content", [b"", b"\n\n  \n", "\ufeff".encode()])
def test_empty_jsonl_is_a_clear_error(tmp_path, content):
    assert data_error(write(tmp_path / "empty.jsonl", content), "no records found")


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_jsonl_line_endings_and_bom(tmp_path, ending):
    texts = ["first", "second\r\nwith escaped CRLF", "third"]
    body = ending.join(json.dumps({"text": t}) for t in texts) + ending
    for bom in ("", "\ufeff"):
        loaded = load_texts(write(tmp_path / "data.jsonl", bom + body))
        assert loaded.texts == texts
        assert [r.id for r in loaded.records] == ["data:1", "data:2", "data:3"]  # ids count lines, not records


def test_jsonl_line_separators_inside_strings_are_kept(tmp_path):
    # JSON allows raw U+2028, U+2029 and U+0085 inside strings; they do not end a JSONL line
    texts = ["one\u2028two", "three\u2029four", "five\x85six", "seven\x0b\x0ceight"]
    rows = [json.dumps({"text": t}, ensure_ascii=False) for t in texts]
    path = write(tmp_path / "seps.jsonl", "\n".join(rows) + "\n")
    assert load_texts(path).texts == texts
    bad = write(tmp_path / "bad.jsonl", rows[0] + "\n{oops}\n")
    assert data_error(bad, "line 2")  # line numbers still count only real line breaks


def test_escaped_nul_in_jsonl_is_kept(tmp_path):
    path = write(tmp_path / "nul.jsonl", json.dumps({"text": "a\x00b"}) + "\n")
    assert load_texts(path).texts == ["a\x00b"]


def test_latin1_and_mixed_encodings_name_the_line(tmp_path):
    good = '{"text": "café ☕"}\n'.encode()
    path = write(tmp_path / "mixed.jsonl", good + good + '{"text": "café"}\n'.encode("latin-1") + good)
    assert data_error(path, "line 3", "not valid UTF-8")
    utf16 = write(tmp_path / "utf16.jsonl", '{"text": "a"}\n'.encode("utf-16"))
    assert data_error(utf16, "line 1", "not valid UTF-8")


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_bad_bytes_deep_in_a_streamed_file_name_their_line(tmp_path, suffix):
    # files are decoded as they are read: the error surfaces after many lines were already parsed
    row = (lambda i: json.dumps({"text": f"record {i} " + "x" * 200}) + "\n") if suffix == ".jsonl" else \
        (lambda i: f"record {i} {'x' * 200}\n")
    head = "text\n" if suffix == ".csv" else ""
    lines = head + "".join(row(i) for i in range(5000))
    bad = ('{"text": "caf\xe9"}\n' if suffix == ".jsonl" else "caf\xe9\n").encode("latin-1")
    path = write(tmp_path / f"big{suffix}", lines.encode() + bad + row(5000).encode())
    line = 5001 + (suffix == ".csv")
    assert data_error(path, f"line {line}", "not valid UTF-8")
    ok = write(tmp_path / f"ok{suffix}", (lines + row(5000)).encode())
    assert len(load_texts(ok)) == 5001


def test_jsonl_duplicate_ids(tmp_path):
    path = write(tmp_path / "dup.jsonl", '{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n'
                                         '{"id": "a", "text": "z"}\n')
    assert data_error(path, "duplicate id 'a'", "records 1 and 3")
    mixed = write(tmp_path / "dup2.jsonl", '{"id": 1, "text": "x"}\n{"id": "1", "text": "y"}\n')
    assert data_error(mixed, "duplicate id '1'")
    default = write(tmp_path / "dup3.jsonl", '{"text": "x"}\n{"id": "dup3:1", "text": "y"}\n')
    assert data_error(default, "duplicate id 'dup3:1'")  # an explicit id colliding with a line-number id


def test_jsonl_extra_string_fields_are_kept(tmp_path):
    path = write(tmp_path / "pii.jsonl", json.dumps({"id": 7, "text": "mail a@b.c", "email": "a@b.c", "n": 3}) + "\n")
    (record,) = load_texts(path).records
    assert record.id == "7" and record.fields == {"email": "a@b.c"}  # only string columns are kept


# ---------------------------------------------------------------------------------------------
# CSV and TSV
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix,sep", [(".csv", ","), (".tsv", "\t")])
@pytest.mark.parametrize("body,line,needle", [
    ("1{s}\n", "line 2", "empty or whitespace-only"),
    ("1{s}   \n", "line 2", "empty or whitespace-only"),
    ("1{s}a{s}extra\n", "line 2", "more fields than header columns"),
    ("1\n", "line 2", "fewer fields than header columns"),
    ('1{s}"unterminated\n2{s}b\n', "line 3", "malformed"),  # strict: never swallow the rest of the file
    ('1{s}"ab"cd\n', "line 2", "malformed"),
])
def test_bad_csv_row_names_file_and_line(tmp_path, suffix, sep, body, line, needle):
    path = write(tmp_path / f"data{suffix}", f"id{sep}text\n" + body.format(s=sep))
    assert data_error(path, line, needle)


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_empty_header_only_and_bad_header(tmp_path, suffix):
    assert data_error(write(tmp_path / f"empty{suffix}", b""), "no header row")
    sep = "\t" if suffix == ".tsv" else ","
    assert data_error(write(tmp_path / f"header{suffix}", f"id{sep}text\n"), "no records found")
    assert data_error(write(tmp_path / f"header2{suffix}", f"id{sep}text\r\n\r\n"), "no records found")
    assert data_error(write(tmp_path / f"nocol{suffix}", f"id{sep}body\n1{sep}x\n"), "missing column 'text'",
                      "columns: id, body")
    assert data_error(write(tmp_path / f"dupcol{suffix}", f"text{sep}text\na{sep}b\n"), "line 1",
                      "duplicate column(s) 'text'")
    assert data_error(write(tmp_path / f"badhead{suffix}", f'"id{sep}text\n1{sep}a\n'), "malformed", "header")


def test_csv_quoted_newlines_are_kept_and_later_lines_counted(tmp_path):
    rows = [{"id": "a", "text": "line one\nline two\r\nline three"}, {"id": "b", "text": 'quote " and, comma'}]
    path = write(tmp_path / "multi.csv", to_csv(rows))
    assert load_texts(path).texts == [r["text"] for r in rows]
    bad = write(tmp_path / "multi_bad.csv", 'id,text\na,"x\ny\nz"\nb,\n')
    assert data_error(bad, "line 5", "empty or whitespace-only")


def test_csv_bom_crlf_and_nul(tmp_path):
    path = write(tmp_path / "bom.csv", "\ufeffid,text\r\nx,hello\r\ny,a\x00b\r\n")
    loaded = load_texts(path)
    assert [r.id for r in loaded.records] == ["x", "y"]  # the BOM is not part of the first column's name
    assert loaded.texts == ["hello", "a\x00b"]


def test_csv_latin1_names_the_line(tmp_path):
    path = write(tmp_path / "latin.csv", b"id,text\n1,fine\n2,caf\xe9\n")
    assert data_error(path, "line 3", "not valid UTF-8")


def test_csv_duplicate_ids_and_extra_columns(tmp_path):
    path = write(tmp_path / "dup.csv", "id,text\n1,a\n2,b\n1,c\n")
    assert data_error(path, "duplicate id '1'")
    rows = [{"id": "r1", "text": "call 555", "phone": "555", "note": ""}]
    tsv = load_texts(write(tmp_path / "extra.tsv", to_csv(rows, delimiter="\t")))
    assert tsv.records[0].fields == {"phone": "555", "note": ""}


# ---------------------------------------------------------------------------------------------
# Folder of .txt files
# ---------------------------------------------------------------------------------------------


def test_folder_errors_name_the_file(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    assert data_error(folder, "no .txt files")
    write(folder / "a.txt", "fine")
    write(folder / "b.txt", " \n\t ")
    assert data_error(folder, "empty or whitespace-only", named=folder / "b.txt")
    write(folder / "b.txt", b"line one\ncaf\xe9\n")
    assert data_error(folder, "line 2", "not valid UTF-8", named=folder / "b.txt")


def test_folder_texts_are_kept_byte_for_byte(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    texts = {"a": "windows\r\nline endings\r\n", "b": "nul\x00byte", "c": "  leading and trailing space  \n"}
    for name, text in texts.items():
        write(folder / f"{name}.txt", text)
    write(folder / "d.txt", "\ufeffbom file")
    write(folder / "ignored.md", "")
    loaded = load_texts(folder)
    assert [r.id for r in loaded.records] == ["a", "b", "c", "d"]
    assert loaded.texts == [*texts.values(), "bom file"]


# ---------------------------------------------------------------------------------------------
# Long texts and round trips in every format
# ---------------------------------------------------------------------------------------------

LONG = ('ab,c"d\te\nf\r\ng\u2028h é 😀 \\ ' * 50_000)[:1_000_000]


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl-ascii", "csv", "tsv", "txt"])
def test_a_million_character_text_loads_intact(tmp_path, fmt):
    assert len(LONG) == 1_000_000
    rows = [{"id": "long", "text": LONG}, {"id": "short", "text": "x"}]
    if fmt.startswith("jsonl"):
        path = write(tmp_path / "long.jsonl",
                     "".join(json.dumps(r, ensure_ascii=fmt == "jsonl-ascii") + "\n" for r in rows))
    elif fmt in ("csv", "tsv"):
        path = write(tmp_path / f"long.{fmt}", to_csv(rows, delimiter="," if fmt == "csv" else "\t"))
    else:
        path = tmp_path / "folder"
        path.mkdir()
        for r in rows:
            write(path / f"{r['id']}.txt", r["text"])
    loaded = load_texts(path)
    assert {r.id: r.text for r in loaded.records} == {"long": LONG, "short": "x"}


AWKWARD = st.sampled_from(list('\u2028\u2029\x85\x0b\x0c\x1c\r\n\t",\x00\ufeff\\'))  # separators, quotes, NUL, BOM
# any character but a lone surrogate (UTF-8 cannot encode one: no file can hold it)
TEXTS = st.lists(st.text(st.one_of(st.characters(exclude_categories=("Cs",)), AWKWARD), min_size=1,
                         max_size=40).filter(lambda t: t.strip()),
                 min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=TEXTS, ascii_only=st.booleans())
@example(texts=["a\u2028b", "c\x85d", 'e"\r\nf', "\ufeffg\x00"], ascii_only=False)
def test_any_texts_round_trip_through_every_format(texts, ascii_only):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = [{"id": f"r{i}", "text": t, "extra": t[::-1]} for i, t in enumerate(texts)]
        jsonl = write(root / "t.jsonl", "".join(json.dumps(r, ensure_ascii=ascii_only) + "\n" for r in rows))
        paths = [jsonl, write(root / "t.csv", to_csv(rows)), write(root / "t.tsv", to_csv(rows, delimiter="\t"))]
        for path in paths:
            loaded = load_texts(path)
            assert loaded.texts == texts, path.suffix
            assert [r.id for r in loaded.records] == [r["id"] for r in rows]
            assert [r.fields for r in loaded.records] == [{"extra": r["extra"]} for r in rows]
        folder = root / "folder"
        folder.mkdir()
        kept = [t for t in texts if not t.startswith("\ufeff")]  # a leading U+FEFF is read as a byte-order mark
        for i, t in enumerate(kept):
            write(folder / f"{i:03d}.txt", t)
        if kept:
            assert load_texts(folder).texts == kept
