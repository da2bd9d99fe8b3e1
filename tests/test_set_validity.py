"""Set validity beyond the blind baselines: near-copies across the sets, and the reference's own scores."""

from __future__ import annotations

import json

import numpy as np
from scipy.stats import mannwhitneyu

from helpers import assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import Record, TextSet
from lmaudit.data.overlap import ngram_overlap
from lmaudit.metrics import auc
from lmaudit.report.summary import evidence, mia_summary

WORDS = [f"w{i}" for i in range(20)]


def test_ngram_overlap_counts_each_non_members_runs_of_words_found_in_the_members():
    members = TextSet([Record("a", " ".join(WORDS)), Record("b", "other words entirely")])
    near = " ".join(WORDS[:-1] + ["changed"])  # 20 words, the last one changed
    half = " ".join(WORDS[:10] + [f"x{i}" for i in range(10)])
    nonmembers = TextSet([Record("n1", near), Record("n2", half), Record("n3", "too short to have thirteen")])
    got = ngram_overlap(members, nonmembers)
    # 13-grams: n1 has 8, of which the first 7 are a member's (7/8); n2 has 8, none of which is whole in a member
    assert got["13"] == {"mean": (7 / 8 + 0) / 2, "median": (7 / 8) / 2, "max": 7 / 8, "near_copies": 1,
                         "scored": 2, "too_short": 1}
    # 7-grams: n1 13 of 14; n2 4 of 14 (w0-w6 ... w3-w9)
    assert got["7"]["max"] == 13 / 14 and np.isclose(got["7"]["mean"], (13 / 14 + 4 / 14) / 2)
    assert got["7"]["near_copies"] == 1 and got["7"]["too_short"] == 1


def test_the_reference_is_scored_as_a_target_and_the_verdict_reads_it(tmp_path, tiny_model_dir):
    """The tiny model as its own reference: its prior is the target itself, so every reference-free attack adds
    exactly nothing beyond it (paired difference 0), and on sets it tells apart the verdict says so."""
    rng = np.random.default_rng(5)
    dated = [f"On {rng.integers(1, 28)}/{rng.integers(1, 12)}/{rng.integers(1990, 2024)}: {t}"
             for t in make_texts(40, seed=81, min_words=12, max_words=30)]
    members = write_jsonl(tmp_path / "m.jsonl", dated)
    nonmembers = write_jsonl(tmp_path / "n.jsonl", make_texts(40, seed=82, min_words=12, max_words=30))
    res = lmaudit("mia", "--model", tiny_model_dir, "--reference", tiny_model_dir, "--members", members,
                  "--nonmembers", nonmembers, "--attacks", "loss,zlib,reference", "--bootstrap", 200,
                  "--out", tmp_path / "out", "--no-blind")
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "out" / "results.json").read_text())
    prior = got["set_check"]["reference"]
    assert set(prior["attacks"]) == {"loss", "zlib"} and prior["calibrated"] == ["reference"]
    assert prior["attacks"]["loss"]["auc"] == got["attacks"]["loss"]["auc"]
    assert got["attacks"]["loss"]["vs_prior"]["diff"] == 0 and got["attacks"]["loss"]["vs_prior"]["beyond"] is False
    import pandas as pd

    scores = pd.read_parquet(tmp_path / "out" / "scores.parquet")
    y = scores["label"].to_numpy()
    own = scores["reference:loss"].to_numpy()
    assert np.isclose(auc(y, own), prior["attacks"]["loss"]["auc"])
    p = mannwhitneyu(own[y == 1], own[y == 0], alternative="two-sided").pvalue
    assert np.isclose(prior["attacks"]["loss"]["p"], p)
    assert prior["differ"] is (min(1.0, 2 * min(e["p"] for e in prior["attacks"].values())) <= 0.05)
    assert prior["differ"], "the tiny model reads dated texts differently: the planted shift is seen"
    said = " ".join(res.output.split())
    assert "The reference model, which never saw the members, already tells them apart" in said
    assert "(reference's own)" in said
    assert set(evidence(got)) == {"reference"}  # loss and zlib add nothing beyond the reference's own scores
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Δ vs prior" in report and "13-word runs found in the members: mean" in report
    strict = lmaudit("mia", "--model", tiny_model_dir, "--reference", tiny_model_dir, "--members", members,
                     "--nonmembers", nonmembers, "--attacks", "loss", "--bootstrap", 0, "--out",
                     tmp_path / "strict", "--no-blind", "--no-report", "--strict-sets")
    assert_user_error(strict, "members and non-members differ to the reference, which never saw the members")


def test_with_no_attack_beyond_the_reference_exposure_is_not_shown():
    def attack(value, beyond):
        return {"auc": value, "auc_ci95": [value - 0.05, value + 0.05], "tpr@1%fpr": None,
                "vs_prior": {"prior": "reference:loss", "diff": 0.0, "ci95": [-0.1, 0.1], "beyond": beyond}}

    prior = {"attacks": {"loss": {"auc": 0.8, "auc_ci95": [0.7, 0.9], "p": 1e-5}}, "best": "loss", "auc": 0.8,
             "auc_ci95": [0.7, 0.9], "p_adjusted": 1e-5, "differ": True, "calibrated": ["reference"]}
    res = {"attacks": {"loss": attack(0.85, False)}, "n_members": 50, "n_nonmembers": 50,
           "set_check": {"baselines": {}, "differ": None, "reference": prior}}
    summary = mia_summary([("", res)])
    assert summary.headline.startswith("Exposure: cannot tell (a model that never saw the members tells the sets")
    assert "none beyond the reference's own scores" in summary.points[1]
    res["attacks"]["reference"] = {"auc": 0.9, "auc_ci95": [0.85, 0.95], "tpr@1%fpr": None}
    summary = mia_summary([("", res)])
    assert summary.headline.startswith("Exposure: high (beyond the reference's own scores")  # its AUC's lower end: 0.85
    assert "attack beyond the reference's own scores: reference" in summary.points[1]


def test_the_level_is_read_from_the_lower_ends_of_the_intervals():
    """Chance alone on 200 non-members: a TPR at 1% FPR of 3% (interval 0.5–8%) and an AUC of 0.56 (0.50–0.62) are
    'low'; the same values with intervals that exclude chance set the level."""
    from lmaudit.report.summary import mia_level

    noisy = {"auc": 0.56, "auc_ci95": [0.50, 0.62], "tpr@1%fpr": 0.03, "tpr@1%fpr_ci95": [0.005, 0.08]}
    assert mia_level({"min_k": noisy}) == "low"
    assert mia_level({"min_k": {**noisy, "auc_ci95": None, "tpr@1%fpr_ci95": None}}) == "moderate"  # no interval
    assert mia_level({"min_k": {**noisy, "tpr@1%fpr_ci95": [0.11, 0.2]}}) == "high"


def test_with_both_checks_the_level_reads_the_weaker_lower_end():
    """The blind gain's interval starts at 0.26, the prior gain's at 0.05: the level reads 0.5 + 0.05 (low), not
    the interval of whichever gain has the smaller point value (0.5 + 0.26, high)."""
    from lmaudit.report.summary import part_level

    prior = {"attacks": {}, "differ": True, "calibrated": [], "best": "loss", "auc": 0.8, "auc_ci95": [0.7, 0.9],
             "p_adjusted": 1e-6}
    res = {"attacks": {"loss": {"auc": 0.95, "auc_ci95": [0.9, 1.0], "tpr@1%fpr": None,
                                "vs_blind": {"diff": 0.30, "ci95": [0.26, 0.34], "beyond": True},
                                "vs_prior": {"diff": 0.32, "ci95": [0.05, 0.59], "beyond": True}}},
           "set_check": {"differ": True, "reference": prior}}
    assert part_level(res) == "low"
