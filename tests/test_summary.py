"""The verdict that opens every report, the per-record p-values, and progress lines without a terminal."""

import io
import json

import numpy as np
import pandas as pd
import pytest

from lmaudit.progress import LineBar, progress
from lmaudit.report.build import build_report, unresolved_cells
from lmaudit.report.summary import (
    audit_summary,
    experiment_summary,
    extraction_summary,
    member_exposure,
    mia_level,
    mia_summary,
    pii_summary,
    strongest_attack,
)
from report_folders import audit_folder, extraction_folder, mia_folder, pii_folder


def attack(auc, tpr, **extra):
    m = {"auc": auc, "auc_ci95": [auc - 0.05, auc + 0.05], "tpr@1%fpr": tpr, **extra}
    if tpr is None:
        m["unresolved"] = {"tpr@1%fpr": "n/a (needs ≥ 100 non-members)"}
    return m


def at(auc, tpr):
    """An attack whose AUC interval starts at its value: the level reads the lower end, so the bounds are tested
    at the value."""
    return {**attack(auc, tpr), "auc_ci95": [auc, auc + 0.05]}


@pytest.mark.parametrize("attacks, level", [
    ({"a": at(0.55, 0.015)}, "low"),  # both readings under the first bounds
    ({"a": at(0.55, 0.02)}, "moderate"),  # TPR reaches 2%
    ({"a": at(0.74, 0.05), "b": at(0.58, 0.09)}, "moderate"),
    ({"a": at(0.80, 0.05)}, "high"),  # AUC reaches 0.75
    ({"a": at(0.70, 0.12)}, "high"),  # TPR reaches 10%
    ({"a": at(0.80, 0.35)}, "severe"),  # TPR reaches 30%
    ({"a": at(0.92, 0.05)}, "severe"),  # AUC reaches 0.90
    ({"a": at(0.92, None)}, "severe"),  # an unmeasured TPR is left out; AUC alone
    ({"a": at(0.65, None)}, "moderate"),
])
def test_exposure_level_follows_the_stated_rule(attacks, level):
    assert mia_level(attacks) == level


def test_strongest_attack_is_the_best_tpr_at_1pct_then_auc():
    assert strongest_attack({"a": attack(0.95, 0.10), "b": attack(0.80, 0.20)}) == "b"
    assert strongest_attack({"a": attack(0.85, 0.20), "b": attack(0.80, 0.20)}) == "a"  # tie: the higher AUC
    assert strongest_attack({"a": attack(0.70, None), "b": attack(0.90, None)}) == "b"  # none measured: AUC
    assert strongest_attack({"a": attack(0.99, None), "b": attack(0.60, 0.02)}) == "b"


def test_member_p_values_and_ranks_by_hand():
    scores = np.array([5.0, 3.0, 1.0, 3.0, 4.0, 2.0, 3.0, 0.0])
    labels = np.array([1, 1, 1, 1, 0, 0, 0, 0])
    p, rank = member_exposure(scores, labels)
    # non-members score 4, 2, 3, 0: members 5 → none ≥; 3 → {4, 3}; 1 → {4, 2, 3}
    assert p[:4].tolist() == [0.0, 0.5, 0.75, 0.5]
    assert p[4:].tolist() == [0.25, 0.75, 0.5, 1.0]  # a non-member counts itself
    assert rank[:4].tolist() == [1, 2, 4, 2] and np.isnan(rank[4:]).all()  # equal scores share the best rank


def test_scores_parquet_stores_p_value_and_rank_of_the_strongest_attack(tmp_path):
    folder, result = mia_folder(tmp_path / "run")
    best = strongest_attack(result.attacks)
    assert best == "min_k"  # the attack built to separate strongly
    frame = pd.read_parquet(folder / "scores.parquet")
    assert {"p_value", "rank"} <= set(frame.columns) and len(frame) == 180
    s, labels = frame[best].to_numpy(), frame["label"].to_numpy()
    nonmembers = s[labels == 0]
    for i in (0, 7, 33):  # a member's p-value is the fraction of non-members scoring at least as high
        assert frame["p_value"][i] == pytest.approx(np.mean(nonmembers >= s[i]))
    members = frame[labels == 1]
    assert members.loc[members[best].idxmax(), "rank"] == 1
    assert sorted(members["rank"].astype(int)) == list(range(1, 61))  # no ties among continuous scores
    assert frame.loc[labels == 0, "rank"].isna().all()


def hand_made_mia(tmp_path, *, tpr_ci=None, n_nonmembers=300):
    """A mia folder whose results.json holds hand-set metrics (the scores come from mia_folder)."""
    folder, _ = mia_folder(tmp_path / "run", n_nonmembers=n_nonmembers)
    res = json.loads((folder / "results.json").read_text())
    tpr = 0.06 if n_nonmembers >= 100 else None
    res["attacks"] = {"loss": attack(0.71, tpr and 0.04), "min_k": attack(0.74, tpr)}
    if tpr_ci:
        res["attacks"]["min_k"]["tpr@1%fpr_ci95"] = tpr_ci
    for m in res["attacks"].values():
        m.update(params={}, forwards_per_sample=1, **{"tpr@10%fpr": 0.3, "tpr@0.1%fpr": None})
    (folder / "results.json").write_text(json.dumps(res))
    return folder, res


def test_mia_summary_of_hand_made_metrics(tmp_path):
    folder, res = hand_made_mia(tmp_path)
    s = build_report(folder).summary  # read from the folder's results.json
    assert s == mia_summary([("AR target", res)], {"AR target": s_exposed(folder)})
    assert s.headline == "Exposure: moderate" and s.level == "moderate"
    assert s.points[0].startswith("Strongest attack: min_k identifies 6.0% of members at 1% false positives "
                                  "(AUC 0.740, 95% interval 0.690–0.790)")
    assert "Low: TPR < 2% and AUC < 0.60; moderate: TPR < 10% and AUC < 0.75" in s.rule
    assert "not guarantees" in s.points[-1] and "DP-SGD" in s.points[-1]


def s_exposed(folder) -> int:
    """Members scoring above every non-member under min_k, from scores.parquet."""
    frame = pd.read_parquet(folder / "scores.parquet")
    return int((frame.loc[frame["label"] == 1, "p_value"] == 0).sum())


def test_mia_summary_uses_the_tpr_interval_when_results_have_it(tmp_path):
    _, res = hand_made_mia(tmp_path, tpr_ci=[0.031, 0.095])
    s = mia_summary([("AR target", res)])
    assert "min_k identifies 6.0% of members at 1% false positives (95% interval 3.1%–9.5%; AUC 0.740)" in s.points[0]


def test_mia_summary_says_na_when_too_few_nonmembers(tmp_path):
    _, res = hand_made_mia(tmp_path, n_nonmembers=60)
    s = mia_summary([("AR target", res)])
    assert s.points[0].startswith("Strongest attack: min_k: TPR at 1% FPR n/a (needs ≥ 100 non-members), 60 here; "
                                  "AUC 0.740")
    assert s.level == "moderate"  # from the AUC of 0.74 alone


def test_a_low_level_is_a_finding_not_a_guarantee():
    res = {"attacks": {"loss": attack(0.52, 0.01)}, "n_members": 3000, "n_nonmembers": 3000}
    s = mia_summary([("AR target", res)])
    assert s.level == "low" and "not a guarantee" in s.points[-1]


@pytest.mark.parametrize("res, why", [
    # 5 members against 4 non-members, AUC 0.55 [0.20, 0.90]: nothing is ruled out
    ({"attacks": {"loss": {"auc": 0.55, "auc_ci95": [0.20, 0.90], "tpr@1%fpr": None}}, "n_members": 5,
      "n_nonmembers": 4}, "AUC up to 0.90, TPR at 1% FPR not measured (it takes 100 non-members), on 5 members vs 4 "
                          "non-members; about 258 members and 258 non-members drawn alike would tell"),
    # 20 + 20 served texts, AUC 0.477 [0.285, 0.670]
    ({"attacks": {"loss": {"auc": 0.477, "auc_ci95": [0.285, 0.670], "tpr@1%fpr": None}}, "n_members": 20,
      "n_nonmembers": 20}, "AUC up to 0.67"),
    # a chance TPR of 1% on 500 members: its exact upper end (2.3%) does not exclude 2%
    ({"attacks": {"loss": attack(0.52, 0.01)}, "n_members": 500, "n_nonmembers": 500}, "TPR at 1% FPR up to 2.3%"),
])
def test_low_must_rule_moderate_out_or_the_verdict_is_cannot_tell_with_the_sizes_that_would(res, why):
    s = mia_summary([("", res)])
    assert s.level is None and s.headline.startswith("Exposure: cannot tell (the 95% intervals do not rule out "
                                                     "moderate exposure: ") and why in s.headline


def test_two_parts_are_each_judged_and_the_headline_is_the_worse():
    ar = {"attacks": {"loss": attack(0.55, 0.01)}, "n_members": 300, "n_nonmembers": 300}
    dlm = {"attacks": {"q_skew": attack(0.80, 0.12)}, "n_members": 100, "n_nonmembers": 100}
    s = mia_summary([("AR target", ar), ("DLM target", dlm)], {"AR target": 0, "DLM target": 4})
    assert s.headline == "Exposure: high"
    assert s.points[0].startswith("AR target (exposure cannot tell): strongest attack: loss")  # 300 + 300: too few
    assert s.points[1].startswith("DLM target (exposure high): strongest attack: q_skew identifies 12.0%")
    assert "4 of the 100 members score above every non-member" in s.points[1]


def test_audit_summary_is_rho_and_its_interval_in_one_sentence(tmp_path):
    res = json.loads((audit_folder(tmp_path / "a") / "results.json").read_text())
    est = res["methods"]["smi-m"]
    lo, hi = est["ci90"]
    s = audit_summary(res)
    assert s.points[0].startswith(f"SMI-M estimates ρ = {est['rho']:.2f} (90% interval {lo:.2f}–{hi:.2f}): about "
                                  f"{100 * est['rho']:.0f}% of the 80 suspect texts behave like texts the model "
                                  "never saw")
    assert 0.15 < est["rho"] < 0.5  # 30% of the suspect set was drawn like the non-members
    assert f"(SMI: ρ = {res['methods']['smi']['rho']:.2f}" in s.points[0]


def test_extraction_summary_is_the_share_extractable_at_n_and_p(tmp_path):
    res = json.loads((extraction_folder(tmp_path / "x") / "results.json").read_text())
    s = extraction_summary(res)
    # p̂ = 0.01 within 10,000 queries: 1 − 0.99^10000 ≈ 1 ≥ 0.99, for 3 records at max steps (2 at one step)
    assert s.points[0] == ("Extractable within n = 10,000 queries (mask suffix:32): 3 of 10 records (30.0%) with "
                           "probability ≥ 0.5 (at max denoising steps); 3 of 10 records (30.0%) with probability ≥ "
                           "0.99 (at max denoising steps). Step counts compared: 1, max; the most exposing is given.")
    assert s.level == "severe" and "20% or more" in s.rule


def test_pii_summary_is_the_best_signals_top1_asr_and_coverage(tmp_path):
    res = json.loads((pii_folder(tmp_path / "p") / "results.json").read_text())
    s = pii_summary(res)
    assert s.points[0] == ("The best ranking signal, combined, puts the true email first for 5 of 20 redacted records "
                           "(top-1 ASR 25.0%).")
    assert "12 records (60.0%)" in s.points[1] and s.level == "severe"
    res["asr"] = {"ce": {"count": 0, "percent": 0.0}}
    low = pii_summary(res)
    assert low.level == "low" and "not a guarantee" in low.points[-1]


def test_experiment_summary_and_unresolved_tpr_cells():
    rows = {"loss": {"auc": [0.7, 0.01], "tpr@10%fpr": [0.2, 0.0], "tpr@1%fpr": [float("nan"), float("nan")]},
            "q_skew": {"auc": [0.93, 0.02], "tpr@10%fpr": [0.8, 0.0], "tpr@1%fpr": [float("nan"), float("nan")]}}
    res = {"experiment": {"name": "e", "seeds": [0, 1], "description": "d"}, "rows": rows}
    s = experiment_summary(res)
    assert s.level == "severe" and "q_skew, TPR at 1% FPR n/a (needs ≥ 100 non-members), AUC 0.930" in s.points[0]
    header = ["attack", "AUC", "TPR@10%FPR", "TPR@1%FPR", "TPR@0.1%FPR"]
    cells = unresolved_cells(header, [["loss", "70.0 ± 1.0", "20.0 ± 0.0", "nan ± nan", "nan"]])
    assert cells == [["loss", "70.0 ± 1.0", "20.0 ± 0.0", "n/a (needs ≥ 100 non-members)",
                      "n/a (needs ≥ 1,000 non-members)"]]
    assert experiment_summary({"experiment": {"name": "x", "seeds": [0]}, "unlearning": {}}).level is None


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_line_bar_reports_every_tenth_with_rate_and_eta():
    clock, out = Clock(), io.StringIO()
    bar = LineBar("train", 50, stream=out, clock=clock)
    for _ in range(50):
        clock.t += 0.5  # 2 steps per second
        bar.advance(1)
        bar.update(extra="[dim]loss 1.000[/dim]")
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and all(lines)
    assert lines[0] == "train: 5/50 (10%), 2.0/s, elapsed 0:02, ETA 0:22, loss 1.000"
    assert lines[4] == "train: 25/50 (50%), 2.0/s, elapsed 0:12, ETA 0:12, loss 1.000"
    assert lines[-1] == "train: 50/50 (100%), 2.0/s, done in 0:25, loss 1.000"
    bar.finish()
    assert out.getvalue().splitlines() == lines  # the last line once


def test_line_bar_reports_every_30_s_when_the_tenths_are_slow():
    clock, out = Clock(), io.StringIO()
    bar = LineBar("probe", 1000, stream=out, clock=clock)
    for _ in range(20):
        clock.t += 10.0
        bar.advance(1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 6 and lines[0] == "probe: 3/1,000 (0%), 6.0/min, elapsed 0:30, ETA 2:46:10"


def test_line_bar_rate_is_that_since_the_previous_line():
    clock, out = Clock(), io.StringIO()
    bar = LineBar("train", 100, stream=out, clock=clock)
    clock.t = 20.0  # a slow first step (a warm-up) ...
    bar.advance(10)
    for _ in range(10):
        clock.t += 0.125  # ... then 8 steps per second
        bar.advance(1)
    lines = out.getvalue().splitlines()
    assert lines[0] == "train: 10/100 (10%), 30.0/min, elapsed 0:20, ETA 3:00"
    assert lines[1] == "train: 20/100 (20%), 8.0/s, elapsed 0:21, ETA 0:10"
    bar.finish()
    assert out.getvalue().splitlines()[-1] == "train: 20/100 (20%), 56.5/min, done in 0:21"  # the mean rate


def test_line_bar_rate_leaves_out_what_a_resumed_run_had_done():
    clock, out = Clock(), io.StringIO()
    bar = LineBar("probe", 100, stream=out, clock=clock)
    bar.advance(50)  # cached shards, at once
    clock.t += 10.0
    bar.advance(10)
    assert out.getvalue().splitlines()[-1] == "probe: 60/100 (60%), 1.0/s, elapsed 0:10, ETA 0:40"


def test_progress_without_a_terminal_prints_the_outermost_lines_and_inner_work_every_30_s(monkeypatch, capsys):
    monkeypatch.delenv("LMAUDIT_PROGRESS", raising=False)
    with progress("outer", 2) as bar:
        with progress("inner", 5) as inner:
            inner.advance(5)  # quick inner work: no line of its own
        bar.advance(2)
    err = capsys.readouterr().err
    assert err.splitlines() == [err.splitlines()[0]] and err.startswith("outer: 2/2 (100%)") and "inner" not in err
    # slow inner work (a served model's texts inside one shard): a line each 30 s, no last line of its own
    clock, out = Clock(), io.StringIO()
    inner = LineBar("served probe", 60, stream=out, clock=clock, nested=True)
    for _ in range(60):
        clock.t += 4.0  # 15 texts a minute
        inner.advance(1)
    inner.finish()
    lines = out.getvalue().splitlines()
    assert len(lines) == 7 and lines[0] == "served probe: 8/60 (13%), 15.0/min, elapsed 0:32, ETA 3:28"
    monkeypatch.setenv("LMAUDIT_PROGRESS", "0")
    with progress("off", 2) as bar:
        bar.advance(2)
    assert capsys.readouterr().err == ""


def test_progress_on_a_terminal_shows_inner_work_as_a_row_of_the_outer_display(monkeypatch):
    import rich.console

    import lmaudit.progress as progress_module

    monkeypatch.delenv("LMAUDIT_PROGRESS", raising=False)
    monkeypatch.setattr(progress_module, "_stderr_is_terminal", lambda: True)
    monkeypatch.setattr(progress_module, "console", rich.console.Console(file=io.StringIO(), force_terminal=True))
    with progress("outer", 2) as bar:
        live = progress_module._state["live"]
        with progress("inner", 5) as inner:  # one live display: a second one fails on rich 13
            assert progress_module._state["live"] is live
            assert [t.description for t in live.tasks] == ["outer", "inner"]
            inner.advance(5)
        assert [t.description for t in live.tasks] == ["outer"]  # the row goes with its work
        bar.advance(2)
    assert progress_module._state["live"] is None
