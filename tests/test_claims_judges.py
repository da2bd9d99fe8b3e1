"""The judges of CLAIMS.md not covered in test_claims_rules: each given stored values that make each verdict it can
give (a judge that can only say "not testable" says so whatever the values), then the defects of issue 42 part 1,
each with the values the issue quotes planted into a minimal record."""

import numpy as np
import pytest

from lmaudit.report import claims_gapk as g
from lmaudit.report import claims_headline as h
from lmaudit.report import claims_more as m
from lmaudit.report import claims_others as o
from lmaudit.report import claims_pii as pii
from lmaudit.report import claims_qskew as q
from lmaudit.report.verdicts import AGAINST, INCONCLUSIVE, NOT_REPRODUCED, PARTLY, REPRODUCED, UNTESTABLE

AHEAD, TIED, BEHIND = (0.05, 0.02, 0.08), (0.01, -0.02, 0.04), (-0.05, -0.08, -0.02)


def seeds(*triples):
    return [{"seed": i, "diff": d, "ci95": [lo, hi]} for i, (d, lo, hi) in enumerate(triples)]


def auc_rows(**per_seed):
    return {row.replace("__", " ").replace("_eq_", "="): {"per_seed": [{"auc": x} for x in v]}
            for row, v in per_seed.items()}


@pytest.mark.parametrize("per_seed, verdict", [((AHEAD, AHEAD), REPRODUCED), ((AHEAD, TIED), PARTLY),
                                               ((TIED, TIED), INCONCLUSIVE), ((BEHIND, BEHIND), AGAINST)])
def test_pretraining_gap_reads_each_seed_against_the_papers_gain(per_seed, verdict):
    rec = {"paired": {"seen once": seeds(*per_seed)}, "rows": {}, "experiment": {"attacks": [], "pretrain_tokens": 9}}
    f = g.pretraining_gap({"pt": rec}, name="pt")
    assert f.verdict == verdict and f"seen once: {100 * per_seed[0][0]:+.1f} [" in f.ours and "on 9 tokens" in f.regime
    assert "against the paper's +2.1 points" in f.ours


def smoothing_record(seq, shu, non):
    """Per-seed AUCs of the three smoothing rows (points: 5 seeds for the sign test to read them)."""
    rows = {f"s: gap_k smooth={k}": {"per_seed": [{"auc": x} for x in v]} for k, v in
            (("sequential", seq), ("shuffled", shu), ("none", non))}
    return {"paired": {"s": []}, "rows": rows, "experiment": {"seeds": list(range(len(seq)))}}


UP5, MIXED5 = (0.7, 0.5, 0.7, 0.7, 0.7), (0.5, 0.7, 0.5, 0.5, 0.5)  # 5 seeds: ahead of 0.6 on 4 of 5; behind on 4


@pytest.mark.parametrize("aucs, verdict", [(((0.7,) * 5, (0.6,) * 5, (0.5,) * 5), REPRODUCED),
                                           (((0.5,) * 5, (0.6,) * 5, (0.7,) * 5), AGAINST),
                                           ((UP5, (0.6,) * 5, (0.5,) * 5), PARTLY),  # one '>' mixed: a tie
                                           ((UP5, (0.6,) * 5, MIXED5), INCONCLUSIVE)])
def test_smoothing_order_is_read_seed_by_seed(aucs, verdict):
    f = g.smoothing({"pt": smoothing_record(*aucs)}, name="pt")
    assert f.verdict == verdict and f.points


@pytest.mark.parametrize("gap, verdict", [((0.70, 0.71, 0.70, 0.72, 0.70), REPRODUCED),  # 5 seeds: points
                                          ((0.61, 0.59, 0.61, 0.61, 0.61), INCONCLUSIVE),
                                          ((0.5, 0.55, 0.5, 0.5, 0.5), AGAINST)])
def test_paraphrase_is_read_seed_by_seed(gap, verdict):
    rows = {"s: perturbed gap_k": {"per_seed": [{"auc": x} for x in gap]},
            "s: perturbed min_k_pp": {"per_seed": [{"auc": 0.6}] * len(gap)}}
    f = g.paraphrase({"pt": {"paired": {"s": []}, "rows": rows, "experiment": {"seeds": list(range(len(gap)))}}},
                     name="pt")
    assert f.verdict == verdict and "s: gap_k" in f.ours


@pytest.mark.parametrize("smi, shadows, verdict", [
    (0.01, 30.0, REPRODUCED),  # SMI's audit 1.02 s vs LiRA's 32 s: over an order of magnitude cheaper
    (0.01, 3.0, INCONCLUSIVE),  # 1.02 s vs 5 s: cheaper, but within an order of magnitude (was 'reproduced' from one
    # mean timing below the probes)
    (60.0, 3.0, AGAINST),  # 61 s vs 5 s: an order of magnitude dearer
    (5.0, 30.0, INCONCLUSIVE),  # 6 s vs 32 s (was 'against': dearer than the probes alone, from one timing)
    (0.01, None, UNTESTABLE),  # no shadow models: no LiRA cost to compare with
])
def test_smi_cost_is_a_ratio_of_magnitudes(smi, shadows, verdict):
    cost = {"smi": smi, "smi-m": 0.02, "features": 1.0, "smi-scores": 0.01, "smi-m-scores": 0.01, "lira_probes": 2.0,
            "lira_shadow_training": shadows}
    f = o.smi_cost({"unlearning-audit": {"cost_s": cost}})
    assert f.verdict == verdict
    if shadows is not None:
        assert "not a difference that needs seeds" in f.regime and "at least 10× cheaper is reproduced" in f.regime
        assert f"LiRA / SMI = {(shadows + 2.0) / (1.0 + max(smi, 0.02)):.3g}" in f.ours


def steps_record(cols: dict[str, list[float]], moved: float = 0.0) -> dict:
    conv = {"not_converged_fraction": moved}
    return {"steps": {s: {"per_seed": [{"convergence": conv}]} for s in cols}, "log_p_columns": cols,
            "monotone_fraction": [0.5, 0.0]}


RISE = {"1": [-9.0] * 40, "2": [-8.0] * 40, "max": [-6.0] * 40}  # every record rises on every refinement


@pytest.mark.parametrize("cols, moved, verdict", [
    (RISE, 0.0, REPRODUCED),  # medians above 0 (no paper effect given here), no record falls
    ({**RISE, "max": [-6.0] * 30 + [-8.5] * 10}, 0.0, PARTLY),  # 10 of 40 fall from 2 to max: the theorem fails there
    ({**RISE, "max": [-6.0] * 30 + [-8.5] * 10}, 0.5, NOT_REPRODUCED),  # and the medians rest on an unconverged p̂
    ({"1": [-9.0] * 40, "2": [-9.5] * 40, "max": [-10.0] * 40}, 0.0, AGAINST),  # the median falls
])
def test_steps_monotone_judges_the_median_gains_and_the_falls_on_refinements(cols, moved, verdict):
    f = o.steps_monotone({"st": steps_record(cols, moved)}, name="st")
    assert f.verdict == verdict and f.one_seed and "bootstrap 95% interval over 40 masks" in f.ours
    assert ("2 → max: 25.0%" in f.ours) == (cols["max"][-1] == -8.5)
    assert ("(p̂ not converged)" in f.ours) == (moved > 0.1)


def budget(fractions: dict[str, list[float]], n=(1, 10, 100, 1000)) -> dict:
    return {"extraction-relaxed": {"budget": {"n": list(n), "p": 0.5, "mask": "suffix:8", "n_records": 200,
                                              "fractions": fractions}}}


@pytest.mark.parametrize("fractions, verdict", [
    ([0.4, 0.45, 0.48, 0.5], REPRODUCED),  # 80 of the 100 found at n = 1000 already found at n = 1
    ([0.0, 0.01, 0.1, 0.5], AGAINST),  # none of them at n = 1: most appear late
    ([0.0, 0.0, 0.0, 0.0], UNTESTABLE),  # nothing extractable at any n
])
def test_sublinear_budget_rule(fractions, verdict):
    f = o.sublinear_budget(budget({"DLM": fractions}))
    assert f.verdict == verdict and f.one_seed


def regimes_record(unmasked: list[tuple], masked: list[tuple], skews=None) -> dict:
    cells = {}
    for i, (u, mk) in enumerate(zip(unmasked, masked)):
        ms, ns = (skews or [(0.3, 0.05)] * len(unmasked))[i]
        cells[f"c{i}"] = {"settings": {"mode": "dft"}, "paired": {"calibration unmasked_ratio": u, "calibration": mk},
                          "auc": {"calibration unmasked_ratio": [0.6, 0.0], "calibration": [0.7, 0.0]},
                          "delta": {"members": {"mean": 1.0, "std": 1.0, "skew": ms},
                                    "nonmembers": {"mean": 0.0, "std": 1.0, "skew": ns},
                                    "separation": {"d_mean": 1.5, "d_skew": 0.2}}}
    return {"cells": cells}


@pytest.mark.parametrize("unmasked, verdict", [([AHEAD, AHEAD], REPRODUCED), ([AHEAD, TIED], PARTLY),
                                               ([AHEAD, BEHIND], AGAINST), ([TIED, TIED], INCONCLUSIVE)])
def test_authors_calibration_judges_every_regime(unmasked, verdict):
    f = q.authors_calibration({"rg": regimes_record(unmasked, [BEHIND, BEHIND])}, name="rg")
    assert f.verdict == verdict and "against the masked-ELBO calibration: ahead 0, tied 0, behind 2" in f.ours
    assert "the unmasked ratio is the weaker baseline in every regime" in f.regime  # its AUC is below in 0/2


SKEWED = [(0.3, 0.05), (0.2, 0.0), (0.3, 0.05), (0.25, -0.05), (0.2, 0.0)]  # (members, non-members) per regime


@pytest.mark.parametrize("skews, verdict", [  # each regime one point: 5 regimes for the sign test to read them
    (SKEWED, REPRODUCED),  # members right-skewed, above non-members, who are near symmetric
    ([(0.3, 0.2)] + SKEWED[1:], PARTLY),  # one cell's non-members skewed (g₁ ≥ 0.1)
    ([(-0.3, 0.0), (0.0, 0.1), (-0.2, 0.0), (0.05, 0.1), (-0.1, 0.05)], AGAINST),  # members' skew never
    # right-skewed nor above non-members'
    (SKEWED[:3], INCONCLUSIVE),  # the same pattern in 3 regimes: 0.5³ = 12.5%, too few for the sign test
])
def test_asymmetry_reads_three_parts(skews, verdict):
    n = len(skews)
    f = q.asymmetry({"rg": regimes_record([TIED] * n, [TIED] * n, skews)}, name="rg")
    assert f.verdict == verdict and f.points \
        and "by Cohen's d = 0.20 on average, the location shift (per-text mean Δ) by d = 1.50" in f.regime


@pytest.mark.parametrize("vs, verdict", [({"mean": [AHEAD], "random": [AHEAD]}, REPRODUCED),
                                         ({"mean": [AHEAD], "random": [TIED]}, PARTLY),
                                         ({"mean": [BEHIND], "random": [TIED]}, AGAINST)])
def test_components_help_only_when_full_beats_the_variant_on_every_seed(vs, verdict):
    rec = {"paired": {"compare": "q_skew", "vs": {k: seeds(*v) for k, v in vs.items()}},
           "rows": {"q_skew": {"auc": [0.7, 0.0]}}, "experiment": {"budget": 8, "n_members": 60, "n_nonmembers": 60}}
    f = q.components_help({"ab": rec}, name="ab", effects={"mean": 0.027})
    assert f.verdict == verdict and "the paper's drop: mean +2.7 points, random none given" in f.ours
    assert ("The variant(s) mean beat the full method" in f.regime) == (verdict == AGAINST)


@pytest.mark.parametrize("vs, verdict", [
    ({"ρ = 0.15": [AHEAD, AHEAD], "ρ = 0.5": [AHEAD, AHEAD]}, REPRODUCED),  # ahead of every other ρ on every seed
    ({"ρ = 0.15": [AHEAD, AHEAD], "ρ = 0.5": [TIED, TIED]}, PARTLY),  # its neighbour within noise
    ({"ρ = 0.15": [AHEAD, TIED], "ρ = 0.5": [TIED, BEHIND]}, NOT_REPRODUCED),  # symmetric mixed evidence
    ({"ρ = 0.15": [AHEAD, AHEAD], "ρ = 0.5": [BEHIND, BEHIND]}, AGAINST),
    ({"ρ = 0.15": [TIED, TIED], "ρ = 0.5": [TIED, TIED]}, INCONCLUSIVE),  # flat: a tie everywhere
])
def test_rho_maximises_needs_every_other_rho_behind(vs, verdict):
    rows = {k: {"auc": [0.7, 0.01]} for k in ("ρ = 0.15", "ρ = 0.35", "ρ = 0.5")}
    rec = {"paired": {"compare": "ρ = 0.35", "vs": {k: seeds(*v) for k, v in vs.items()}}, "rows": rows,
           "experiment": {"budget": 16}}
    f = q.rho_maximises({"r": rec}, name="r")
    assert f.verdict == verdict and "ρ = 0.35 70.0 ± 1.0" in f.ours and "same 16 masked forwards" in f.regime
    assert ("Ahead of ρ = 0.35 on every seed: ρ = 0.5." in f.regime) == (verdict == AGAINST)


@pytest.mark.parametrize("q_aucs, verdict", [(((0.9,) * 5, (0.9,) * 5), REPRODUCED),  # 5 seeds: points
                                             (((0.9,) * 5, (0.9, 0.5, 0.9, 0.9, 0.9)), PARTLY),
                                             (((0.5,) * 5, (0.5,) * 5), AGAINST),
                                             (((0.9,), (0.9,)), INCONCLUSIVE)])  # one seed of points
def test_over_epochs_reads_each_epoch_seed_by_seed(q_aucs, verdict):
    n = len(q_aucs[0])
    curves = {"q_skew": {e: {"auc": [np.mean(a)], "per_seed": [{"auc": x} for x in a]}
                         for e, a in zip(("1", "2"), q_aucs)},
              "loss": {e: {"auc": [0.7], "per_seed": [{"auc": 0.7}] * n} for e in ("1", "2")}}
    f = q.over_epochs({"dlm-epochs": {"curves": curves, "experiment": {"seeds": list(range(n))}}})
    assert f.verdict == verdict and f.points and f.one_seed == (n == 1)


@pytest.mark.parametrize("full, verdict", [(0.8, PARTLY), (0.6, AGAINST)])
def test_gap_components_is_partly_at_best(full, verdict):
    rows = auc_rows(**{"s:__gap_k": [full] * 5, "s:__gap_k__smooth_eq_none": [0.7] * 5})  # 5 seeds: points
    rec = {"paired": {"s": []}, "rows": rows, "experiment": {"seeds": list(range(5))}}
    assert g.gap_components({"pt": rec}, name="pt").verdict == verdict
    rec["experiment"]["seeds"] = [0]
    rec["rows"] = auc_rows(**{"s:__gap_k": [full], "s:__gap_k__smooth_eq_none": [0.7]})
    assert g.gap_components({"pt": rec}, name="pt").verdict == INCONCLUSIVE  # one seed: nothing to measure noise by


def test_smi_ranking_is_not_testable_whatever_the_estimates_and_shows_the_ranking():
    table = {"0.1 / npo / smi-m": {"mean": 0.9, "per_seed": [0.89, 0.91]},
             "0.1 / gradient_ascent / smi-m": {"mean": 0.5, "per_seed": [0.49, 0.51]},
             "0.1 / finetune / smi-m": {"mean": 0.4, "per_seed": [0.4, float("nan")]},  # one seed defined: no spread
             "0.1 / retrain / smi-m": {"mean": 1.0, "per_seed": [1.0, 1.0]}}
    f = m.smi_ranking({"ul": {"unlearning": table}}, name="ul")
    assert f.verdict == UNTESTABLE  # the sample std (ddof = 1) of 0.49, 0.51 is 0.014, not the population's 0.010
    assert "forget 10%: npo 0.90 ± 0.01 > gradient_ascent 0.50 ± 0.01 ≈ finetune 0.40 ± nan" in f.ours
    assert m._defined_std([0.49, 0.51]) == pytest.approx(0.0141421, abs=1e-6)


def reconstruction(ar: list[list[int]], dlm: list[list[int]]) -> dict:
    """A pii-reconstruction record: per seed, the true value's rank per record (1 = top-1) for the AR model and the
    DLM, e-mails only."""
    ranks = {"ce": {"email": dlm}, "AR ce": {"email": ar}}
    top1 = {k: {"email": [100.0 * sum(r == 1 for r in s) / len(s) for s in v["email"]]} for k, v in ranks.items()}
    return {"ranks": ranks, "asr": top1, "fields": {"email": {"coverage": [40.0], "ar_coverage": [80.0]}},
            "n_targets": len(ar[0]), "experiment": {"lr": 2e-3, "epochs": 150, "n_members": 30, "adapt_tokens": 1000}}


@pytest.mark.parametrize("ar_ranks, dlm_ranks, verdict", [
    ([1] * 5, [2] * 5, REPRODUCED), ([3] * 5, [2] * 5, INCONCLUSIVE),  # at 0% top-1 each: nothing varies
    ([3] * 5, [1] * 5, AGAINST)])  # the DLM ahead: against the claim, said so
def test_ar_reconstructs_more_is_read_from_paired_ranks(ar_ranks, dlm_ranks, verdict):
    f = pii.ar_reconstructs_more({"rc": reconstruction([ar_ranks], [dlm_ranks])}, name="rc")
    assert f.verdict == verdict and "email: DLM 40%, AR 80%" in f.ours and f.one_seed
    assert ("(against the claim)" in f.ours) == (verdict == AGAINST)
    assert "fine-tuned (every weight, lr 0.002) 150 epochs on the same 30 messages; 5 redacted per field" in f.regime


def sensitivity_record(errors: dict[str, dict[str, list[float]]], variants: dict | None = None) -> dict:
    """An unlearning-sensitivity record where each (fraction, audit) has the given per-seed error: 'none' reads ρ = e
    and 'retrain' 1 − e, so the mean |ρ − truth| is e (NaN: undefined on both)."""
    table = {}
    for frac, audits in errors.items():
        for audit, errs in audits.items():
            table[f"{frac} / none / {audit}"] = {"per_seed": list(errs)}
            table[f"{frac} / retrain / {audit}"] = {"per_seed": [1 - e for e in errs]}
    variants = variants if variants is not None else {"rbf 0.25×": {"kernel": "rbf", "bandwidth_factor": 0.25},
                                                      "laplacian": {"kernel": "laplacian"}}
    n = len(next(iter(next(iter(errors.values())).values())))
    return {"s": {"unlearning": table, "n_train": 400, "n_nonmembers": 400,
                  "experiment": {"seeds": list(range(n)), "smi_m_variants": variants}}}


DEFAULT_ERR = [0.1, 0.12, 0.11, 0.1, 0.12]  # the default bandwidth's error on 5 seeds (points: the sign test's 5)


@pytest.mark.parametrize("narrow, lap, verdict", [
    ([0.5, 0.45, 0.55, 0.5, 0.48], [0.12, 0.1, 0.11, 0.12, 0.1], REPRODUCED),  # narrow worse on every seed, the
    # kernel barely moves it
    ([0.5, 0.45, 0.55, 0.5, 0.48], [0.6, 0.55, 0.65, 0.6, 0.58], AGAINST),  # the kernel moves it more than the
    # narrow bandwidth does
    ([0.2, 0.1, 0.15, 0.2, 0.1], DEFAULT_ERR, INCONCLUSIVE),  # narrow worse on some seeds only
    ([0.12, 0.1, 0.11, 0.12, 0.1], [0.6, 0.55, 0.65, 0.6, 0.58], AGAINST),
    ([float("nan")] * 5, DEFAULT_ERR, REPRODUCED),  # undefined narrow estimates count as 0.5 each
])
def test_smi_bandwidth_reads_the_narrowest_bandwidth_and_the_kernels_seed_by_seed(narrow, lap, verdict):
    errors = {"0.1": {"smi-m-scores": DEFAULT_ERR, "smi-m-scores rbf 0.25×": narrow, "smi-m-scores laplacian": lap}}
    f = m.smi_bandwidth(sensitivity_record(errors), name="s")
    assert f.verdict == verdict and f.points and "rbf 1× (default) 0.11 ± 0.01" in f.ours


SMALL_WRONG, MID_RIGHT, BIG_RIGHT = [0.4, 0.35, 0.45, 0.4, 0.38], [0.05, 0.06, 0.04, 0.05, 0.05], \
    [0.03, 0.04, 0.05, 0.04, 0.04]  # errors on 5 seeds (points: the sign test's 5)


@pytest.mark.parametrize("small, mid, verdict", [
    (SMALL_WRONG, MID_RIGHT, REPRODUCED),  # 10 texts misread on every seed, 20 read right
    ([0.07] * 5, MID_RIGHT, AGAINST),  # the tiny models' case: 10 texts still read right
    ([0.05, 0.15, 0.2, 0.05, 0.15], MID_RIGHT, PARTLY),  # 10 texts misread on some seeds only
    (SMALL_WRONG, [0.2, 0.15, 0.25, 0.2, 0.18], AGAINST),  # 20 texts misread too: the stable part reads the 20-text
    # set
])
def test_smi_min_samples_needs_a_misread_small_set_and_a_right_one_at_twenty(small, mid, verdict):
    errors = {"0.025": {"smi-m-scores": small}, "0.05": {"smi-m-scores": mid}, "0.1": {"smi-m-scores": BIG_RIGHT}}
    f = m.smi_min_samples(sensitivity_record(errors), name="s")
    assert f.verdict == verdict and "10 texts" in f.ours and "20 texts" in f.ours and "40 texts 0.04 ± 0.01" in f.ours
    assert "against 200 retain and 200 held-out reference texts" in f.regime


def test_smi_min_samples_is_not_testable_where_even_the_largest_set_is_misread():
    errors = {f: {"smi-m-scores": [0.4, 0.35, 0.45]} for f in ("0.025", "0.05", "0.1")}
    f = m.smi_min_samples(sensitivity_record(errors), name="s")
    assert f.verdict == UNTESTABLE and "misreads even 40 texts (error 0.40" in f.regime


# ---------------------------------------------------------------- issue 42 part 1: the values it quotes, planted

def test_tpr_at_1_with_calibration_and_sama_ahead_on_every_seed_is_against_as_the_auc_rule_says():
    def record(tpr):
        n = len(tpr["q_skew"])
        return {"rows": {a: {"per_seed": [{"auc": 0.9, "tpr@1%fpr": t} for t in v]} for a, v in tpr.items()},
                "experiment": {"seeds": list(range(n))}}

    tpr = {"q_skew": (0.51, 0.385, 0.19), "calibration": (0.94, 0.53, 0.675), "sama": (0.80, 0.665, 0.48),
           "gap_k": (0.055, 0.07, 0.045)}  # dlm-dft as the issue quotes it: Q-Skew beats gap_k, trails two
    f = h.tpr_at_1({"dlm-dft": record(tpr)})
    # 3 seeds of points cannot pass a sign test at 5% (0.5³ = 12.5%): the stored dlm-dft is inconclusive, not partly
    assert f.verdict == INCONCLUSIVE  # was 'partly', then 'against'
    # ... but the measured column says which way the seeds point, from the signs: it read '(mixed)'
    assert "calibration 94.0, 53.0, 67.5% (below on every seed)" in f.ours
    assert "sama 80.0, 66.5, 48.0% (below on every seed)" in f.ours and "gap_k 5.5, 7.0, 4.5% (above on every seed)" \
        in f.ours
    # the same pattern on 5 seeds: calibration and SAMA ahead of Q-Skew on every seed make it against, not partly
    five = {"q_skew": (0.51, 0.385, 0.19, 0.45, 0.30), "calibration": (0.94, 0.53, 0.675, 0.80, 0.60),
            "sama": (0.80, 0.665, 0.48, 0.70, 0.55), "gap_k": (0.055, 0.07, 0.045, 0.06, 0.05)}
    f = h.tpr_at_1({"dlm-dft": record(five)})
    assert f.verdict == AGAINST and "calibration 94.0, 53.0, 67.5, 80.0, 60.0% (below on every seed)" in f.ours
    assert "gap_k 5.5, 7.0, 4.5, 6.0, 5.0% (above on every seed)" in f.ours
    auc = {"rows": {"q_skew": {"auc": [0.9, 0.0]}},
           "paired": {"vs": {"calibration": seeds(BEHIND, BEHIND, BEHIND), "gap_k": seeds(AHEAD, AHEAD, AHEAD)}}}
    assert q.q_skew_beats_baselines("dlm-dft")({"dlm-dft": auc}).verdict == AGAINST  # the same pattern, the same word


def test_pii_reconstruction_is_judged_per_seed_not_pooled():
    # inference e-mail, AR − DLM per seed: 8/25 vs 8/25 (the same records: a tie), +44 and +28 points
    dlm = [1] * 8 + [2] * 17
    f = pii.ar_reconstructs_more({"rc": reconstruction([dlm, [1] * 19 + [2] * 6, [1] * 15 + [2] * 10],
                                                       [dlm, dlm, dlm])}, name="rc")
    assert f.verdict == PARTLY and "+0.0 [+0.0, +0.0], +44.0 [" in f.ours and ", +28.0 [" in f.ours
    assert "(ahead 2/3, tied 1/3: partly reproduced)" in f.ours and not f.one_seed  # pooled, it read 'reproduced'


def test_a_reconstruction_pair_significantly_against_makes_the_claim_against():
    # SmolLM2 phone −16 [−32, −4]: the DLM's 4 hits of 25 that the AR model misses; e-mail +28 points ahead
    rec = reconstruction([[1] * 9 + [2] * 16], [[1] * 2 + [2] * 23])
    rec["ranks"] = {k: {**v, "phone": [[2] * 25] if k == "AR ce" else [[1] * 4 + [2] * 21]}
                    for k, v in rec["ranks"].items()}
    rec["asr"] = {k: {**v, "phone": [0.0] if k == "AR ce" else [16.0]} for k, v in rec["asr"].items()}
    rec["fields"]["phone"] = {"coverage": [0.0], "ar_coverage": [0.0]}
    f = pii.ar_reconstructs_more({"rc": rec}, name="rc")
    assert f.verdict == AGAINST and "phone: AR 0.0% vs DLM 16.0%, difference -16.0 [" in f.ours  # was 'partly'


def pii_extraction(ar_train: int, ar_unseen: int, dlm: int = 0) -> dict:
    row = lambda k, u: {"discoverable@p=0.5": k, "unseen_discoverable": {"discoverable@p=0.5": u},  # noqa: E731
                        "convergence": {"not_converged_fraction": 0.0}}
    rows = {"email / AR": [row(ar_train, ar_unseen)], "email / DLM max-step": [row(dlm, 0)],
            "phone / AR": [row(0, 0)], "phone / DLM max-step": [row(0, 0)]}
    return {"x": {"pii_rows": rows, "n_train": 60, "n_unseen": 60,
                  "experiment": {"extract": {"n": 10000}, "lr": 5e-4, "lora": 16, "epochs": 10, "n_members": 60}}}


def test_values_the_ar_model_guesses_unseen_lower_the_pii_extraction_verdict():
    effects = {"email": 197 / 3000, "phone": 5 / 3000}
    guessed = pii.ar_leaks_more(pii_extraction(41, 34), name="x", effects=effects)  # SmolLM2: 41/60 vs 34/60 unseen
    assert guessed.verdict == INCONCLUSIVE and "not above its unseen control" in guessed.regime
    memorised = pii.ar_leaks_more(pii_extraction(41, 3), name="x", effects=effects)
    assert memorised.verdict == PARTLY  # e-mails ahead; phones 0 vs 0 hold 0 and the paper's +0.2


def test_theorem_3_2_uses_one_band_and_a_member_skew_inside_it_is_not_right_skewed():
    one = q.asymmetry({"rg": regimes_record([TIED], [TIED], [(0.06, -0.06)])}, name="rg")  # SmolLM2's one cell
    assert one.verdict == INCONCLUSIVE and "members' skew ≥ 0.1 in 0/1" in one.ours  # was 'reproduced'
    inside = [(0.06, -0.06), (0.05, 0.0), (0.04, 0.02), (0.08, -0.03), (0.02, 0.01)]  # 5 regimes: points
    five = q.asymmetry({"rg": regimes_record([TIED] * 5, [TIED] * 5, inside)}, name="rg")
    assert five.verdict == AGAINST  # members inside the symmetric band in every regime (skew > 0 would reproduce)


def test_assumption_3_1_is_judged_on_the_mean_gain_per_token_not_per_exposure():
    ratios = {r: {"mean_gain": gain, "mean_gain_per_exposure": gain / float(r) / 4}
              for r, gain in (("0.25", 0.464), ("0.5", 0.526), ("0.75", 0.355))}
    f = q.mask_ratio({"dlm-mask-ratio": {"ratios": ratios, "experiment": {"seeds": [0]}}})
    assert f.verdict == INCONCLUSIVE and "0.25 → 0.5: rises" in f.ours  # was 'partly' from the per-exposure fallback
    assert "Context, not judged: per exposure" in f.ours
    assert "one seed stored: inconclusive whatever the values" in f.regime and f.one_seed


def test_assumption_3_1_says_one_value_per_ratio_is_inconclusive_whatever_the_values():
    # falling at every step, over 5 seeds pooled: still one value per ratio, so no test is run (it was a sign test
    # handed one difference per step, inconclusive by construction and not said so)
    ratios = {r: {"mean_gain": gain, "mean_gain_per_exposure": gain / float(r) / 4}
              for r, gain in (("0.25", 0.9), ("0.5", 0.6), ("0.75", 0.3))}
    f = q.mask_ratio({"dlm-mask-ratio": {"ratios": ratios, "experiment": {"seeds": list(range(5))}}})
    assert f.verdict == INCONCLUSIVE and "0.25 → 0.5: falls; 0.5 → 0.75: falls" in f.ours and not f.one_seed
    assert "one value per ratio stored, the tokens of 5 seeds pooled: inconclusive whatever the values" in f.regime


def test_rho_0_35_with_the_higher_mean_auc_elsewhere_and_mixed_seeds_is_not_partly():
    vs = {"ρ = 0.15": [(0.007, -0.006, 0.021), (-0.0, -0.012, 0.012), (0.015, 0.001, 0.029)],
          "ρ = 0.25": [(0.005, -0.009, 0.018), (-0.009, -0.019, 0.002), (0.012, 0.0002, 0.024)],
          "ρ = 0.5": [(-0.017, -0.031, -0.004), (0.004, -0.005, 0.015), (-0.006, -0.02, 0.008)],
          "ρ = 0.75": [(-0.008, -0.02, 0.003), (-0.013, -0.024, -0.002), (0.004, -0.009, 0.016)]}
    aucs = {"ρ = 0.15": 0.944, "ρ = 0.25": 0.948, "ρ = 0.35": 0.951, "ρ = 0.5": 0.957, "ρ = 0.75": 0.957}
    rec = {"paired": {"compare": "ρ = 0.35", "vs": {k: seeds(*v) for k, v in vs.items()}},
           "rows": {k: {"auc": [a, 0.01]} for k, a in aucs.items()}, "experiment": {"budget": 16}}
    f = q.rho_maximises({"r": rec}, name="r")
    assert f.verdict == NOT_REPRODUCED and "A higher mean AUC than ρ = 0.35: ρ = 0.5, ρ = 0.75." in f.regime


def test_theorem_4_3_judges_the_falls_on_refinements_and_the_convergence_not_the_median_alone():
    # SmolLM2-DLM: 46.7% of 60 records fall from 10 steps to max, medians rising, p̂ not converged at R = 4
    n = 60
    cols = {"1": [-80.0] * n, "2": [-73.0] * n, "10": [-70.0] * n, "max": [-68.0] * 32 + [-71.0] * 28}
    f = o.steps_monotone({"st": steps_record(cols, moved=0.467)}, name="st", effects={"2": 0.65, "10": 2.05})
    assert f.verdict == NOT_REPRODUCED and "10 → max: 46.7%" in f.ours and "(p̂ not converged)" in f.ours
    assert o.steps_monotone({"st": steps_record(cols)}, name="st").verdict == PARTLY  # converged: medians count


def test_the_query_budget_reads_the_ar_curve_and_names_the_dlms():
    n = [10 ** e for e in range(7)]
    ar = [0.0, 0.0, 0.0, 0.01, 0.05, 0.18, 0.375]  # 1% at 10³ queries, 37.5% at 10⁶
    f = o.sublinear_budget(budget({"AR": ar, "DLM one-step": [0.0] * 7, "DLM max-step": [0.0] * 7}, n=n))
    assert f.verdict == AGAINST and "at n = 1,000 already 2/75 of those at 1,000,000" in f.ours  # was 'partly'
    assert "DLM one-step: 0 at every n up to 1,000,000 (nothing extractable: not testable)" in f.ours
    assert "DLM max-step: 0 at every n" in f.ours


def test_illusory_forgetting_excludes_controls_outside_the_anomaly_band():
    # tiny: untouched-model estimates −1.69, 0.27, 1.90 and −0.49, −0.81, 0.38: one seed each can tell
    table = {f"{fr} / gradient_ascent / threshold-loss": {"mean": 1.0} for fr in ("0.05", "0.1")}
    raw = {"0.05 / none / smi-m": [-1.69, 0.27, 1.90], "0.05 / gradient_ascent / smi-m": [2.28, 2.11, 3.82],
           "0.1 / none / smi-m": [-0.49, -0.81, 0.38], "0.1 / gradient_ascent / smi-m": [2.54, 2.42, 3.71]}
    f = m.smi_illusory({"ul": {"unlearning": table, "rho_unclipped": raw}}, name="ul")
    assert f.verdict == INCONCLUSIVE and f.ours.count("seeds that can tell: 1/3") == 2  # was 'reproduced' on 2/3, 3/3


def test_smi_min_samples_reads_the_twenty_text_set_not_the_largest_against_itself():
    for mid, verdict in ((MID_RIGHT, REPRODUCED), ([0.3, 0.2, 0.25, 0.3, 0.2], AGAINST)):  # 5 seeds: points
        errors = {"0.025": {"smi-m-scores": SMALL_WRONG}, "0.05": {"smi-m-scores": mid},
                  "0.1": {"smi-m-scores": BIG_RIGHT}}
        assert m.smi_min_samples(sensitivity_record(errors), name="s").verdict == verdict


def test_the_unlearning_std_is_ddof_1_in_the_stored_record_and_its_table():
    from lmaudit.experiments.types import unlearning_audit as ua  # the experiment layer: torch comes with it

    assert ua._seed_std([0.0, 0.0, 1.0]) == pytest.approx(0.57735, abs=1e-5)  # ddof = 0 would read 0.4714
    assert ua._seed_std([0.3, float("nan")]) == 0.0 and np.isnan(ua._seed_std([float("nan")] * 2))
    old = {"per_seed": [0.0, 0.0, 1.0], "mean": 1 / 3, "std": 0.4714, "n_undefined": 0}  # written with ddof = 0
    assert ua._std(old) == pytest.approx(0.57735, abs=1e-5)


def test_the_papers_effect_decides_between_not_reproduced_and_inconclusive():
    # SmolLM2-DLM Q-Skew − SAMA −5.1 [−16.2, +6.4] against the paper's +9.7: excluded, not a tie toward 'partly'
    rec = {"rows": {"q_skew": {"auc": [0.703, 0.0]}}, "experiment": {"seeds": [0]},
           "paired": {"vs": {"sama": seeds((-0.051, -0.162, 0.064)), "loss": seeds((0.174, 0.053, 0.298))}}}
    f = q.q_skew_beats_baselines("d", effect=0.097)({"d": rec})
    assert "sama -5.1 [-16.2, +6.4] (short of the paper's effect 1/1: not reproduced)" in f.ours
    assert f.verdict == PARTLY and f.one_seed and "70.3 (one seed)" in f.ours
    assert q.q_skew_beats_baselines("d", effect=0.15)({"d": {**rec, "paired": {"vs": {
        "sama": seeds((-0.051, -0.162, 0.064))}}}}).verdict == NOT_REPRODUCED
    assert q.q_skew_beats_baselines("d")({"d": {**rec, "paired": {"vs": {
        "sama": seeds((-0.051, -0.162, 0.064))}}}}).verdict == INCONCLUSIVE  # no effect given: a tie
    # Gap-K% − Min-K%++ on SmolLM2, [−5.8, +0.5] and [−5.9, +0.4], against the paper's +2.1
    pt = {"paired": {"seen 1×": seeds((-0.027, -0.058, 0.005)), "seen 4×": seeds((-0.028, -0.059, 0.004))},
          "rows": {}, "experiment": {"attacks": [], "pretrain_tokens": 9, "seeds": [0]}}
    assert g.pretraining_gap({"pt": pt}, name="pt").verdict == NOT_REPRODUCED


def test_ties_read_inconclusive_in_every_judge_that_once_read_them_as_not_reproduced():
    tied = {"paired": {"s": seeds(TIED, TIED)}, "rows": {}, "experiment": {"attacks": [], "pretrain_tokens": 9}}
    assert g.pretraining_gap({"pt": tied}, name="pt").verdict == INCONCLUSIVE
    mixed = smoothing_record(UP5, (0.6,) * 5, MIXED5)  # 5 seeds: with fewer, points are inconclusive anyway
    assert g.smoothing({"pt": mixed}, name="pt").verdict == INCONCLUSIVE
    rows = {"s: perturbed gap_k": {"per_seed": [{"auc": x} for x in (0.62, 0.58, 0.62, 0.62, 0.62)]},
            "s: perturbed min_k_pp": {"per_seed": [{"auc": 0.6}] * 5}}
    f = g.paraphrase({"pt": {"paired": {"s": []}, "rows": rows, "experiment": {"seeds": list(range(5))}}}, name="pt")
    assert f.verdict == INCONCLUSIVE and "(mixed)" in f.ours


def test_one_seed_of_points_is_inconclusive_in_every_points_judge():
    one = {"experiment": {"seeds": [0]}}
    rec = {"pt": {"paired": {"s": []}, **one, "rows": {
        **{f"s: gap_k smooth={k}": {"per_seed": [{"auc": a}]} for k, a in (("sequential", 0.7), ("shuffled", 0.6),
                                                                          ("none", 0.5))},
        **{f"s: {a}": {"per_seed": [{"auc": x, "tpr@1%fpr": x, "tpr@10%fpr": x}]}
           for a, x in (("gap_k", 0.7), ("min_k", 0.5), ("min_k_pp", 0.5), ("perturbed gap_k", 0.7),
                        ("perturbed min_k_pp", 0.5), ("gap_k k=0.15", 0.7), ("gap_k smooth=none", 0.5))}}}}
    for judge in (g.smoothing, g.paraphrase, g.gap_beats_min_k, g.gap_low_fpr, g.k_sensitivity):
        f = judge(rec, name="pt")
        assert f.verdict == INCONCLUSIVE and f.one_seed and "One seed of points" in f.regime, judge.__name__
    f = g.gap_components(rec, name="pt")
    assert f.verdict == INCONCLUSIVE and f.one_seed  # the untested half aside


# ---------------------------------------------------------------- the measured column reads the signs, not the verdict

def test_gap_k_judges_say_which_way_three_seeds_point_though_inconclusive():
    three = list(range(3))
    rows = {**{f"s: gap_k smooth={k}": {"per_seed": [{"auc": a}] * 3}
               for k, a in (("sequential", 0.7), ("shuffled", 0.6), ("none", 0.65))},
            **{f"s: {a}": {"per_seed": [{"auc": x, "tpr@1%fpr": x, "tpr@10%fpr": 1 - x}] * 3}
               for a, x in (("gap_k", 0.7), ("min_k", 0.5), ("min_k_pp", 0.5), ("perturbed gap_k", 0.4),
                            ("perturbed min_k_pp", 0.5))}}
    rec = {"pt": {"paired": {"s": []}, "rows": rows, "experiment": {"seeds": three}}}
    found = {j.__name__: j(rec, name="pt") for j in (g.smoothing, g.paraphrase, g.gap_beats_min_k, g.gap_low_fpr,
                                                    g.gap_components)}
    assert all(f.verdict == INCONCLUSIVE for f in found.values())  # 3 seeds: 0.5³ = 12.5%, no sign test passes
    assert "(sequential − shuffled above on every seed, shuffled − none below on every seed)" in found["smoothing"].ours
    assert "gap_k 40.0 ± 0.0 vs min_k_pp 50.0 ± 0.0 (below on every seed)" in found["paraphrase"].ours
    assert "gap_k 70.0, 70.0, 70.0 vs min_k 50.0, 50.0, 50.0 (above on every seed)" in found["gap_beats_min_k"].ours
    low = found["gap_low_fpr"].ours
    assert "TPR at 1% FPR: gap_k 70.0, 70.0, 70.0 vs min_k_pp 50.0, 50.0, 50.0 (above on every seed)" in low
    assert "TPR at 10% FPR: gap_k 30.0, 30.0, 30.0 vs min_k_pp 50.0, 50.0, 50.0 (below on every seed)" in low
    assert "(full above on every seed)" in found["gap_components"].ours  # full 70.0 vs top-1 only 65.0
    assert not any("mixed" in f.ours for f in found.values())


def test_smi_sensitivity_says_which_way_three_seeds_point_though_inconclusive():
    default = [0.1, 0.12, 0.11]
    errors = {"0.1": {"smi-m-scores": default, "smi-m-scores rbf 0.25×": [0.5, 0.45, 0.55],
                      "smi-m-scores laplacian": [0.12, 0.1, 0.11]}}
    f = m.smi_bandwidth(sensitivity_record(errors), name="s")
    assert f.verdict == INCONCLUSIVE and "worse than the default on every seed" in f.regime  # was 'on some seeds only'
    assert "laplacian moves it by 0.01, less than the narrow bandwidth on every seed" in f.regime
    errors = {"0.025": {"smi-m-scores": SMALL_WRONG[:3]}, "0.05": {"smi-m-scores": MID_RIGHT[:3]},
              "0.1": {"smi-m-scores": BIG_RIGHT[:3]}}
    f = m.smi_min_samples(sensitivity_record(errors), name="s")
    assert f.verdict == INCONCLUSIVE and "10 texts past the tolerance on every seed" in f.regime
    assert "20 texts under it on every seed, 40 texts under it on every seed" in f.regime
    assert "some seeds only" not in f.regime
    errors["0.05"]["smi-m-scores"] = [0.05, 0.15, 0.05]
    assert "20 texts mixed" in m.smi_min_samples(sensitivity_record(errors), name="s").regime


def test_smi_closest_names_an_audit_closer_on_every_seed_of_three():
    def cell(v):
        return {"mean": sum(v) / len(v), "n_undefined": 0, "per_seed": list(v)}

    table = {"0.1 / none / smi-m": cell([1.0] * 3), "0.1 / retrain / smi-m": cell([1.0] * 3),
             "0.1 / none / threshold-loss": cell([0.05, 0.06, 0.07]),
             "0.1 / retrain / threshold-loss": cell([0.9, 0.85, 0.88])}
    f = o.smi_closest({"unlearning-audit": {"unlearning": table}})
    assert f.verdict == INCONCLUSIVE and "farther from it on every seed than threshold-loss" in f.ours


def test_misaligned_and_epochs_say_which_way_the_seeds_point():
    n = 3
    curves = {"q_skew": {"1": {"auc": [0.9], "per_seed": [{"auc": 0.9}] * n}},
              "loss": {"1": {"auc": [0.7], "per_seed": [{"auc": 0.7}] * n}}}
    f = q.over_epochs({"dlm-epochs": {"curves": curves, "experiment": {"seeds": list(range(n))}}})
    assert f.verdict == INCONCLUSIVE and "1: q_skew 90.0 (q_skew 90.0, above on every seed)" in f.ours


# ---------------------------------------------------------------- rule text follows the rule's constants

def test_rule_texts_follow_the_sign_test_constant(monkeypatch):
    from lmaudit.report.claims import RULE
    from lmaudit.report.verdicts import SIGN_TEST_SEEDS

    assert f"{SIGN_TEST_SEEDS} seeds or more" in RULE and "five seeds" not in RULE
    assert "points never give not reproduced" in RULE
    skews = [(0.3, 0.05), (0.2, 0.0), (0.3, 0.05)]
    f = q.asymmetry({"rg": regimes_record([TIED] * 3, [TIED] * 3, skews)}, name="rg")
    assert f"either only on {SIGN_TEST_SEEDS} regimes or more; fewer regimes (here 3)" in f.regime
    assert "one regime is inconclusive" not in f.regime and f.verdict == INCONCLUSIVE
    table = {"0.1 / gradient_ascent / threshold-loss": {"mean": 1.0}}
    raw = {"0.1 / none / smi-m": [0.1, 0.2, 0.1], "0.1 / gradient_ascent / smi-m": [3.0, 2.5, 2.8]}
    f = m.smi_illusory({"ul": {"unlearning": table, "rho_unclipped": raw}}, name="ul")
    assert f"on {SIGN_TEST_SEEDS} such seeds at least" in f.regime and "two seeds" not in f.regime
    assert "on the seeds that can tell: beyond the band on every seed" in f.ours and f.verdict == INCONCLUSIVE
    assert "Fewer than two" not in m.smi_illusory.__doc__
    # the texts read the constant, not a number written beside it
    monkeypatch.setattr(q, "SIGN_TEST_SEEDS", 7)
    monkeypatch.setattr(m, "SIGN_TEST_SEEDS", 7)
    assert "either only on 7 regimes or more" in q.asymmetry({"rg": regimes_record([TIED] * 3, [TIED] * 3, skews)},
                                                             name="rg").regime
    assert "on 7 such seeds at least" in m.smi_illusory({"ul": {"unlearning": table, "rho_unclipped": raw}},
                                                        name="ul").regime


@pytest.mark.parametrize("at5, verdict", [((0.06, 0.04, 0.09), REPRODUCED), ((0.0, -0.045, 0.025), NOT_REPRODUCED),
                                          ((0.0, -0.04, 0.05), INCONCLUSIVE), ((-0.06, -0.09, -0.02), AGAINST)])
def test_gap_low_fpr_reads_the_paired_tpr_at_five_percent_against_the_papers_gain(at5, verdict):
    def entry(i):
        d, lo, hi = at5
        return {"seed": i, "diff": 0.01, "ci95": [-0.02, 0.04], "tpr@5%fpr": {"diff": d, "ci95": [lo, hi]},
                "tpr@1%fpr": {"diff": -0.01, "ci95": [-0.025, 0.01]}}

    rec = {"paired": {"compare": "gap_k", "vs": {"min_k_pp": [entry(0), entry(1), entry(2)]}},
           "experiment": {"n_members": 200, "n_nonmembers": 1000, "epochs": 3}, "rows": {}}
    f = g.gap_low_fpr_paired({"tpr": rec}, name="tpr", fallback="pt")
    assert f.verdict == verdict and not f.points
    assert f"at 5% FPR {100 * at5[0]:+.1f} [{100 * at5[1]:+.1f}, {100 * at5[2]:+.1f}]" in f.ours
    assert "against the paper's +3.0 points" in f.ours and "5% FPR is 50 of them and 1% is 10" in f.regime


def test_gap_low_fpr_without_paired_tprs_falls_back_to_the_points_of_the_pretraining_run():
    rows = {f"seen 1×: {a}": {"per_seed": [{"tpr@1%fpr": x, "tpr@10%fpr": x} for x in v]}
            for a, v in (("gap_k", [0.02]), ("min_k_pp", [0.03]))}
    pt = {"paired": {"seen 1×": []}, "rows": rows, "experiment": {"seeds": [0]}}
    old = {"paired": {"compare": "gap_k", "vs": {"min_k_pp": seeds(TIED)}}, "experiment": {}, "rows": {}}
    f = g.gap_low_fpr_paired({"tpr": old, "pt": pt}, name="tpr", fallback="pt")
    assert f.points and "gap_k 2.0 vs min_k_pp 3.0" in f.ours
