"""Paired comparisons between attacks, TPR intervals and tied scores: values checked by hand or by a naive loop."""

import json

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from sklearn.metrics import roc_auc_score

from lmaudit.folders import write_manifest
from lmaudit.metrics import (
    TPR_POINTS,
    auc,
    auc_bootstrap_ci,
    largest_tie,
    paired_auc_diff,
    roc_curve,
    stratified_bootstrap,
    summarize,
    summarize_attacks,
    tie_note,
    tpr_at_fpr,
)
from lmaudit.report import plots
from lmaudit.report.cells import READING_NOTE, vs_best_text

# 4 members, 10 non-members; a block of 5 tied scores (3 members, 2 non-members) at 2.
# ROC vertices: (0, 0), (0, 1/4) at threshold 5, (2/10, 4/4) at 2, then (3/10, 1), ..., (1, 1).
TIED_Y = np.r_[np.ones(4), np.zeros(10)].astype(int)
TIED_S = np.array([5, 2, 2, 2, 2, 2, 0, -1, -2, -3, -4, -5, -6, -7], dtype=float)


def test_a_tied_block_is_read_at_its_vertices_not_interpolated():
    """At FPR 0.1 the threshold must take the whole tied block (FPR 0.2) or none of it (FPR 0): the TPR is 1/4.

    Interpolating across the block (a randomised threshold) would give 1/4 + (0.1 / 0.2) · 3/4 = 0.625.
    """
    fpr, tpr, thr = roc_curve(TIED_Y, TIED_S)
    np.testing.assert_array_equal(fpr[:3], [0.0, 0.0, 0.2])
    np.testing.assert_array_equal(tpr[:3], [0.0, 0.25, 1.0])
    assert tpr_at_fpr(TIED_Y, TIED_S, fpr=0.1) == 0.25  # conservative; 0.625 interpolated
    assert tpr_at_fpr(TIED_Y, TIED_S, fpr=0.19) == 0.25
    assert tpr_at_fpr(TIED_Y, TIED_S, fpr=0.2) == 1.0
    assert auc(TIED_Y, TIED_S) == pytest.approx((1 * 10 + 3 * (8 + 0.5 * 2)) / 40)  # ties count one half
    out = summarize(TIED_Y, TIED_S, n_resamples=200)
    assert out["tpr@10%fpr"] == 0.25 and out["tpr@1%fpr"] is None and out["tpr@1%fpr_ci95"] is None


def test_the_plotted_roc_is_the_staircase_through_the_tables_vertices():
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 2, 300)
    for y, s in ((TIED_Y, TIED_S), (labels, np.round(rng.normal(size=300) + labels, 0))):  # by hand, then many ties
        fpr, tpr, _ = roc_curve(y, s)
        x, h = plots.roc_line(y, s)
        np.testing.assert_array_equal(x[0::2], fpr)  # every vertex is a point of the line, in order ...
        np.testing.assert_array_equal(h[0::2], tpr)
        assert ((np.diff(x) == 0) | (np.diff(h) == 0)).all()  # ... joined only by horizontal and vertical steps
        for f in (0.0, 0.05, 0.1, 0.15, 0.2, 0.5, 1.0, *TPR_POINTS.values()):  # the line's height is the table's TPR
            assert h[x <= f + 1e-12].max() == tpr_at_fpr(y, s, fpr=f)
    assert plots.roc_curves(TIED_Y, {"tied": TIED_S}, log=True).startswith(b"\x89PNG")


def test_a_large_tied_block_is_noted_with_its_value_and_count():
    from lmaudit.runs.mia_notes import degenerate_notes

    assert largest_tie(TIED_S) == (2.0, 5)
    assert tie_note(TIED_S).startswith("5 of 14 scores (35.7%) are tied at 2:")
    with pytest.warns(UserWarning, match="only 4 member"), \
            pytest.warns(UserWarning,
                         match=r"^min_k: 5 of 14 scores \(35.7%\) are tied at 2: a threshold cannot split"):
        notes = degenerate_notes("min_k", TIED_S, 4, 10)
    assert len(notes) == 2 and "conservative" in notes[1]  # after the note on the tiny set
    # more than 1% of the samples: 3 of 300 is not, 4 of 300 is; a pair among 150 is
    s = np.arange(300.0)
    s[:3] = -7.0
    assert tie_note(s) is None
    s[3] = -7.0
    assert tie_note(s).startswith("4 of 300 scores (1.3%) are tied at -7:")
    assert tie_note(np.r_[1.0, np.arange(149.0)]).startswith("2 of 150")
    assert tie_note(np.arange(50.0)) is None
    with pytest.warns(UserWarning, match="same score"):
        notes = degenerate_notes("loss", np.zeros(60), 30, 30)
    assert len(notes) == 1  # all equal: said once, not again as a tie


def test_paired_interval_of_identical_scores_is_exactly_zero():
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(40), np.zeros(50)].astype(int)
    s = np.round(rng.normal(size=90) + y, 1)
    assert paired_auc_diff(y, s, s, n_resamples=500, seed=2) == (0.0, 0.0, 0.0)
    out = summarize_attacks(y, {"a": s, "twin": s.copy()}, n_resamples=500, seed=2)
    assert out["a"]["vs_best"] == {"best": "a", "diff": 0.0, "ci95": [0.0, 0.0], "tied": True}
    assert out["twin"]["vs_best"] == {"best": "a", "diff": 0.0, "ci95": [0.0, 0.0], "tied": True}


def test_an_attack_that_wins_every_resample_has_an_interval_above_zero():
    """B is A with 6 members' scores lowered: no member/non-member pair gets better, so AUC(B) ≤ AUC(A) on every
    resample. The two AUC intervals overlap; the paired interval of the difference does not contain 0."""
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(60), np.zeros(60)].astype(int)
    a = rng.normal(size=120) + y
    b = a.copy()
    b[:6] -= 3
    reps = stratified_bootstrap(y, [a, b], n_resamples=1000, seed=0)
    assert (reps.auc[:, 0] >= reps.auc[:, 1]).all()
    diff = paired_auc_diff(y, a, b, n_resamples=1000, seed=0)
    assert diff.diff == auc(y, a) - auc(y, b) and 0 < diff.lo <= diff.hi
    assert auc_bootstrap_ci(y, b, seed=0)[1] > auc_bootstrap_ci(y, a, seed=0)[0]  # unpaired: overlapping intervals
    out = summarize_attacks(y, {"b": b, "a": a}, n_resamples=1000, seed=0)
    assert out["b"]["vs_best"]["best"] == "a" and out["b"]["vs_best"]["tied"] is False
    assert out["b"]["vs_best"]["ci95"] == [diff.lo, diff.hi]


def test_bootstrap_replicates_equal_a_naive_loop_over_the_same_resamples():
    """Same seed, same index draws (members first, then non-members): every replicate's AUC (by scikit-learn),
    conservative TPR and paired difference, computed one resample at a time."""
    rng = np.random.default_rng(5)
    y = np.r_[np.ones(7), np.zeros(9)].astype(int)
    scores = [np.round(rng.normal(size=16) + y, 0), rng.normal(size=16), np.round(rng.normal(size=16) + 2 * y, 1)]
    fprs = [0.0, 0.1, 0.11, 0.25, 0.5, 1.0]  # 0, 0, 0, 2, 4 and 9 of 9 non-members allowed
    reps = stratified_bootstrap(y, scores, n_resamples=60, seed=11, fprs=fprs)

    draw = np.random.default_rng(11)
    ip, ineg = draw.integers(0, 7, (60, 7)), draw.integers(0, 9, (60, 9))
    naive_auc, naive_tpr = np.empty((60, 3)), np.empty((60, 3, len(fprs)))
    for r in range(60):
        for a, s in enumerate(scores):
            sample = np.r_[s[y == 1][ip[r]], s[y == 0][ineg[r]]]
            naive_auc[r, a] = roc_auc_score(y, sample)
            naive_tpr[r, a] = [tpr_at_fpr(y, sample, fpr=f) for f in fprs]
    np.testing.assert_allclose(reps.auc, naive_auc, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(reps.tpr, naive_tpr)
    naive_diff = naive_auc[:, 2] - naive_auc[:, 0]
    np.testing.assert_allclose(reps.auc[:, 2] - reps.auc[:, 0], naive_diff, rtol=0, atol=1e-12)
    d = paired_auc_diff(y, scores[2], scores[0], n_resamples=60, seed=11)
    np.testing.assert_allclose([d.lo, d.hi], np.quantile(naive_diff, [0.025, 0.975]), rtol=0, atol=1e-12)
    np.testing.assert_allclose(auc_bootstrap_ci(y, scores[1], n_resamples=60, seed=11),
                               np.quantile(naive_auc[:, 1], [0.025, 0.975]), rtol=0, atol=1e-12)


def test_summary_intervals_share_the_resamples_and_mark_ties_with_the_best():
    rng = np.random.default_rng(2)
    y = np.r_[np.ones(150), np.zeros(150)].astype(int)
    strong = rng.normal(size=300) + 1.5 * y
    scores = {"weak": rng.normal(size=300) + 0.2 * y, "strong": strong, "close": strong + 0.05 * rng.normal(size=300)}
    out = summarize_attacks(y, scores, n_resamples=400, seed=7)
    best = max(scores, key=lambda n: auc(y, scores[n]))
    for name, m in out.items():
        assert m["auc_ci95"] == list(auc_bootstrap_ci(y, scores[name], n_resamples=400, seed=7))
        assert m["unresolved"] == {"tpr@0.1%fpr": "n/a (needs ≥ 1,000 non-members)"} and m["tpr@0.1%fpr_ci95"] is None
        for key in ("tpr@10%fpr", "tpr@1%fpr"):
            lo, hi = m[f"{key}_ci95"]
            assert 0.0 <= lo <= hi <= 1.0 and m[key] == tpr_at_fpr(y, scores[name], fpr=TPR_POINTS[key])
        vs = m["vs_best"]
        assert vs["best"] == best and vs["diff"] == out[best]["auc"] - m["auc"]
        assert vs["tied"] == (vs["ci95"][0] <= 0 <= vs["ci95"][1])
    other = "close" if best == "strong" else "strong"
    assert out[other]["vs_best"]["tied"] is True and out["weak"]["vs_best"]["tied"] is False
    assert vs_best_text(best, out[best]) == "best" and vs_best_text(other, out[other]).endswith(" ≈ best")
    assert "≈" not in vs_best_text("weak", out["weak"]) and vs_best_text("old", {"auc": 0.7}) == "-"
    one = summarize(y, scores["weak"], n_resamples=400, seed=7)
    assert one == {k: v for k, v in out["weak"].items() if k != "vs_best"}


def test_no_resamples_means_no_intervals():
    y = np.r_[np.ones(20), np.zeros(20)].astype(int)
    out = summarize_attacks(y, {"a": -np.arange(40.0), "b": np.arange(40.0)}, n_resamples=0)
    assert out["a"]["auc_ci95"] is None and out["a"]["tpr@10%fpr_ci95"] is None
    assert out["b"]["vs_best"] == {"best": "a", "diff": 1.0, "ci95": None, "tied": None}
    assert vs_best_text("b", out["b"]) == "1.000"


def test_results_table_and_report_mark_attacks_tied_with_the_best(tmp_path):
    from lmaudit.report.build import build_report
    from lmaudit.runs.mia import MIAResult, RunConfig
    from lmaudit.runs.mia_notes import results_table

    rng = np.random.default_rng(2)
    y = np.r_[np.ones(60), np.zeros(60)].astype(int)
    strong = rng.normal(size=120) + 1.5 * y
    scores = {"strong": strong, "close": strong + 0.05 * rng.normal(size=120), "weak": rng.normal(size=120)}
    attacks = {n: {"params": {}, "forwards_per_sample": 1, **m}
               for n, m in summarize_attacks(y, scores, n_resamples=200).items()}
    result = MIAResult(RunConfig(n_bootstrap=200), {"kind": "ar", "path": "/t", "fingerprint": "f"}, None, 60, 60,
                       attacks, scores, y, [f"s{i}" for i in range(120)], {})
    console = Console(record=True, width=400)
    console.print(results_table(result))
    text = console.export_text()
    assert "Δ vs best [95% CI]" in text and "≈ best" in text and "read from these intervals" in text
    assert "TPR@0.1%FPR: n/a (needs ≥ 1,000 non-members), 60 here" in text

    result.write(tmp_path / "run")
    report = build_report(tmp_path / "run")
    header, rows = report.sections[0].table
    cells = {row[0]: dict(zip(header, row)) for row in rows}
    tied = [n for n in scores if attacks[n]["vs_best"]["tied"] and attacks[n]["vs_best"]["best"] != n]
    assert tied and all(cells[n]["Δ vs best [95% CI]"].endswith("≈ best") for n in tied)
    assert cells["weak"]["Δ vs best [95% CI]"].count("≈") == 0
    best = attacks["weak"]["vs_best"]["best"]
    assert cells[best]["Δ vs best [95% CI]"] == "best"
    lo, hi = attacks[best]["tpr@10%fpr_ci95"]
    assert cells[best]["TPR@10%FPR"] == f"{100 * attacks[best]['tpr@10%fpr']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"
    assert READING_NOTE in report.sections[0].text and "200 resamples" in report.sections[0].text


def test_a_report_of_results_written_before_paired_intervals_still_renders(tmp_path):
    from lmaudit.report.build import build_report

    y = np.r_[np.ones(30), np.zeros(30)].astype(int)
    pd.DataFrame({"id": [f"s{i}" for i in range(60)], "label": y, "loss": np.arange(60.0)}).to_parquet(
        tmp_path / "scores.parquet")
    old = {"params": {}, "auc": 0.8, "auc_ci95": [0.7, 0.9], "tpr@10%fpr": 0.5, "tpr@1%fpr": None,
           "tpr@0.1%fpr": None, "unresolved": {"tpr@1%fpr": "n/a (needs ≥ 100 non-members)",
                                                "tpr@0.1%fpr": "n/a (needs ≥ 1,000 non-members)"}}
    res = {"config": {"seed": 0}, "target": {"path": "/t", "fingerprint": "f", "kind": "ar"}, "reference": None,
           "n_members": 30, "n_nonmembers": 30, "attacks": {"loss": old}}
    (tmp_path / "results.json").write_text(json.dumps(res))
    write_manifest(tmp_path, "run")
    header, rows = build_report(tmp_path).sections[0].table
    assert rows == [["loss", "0.800", "[0.700, 0.900]", "-", "50.0%", "n/a (needs ≥ 100 non-members)",
                     "n/a (needs ≥ 1,000 non-members)", "1", "-"]]


def test_run_mia_writes_paired_comparisons_and_tpr_intervals(tiny_model_dir, tmp_path):
    from helpers import make_texts, write_jsonl
    from lmaudit.data.loaders import load_texts
    from lmaudit.models.loading import load_causal_lm
    from lmaudit.runs.mia import RunConfig, run_mia

    members = load_texts(write_jsonl(tmp_path / "m.jsonl", make_texts(24, seed=1)))
    nonmembers = load_texts(write_jsonl(tmp_path / "n.jsonl", make_texts(24, seed=2)))
    result = run_mia(load_causal_lm(tiny_model_dir), members, nonmembers,
                     config=RunConfig(attacks=["loss", "min_k", "zlib"], n_bootstrap=100, use_cache=False))
    data = json.loads(result.write(tmp_path / "run").read_text())["attacks"]
    y = result.labels
    expected = summarize_attacks(y, result.scores, n_resamples=100, seed=0)
    for name, m in data.items():
        assert {k: m[k] for k in expected[name]} == expected[name]
        assert m["vs_best"]["best"] == max(data, key=lambda n: data[n]["auc"])
        assert m["tpr@10%fpr_ci95"] is not None and m["tpr@1%fpr_ci95"] is None  # 24 non-members resolve 10% only
