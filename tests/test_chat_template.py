"""Instruction pairs in a tokenizer's chat template, in fine-tuning and in probing alike."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from helpers import assert_ok, assert_user_error, lmaudit, make_texts
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.chat import chat_records, use_chat_template
from lmaudit.models.train import ift_examples

# a template of the usual shape: a role marker, the content, an end-of-turn token, a generation prompt
TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}<eos>\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant] {% endif %}")


@pytest.fixture
def chat_tokenizer(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = TEMPLATE
    return tok


def _pairs(n: int, seed: int) -> TextSet:
    texts = make_texts(2 * n, seed=seed)
    return TextSet([Record(f"p{i}", texts[2 * i + 1], "Question: " + texts[2 * i]) for i in range(n)])


def test_a_pair_is_rendered_as_the_conversation_with_the_prompt_as_context(chat_tokenizer):
    (rec,) = chat_records(_pairs(1, seed=1), chat_tokenizer).records
    original = _pairs(1, seed=1).records[0]
    assert rec.context == f"[user] {original.context}<eos>\n[assistant] "
    assert rec.target == f"{original.target}<eos>\n"
    (ids, mask), = ift_examples(chat_tokenizer, TextSet([rec]), max_length=512)
    prompt_len = len(chat_tokenizer(rec.context)["input_ids"])
    assert not mask[:prompt_len].any() and mask[prompt_len:].all()  # the prompt is never trained
    assert (ids == chat_tokenizer.eos_token_id).sum() == 2  # the template's end of turn, not one more appended


def test_plain_texts_and_tokenizers_without_a_template_are_left_alone(tokenizer, chat_tokenizer):
    plain = TextSet.from_texts(make_texts(3, seed=2))
    assert not use_chat_template(chat_tokenizer, plain, None)  # no prompts: nothing to format
    assert not use_chat_template(tokenizer, _pairs(2, seed=3), None)  # no template
    assert not use_chat_template(chat_tokenizer, _pairs(2, seed=3), False)
    with pytest.raises(LmauditError, match="has no chat template"):
        use_chat_template(tokenizer, _pairs(2, seed=3), True)


def _write_pairs(path, ts: TextSet):
    path.write_text("".join(json.dumps({"prompt": r.context, "response": r.target}) + "\n" for r in ts.records))
    return path


def test_ift_and_mia_use_the_template_and_the_flag_turns_it_off(tmp_path, tiny_model_dir, chat_tokenizer):
    model = shutil.copytree(tiny_model_dir, tmp_path / "chat_model")
    chat_tokenizer.save_pretrained(model)
    members, nonmembers = _write_pairs(tmp_path / "m.jsonl", _pairs(20, 5)), _write_pairs(tmp_path / "n.jsonl",
                                                                                            _pairs(20, 6))
    ft = tmp_path / "ft"
    assert_ok(lmaudit("finetune", "--model", model, "--data", members, "--mode", "ift", "--epochs", "1", "--out", ft))
    assert json.loads((ft / "lmaudit_training.json").read_text())["chat_template"] is True
    runs = {}
    for flag in ("--chat-template", "--no-chat-template"):
        out = tmp_path / flag.strip("-")
        assert_ok(lmaudit("mia", "--model", ft, "--members", members, "--nonmembers", nonmembers, "--out", out,
                          "--attacks", "loss", "--no-report", "--bootstrap", "10", flag))
        runs[flag] = json.loads((out / "results.json").read_text())
    assert runs["--chat-template"]["chat_template"] is True and runs["--no-chat-template"]["chat_template"] is False
    a, b = (pd.read_parquet(tmp_path / f.strip("-") / "scores.parquet")["loss"].to_numpy() for f in runs)
    assert not np.allclose(a, b)  # the same responses, scored after another context
    assert_user_error(lmaudit("mia", "--model", tiny_model_dir, "--members", members, "--nonmembers", nonmembers,
                              "--out", tmp_path / "x", "--chat-template"), "has no chat template")
