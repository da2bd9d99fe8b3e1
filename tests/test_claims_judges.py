"""The judges of CLAIMS.md not covered in test_claims_rules: each given stored values that make each verdict it can
give (a judge that can only say "not testable" says so whatever the values)."""

import pytest

from lmaudit.report import claims_more as m
from lmaudit.report import claims_others as o
from lmaudit.report import claims_pii as pii
from lmaudit.report import claims_qskew as q
from lmaudit.report.claims_base import NOT_REPRODUCED, PARTLY, REPRODUCED, UNTESTABLE

AHEAD, TIED, BEHIND = (0.05, 0.02, 0.08), (0.01, -0.02, 0.04), (-0.05, -0.08, -0.02)


def seeds(*triples):
    return [{"seed": i, "diff": d, "ci95": [lo, hi]} for i, (d, lo, hi) in enumerate(triples)]


def auc_rows(**per_seed):
    return {row.replace("__", " ").replace("_eq_", "="): {"per_seed": [{"auc": x} for x in v]}
            for row, v in per_seed.items()}


@pytest.mark.parametrize("per_seed, verdict", [((AHEAD, AHEAD), REPRODUCED), ((AHEAD, TIED), NOT_REPRODUCED),
                                               ((BEHIND, BEHIND), NOT_REPRODUCED)])
def test_pretraining_gap_needs_every_seed_ahead_and_none_behind(per_seed, verdict):
    rec = {"paired": {"seen once": seeds(*per_seed)}, "rows": {}, "experiment": {"attacks": [], "pretrain_tokens": 9}}
    f = o.pretraining_gap({"pt": rec}, name="pt")
    assert f.verdict == verdict and f"seen once: {100 * per_seed[0][0]:+.1f} [" in f.ours and "on 9 tokens" in f.regime


def smoothing_record(seq, shu, non):
    rows = {f"s: gap_k smooth={k}": {"per_seed": [{"auc": v}, {"auc": v}]} for k, v in
            (("sequential", seq), ("shuffled", shu), ("none", non))}
    return {"paired": {"s": []}, "rows": rows, "experiment": {"seeds": [0, 1]}}


@pytest.mark.parametrize("aucs, verdict", [((0.7, 0.6, 0.5), REPRODUCED), ((0.5, 0.6, 0.7), NOT_REPRODUCED)])
def test_smoothing_order_is_read_from_the_means(aucs, verdict):
    f = o.smoothing({"pt": smoothing_record(*aucs)}, name="pt")
    assert f.verdict == verdict and f"sequential {100 * aucs[0]:.1f} ± 0.0" in f.ours and f.points


@pytest.mark.parametrize("gap, verdict", [((0.70, 0.01), REPRODUCED), ((0.61, 0.01), NOT_REPRODUCED)])
def test_paraphrase_needs_gap_k_ahead_beyond_both_stds(gap, verdict):
    rows = {"s: perturbed gap_k": {"auc": list(gap)}, "s: perturbed min_k_pp": {"auc": [0.6, 0.01]}}
    f = o.paraphrase({"pt": {"paired": {"s": []}, "rows": rows}}, name="pt")
    assert f.verdict == verdict and "s: gap_k" in f.ours


@pytest.mark.parametrize("smi, verdict", [(0.01, REPRODUCED), (5.0, NOT_REPRODUCED)])
def test_smi_cost_is_below_the_lira_probes(smi, verdict):
    cost = {"smi": smi, "smi-m": 0.02, "features": 1.0, "smi-scores": 0.01, "smi-m-scores": 0.01, "lira_probes": 2.0,
            "lira_shadow_training": 30.0}
    assert o.smi_cost({"unlearning-audit": {"cost_s": cost}}).verdict == verdict


@pytest.mark.parametrize("medians, verdict", [((0.0, 0.5, 1.0), REPRODUCED), ((0.0, 1.0, 0.5), NOT_REPRODUCED)])
def test_steps_monotone_reads_the_median_gains_and_counts_falls_on_refinements(medians, verdict):
    rec = {"steps": {s: {"median_delta_log_p": [v]} for s, v in zip(("1", "2", "max"), medians)},
           "monotone_fraction": [0.75], "log_p_columns": {"1": [-3, -3, -3, -3], "2": [-2, -2, -4, -2],
                                                           "max": [-1, -1, -1, -3]}}
    f = o.steps_monotone({"st": rec}, name="st")
    assert f.verdict == verdict and "on 75.0% of masks (first seed, 4 masks)" in f.ours and f.points
    assert "1 → 2: 25.0%, 2 → max: 25.0%" in f.regime  # one record of four fell on each refinement


@pytest.mark.parametrize("fractions, verdict", [
    ([0.1, 0.3, 0.45, 0.5], REPRODUCED),  # < 10× per decade, last decade's gain below the one before it
    ([0.1, 0.2, 0.3, 0.5], PARTLY),  # sublinear, still rising at the largest n
    ([0.001, 0.5, 0.6, 0.7], NOT_REPRODUCED),  # 500× in one decade
    ([0.0, 0.0, 0.0, 0.0], UNTESTABLE),  # nothing extractable at any n
])
def test_sublinear_budget_rule(fractions, verdict):
    budget = {"n": [1, 10, 100, 1000], "p": 0.5, "mask": "suffix:8", "fractions": {"DLM": fractions}}
    assert o.sublinear_budget({"extraction-relaxed": {"budget": budget}}).verdict == verdict


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


@pytest.mark.parametrize("unmasked, verdict", [([AHEAD, AHEAD], REPRODUCED), ([AHEAD, BEHIND], PARTLY),
                                               ([TIED, BEHIND], NOT_REPRODUCED)])
def test_authors_calibration_counts_the_regimes_where_q_skew_is_ahead(unmasked, verdict):
    f = q.authors_calibration({"rg": regimes_record(unmasked, [BEHIND, BEHIND])}, name="rg")
    assert f.verdict == verdict and "against the masked-ELBO calibration: ahead 0, tied 0, behind 2" in f.ours
    assert "the unmasked ratio is the weaker baseline in every regime" in f.regime  # its AUC is below in 0/2


@pytest.mark.parametrize("skews, verdict", [
    ([(0.3, 0.05), (0.2, 0.0)], REPRODUCED),  # members right-skewed, above non-members, who are near symmetric
    ([(0.3, 0.2), (0.2, 0.0)], PARTLY),  # one cell's non-members skewed (g₁ ≥ 0.1)
    ([(-0.3, 0.0), (0.0, 0.1)], NOT_REPRODUCED),  # members' skew never above non-members'
])
def test_asymmetry_reads_three_parts(skews, verdict):
    f = q.asymmetry({"rg": regimes_record([TIED] * 2, [TIED] * 2, skews)}, name="rg")
    assert f.verdict == verdict and f.points \
        and "by Cohen's d = 0.20 on average, the location shift (per-text mean Δ) by d = 1.50" in f.regime


@pytest.mark.parametrize("vs, verdict", [({"mean": [AHEAD], "random": [AHEAD]}, REPRODUCED),
                                         ({"mean": [AHEAD], "random": [TIED]}, PARTLY),
                                         ({"mean": [BEHIND], "random": [TIED]}, NOT_REPRODUCED)])
def test_components_help_only_when_full_beats_the_variant_on_every_seed(vs, verdict):
    rec = {"paired": {"compare": "q_skew", "vs": {k: seeds(*v) for k, v in vs.items()}},
           "rows": {"q_skew": {"auc": [0.7, 0.0]}}, "experiment": {"budget": 8, "n_members": 60, "n_nonmembers": 60}}
    f = q.components_help({"ab": rec}, name="ab")
    assert f.verdict == verdict
    assert ("The variant(s) mean beat the full method" in f.regime) == (verdict == NOT_REPRODUCED)


@pytest.mark.parametrize("vs, verdict", [
    ({"ρ = 0.15": [AHEAD, AHEAD], "ρ = 0.5": [TIED, TIED]}, REPRODUCED),  # a maximum, its neighbour within noise
    ({"ρ = 0.15": [AHEAD, AHEAD], "ρ = 0.5": [TIED, BEHIND]}, PARTLY),  # ρ = 0.5 ahead of it on one seed
    ({"ρ = 0.15": [AHEAD, TIED], "ρ = 0.5": [TIED, TIED]}, PARTLY),  # ahead of no ρ on every seed
    ({"ρ = 0.15": [AHEAD, AHEAD], "ρ = 0.5": [BEHIND, BEHIND]}, NOT_REPRODUCED),
    ({"ρ = 0.15": [TIED, TIED], "ρ = 0.5": [TIED, TIED]}, UNTESTABLE),  # flat: no maximum to locate
])
def test_rho_maximises_needs_no_rho_ahead_and_a_curve_that_is_not_flat(vs, verdict):
    rows = {k: {"auc": [0.7, 0.01]} for k in ("ρ = 0.15", "ρ = 0.35", "ρ = 0.5")}
    rec = {"paired": {"compare": "ρ = 0.35", "vs": {k: seeds(*v) for k, v in vs.items()}}, "rows": rows,
           "experiment": {"budget": 16}}
    f = q.rho_maximises({"r": rec}, name="r")
    assert f.verdict == verdict and "ρ = 0.35 70.0 ± 1.0" in f.ours and "same 16 masked forwards" in f.regime
    assert ("Ahead of ρ = 0.35 on every seed: ρ = 0.5." in f.regime) == (verdict == NOT_REPRODUCED)


@pytest.mark.parametrize("q_aucs, verdict", [((0.9, 0.9), REPRODUCED), ((0.9, 0.5), PARTLY),
                                             ((0.5, 0.5), NOT_REPRODUCED)])
def test_over_epochs_counts_the_epochs_q_skew_leads(q_aucs, verdict):
    curves = {"q_skew": {e: {"auc": [a]} for e, a in zip(("1", "2"), q_aucs)},
              "loss": {e: {"auc": [0.7]} for e in ("1", "2")}}
    f = q.over_epochs({"dlm-epochs": {"curves": curves, "experiment": {"seeds": [0]}}})
    assert f.verdict == verdict and f.points


@pytest.mark.parametrize("full, verdict", [(0.8, PARTLY), (0.6, NOT_REPRODUCED)])
def test_gap_components_is_partly_at_best(full, verdict):
    rows = auc_rows(**{"s:__gap_k": [full, full], "s:__gap_k__smooth_eq_none": [0.7, 0.7]})
    rec = {"paired": {"s": []}, "rows": rows, "experiment": {"seeds": [0, 1]}}
    assert m.gap_components({"pt": rec}, name="pt").verdict == verdict
    rec["experiment"]["seeds"] = [0]
    assert m.gap_components({"pt": rec}, name="pt").verdict == UNTESTABLE  # one seed: nothing to measure noise by


def test_smi_ranking_is_not_testable_whatever_the_estimates_and_shows_the_ranking():
    table = {"0.1 / npo / smi-m": {"mean": 0.9, "per_seed": [0.89, 0.91]},
             "0.1 / gradient_ascent / smi-m": {"mean": 0.5, "per_seed": [0.49, 0.51]},
             "0.1 / finetune / smi-m": {"mean": 0.4, "per_seed": [0.4, float("nan")]},  # one seed defined: no spread
             "0.1 / retrain / smi-m": {"mean": 1.0, "per_seed": [1.0, 1.0]}}
    f = m.smi_ranking({"ul": {"unlearning": table}}, name="ul")
    assert f.verdict == UNTESTABLE  # the sample std (ddof = 1) of 0.49, 0.51 is 0.014, not the population's 0.010
    assert "forget 10%: npo 0.90 ± 0.01 > gradient_ascent 0.50 ± 0.01 ≈ finetune 0.40 ± nan" in f.ours
    assert m._defined_std([0.49, 0.51]) == pytest.approx(0.0141421, abs=1e-6)


@pytest.mark.parametrize("ar_ranks, dlm_ranks, verdict, against", [
    ([1] * 5, [2] * 5, REPRODUCED, False), ([3] * 5, [2] * 5, NOT_REPRODUCED, False),  # tied at 0% top-1 each
    ([3] * 5, [1] * 5, NOT_REPRODUCED, True)])  # the DLM ahead: against the claim, said so
def test_ar_reconstructs_more_is_read_from_paired_ranks(ar_ranks, dlm_ranks, verdict, against):
    ranks = {"ce": {"email": [dlm_ranks]}, "AR ce": {"email": [ar_ranks]}}
    top1 = {k: {"email": [100.0 * sum(r == 1 for r in v["email"][0]) / 5]} for k, v in ranks.items()}
    rec = {"ranks": ranks, "asr": top1, "fields": {"email": {"coverage": [40.0], "ar_coverage": [80.0]}},
           "n_targets": 5, "experiment": {"lr": 2e-3, "epochs": 150, "n_members": 30, "adapt_tokens": 1000}}
    f = pii.ar_reconstructs_more({"rc": rec}, name="rc")
    assert f.verdict == verdict and "email: DLM 40%, AR 80%" in f.ours
    assert ("(against the claim)" in f.ours) == against
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
    return {"s": {"unlearning": table, "n_train": 400, "n_nonmembers": 400,
                  "experiment": {"seeds": [0, 1, 2], "smi_m_variants": variants}}}


@pytest.mark.parametrize("narrow, lap, verdict", [
    ([0.5, 0.45, 0.55], [0.12, 0.1, 0.11], REPRODUCED),  # narrow far worse, the kernel barely moves it
    ([0.5, 0.45, 0.55], [0.6, 0.55, 0.65], PARTLY),  # the kernel moves it more than the narrow bandwidth does
    ([0.2, 0.1, 0.15], [0.1, 0.12, 0.11], PARTLY),  # narrow +0.04 within the seeds' spread; the kernel moves it less
    ([0.12, 0.1, 0.11], [0.6, 0.55, 0.65], NOT_REPRODUCED),
    ([float("nan")] * 3, [0.1, 0.1, 0.1], REPRODUCED),  # undefined narrow estimates count as 0.5 each
])
def test_smi_bandwidth_reads_the_narrowest_bandwidth_and_the_kernels_against_the_default(narrow, lap, verdict):
    errors = {"0.1": {"smi-m-scores": [0.1, 0.12, 0.11], "smi-m-scores rbf 0.25×": narrow,
                      "smi-m-scores laplacian": lap}}
    f = m.smi_bandwidth(sensitivity_record(errors), name="s")
    assert f.verdict == verdict and f.points and "rbf 1× (default) 0.11 ± 0.01" in f.ours


@pytest.mark.parametrize("small, mid, verdict", [
    ([0.4, 0.35, 0.45], [0.1, 0.12, 0.11], REPRODUCED),  # 10 texts far worse, 20 as good as 40
    ([0.1, 0.12, 0.11], [0.1, 0.12, 0.11], PARTLY),  # no limit at 10, stable at 20
    ([0.4, 0.35, 0.45], [0.4, 0.35, 0.45], PARTLY),  # 20 as bad as 10
    ([0.1, 0.12, 0.11], [0.4, 0.35, 0.45], NOT_REPRODUCED),
])
def test_smi_min_samples_needs_a_worse_small_set_and_a_stable_one_at_twenty(small, mid, verdict):
    errors = {"0.025": {"smi-m-scores": small}, "0.05": {"smi-m-scores": mid},
              "0.1": {"smi-m-scores": [0.1, 0.11, 0.12]}}
    f = m.smi_min_samples(sensitivity_record(errors), name="s")
    assert f.verdict == verdict and "10 texts" in f.ours and "20 texts" in f.ours and "40 texts 0.11 ± 0.01" in f.ours
    assert "against 200 retain and 200 held-out reference texts" in f.regime


def test_smi_min_samples_worse_but_within_the_tolerance_is_no_limit():
    small, rest = [0.07, 0.07, 0.07], [0.01, 0.02, 0.03]  # 10 texts worse beyond the spread, yet under 0.1
    errors = {"0.025": {"smi-m-scores": small}, "0.05": {"smi-m-scores": rest}, "0.1": {"smi-m-scores": rest}}
    f = m.smi_min_samples(sensitivity_record(errors), name="s")
    assert f.verdict == PARTLY and "its error stays under 0.1, so it still reads 'none' as kept" in f.regime


def test_smi_min_samples_is_not_testable_where_even_the_largest_set_is_misread():
    errors = {f: {"smi-m-scores": [0.4, 0.35, 0.45]} for f in ("0.025", "0.05", "0.1")}
    f = m.smi_min_samples(sensitivity_record(errors), name="s")
    assert f.verdict == UNTESTABLE and "misreads even 40 texts (error 0.40" in f.regime
