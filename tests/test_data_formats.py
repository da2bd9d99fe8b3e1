"""Parquet files, datasets save_to_disk folders, one labelled file (WikiMIA / MIMIR style) and --text-field."""

import json

import datasets
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import load_labelled, load_texts
from lmaudit.errors import DataError, ModelLoadError

datasets.disable_progress_bars()
TEXTS = ["first text, with a comma", "second text\nover two lines", 'third "quoted"', "fourth text"]


def to_parquet(path, columns: dict, row_group_size=None):
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def test_parquet_reads_every_row_group_with_jsonl_id_and_field_rules(tmp_path):
    plain = load_texts(to_parquet(tmp_path / "plain.parquet", {"text": TEXTS, "n": [1, 2, 3, 4]}, row_group_size=1))
    assert plain.texts == TEXTS and [r.id for r in plain.records] == ["plain:1", "plain:2", "plain:3", "plain:4"]
    assert plain.source == str(tmp_path / "plain.parquet")
    ided = load_texts(to_parquet(tmp_path / "ided.parquet", {"id": [7, 8], "text": TEXTS[:2], "email": ["a@b", "c@d"]}))
    assert [r.id for r in ided.records] == ["7", "8"] and ided.records[1].fields == {"email": "c@d"}
    pairs = load_texts(to_parquet(tmp_path / "pairs.parquet", {"prompt": ["Q: what? "], "response": ["an answer"]}))
    assert (pairs.records[0].context, pairs.records[0].target) == ("Q: what? ", "an answer")
    # the same data as JSONL gives the same texts and the same fingerprint (the probe cache key)
    jl = write_jsonl(tmp_path / "plain.jsonl", TEXTS)
    assert load_texts(jl).fingerprint() == plain.fingerprint()


def test_datasets_folders_read_without_datasets(tmp_path):
    ds = datasets.Dataset.from_dict({"text": TEXTS, "label": [1, 0, 1, 0]})
    ds.save_to_disk(tmp_path / "one", num_shards=2)  # two .arrow stream files, in order
    one = load_texts(tmp_path / "one")
    assert one.texts == TEXTS and [r.id for r in one.records] == ["one:1", "one:2", "one:3", "one:4"]
    datasets.DatasetDict({"test": ds}).save_to_disk(tmp_path / "single")
    assert [r.id for r in load_texts(tmp_path / "single").records][:2] == ["test:1", "test:2"]
    datasets.DatasetDict({"train": ds.select([0, 1]), "test": ds.select([2, 3])}).save_to_disk(tmp_path / "dd")
    assert load_texts(tmp_path / "dd", split="test").texts == TEXTS[2:]
    assert load_texts(tmp_path / "dd", split="train").texts == TEXTS[:2]
    with pytest.raises(DataError, match=r"dd: a datasets folder with splits train, test; choose one with --split"):
        load_texts(tmp_path / "dd")
    with pytest.raises(DataError, match=r"dd: no split 'valid' \(splits: train, test\)"):
        load_texts(tmp_path / "dd", split="valid")
    ided = datasets.Dataset.from_dict({"id": ["a", "b"], "body": TEXTS[:2]})
    ided.save_to_disk(tmp_path / "ided")
    got = load_texts(tmp_path / "ided", text_field="body")
    assert got.texts == TEXTS[:2] and [r.id for r in got.records] == ["a", "b"]


def test_a_folder_of_txt_files_stays_one_and_json_marks_a_datasets_folder(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.txt").write_text("a text in a folder")
    assert load_texts(tmp_path / "t").texts == ["a text in a folder"]
    (tmp_path / "t" / "dataset_info.json").write_text("{}")  # now it claims to be a datasets folder
    with pytest.raises(DataError, match=r"t/state.json: missing"):
        load_texts(tmp_path / "t")


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "datasets"])
def test_text_field_picks_the_column_and_a_missing_one_lists_the_columns(tmp_path, fmt):
    rows = {"id": ["r1", "r2"], "input": TEXTS[:2]}
    path = write_format(tmp_path, fmt, rows)
    got = load_texts(path, text_field="input")
    assert got.texts == TEXTS[:2] and [r.id for r in got.records] == ["r1", "r2"]
    with pytest.raises(DataError) as err:
        load_texts(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "missing" in message and "'text'" in message
    assert "id, input" in message


def write_format(tmp_path, fmt, rows: dict):
    """The columns ``rows`` as a file (or folder) of format ``fmt``."""
    frame = pd.DataFrame(rows)
    path = tmp_path / f"data.{fmt}"
    if fmt == "jsonl":
        frame.to_json(path, orient="records", lines=True)
    elif fmt == "csv":
        frame.to_csv(path, index=False)
    elif fmt == "parquet":
        frame.to_parquet(path)
    else:
        datasets.Dataset.from_dict(rows).save_to_disk(path)
    return path


@pytest.mark.parametrize("fmt, labels", [
    ("jsonl", [True, False, True, False]), ("csv", [1, 0, 1, 0]), ("parquet", ["1", "0", "1", "0"]),
    ("datasets", [1, 0, 1, 0]),
])
def test_a_labelled_file_splits_into_members_and_nonmembers(tmp_path, fmt, labels):
    path = write_format(tmp_path, fmt, {"input": TEXTS, "label": labels, "note": ["w", "x", "y", "z"]})
    members, nonmembers = load_labelled(path, label_field="label", text_field="input")
    assert members.texts == [TEXTS[0], TEXTS[2]] and nonmembers.texts == [TEXTS[1], TEXTS[3]]
    # ids: JSONL lines; CSV lines (the header is line 1, the second text spans lines 3-4); table rows
    expected = {"jsonl": ["data:1", "data:3"], "csv": ["data:2", "data:5"], "parquet": ["data:1", "data:3"],
                "datasets": ["data.datasets:1", "data.datasets:3"]}[fmt]
    assert [r.id for r in members.records] == expected
    assert members.records[0].fields == {"note": "w"}  # the label is not kept among the fields
    assert members.source == f"{path} [label=1]" and nonmembers.source == f"{path} [label=0]"


@pytest.mark.parametrize("fmt, labels, needle", [
    ("jsonl", [1, 0, 2, 0], "data.jsonl: line 3: field 'label' must be 0 or 1 (or true/false), got 2"),
    ("csv", ["1", "0", "yes", "0"], "data.csv: line 5: field 'label' must be 0 or 1 (or true/false), got 'yes'"),
    ("parquet", [1.0, 0.0, 1.0, 0.0], "data.parquet: row 1: field 'label' must be 0 or 1 (or true/false), got 1.0"),
    ("datasets", [1, 0, -1, 0], "data.datasets: row 3: field 'label' must be 0 or 1 (or true/false), got -1"),
    ("parquet", [1, 1, 1, 1], "data.parquet: field 'label' is 1 in all 4 rows (one class only)"),
    ("jsonl", [False] * 4, "data.jsonl: field 'label' is 0 in all 4 rows (one class only)"),
])
def test_bad_labels_name_the_file_the_field_and_the_first_bad_row(tmp_path, fmt, labels, needle):
    path = write_format(tmp_path, fmt, {"text": TEXTS, "label": labels})
    with pytest.raises(DataError) as err:
        load_labelled(path, label_field="label")
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_missing_labels_and_unlabelled_inputs_are_errors(tmp_path):
    path = write_format(tmp_path, "parquet", {"text": TEXTS, "label": [1, 0, 1, 0]})
    with pytest.raises(DataError, match=r"data.parquet: missing column 'is_member' \(columns: text, label\)"):
        load_labelled(path, label_field="is_member")
    jl = tmp_path / "l.jsonl"
    jl.write_text('{"text": "a b", "label": 1}\n{"text": "c d"}\n')
    with pytest.raises(DataError, match=r"l.jsonl: line 2: missing field 'label' \(found: text\)"):
        load_labelled(jl, label_field="label")
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "a.txt").write_text("some text")
    with pytest.raises(DataError, match="a folder of .txt files has no field 'label'"):
        load_labelled(tmp_path / "txt", label_field="label")


def test_unreadable_tables_and_folders_are_one_line_errors(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    ds = tmp_path / "ds"
    datasets.Dataset.from_dict({"text": TEXTS}).save_to_disk(ds)
    arrow = next(ds.glob("*.arrow"))
    state = json.loads((ds / "state.json").read_text())
    cases = [(tmp_path / "bad.parquet", "bad.parquet: not a readable Parquet file")]
    arrow.rename(tmp_path / "moved.arrow")
    cases.append((ds, f"{arrow}: missing (listed in {ds / 'state.json'})"))
    for path, needle in cases:
        with pytest.raises(DataError) as err:
            load_texts(path)
        assert needle in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "moved.arrow").rename(arrow)
    (ds / "state.json").write_text(json.dumps({**state, "_data_files": [{"filename": "../moved.arrow"}]}))
    with pytest.raises(DataError, match="field '_data_files' must list the folder's .arrow files by name"):
        load_texts(ds)
    (ds / "state.json").write_text("{not json")
    with pytest.raises(DataError, match="state.json: malformed JSON"):
        load_texts(ds)
    (ds / "state.json").write_text(json.dumps(state))
    arrow.write_bytes(b"garbage")
    with pytest.raises(DataError, match="not a readable Arrow stream file"):
        load_texts(ds)


MIA_ARGS = ("--attacks", "loss,zlib", "--bootstrap", "20", "--no-report")


@pytest.mark.filterwarnings("ignore:.*fewer than 20 per class")
def test_mia_on_one_labelled_parquet_file_equals_two_jsonl_files(tmp_path, tiny_model_dir):
    members, nonmembers = make_texts(12, seed=1), make_texts(12, seed=2)
    m, n = write_jsonl(tmp_path / "m.jsonl", members), write_jsonl(tmp_path / "n.jsonl", nonmembers)
    assert_ok(lmaudit("mia", "--model", tiny_model_dir, "--members", m, "--nonmembers", n, *MIA_ARGS,
                      "--out", tmp_path / "two"))
    # interleaved rows, another text column name: each class keeps its order
    texts = [t for pair in zip(members, nonmembers) for t in pair]
    data = to_parquet(tmp_path / "wikimia.parquet", {"input": texts, "label": [1, 0] * 12})
    assert_ok(lmaudit("mia", "--model", tiny_model_dir, "--data", data, "--label-field", "label",
                      "--text-field", "input", *MIA_ARGS, "--out", tmp_path / "one"))
    two, one = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("two", "one"))
    assert one["attacks"] == two["attacks"] and set(one["attacks"]) == {"loss", "zlib"}
    assert (one["n_members"], one["n_nonmembers"]) == (12, 12)


def test_mia_data_options_are_checked_with_one_line_errors(tmp_path):
    jl = write_jsonl(tmp_path / "m.jsonl", TEXTS)
    labelled = write_format(tmp_path, "parquet", {"text": TEXTS, "label": [1, 0, 2, 0]})
    model = ("--model", tmp_path / "no-model", "--out", tmp_path / "out")
    for args, needles in [
        (["--data", labelled, "--label-field", "label", "--members", jl],
         ["--data and --members/--nonmembers are mutually exclusive"]),
        (["--data", labelled], ["--data needs --label-field"]),
        (["--members", jl, "--nonmembers", jl, "--label-field", "label"], ["--label-field applies to --data only"]),
        ([], ["missing option --members", "--data FILE --label-field NAME"]),
        (["--members", jl], ["missing option --nonmembers"]),
        (["--data", labelled, "--label-field", "label"], [f"{labelled}: row 3: field 'label' must be 0 or 1"]),
        (["--members", jl, "--nonmembers", jl, "--text-field", "input"], [f"{jl}: line 1: missing field 'input'"]),
    ]:
        assert_user_error(lmaudit("mia", *model, *args), *needles)
        assert_user_error(lmaudit("audit-set", *model, "--suspect", jl, *args), *needles)


def test_cli_split_and_text_field_reach_every_data_option(tmp_path):
    dd = tmp_path / "dd"
    ds = datasets.Dataset.from_dict({"body": TEXTS, "label": [1, 0, 1, 0]})
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(dd)
    model = ("--model", tmp_path / "no-model", "--out", tmp_path / "out")
    assert_user_error(lmaudit("mia", *model, "--data", dd, "--label-field", "label", "--text-field", "body"),
                      f"{dd}: a datasets folder with splits train, test")
    # with the split and the column named, the data loads and the next failure is the (absent) model
    res = lmaudit("mia", *model, "--data", dd, "--label-field", "label", "--text-field", "body", "--split", "test")
    assert isinstance(res.exception, ModelLoadError) and "no-model" in str(res.exception)
    res = lmaudit("audit-set", *model, "--members", dd, "--nonmembers", dd, "--suspect", dd, "--text-field", "body",
                  "--split", "train")
    assert isinstance(res.exception, ModelLoadError) and "no-model" in str(res.exception)
    assert_user_error(lmaudit("audit-set", *model, "--members", dd, "--nonmembers", dd, "--suspect", dd,
                              "--split", "train"), f"{dd / 'train'}: missing column 'text' (columns: body, label)")
