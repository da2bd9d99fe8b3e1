"""Every verdict rule of CLAIMS.md can fail: each judge given stored values that make each of its verdicts, and the
"why" text follows the stored data (a planted value changes it)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from lmaudit.claims import gapk as g
from lmaudit.claims import headline as h
from lmaudit.claims import more as m
from lmaudit.claims import others as o
from lmaudit.claims import pii as pii
from lmaudit.claims import qskew as q
from lmaudit.claims.table import build_claims
from lmaudit.claims.verdicts import (
    AGAINST,
    AT_THIS_SIZE,
    INCONCLUSIVE,
    MIXED,
    NOT_REPRODUCED,
    POINTS_ONLY,
    REPRODUCED,
    SMALLER,
    UNTESTABLE,
)
from lmaudit.seeds import pool_paired

REPO = Path(__file__).resolve().parents[1]


def rows(**per_seed):
    """A membership record's rows: {attack: [(auc, tpr@1%), ...] per seed}."""
    return {a: {"per_seed": [{"auc": x, "tpr@1%fpr": t} for x, t in v]} for a, v in per_seed.items()}


SETS = {"n_members": 200, "n_nonmembers": 200}  # the sets the unpaired AUC intervals are built from


def paired(**per_seed):
    return {"vs": {b: [{"seed": i, "diff": d, "ci95": [lo, hi]} for i, (d, lo, hi) in enumerate(v)]
                   for b, v in per_seed.items()}}


@pytest.mark.parametrize("tpr, verdict", [((0.3, 0.2, 0.4), REPRODUCED), ((-0.3, -0.4, -0.2), AGAINST),
                                          ((0.0, -0.1, 0.1), INCONCLUSIVE)])
def test_low_fpr_rule_reads_the_paired_tpr_difference(tpr, verdict):
    entry = {"tpr@1%fpr": {"diff": tpr[0], "ci95": list(tpr[1:])}}
    rec = {"rows": rows(q_skew=[(0.9, 0.5)] * 3, sama=[(0.8, 0.2)] * 3), "paired": {"vs": {"sama": [entry] * 3}}}
    assert h.tpr_at_1({"dlm-dft": rec}).verdict == verdict


@pytest.mark.parametrize("diff, verdict", [((0.15, 0.12, 0.18), REPRODUCED), ((0.11, 0.05, 0.17), REPRODUCED),
                                           ((0.04, 0.02, 0.06), SMALLER),  # a gain, but the claimed 10 excluded
                                           ((0.02, -0.01, 0.05), NOT_REPRODUCED), ((0.05, -0.02, 0.12), INCONCLUSIVE),
                                           ((-0.05, -0.08, -0.02), AGAINST)])
def test_average_gain_is_judged_against_the_claimed_ten_points(diff, verdict):
    rec = {"paired": paired(loss=[(0.3, 0.25, 0.35)] * 2, sama=[diff] * 2)}  # sama: the strongest baseline
    f = h.average_gain({"dlm-dft": rec})
    assert f.verdict == verdict and f"{100 * diff[0]:+.1f}" in f.ours


@pytest.mark.parametrize("ift, verdict", [(0.7, REPRODUCED), (0.95, AGAINST)])
def test_ift_harder_and_min_k_read_unpaired_intervals(ift, verdict):
    one = {"experiment": {"seeds": [0], **SETS}}  # one seed: an interval from the AUCs, no sign test needed
    dft = {"rows": rows(q_skew=[(0.9, 0.1)], loss=[(0.8, 0.1)]), **one}
    ift_rec = {"rows": rows(q_skew=[(ift, 0.1)], loss=[(ift - 0.05, 0.1)]), **one}
    f = h.ift_harder({"dlm-dft": dft, "dlm-ift": ift_rec})
    assert f.verdict == verdict and f.one_seed and not f.points
    broken = {"rows": rows(loss=[(0.8, 0)], min_k=[(ift, 0)], min_k_pp=[(ift, 0)]), **one}
    assert h.min_k_broken({"dlm-dft": broken}).verdict == (REPRODUCED if ift < 0.8 else AGAINST)


def test_secmi_rule_reads_the_paired_intervals():
    ahead = {"paired": paired(secmi_dlm=[(0.2, 0.1, 0.3)] * 3)}
    assert h.secmi_weak({"dlm-dft": ahead}).verdict == REPRODUCED
    short = {"paired": paired(secmi_dlm=[(0.02, -0.01, 0.05)] * 3)}  # excludes the next-best margin +9.7
    assert h.secmi_weak({"dlm-dft": short}).verdict == NOT_REPRODUCED
    tied = {"paired": paired(secmi_dlm=[(0.05, -0.01, 0.11)] * 3)}  # holds 0 and +9.7
    assert h.secmi_weak({"dlm-dft": tied}).verdict == INCONCLUSIVE


def relaxed(dlm_empirical, per_record=None):
    eps = list(range(10))
    model = lambda e: {"eps": eps, "empirical": e, "predicted": [min(1.0, 0.1 * i) for i in eps],  # noqa: E731
                       "mean_abs_error": 0.0}
    rec = {"relaxed": {"DLM": model(dlm_empirical), "AR": model([0.0] + [0.05] * 4 + [0.5] * 4 + [0.95])},
           "experiment": {"extract": {"samples": 64, "relaxed": 9}, "n_relaxed": 7}}
    for model_, pr in (per_record or {}).items():
        rec["relaxed"][model_]["per_record"] = pr
    return {"extraction-relaxed": rec}


def test_gaussian_fit_is_judged_on_the_records_where_they_are_stored():
    zeros = o.gaussian_fit(relaxed([0.0] * 9 + [1.0]))
    assert zeros.verdict == AT_THIS_SIZE and "64 generations per record, 7 records, 9 masked tokens" in zeros.ours
    curve = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    points = o.gaussian_fit(relaxed(curve))  # one error per model: once always inconclusive, now points only
    assert points.verdict == POINTS_ONLY and "per_record" in points.regime
    rng = np.random.default_rng(3)
    emp = np.clip(np.array(curve) + rng.normal(0, 0.05, (30, 10)), 0, 1)
    good, bad = {"empirical": emp.tolist(), "predicted": emp.tolist()}, \
        {"empirical": emp.tolist(), "predicted": np.clip(emp + 0.3, 0, 1).tolist()}
    assert o.gaussian_fit(relaxed(curve, {"DLM": good, "AR": bad})).verdict == REPRODUCED
    assert o.gaussian_fit(relaxed(curve, {"DLM": bad, "AR": good})).verdict == AGAINST


def k_record(aucs: dict[float, list[float]], min_k_pp: float = 0.5) -> dict:
    """A pretraining record with one setting: per-seed AUCs of Gap-K% at each k, and Min-K%++ at ``min_k_pp``."""
    n = len(next(iter(aucs.values())))
    ks = {f"s: gap_k k={k}": {"per_seed": [{"auc": a} for a in v]} for k, v in aucs.items()}
    return {"ar": {"paired": {"s": []}, "rows": {**ks, "s: min_k_pp": {"per_seed": [{"auc": min_k_pp}] * n}},
                   "experiment": {"seeds": list(range(n)), **SETS}}}


def test_k_peak_and_every_k_read_unpaired_intervals():
    sharp = g.k_sensitivity(k_record({0.05: [0.6] * 3, 0.15: [0.8] * 3, 0.5: [0.6] * 3}), name="ar")
    assert sharp.verdict == REPRODUCED and "best k per seed 0.15, 0.15, 0.15" in sharp.ours  # 3 seeds suffice
    off = g.k_sensitivity(k_record({0.05: [0.85] * 3, 0.15: [0.6] * 3, 0.5: [0.6] * 3}), name="ar")
    assert off.verdict == MIXED and AGAINST in off.verdict.parts  # the peak elsewhere
    inside = g.k_sensitivity(k_record({0.1: [0.8] * 3, 0.15: [0.8] * 3}), name="ar")  # no k outside 10–20%
    assert inside.verdict.counts == "6 reproduced, 1 not testable here"


def test_a_planted_value_changes_the_why_text(tmp_path):
    for name in ("pii-reconstruction", "extraction-steps", "extraction-relaxed", "ar-pretraining-detection"):
        shutil.copytree(REPO / "results" / name, tmp_path / name)
    before = build_claims(tmp_path)
    f = tmp_path / "pii-reconstruction" / "results.json"
    rec = json.loads(f.read_text())
    rec["experiment"]["epochs"] = 77
    f.write_text(json.dumps(rec))
    f = tmp_path / "ar-pretraining-detection" / "results.json"
    rec = json.loads(f.read_text())
    rec["experiment"]["pretrain_tokens"] = 123_456
    f.write_text(json.dumps(rec))
    after = build_claims(tmp_path)
    assert "fine-tuned 77 epochs" in after and "fine-tuned 77 epochs" not in before
    assert "123,456 tokens" in after and "123,456 tokens" not in before
    cells = {f"c{i}": {"settings": {"mode": m}, "paired": {"calibration": (-0.05, -0.08, -0.02)},
                       "delta": {part: {"mean": 0.1, "skew": 0.2} for part in ("members", "nonmembers")}}
             for i, m in enumerate(("dft", "dft", "ift"))}
    assert "rg (3 fine-tuning regimes: 2 DFT, 1 IFT)" in q.regimes_why({"rg": {"cells": cells}}, "rg")
    cells["c0"]["settings"]["mode"] = "ift"  # the regime study's modes are counted from its cells
    assert "rg (3 fine-tuning regimes: 2 IFT, 1 DFT)" in q.regimes_why({"rg": {"cells": cells}}, "rg")


def test_low_fpr_rule_is_not_testable_at_this_size_where_too_few_non_members_resolve_it():
    rec = {"rows": rows(q_skew=[(0.9, float("nan"))], sama=[(0.8, float("nan"))]), "experiment": {"n_nonmembers": 60}}
    f = h.tpr_at_1({"dlm-dft": rec})
    assert f.verdict == AT_THIS_SIZE and "60 non-members" in f.regime  # our size, not the claim: never against


def _plant(root: Path, name: str, change) -> None:
    f = root / name / "results.json"
    rec = json.loads(f.read_text())
    change(rec)
    f.write_text(json.dumps(rec))


def test_the_real_models_regime_text_follows_its_results(tmp_path):
    for name in ("real-pretraining-share", "real-unlearning-large", "real-dft-lora", "real-dlm-pii-extraction"):
        shutil.copytree(REPO / "results" / name, tmp_path / name)
    before = build_claims(tmp_path)

    def tokens(rec):
        rec["experiment"]["member_share"] = 0.07
        for seed in rec["rows"]["seen 2×: zlib"]["per_seed"]:
            seed["auc"] = 0.912  # now the best attack seen 2×

    def rho(rec):
        rec["unlearning"]["0.5 / none / smi"]["mean"] = 0.07

    def unseen(rec):
        rec["pii_rows"]["email / AR"][0]["unseen_discoverable"]["discoverable@p=0.5"] = 42

    for name, change in (("real-pretraining-share", tokens), ("real-unlearning-large", rho),
                         ("real-dlm-pii-extraction", unseen)):
        _plant(tmp_path, name, change)
    after = build_claims(tmp_path)
    for planted in ("are 7% of the tokens", "the best attack is zlib at 91.2 AUC", "smi 0.07 vs 0.52",
                    "42 of 60 unseen messages"):
        assert planted in after and planted not in before


def pretraining(gap, other, *, attack="min_k", metric="auc"):
    """A pretraining-detection record with one setting: per-seed values of gap_k and another row."""
    rows = {f"s: {a}": {"per_seed": [{metric: x} for x in v]} for a, v in (("gap_k", gap), (attack, other))}
    return {"pt": {"paired": {"s": []}, "rows": rows, "experiment": {"seeds": list(range(len(gap))), **SETS}}}


@pytest.mark.parametrize("gap, verdict", [([0.7] * 3, REPRODUCED), ([0.5] * 3, AGAINST), ([0.61] * 3, INCONCLUSIVE),
                                          ([0.7, 0.5, 0.7], MIXED), ([0.7], REPRODUCED)])  # one seed: its interval
def test_gap_k_against_min_k_reads_each_seeds_unpaired_interval(gap, verdict):
    f = g.gap_beats_min_k(pretraining(gap, [0.6] * len(gap)), name="pt")
    assert f.verdict == verdict and not f.points and f.one_seed == (len(gap) == 1)


def test_gap_k_low_fpr_is_points_only_without_a_paired_tpr_interval():
    rec = pretraining([0.7] * 3, [0.6] * 3, attack="min_k_pp", metric="tpr@1%fpr")
    for row, v in (("s: gap_k", 0.1), ("s: min_k_pp", 0.2)):
        for x in rec["pt"]["rows"][row]["per_seed"]:
            x["tpr@10%fpr"] = v
    f = g.gap_low_fpr(rec, name="pt")
    assert f.verdict == POINTS_ONLY and "tpr@5%fpr" in f.regime
    rec["pt"]["paired"]["s"] = [{"tpr@5%fpr": {"diff": -0.06, "ci95": [-0.09, -0.03]}}] * 3
    assert g.gap_low_fpr(rec, name="pt").verdict == AGAINST


def unlearning_record(rho_unclipped, threshold, control=(0.1, 0.2), half=0.2):
    table = {"0.1 / gradient_ascent / smi-m": {"mean": 1.0, "std": 0.0, "n_undefined": 0},
             "0.1 / gradient_ascent / threshold-loss": {"mean": threshold, "std": 0.0, "n_undefined": 0}}
    raw = {"0.1 / none / smi-m": list(control), "0.1 / gradient_ascent / smi-m": rho_unclipped}
    iv = {k: [[x - half, x + half] for x in v] for k, v in raw.items()}
    return {"ul": {"unlearning": table, "rho_unclipped": raw, "intervals_unclipped": iv}}


@pytest.mark.parametrize("raw, threshold, control, counts", [
    ([3.0, 2.5, 2.8], 1.0, (0.1, 0.2, 0.1), "3 reproduced"),  # three seeds suffice with an interval each
    ([3.0, 0.9, 2.8], 1.0, (0.1, 0.2, 0.1), "2 reproduced, 1 inconclusive"),
    ([0.5, 0.6, 0.4], 1.0, (0.1, 0.2, 0.1), "3 against the claim"),  # inside the band: a mixture, not past it
    ([3.0, 2.9, 2.8], 1.0, (0.1, 2.4, 0.1), "2 reproduced, 1 not testable here"),  # seed 1's control is outside
    ([3.0, float("nan")], 1.0, (2.4, float("nan")), "2 not testable here"),  # no seed can tell (SmolLM2's case)
])
def test_illusory_forgetting_is_judged_per_seed_where_per_sample_audits_read_forgotten(raw, threshold, control,
                                                                                        counts):
    f = m.smi_illusory(unlearning_record(raw, threshold, control), name="ul")
    assert f.verdict.counts == counts
    can_tell = sum(-0.1 <= c <= 1.1 and x == x for x, c in zip(raw, control))
    assert ("No seed can tell for 0.1 gradient_ascent" in f.regime) == (not can_tell)
    assert f"seeds that can tell: {can_tell}/{len(raw)}" in f.ours


def test_illusory_forgetting_is_not_testable_where_no_method_is_read_forgotten():
    f = m.smi_illusory(unlearning_record([3.0, 2.5], 0.5, (0.1, 0.2)), name="ul")
    assert f.verdict == UNTESTABLE


@pytest.mark.parametrize("moved, R, verdict", [(0.02, 8, REPRODUCED), (0.4, 8, AT_THIS_SIZE), (0.4, 512, AGAINST),
                                               (0.11, 512, INCONCLUSIVE), (float("nan"), 8, AT_THIS_SIZE)])
def test_p_hat_convergence_reads_the_stored_share_with_its_interval(moved, R, verdict):
    conv = {"not_converged_fraction": moved, "median_abs_change_half_to_full": 0.1}
    rec = {"experiment": {"extract": {"trajectories": R}}, "log_p_columns": {"1": [-5.0] * 200},
           "steps": {"2": {"per_seed": [{"convergence": conv}]}, "max": {"per_seed": [{"convergence": conv}]}}}
    f = m.p_hat_converged({"st": rec}, name="st")
    assert f.verdict == verdict  # 22 of 200 (11%): Wilson [7.4%, 16.1%] holds the 10% criterion
    assert (f"{100 * moved:.1f}% [" if moved == moved else "not checkable") in f.ours


def test_pooled_paired_interval_is_of_the_mean_difference():
    assert pool_paired([[0.1, 0.0, 0.3]]) == [0.1, 0.0, 0.3]  # one seed: its own (asymmetric) interval
    diff, lo, hi = pool_paired([[0.1, 0.0, 0.2], [0.3, 0.2, 0.4]])  # two seeds, each ± 0.1 (se 0.1 / 1.96)
    assert diff == pytest.approx(0.2) and hi - lo == pytest.approx(2 * 0.1 / 2 ** 0.5)  # narrower than averaged bounds


def pii_record(ar: tuple[int, int], dlm: tuple[int, int], moved: float | None = None, one: int = 0,
               unseen_ar: int = 7, one_lp: float = -30.0) -> dict:
    """A pii-extraction record, one seed of 60 messages: discoverable e-mails and phones at p = 0.5 per model (the
    AR model finds ``unseen_ar`` of 50 unseen values of each field; the max-step median log p̂ is -20)."""
    conv = {} if moved is None else {"convergence": {"not_converged_fraction": moved}}
    entry = lambda k, lp, extra={}: {"discoverable@p=0.5": k, "median_log_p_train": lp, **extra}  # noqa: E731
    rows = {}
    for i, f in enumerate(("email", "phone")):
        rows[f"{f} / AR"] = [entry(ar[i], -5.0, {"unseen_discoverable": {"discoverable@p=0.5": unseen_ar}})]
        rows[f"{f} / DLM one-step"] = [entry(one, one_lp)]
        rows[f"{f} / DLM max-step"] = [entry(dlm[i], -20.0, {**conv, "unseen_discoverable": {"discoverable@p=0.5": 0}})]
    return {"pii_rows": rows, "n_train": 60, "n_unseen": 50,
            "experiment": {"extract": {"n": 10000}, "lr": 5e-4, "lora": 16, "epochs": 10, "n_members": 60,
                           "base": "m", "adapt_tokens": 100}}


@pytest.mark.parametrize("ar, dlm, moved, verdict", [
    ((40, 30), (2, 1), 0.0, REPRODUCED),  # 40/60 against 2/60: the difference's interval far above 0 in both fields
    ((40, 30), (2, 1), 0.5, AT_THIS_SIZE),  # the DLM's p̂ still moving: too few orders, our size (was inconclusive)
    ((40, 30), (2, 1), float("nan"), AT_THIS_SIZE),  # every DLM p̂ = 0: its convergence cannot be confirmed
    ((40, 3), (2, 1), None, MIXED),  # phones 3/60 vs 1/60: a tie beside a lead
    ((2, 1), (3, 1), None, INCONCLUSIVE),
    ((0, 0), (20, 20), None, AGAINST),  # the DLM finds what the AR model does not: against the claim
    ((0, 0), (0, 0), None, UNTESTABLE),  # nothing discoverable from either model
])
def test_ar_leaks_more_is_judged_per_seed_and_needs_a_converged_dlm_estimate(ar, dlm, moved, verdict):
    f = pii.ar_leaks_more({"x": pii_record(ar, dlm, moved)}, name="x")
    assert f.verdict == verdict and f"email: AR vs DLM max-step {ar[0]} vs {dlm[0]} of 60, difference" in f.ours
    assert "unseen control AR 7/50, DLM 0/50" in f.ours and f.one_seed
    assert "`m` and the DLM adapted from it on 100 tokens, both fine-tuned (LoRA rank 16, lr 0.0005) 10 epochs " \
        "on the same 60 messages" in f.regime
    assert ("its p̂ moved > 2× from R/2 to R orders: 50.0% of records); unseen" in f.ours) == (moved == 0.5)
    assert ("so that field is not testable at this size" in f.regime) == (moved is not None and not moved < 0.1)
    assert ("convergence in R orders cannot be checked" in f.ours) == (moved is not None and moved != moved)
    assert ("phones discoverable from neither model" in f.regime) == (ar[1] == dlm[1] == 0)


def test_ar_leaks_more_does_not_count_values_the_ar_model_finds_unseen_as_often():
    f = pii.ar_leaks_more({"x": pii_record((40, 30), (2, 1), unseen_ar=38)}, name="x")
    assert f.verdict == INCONCLUSIVE and "training count of email and phone is not above its unseen control" in f.regime
    f = pii.ar_leaks_more({"x": pii_record((40, 30), (2, 1), unseen_ar=7)}, name="x")
    assert f.verdict == REPRODUCED and "unseen control (Wilson" not in f.regime  # 7/50 is far below 40/60 and 30/60


@pytest.mark.parametrize("dlm, one, verdict", [
    ((30, 25), 0, REPRODUCED),  # max-step 30/60 and 25/60 against none at one step
    ((2, 1), 30, AGAINST),  # one step finds more
    ((2, 1), 1, INCONCLUSIVE),  # 2 vs 1 and 1 vs 1 of 60: ties
    ((30, 1), 1, MIXED),
])
def test_max_step_leaks_more_is_judged_on_the_counts_per_field(dlm, one, verdict):
    f = pii.one_vs_max_step({"x": pii_record((9, 9), dlm, one=one)}, name="x")
    assert f.verdict == verdict and f"email: discoverable max-step vs one-step {dlm[0]} vs {one} of 60" in f.ours
    assert "median log p̂ -30.0 → -20.0" in f.ours
    assert pii.one_vs_max_step({"x": pii_record((9, 9), (0, 0))}, name="x").verdict == UNTESTABLE
