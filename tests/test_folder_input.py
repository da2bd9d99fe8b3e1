"""A folder of texts: every .txt file is read (any case of the suffix), every other entry is reported."""

import os

import pytest

from lmaudit.data.loaders import load_texts
from lmaudit.errors import DataError


def test_upper_case_suffix_is_read_and_every_skipped_entry_is_named(tmp_path):
    (tmp_path / "a.txt").write_text("the first text of the folder")
    (tmp_path / "B.TXT").write_text("the second text, with an upper-case suffix")
    (tmp_path / "notes.md").write_text("not a text to score")
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "loop", tmp_path / "loop")  # a link to itself: a loop
    os.symlink(tmp_path / "absent.txt", tmp_path / "gone.txt")  # a dangling link with the right suffix
    with pytest.warns(UserWarning, match="skipped 4 entries") as caught:
        texts = load_texts(tmp_path)
    assert [r.id for r in texts.records] == ["B", "a"]
    message = str(caught[0].message)
    for named in ("notes.md (not a .txt file)", "sub (a folder)", "gone.txt (a broken or looping link)",
                  "loop (not a .txt file)"):
        assert named in message


def test_a_folder_without_texts_is_an_error_naming_it(tmp_path):
    (tmp_path / "x.csv").write_text("text\nhello there\n")
    with pytest.warns(UserWarning, match="x.csv"), pytest.raises(DataError, match="folder has no .txt files"):
        load_texts(tmp_path)
