import json

import pytest

from lmaudit.data.loaders import TextSet, load_texts
from lmaudit.data.overlap import check_sets, normal_form
from lmaudit.errors import DataError


def write(path, content, mode="w"):
    with open(path, mode) as fh:
        fh.write(content)
    return path


def test_jsonl_csv_and_folder_load_the_same_texts(tmp_path):
    texts = ["first text, with a comma", "second text\nover two lines", 'third "quoted"']
    jl = write(tmp_path / "a.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))
    import csv

    with open(tmp_path / "a.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text"])
        for i, t in enumerate(texts):
            w.writerow([f"r{i}", t])
    folder = tmp_path / "txt"
    folder.mkdir()
    for i, t in enumerate(texts):
        write(folder / f"{i}.txt", t)
    for src in (jl, tmp_path / "a.csv", folder):
        assert load_texts(src).texts == texts
    assert load_texts(tmp_path / "a.csv").records[1].id == "r1"


def test_prompt_response_records_become_context_and_target(tmp_path):
    p = write(tmp_path / "i.jsonl", json.dumps({"prompt": "Q: what? ", "response": "an answer"}) + "\n")
    rec = load_texts(p).records[0]
    assert (rec.context, rec.target, rec.text) == ("Q: what? ", "an answer", "Q: what? an answer")


@pytest.mark.parametrize(
    "content, needle",
    [
        ('{"text": "ok"}\n{"text": "   "}\n', "line 2: field 'text' is empty"),
        ('{"text": "ok"}\n{"text": "bad\n', "line 2: malformed JSON"),
        ('{"text": "ok"}\n{"body": "x"}\n', "line 2: missing field 'text'"),
        ('{"text": 3}\n', "line 1: field 'text' must be a string"),
        ('["a list"]\n', "line 1: expected a JSON object"),
    ],
)
def test_bad_jsonl_names_file_and_line(tmp_path, content, needle):
    p = write(tmp_path / "bad.jsonl", content)
    with pytest.raises(DataError) as err:
        load_texts(p)
    assert needle in str(err.value) and "bad.jsonl" in str(err.value)


def test_undecodable_bytes_name_line(tmp_path):
    p = write(tmp_path / "latin.jsonl", b'{"text": "fine"}\n{"text": "caf\xe9"}\n', mode="wb")
    with pytest.raises(DataError, match=r"latin.jsonl: line 2: .*not valid UTF-8"):
        load_texts(p)


def test_csv_without_text_column_and_empty_cell(tmp_path):
    with pytest.raises(DataError, match="missing column 'text'"):
        load_texts(write(tmp_path / "a.csv", "body\nx\n"))
    with pytest.raises(DataError, match=r"b.csv: line 3: field 'text' is empty"):
        load_texts(write(tmp_path / "b.csv", "text\nhello\n\" \"\n"))


def test_missing_path_and_unknown_suffix(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_texts(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="unsupported file type"):
        load_texts(write(tmp_path / "x.xml", "<a/>"))


def test_duplicate_ids_rejected(tmp_path):
    p = write(tmp_path / "d.jsonl", '{"id": "a", "text": "x y"}\n{"id": "a", "text": "z w"}\n')
    with pytest.raises(DataError, match="duplicate id 'a'"):
        load_texts(p)


def test_overlap_between_members_and_nonmembers_is_counted_and_beyond_a_small_share_refused():
    m = TextSet.from_texts([f"text number {i}" for i in range(40)])
    n = TextSet.from_texts(["text number 3", "text  number\t4 "] + [f"other text {i}" for i in range(38)])
    with pytest.warns(UserWarning, match="2 text.*1 of them only after"):
        report = check_sets({"m": m, "n": n}, [("m", "n")], allow_overlap=True)
    assert report["pairs"]["m/n"]["exact"] == 1 and report["pairs"]["m/n"]["normalised"] == 2
    assert report["pairs"]["m/n"]["share"] == 2 / 40
    one = TextSet.from_texts(["text number 0"] + [f"other text {i}" for i in range(19)])
    with pytest.warns(UserWarning, match="1 text"):  # 1 of 20 = 5%: not more than the small share
        check_sets({"m": m, "n": one}, [("m", "n")])
    with pytest.raises(DataError, match="19 text.*95.0% of the smaller set"):
        check_sets({"m": m, "n": TextSet.from_texts([f"text number {i}" for i in range(19)] + ["x"])}, [("m", "n")])


def test_the_normal_form_composes_and_collapses_whitespace_but_keeps_case():
    assert normal_form("Cafe\u0301  au\tlait\n") == "Caf\u00e9 au lait"
    assert normal_form("Apple") != normal_form("apple")


def test_tsv_uses_tabs(tmp_path):
    p = write(tmp_path / "a.tsv", "id\ttext\nr1\tone, with a comma\n")
    assert load_texts(p).texts == ["one, with a comma"]
