"""The Python interface: the same jobs as the commands, with the same inputs and the same errors."""

import json

import pytest

import lmaudit
from helpers import make_texts, write_jsonl
from lmaudit.errors import LmauditError
from lmaudit.runs.mia import RunConfig


def test_mia_from_one_labelled_file_equals_two_files(tmp_path, tiny_model_dir):
    mem, non = make_texts(10, seed=1), make_texts(10, seed=2)
    labelled = tmp_path / "all.jsonl"
    labelled.write_text("".join(json.dumps({"input": t, "label": lab}) + "\n"
                                for t, lab in [*((t, 1) for t in mem), *((t, 0) for t in non)]))
    cfg = RunConfig(attacks=["loss", "min_k"], n_bootstrap=50)
    a = lmaudit.mia(tiny_model_dir, write_jsonl(tmp_path / "m.jsonl", mem), write_jsonl(tmp_path / "n.jsonl", non),
                    config=cfg)
    b = lmaudit.mia(tiny_model_dir, data=labelled, label_field="label", text_field="input", config=cfg)
    assert (b.n_members, b.n_nonmembers) == (10, 10)
    for name in ("loss", "min_k"):  # the same texts in the same roles: the same scores
        assert b.attacks[name]["auc"] == pytest.approx(a.attacks[name]["auc"])
        assert b.scores[name] == pytest.approx(a.scores[name], abs=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    (dict(members="m.jsonl"), "missing option nonmembers="),
    (dict(data="all.jsonl"), "data= needs label_field="),
    (dict(members="m.jsonl", nonmembers="n.jsonl", data="all.jsonl", label_field="label"), "mutually exclusive"),
])
def test_mia_says_which_argument_is_wrong_before_loading_a_model(tmp_path, kwargs, message):
    with pytest.raises(LmauditError, match=message):
        lmaudit.mia(tmp_path / "no-model-here", **kwargs)
