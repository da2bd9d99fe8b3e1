"""MUSE's PrivLeak against a retrained model's run: the formula, the pairing, and runs of other texts refused."""

from __future__ import annotations

import json

import numpy as np
from sklearn.metrics import roc_auc_score

from helpers import TEST_PRESET_ARGS, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.runs.privleak import privleak


def test_privleak_is_the_relative_auc_gap_with_a_paired_interval():
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(60), np.zeros(60)].astype(int)
    retrained = rng.normal(size=120)
    unlearned = retrained + 0.8 * y + rng.normal(scale=0.3, size=120)  # still tells the forget set apart
    got = privleak(y, unlearned, retrained, n_resamples=400, seed=1)
    a_u, a_r = roc_auc_score(y, unlearned), roc_auc_score(y, retrained)
    assert np.isclose(got["privleak"], (a_u - a_r) / a_r) and got["ci95"][0] > 0  # under-unlearning, shown
    assert privleak(y, retrained, retrained, n_resamples=50)["ci95"] == [0.0, 0.0]  # paired: no spread at all


def test_mia_reports_privleak_against_a_retrained_run_of_the_same_texts(tmp_path, tiny_model_dir, tokenizer):
    from lmaudit.models.presets import Preset, build_ar_model

    retrained_dir = tmp_path / "retrained_model"  # another model of the same kind: the "retrained" one
    build_ar_model(Preset("test", **TEST_PRESET_ARGS), tokenizer, seed=1).save_pretrained(retrained_dir)
    tokenizer.save_pretrained(retrained_dir)
    members = write_jsonl(tmp_path / "m.jsonl", make_texts(24, seed=61))
    nonmembers = write_jsonl(tmp_path / "n.jsonl", make_texts(24, seed=62))
    common = ("--members", members, "--nonmembers", nonmembers, "--attacks", "loss,zlib", "--bootstrap", 100)
    assert lmaudit("mia", "--model", retrained_dir, *common, "--out", tmp_path / "retrained",
                   "--no-report").exit_code == 0
    res = lmaudit("mia", "--model", tiny_model_dir, *common, "--retrained", tmp_path / "retrained",
                  "--out", tmp_path / "run")
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "run" / "results.json").read_text())["privleak"]
    mine = json.loads((tmp_path / "run" / "results.json").read_text())["attacks"]["loss"]["auc"]
    theirs = json.loads((tmp_path / "retrained" / "results.json").read_text())["attacks"]["loss"]["auc"]
    assert set(got["attacks"]) == {"loss", "zlib"}
    assert np.isclose(got["attacks"]["loss"]["privleak"], (mine - theirs) / theirs)
    assert "PrivLeak against the retrained model" in (tmp_path / "run" / "report.md").read_text()
    same = lmaudit("mia", "--model", tiny_model_dir, *common, "--retrained", tmp_path / "run", "--out",
                   tmp_path / "same", "--no-report")
    assert_user_error(same, "audits the same model as this run")
    other = write_jsonl(tmp_path / "o.jsonl", make_texts(24, seed=63))
    refused = lmaudit("mia", "--model", tiny_model_dir, "--members", members, "--nonmembers", other, "--attacks",
                      "loss", "--retrained", tmp_path / "retrained", "--out", tmp_path / "bad", "--no-report")
    assert_user_error(refused, "scores other texts than this run")
