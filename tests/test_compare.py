"""lmaudit compare: two membership runs on the texts both scored (a served model against its weights, before and
after a change), and the inputs it refuses."""

from __future__ import annotations

import json
import shutil

import pytest

import lmaudit
from helpers import assert_ok, assert_user_error, make_texts
from helpers import lmaudit as cli
from lmaudit.errors import LmauditError

TEXTS = make_texts(48, seed=31)
MEMBERS, NONMEMBERS = TEXTS[:24], TEXTS[24:]
CFG = lmaudit.RunConfig(attacks=["loss", "min_k", "zlib"], n_bootstrap=50, blind=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("compare")
    lmaudit.mia(tiny_model_dir, MEMBERS, NONMEMBERS, config=CFG).write(root / "a")
    # the same texts, the members in another order and two of them left out: matched by content, not position
    lmaudit.mia(tiny_model_dir, MEMBERS[::-1][2:], NONMEMBERS, config=CFG).write(root / "b")
    return root


def test_a_run_against_itself_differs_by_nothing(runs):
    same = lmaudit.compare(runs / "a", runs / "a", config=lmaudit.CompareConfig(n_bootstrap=200))
    for m in same["attacks"].values():
        assert m["delta_auc"] == 0 and m["delta_auc_ci95"] == [0.0, 0.0] and m["reading"] == "no difference shown"
        assert m["spearman"] == pytest.approx(1.0)
    assert same["same_model"] and same["matched"] == {"members": 24, "nonmembers": 24, "only_a": 0, "only_b": 0}


def test_texts_are_matched_by_content_and_the_shared_ones_compared(runs):
    found = lmaudit.compare(runs / "a", runs / "b", config=lmaudit.CompareConfig(n_bootstrap=200))
    assert found["matched"] == {"members": 22, "nonmembers": 24, "only_a": 2, "only_b": 0}
    a = lmaudit.load_results(runs / "a")
    kept = [i for i, t in enumerate(MEMBERS) if t in MEMBERS[::-1][2:]] + list(range(24, 48))
    from lmaudit.metrics import auc
    want = auc(a.labels[kept], a.scores["loss"][kept])
    assert found["attacks"]["loss"]["auc_a"] == pytest.approx(want)
    assert found["attacks"]["loss"]["auc_a"] == pytest.approx(found["attacks"]["loss"]["auc_b"])  # the same model
    assert found.to_frame()["attack"].tolist() == ["loss", "min_k", "zlib"]


def test_a_changed_model_shows_its_difference_with_an_interval(runs, tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():  # a model that lost what it knew: its scores no longer rank the members first
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 0.5)
    model.save_pretrained(tmp_path / "noised")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(tmp_path / "noised")
    lmaudit.mia(tmp_path / "noised", MEMBERS, NONMEMBERS, config=CFG).write(tmp_path / "c")
    found = lmaudit.compare(runs / "a", tmp_path / "c", config=lmaudit.CompareConfig(n_bootstrap=300))
    m = found["attacks"]["loss"]
    lo, hi = m["delta_auc_ci95"]
    assert lo <= m["delta_auc"] <= hi and not found["same_model"]
    assert m["reading"] == ("lower in B" if hi < 0 else "higher in B" if lo > 0 else "no difference shown")
    assert abs(m["spearman"]) < 0.99


def test_the_command_prints_both_verdicts_and_writes_a_folder_with_a_report(runs, tmp_path):
    r = cli("compare", runs / "a", runs / "b", "--out", tmp_path / "cmp", "--bootstrap", 200)
    assert_ok(r)
    assert r.output.count("Exposure: ") == 2 and "22 members and 24 non-members both runs scored" in r.output
    saved = json.loads((tmp_path / "cmp" / "results.json").read_text())
    assert saved["type"] == "comparison" and set(saved["attacks"]) == {"loss", "min_k", "zlib"}
    assert "Verdicts side by side" in (tmp_path / "cmp" / "report.md").read_text()
    assert lmaudit.load_results(tmp_path / "cmp").headline().endswith("on 46 shared texts")


def test_hostile_inputs_are_refused_with_what_is_wrong(runs, tmp_path, tiny_model_dir):
    # another job's folder
    texts = [f"record {i} holds the value {i * 3}" for i in range(6)]
    lmaudit.extract(tiny_model_dir, texts, config=lmaudit.ExtractConfig(mask="suffix:4", n=100)).write(tmp_path / "x")
    with pytest.raises(LmauditError, match="an extraction run, not a membership-inference run"):
        lmaudit.compare(runs / "a", tmp_path / "x")
    # a folder edited after the run: its manifest says so
    shutil.copytree(runs / "a", tmp_path / "edited")
    res = json.loads((tmp_path / "edited" / "results.json").read_text())
    res["attacks"]["loss"]["auc"] = 0.99
    (tmp_path / "edited" / "results.json").write_text(json.dumps(res))
    with pytest.raises(LmauditError, match="results.json"):
        lmaudit.compare(tmp_path / "edited", runs / "a")
    # texts that differ only by an invisible character are other texts: nothing to match
    hidden = [t.replace(" ", " \u200b", 1) for t in TEXTS]
    lmaudit.mia(tiny_model_dir, hidden[:24], hidden[24:], config=CFG).write(tmp_path / "hidden")
    with pytest.raises(LmauditError, match="the runs share 0 member.s. and 0 non-member.s. .* 48 only in A"):
        lmaudit.compare(runs / "a", tmp_path / "hidden")
    # the same texts with the labels swapped
    lmaudit.mia(tiny_model_dir, NONMEMBERS, MEMBERS, config=CFG).write(tmp_path / "swapped")
    with pytest.raises(LmauditError, match="is a member in run A but a non-member in run B"):
        lmaudit.compare(runs / "a", tmp_path / "swapped")
    assert_user_error(cli("compare", runs / "a", tmp_path / "nothing"), "no results.json")
