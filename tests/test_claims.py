"""CLAIMS.md: verdicts follow the interval rule, missing or older experiments say so, the committed file is current."""

import json
from pathlib import Path

import pytest

from helpers import assert_ok, assert_user_error, lmaudit
from lmaudit.claims.gapk import finetuned_gap
from lmaudit.claims.pii import pii_combined
from lmaudit.claims.qskew import misaligned, q_skew_beats_baselines
from lmaudit.claims.smi import smi_closest, smi_coverage
from lmaudit.claims.table import CLAIMS, build_claims, judge_all
from lmaudit.claims.verdicts import (
    AGAINST,
    AT_THIS_SIZE,
    INCONCLUSIVE,
    MIXED,
    NOT_REPRODUCED,
    NOT_RUN,
    REPRODUCED,
    SMALLER,
)

REPO = Path(__file__).resolve().parents[1]


def mia_record(intervals: dict[str, list[tuple[float, float, float]]]) -> dict:
    """A dlm-dft-like record: q_skew paired against each baseline, one (diff, lo, hi) per seed."""
    rows = {name: {"auc": [0.8, 0.01]} for name in ["q_skew", *intervals]}
    vs = {b: [{"seed": i, "diff": d, "ci95": [lo, hi]} for i, (d, lo, hi) in enumerate(per_seed)]
          for b, per_seed in intervals.items()}
    return {"rows": rows, "paired": {"compare": "q_skew", "vs": vs}}


AHEAD, TIED, BEHIND = (0.05, 0.02, 0.08), (0.01, -0.02, 0.04), (-0.05, -0.08, -0.02)


@pytest.mark.parametrize("intervals, verdict", [
    ({"loss": [AHEAD] * 3, "calibration": [AHEAD] * 3}, REPRODUCED),
    ({"loss": [AHEAD] * 3, "calibration": [AHEAD, AHEAD, TIED]}, MIXED),  # a tied seed is not support: mixed
    ({"loss": [AHEAD] * 3, "calibration": [BEHIND] * 3}, MIXED),  # one baseline ahead of Q-Skew on every seed
    ({"loss": [BEHIND] * 3, "calibration": [BEHIND] * 3}, AGAINST),
])
def test_q_skew_verdict_is_read_from_the_paired_intervals(intervals, verdict):
    f = q_skew_beats_baselines("dlm-dft")({"dlm-dft": mia_record(intervals)})
    assert f.verdict == verdict
    # each seed, own interval (no size given here: the direction alone)
    assert "loss +5.0 [+2.0, +8.0], +5.0 [+2.0, +8.0], +5.0 [+2.0, +8.0] (seeds: 3 reproduced)" in f.ours \
        or verdict == AGAINST
    assert q_skew_beats_baselines("dlm-dft", effect=0.097)({"dlm-dft": mia_record(
        {"loss": [AHEAD] * 3})}).verdict == SMALLER  # +5.0 [+2.0, +8.0] excludes the paper's +9.7
    if "calibration -5.0" in f.ours:
        assert "Ahead of Q-Skew on every seed: " in f.ours and "calibration" in f.ours.split("every seed: ")[-1]


def test_pii_claim_pairs_the_same_records():
    ranks = {"ce": {"email": [[1, 2, 2, 3, None]]}, "combined": {"email": [[1, 1, 1, 1, None]]}}
    rec = {"fields": {"email": {"coverage": [80.0], "alpha": [0.0]}}, "asr": {"ce": {"email": [20.0]},
           "combined": {"email": [80.0]}}, "ranks": ranks, "experiment": {"epochs": 150, "n_members": 30},
           "n_targets": 25, "n_calibration": 5}
    f = pii_combined("combined", "ce", better=True)({"pii-reconstruction": rec})
    # 3 of 5 records won by combined, none lost: +60 points; fewer than 2 wins in a resample has probability 8.7%,
    # so the 2.5% bound is one win of five (+20), above 0
    assert "inference email: combined 80.0% vs ce 20.0%, difference +60.0 [+20.0, +100.0]" in f.ours
    assert f.verdict == REPRODUCED
    assert "fine-tuned 150 epochs on 30 messages" in f.regime and "fitted on 5 known messages: 0" in f.regime
    # a fitted α of 0 makes combined CE itself (a tie that cannot fail): the claim is judged at the paper's α = 0.1
    rec["ranks"] = {**ranks, "combined_paper": ranks["combined"], "combined": ranks["ce"]}
    rec["asr"] = {**rec["asr"], "combined_paper": {"email": [80.0]}, "combined": {"email": [20.0]}}
    f = pii_combined("combined_paper", "ce", better=True, beside="combined")({"pii-reconstruction": rec})
    assert f.verdict == REPRODUCED and "Beside it, combined (fitted α, not judged): inference email: combined 20.0% " \
        "vs ce 20.0%, difference +0.0 [+0.0, +0.0]" in f.ours
    rec["ranks"]["combined_paper"] = ranks["ce"]  # the same hits on every record: [0, 0] measures nothing
    assert pii_combined("combined_paper", "ce", better=True)({"pii-reconstruction": rec}).verdict == AT_THIS_SIZE


def test_missing_and_older_experiments_are_not_run_naming_the_command():
    judged = dict((c.claim, f) for c, f, _ in judge_all({"dlm-dft": {"rows": {}}}))  # an older record: no 'paired'
    dft = judged[CLAIMS[0].claim]
    assert dft.verdict == NOT_RUN and "lacks 'paired'" in dft.ours \
        and "lmaudit run experiments/dlm-dft.toml" in dft.regime
    ift = judged[CLAIMS[1].claim]
    assert ift.verdict == NOT_RUN and "`results/dlm-ift` is missing" in ift.ours


def test_claims_command_writes_one_row_per_claim(tmp_path):
    (tmp_path / "dlm-dft").mkdir()
    (tmp_path / "dlm-dft" / "results.json").write_text(json.dumps(mia_record({"loss": [AHEAD] * 3})))
    assert_ok(lmaudit("claims", str(tmp_path)))
    text = (tmp_path / "CLAIMS.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| claim |")]
    assert len(rows) == len(CLAIMS)
    assert "| **smaller** |" in rows[0] and "[dlm-dft](dlm-dft/table.md)" in rows[0]  # +5.0 [+2.0, +8.0] vs +9.7
    assert_user_error(lmaudit("claims", str(tmp_path / "nope")), "is not a folder")
    (tmp_path / "dlm-dft" / "results.json").write_text("{")
    assert_user_error(lmaudit("claims", str(tmp_path)), "dlm-dft/results.json: cannot read")


def test_the_committed_claims_are_those_the_committed_results_give():
    committed = (REPO / "results" / "CLAIMS.md").read_text()
    assert committed == build_claims(REPO / "results") + "\n", "rerun `lmaudit claims` after changing results/"


@pytest.mark.parametrize("cost, mis_auc, verdict", [
    ((0.05, 0.0, 0.10), 0.99, MIXED),  # a drop of 0 to 10 points holds the paper's 5.0: inconclusive; the lead
    # over the baseline (+14 points, against the paper's +8.2) reproduced: a mixed row
    ((0.02, 0.01, 0.03), 0.99, REPRODUCED),  # a drop shown below the paper's 5.0, and the lead
    ((0.10, 0.07, 0.13), 0.70, AGAINST),  # a drop shown above the paper's 5.0, and below the strongest baseline
])
def test_misaligned_reference_cost_is_read_from_golden_minus_misaligned(cost, mis_auc, verdict):
    auc = lambda a: {"auc": [a, 0.0], "per_seed": [{"auc": a}] * 3}  # noqa: E731
    rows = {"golden / q_skew": auc(0.99), "golden / calibration": auc(0.85), "other-seed / q_skew": auc(mis_auc),
            "other-seed / calibration": auc(0.84)}
    vs = {k: [{"seed": i, "diff": cost[0], "ci95": list(cost[1:])} for i in range(3)]
          for k in rows if k != "golden / q_skew"}
    f = misaligned({"dlm-misaligned-ref": {"rows": rows, "paired": {"compare": "golden / q_skew", "vs": vs},
                                           "experiment": {"n_members": 200, "n_nonmembers": 200, "seeds": [0, 1, 2]}}})
    assert f.verdict == verdict
    assert "the strongest golden-reference baseline (golden / calibration, 85.0 ± 0.0)" in f.ours
    assert "unpaired: Hanley and McNeil" in f.ours  # the lead's interval is computed from the two AUCs


def coverage_record(none: list, retrain: list, seeds: int = 2) -> dict:
    """Per seed, the 90% intervals of 'none' and 'retrain' over as many forget fractions as given."""
    iv = {}
    for i, (a, b) in enumerate(zip(none, retrain)):
        iv[f"0.{i + 1:02d} / none / smi-m"] = [a] * seeds
        iv[f"0.{i + 1:02d} / retrain / smi-m"] = [b] * seeds
    iv["0.01 / npo / smi-m"] = [[0.2, 0.3]] * seeds  # npo's true ρ is unknown: not counted
    return {"unlearning-audit": {"intervals": iv, "experiment": {"seeds": list(range(seeds))}}}


def test_interval_coverage_is_judged_per_seed_not_pooled_over_fractions_and_seeds():
    hold = coverage_record([[0.0, 0.1]] * 15, [[0.8, 1.0]] * 15)  # 30 intervals per seed, all holding the truth
    f = smi_coverage(hold)
    assert f.verdict == REPRODUCED and "smi-m 30/30 [88.6, 100.0]%, 30/30" in f.ours  # Wilson lower 88.6% > 80%
    miss = coverage_record([[0.1, 0.2]] * 15, [[0.5, 0.7]] * 15)
    assert smi_coverage(miss).verdict == AGAINST  # below 80% with confidence, on every seed
    # 2 intervals per seed (the tiny regime's 2 fractions × 'none' and 'retrain'): even full coverage cannot show 80%,
    # a limit of our size; pooled over fractions and seeds this read 'reproduced' or 'not reproduced'
    few = smi_coverage(coverage_record([[0.0, 0.1]], [[0.5, 0.7]], seeds=3))
    assert few.verdict == AT_THIS_SIZE and "16 informative intervals" in few.regime
    # clipped ([0, 0], [1, 1]) and whole-range intervals hold the truth whatever the audit does: never counted
    degenerate = coverage_record([[0.0, 0.0]] * 20, [[0.0, 1.0]] * 20)
    assert smi_coverage(degenerate).verdict == AT_THIS_SIZE and "smi-m 0/0" in smi_coverage(degenerate).ours


def test_a_claim_is_judged_in_both_regimes_side_by_side(tmp_path):
    def real(diffs):
        rec = mia_record({"min_k_pp": diffs})
        rec["rows"] = {"gap_k": {"auc": [0.6, 0.01]}, "min_k_pp": {"auc": [0.55, 0.02]}}
        return rec

    gap = next(c for c in CLAIMS if c.claim.startswith("Gap-K% beats Min-K%++"))
    assert gap.real_judge is not None and "real-dft-lora" in gap.real_experiments
    assert finetuned_gap("real-dft-lora")({"real-dft-lora": real([AHEAD] * 3)}).verdict == REPRODUCED
    assert finetuned_gap("real-dft-lora")({"real-dft-lora": real([AHEAD, TIED, AHEAD])}).verdict == MIXED
    # [−2, +4] holds 0 and the paper's +2.1: inconclusive
    assert finetuned_gap("real-dft-lora")({"real-dft-lora": real([TIED] * 3)}).verdict == INCONCLUSIVE
    # [−5.8, +0.5] holds 0 but excludes the paper's +2.1: not reproduced
    short = real([(-0.027, -0.058, 0.005)] * 3)
    assert finetuned_gap("real-dft-lora")({"real-dft-lora": short}).verdict == NOT_REPRODUCED
    judged = {c.claim: (f, r) for c, f, r in judge_all({"real-dft-lora": real([AHEAD] * 3)})}
    tiny, on_real = judged[gap.claim]
    assert tiny.verdict == NOT_RUN and on_real.verdict == REPRODUCED  # the two columns are judged apart
    assert judged[CLAIMS[0].claim][1].verdict == NOT_RUN  # the real-weights DLM's experiment is absent here


def test_the_real_gap_k_verdict_comes_from_continued_pretraining_when_it_was_run():
    from lmaudit.claims.table import REAL_PT

    gap = next(c for c in CLAIMS if c.claim.startswith("Gap-K% beats Min-K%++"))
    tuned = mia_record({"min_k_pp": [TIED] * 3})
    tuned["rows"] = {"gap_k": {"auc": [0.6, 0.01]}, "min_k_pp": {"auc": [0.6, 0.02]}}
    pretrained = {"paired": {"seen 4×": [{"seed": 0, "diff": 0.04, "ci95": [0.01, 0.07]}]},
                  "experiment": {"lr": 3e-5, "pretrain_tokens": 60_000, "seeds": [0], "attacks": ["gap_k", "min_k_pp"]},
                  "rows": {"seen 4×: gap_k": {"auc": [0.64, 0.0]}, "seen 4×: min_k_pp": {"auc": [0.6, 0.0]}}}
    both = gap.real_judge({"real-dft-lora": tuned, REAL_PT: pretrained})
    assert both.verdict == REPRODUCED and both.ours.startswith("continued pretraining: ")
    assert "After fine-tuning (members met in fine-tuning, not in pretraining; inconclusive there)" in both.ours
    assert "the paper's regime" not in both.ours + both.regime  # continued pretraining is an analogue, not the paper's
    assert "60,000 tokens" in both.regime and "the best attack is gap_k at 64.0 AUC" in both.regime
    assert gap.real_judge({"real-dft-lora": tuned}).verdict == INCONCLUSIVE  # fine-tuning alone: its own verdict


def test_an_audit_that_reads_none_like_retrain_cannot_be_the_closest_to_the_gold_standard():
    def rec(smi_m: tuple[float, float], other: tuple[float, float], half: float = 0.02, n: int = 3):
        cells = {"0.1 / none / smi-m": smi_m[0], "0.1 / retrain / smi-m": smi_m[1], "0.1 / none / smi": other[0],
                 "0.1 / retrain / smi": other[1]}
        return {"unlearning-audit": {
            "unlearning": {k: {"mean": v, "n_undefined": 0, "per_seed": [v] * n} for k, v in cells.items()},
            "intervals": {k: [[v - half, v + half]] * n for k, v in cells.items()},
            "experiment": {"seeds": list(range(n))}}}

    assert smi_closest(rec((0.02, 0.98), (0.3, 0.7))).verdict == REPRODUCED  # closer on every seed, both models
    stuck = smi_closest(rec((1.0, 1.0), (0.05, 0.95)))  # exactly 1 for retrain, but also for the untouched model
    assert stuck.verdict == MIXED and stuck.verdict.counts == "3 reproduced, 3 against the claim"
    assert "none (ρ = 0): smi-m 1.00 ± 0.00; other audit, its error − smi-m's: smi 0.05 ± 0.00 -0.95" in stuck.ours
    # audits without an interval (the thresholded ones) are points only, counted beside the judged seeds
    table = rec((0.02, 0.98), (0.3, 0.7))
    table["unlearning-audit"]["unlearning"]["0.1 / none / threshold-loss"] = {"per_seed": [0.1] * 3, "mean": 0.1}
    assert smi_closest(table).verdict.counts == "6 reproduced, 1 points only"
    # the std is the sample std (ddof = 1) of the per-seed values: [0, 0, 1] reads 0.58, not 0.47 (ddof = 0)
    three = rec((0.0, 1.0), (0.1, 0.9))
    three["unlearning-audit"]["unlearning"]["0.1 / none / smi-m"]["per_seed"] = [0.0, 0.0, 1.0]
    assert "smi-m 0.33 ± 0.58" in smi_closest(three).ours
