"""A damaged model folder gives a one-line error naming the file or field at fault, never a library's traceback.

Each test copies the tiny seeded model folder into ``tmp_path`` and damages the copy.
"""

from __future__ import annotations

import json
import shutil

import pytest

from helpers import assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.errors import ModelLoadError
from lmaudit.models.loading import load_model
from lmaudit.models.sources import check_model_dir, detect_kind


@pytest.fixture
def folder(tiny_model_dir, tmp_path):
    """A fresh copy of the tiny AR model folder, free to damage."""
    return shutil.copytree(tiny_model_dir, tmp_path / "model")


def _edit_config(folder, **fields):
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **fields}))


def assert_one_line_error(call, *needles: str) -> ModelLoadError:
    with pytest.raises(ModelLoadError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, message
    return info.value


def test_truncated_config_names_the_file_and_the_json_problem(folder):
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text[: len(text) // 2])
    line = text[: len(text) // 2].count("\n") + 1
    for call in (lambda: load_model(folder), lambda: detect_kind(folder)):
        err = assert_one_line_error(call, f"{folder / 'config.json'}: malformed JSON at line {line}, column")
        assert "re-save" in err.hint


def test_binary_config_is_not_a_decode_error(folder):
    (folder / "config.json").write_bytes(bytes(range(128, 256)))
    assert_one_line_error(lambda: load_model(folder), f"{folder / 'config.json'}: not a JSON text file")


def test_config_that_is_not_an_object(folder):
    (folder / "config.json").write_text("[1, 2, 3]")
    for call in (lambda: load_model(folder), lambda: detect_kind(folder), lambda: check_model_dir(folder)):
        assert_one_line_error(call, f"{folder / 'config.json'}: expected a JSON object", "got [1, 2, 3]")


@pytest.mark.parametrize("field, value", [("vocab_size", "abc"), ("hidden_size", -4), ("hidden_size", 0),
                                          ("num_hidden_layers", 0), ("num_attention_heads", 2.5),
                                          ("max_position_embeddings", True)])
def test_size_field_of_wrong_type_or_sign_names_the_field(folder, field, value):
    _edit_config(folder, **{field: value})
    for call in (lambda: load_model(folder), lambda: detect_kind(folder)):
        assert_one_line_error(call, f"{folder / 'config.json'}: '{field}' must be a positive integer, "
                                    f"got {json.dumps(value)}")


def test_other_invalid_config_field_is_named_by_transformers(folder):
    _edit_config(folder, rms_norm_eps="abc")
    assert_one_line_error(lambda: load_model(folder), f"{folder / 'config.json'}: ", "rms_norm_eps")


def test_truncated_weights_name_the_file(folder):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    for call in (lambda: load_model(folder), lambda: check_model_dir(folder)):
        err = assert_one_line_error(call, f"{weights}: damaged or truncated safetensors file")
        assert "download this file again" in err.hint


def test_garbage_weights_header_names_the_file(folder):
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:8] + b"{not json at all" + data[24:])  # same size, the header's JSON is garbage
    assert_one_line_error(lambda: load_model(folder), f"{weights}: damaged or truncated safetensors file", "header")


@pytest.mark.parametrize("damage", ["random bytes", "truncated JSON", "a JSON list"])
def test_garbage_tokenizer_json_names_the_file(folder, damage):
    tok = folder / "tokenizer.json"
    text = tok.read_text()
    if damage == "random bytes":
        tok.write_bytes(bytes(range(256)) * 8)
    else:
        tok.write_text(text[: len(text) // 2] if damage == "truncated JSON" else "[1]")
    assert_one_line_error(lambda: load_model(folder), f"{tok}: ")


def test_weights_that_do_not_match_the_config_name_a_tensor(folder):
    _edit_config(folder, vocab_size=500)
    err = assert_one_line_error(lambda: load_model(folder), f"'{folder}': the weights do not match config.json",
                          "[400, 32] in the weight files, config.json makes it [500, 32]")
    assert "config.json" in err.hint


def test_intact_copy_still_loads(folder):
    assert load_model(folder).kind == "ar"


def test_mia_command_on_a_broken_folder_is_a_user_error(folder, tmp_path):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    members = write_jsonl(tmp_path / "m.jsonl", make_texts(4, seed=1))
    nonmembers = write_jsonl(tmp_path / "n.jsonl", make_texts(4, seed=2))
    out = lmaudit("mia", "--model", folder, "--members", members, "--nonmembers", nonmembers, "--out", tmp_path / "run")
    assert_user_error(out, str(weights), "damaged or truncated")
    _edit_config(folder, vocab_size="abc")
    out = lmaudit("mia", "--model", folder, "--members", members, "--nonmembers", nonmembers, "--out", tmp_path / "run")
    assert_user_error(out, str(folder / "config.json"), "'vocab_size'")
