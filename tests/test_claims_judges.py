"""The judges of CLAIMS.md not covered in test_claims_rules: each given stored values that make the verdicts it can
give under the one rule (per seed, five categories against the paper's effect; seeds that disagree are mixed), and
the defects once found in them, each with the values quoted then planted into a minimal record."""

import numpy as np
import pytest

from lmaudit.claims import gapk as g
from lmaudit.claims import headline as h
from lmaudit.claims import more as m
from lmaudit.claims import others as o
from lmaudit.claims import qskew as q
from lmaudit.claims import qskew_theory as qt
from lmaudit.claims import smi as smi
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

AHEAD, TIED, BEHIND = (0.05, 0.02, 0.08), (0.01, -0.02, 0.04), (-0.05, -0.08, -0.02)
SETS = {"n_members": 200, "n_nonmembers": 200}


def seeds(*triples):
    return [{"seed": i, "diff": d, "ci95": [lo, hi]} for i, (d, lo, hi) in enumerate(triples)]


def auc_rows(n: int = 3, **aucs):
    return {row.replace("__", " ").replace("_eq_", "="): {"per_seed": [{"auc": a}] * n} for row, a in aucs.items()}


@pytest.mark.parametrize("per_seed, verdict", [((AHEAD, AHEAD), REPRODUCED), ((AHEAD, TIED), MIXED),
                                               ((TIED, TIED), INCONCLUSIVE), ((BEHIND, BEHIND), AGAINST),
                                               (((0.01, 0.005, 0.015),) * 2, SMALLER),
                                               (((-0.027, -0.058, 0.005),) * 2, NOT_REPRODUCED)])
def test_pretraining_gap_reads_each_seed_against_the_papers_gain(per_seed, verdict):
    rec = {"paired": {"seen once": seeds(*per_seed)}, "rows": {}, "experiment": {"attacks": [], "pretrain_tokens": 9}}
    f = g.pretraining_gap({"pt": rec}, name="pt")
    assert f.verdict == verdict and "against the paper's +2.1 points" in f.ours and "on 9 tokens" in f.regime


def pretraining(n=3, **aucs):
    return {"pt": {"paired": {"s": []}, "rows": auc_rows(n, **aucs), "experiment": {"seeds": list(range(n)), **SETS}}}


@pytest.mark.parametrize("aucs, verdict", [
    ((0.9, 0.8, 0.7), REPRODUCED),  # +10 points each step, far beyond the unpaired noise at 200 + 200 texts
    ((0.7, 0.8, 0.9), AGAINST),
    ((0.72, 0.71, 0.70), INCONCLUSIVE),  # +1 point a step: holds 0 and the paper's +1.9 / +0.6
])
def test_smoothing_order_gets_an_interval_from_the_aucs(aucs, verdict):
    rec = pretraining(**{"s: gap_k smooth_eq_sequential": aucs[0], "s: gap_k smooth_eq_shuffled": aucs[1],
                         "s: gap_k smooth_eq_none": aucs[2]})
    f = g.smoothing(rec, name="pt")
    assert f.verdict == verdict and "Hanley and McNeil" in f.ours and not f.points  # was points, never a verdict


@pytest.mark.parametrize("gap, verdict", [(0.9, REPRODUCED), (0.6, INCONCLUSIVE), (0.4, AGAINST)])
def test_paraphrase_is_read_with_the_unpaired_interval(gap, verdict):
    rec = pretraining(**{"s: perturbed gap_k": gap, "s: perturbed min_k_pp": 0.6})
    assert g.paraphrase(rec, name="pt").verdict == verdict


def cost(runs=None, shadows=30.0):
    c = {"smi": 0.01, "smi-m": 0.02, "features": 1.0, "smi-scores": 0.01, "smi-m-scores": 0.01, "lira_probes": 2.0,
         "lira_shadow_training": shadows}
    return {"unlearning-audit": {"cost_s": c, **({"cost_runs": runs} if runs is not None else {})}}


def run(lira: float, trained: bool = True, probes: float = 2.0):
    return {"shadows_timed": trained, "smi": [0.01, 0.012, 0.011], "smi-m": [0.02, 0.021, 0.019],
            "features": [1.0, 1.1, 0.9], "lira_shadow_training": [lira, lira * 1.05, lira * 0.95],
            "lira_probes": [probes, probes, probes * 1.05]}


def test_smi_cost_is_judged_per_seed_only_where_shadow_training_was_timed():
    # the run means alone (one ratio, the shadows maybe from the cache): points, never 'reproduced' from one timing
    assert smi.smi_cost(cost()).verdict == POINTS_ONLY
    assert smi.smi_cost(cost(shadows=None)).verdict == "not run"
    assert smi.smi_cost(cost([run(3000.0, trained=False)] * 3)).verdict == UNTESTABLE  # every seed from the cache
    # trained shadows, log10(LiRA / SMI) per seed against the paper's 3.66 orders of magnitude
    assert smi.smi_cost(cost([run(30_000.0)] * 3)).verdict == REPRODUCED  # 10^4: the paper's size not excluded
    assert smi.smi_cost(cost([run(100.0)] * 3)).verdict == SMALLER  # 10^2: cheaper, by less than the paper's
    assert smi.smi_cost(cost([run(0.0, probes=0.1)] * 3)).verdict == AGAINST  # LiRA's 0.1 s against SMI's 1 s


def steps_record(cols: dict[str, list[float]], moved: float = 0.0, n_seeds: int = 1) -> dict:
    conv = {"not_converged_fraction": moved}
    return {"steps": {s: {"per_seed": [{"convergence": conv}] * n_seeds} for s in cols}, "log_p_columns": cols,
            "monotone_fraction": [0.5, 0.0], "experiment": {"seeds": list(range(n_seeds))}}


NOISE = np.random.default_rng(0).normal(0, 0.05, 40)
RISE = {"1": list(-9.0 + NOISE), "2": list(-8.0 + NOISE), "max": list(-6.0 + NOISE)}  # every record rises


def test_theorem_4_3_reads_falls_beyond_float_rounding_and_each_seed():
    f = o.steps_monotone({"st": steps_record(RISE)}, name="st")
    # medians above 0 (no paper effect given here): reproduced; no fall: a claim of none, inconclusive
    assert f.verdict == MIXED and f.verdict.counts == "2 reproduced, 2 inconclusive" and f.one_seed
    tiny_fall = {**RISE, "max": [x - 1e-9 for x in RISE["2"]]}  # one refinement where every record 'falls' 1e-9 nats
    f = o.steps_monotone({"st": steps_record(tiny_fall)}, name="st")
    assert AGAINST not in f.verdict.parts  # float rounding is not a fall (it made the theorem fail)
    fall = {**RISE, "max": list(np.array(RISE["2"]) - 0.5)}
    f = o.steps_monotone({"st": steps_record(fall)}, name="st")
    assert AGAINST in f.verdict.parts and "2 → max: 40/40" in f.ours
    unconverged = o.steps_monotone({"st": steps_record(RISE, moved=0.5)}, name="st")
    assert AT_THIS_SIZE in unconverged.verdict.parts  # too few orders: our size, not the paper's claim
    # several seeds run, per-record values stored for the first only: not read as if it were every seed
    f = o.steps_monotone({"st": steps_record(RISE, n_seeds=3)}, name="st")
    assert f.verdict == UNTESTABLE and "log_p_columns_per_seed" in f.regime


def budget(fractions: dict[str, list[float]], n=(1, 10, 100, 1000)) -> dict:
    return {"extraction-relaxed": {"budget": {"n": list(n), "p": 0.5, "mask": "suffix:8", "n_records": 200,
                                              "fractions": fractions}, "experiment": {"seeds": [0]}}}


@pytest.mark.parametrize("fractions, verdict", [
    ([0.4, 0.45, 0.48, 0.5], REPRODUCED),  # 80 of the 100 found at n = 1000 already found at n = 1
    ([0.0, 0.0, 0.0, 0.5], AGAINST),  # none of them before n = 1000: most appear late
    ([0.0, 0.0, 0.0, 0.0], UNTESTABLE),  # nothing extractable at any n
])
def test_sublinear_budget_rule(fractions, verdict):
    f = o.sublinear_budget(budget({"DLM": fractions}))
    assert f.verdict == verdict and f.one_seed


def regimes_record(unmasked: list[tuple], masked: list[tuple], per_text=None) -> dict:
    cells = {}
    for i, (u, mk) in enumerate(zip(unmasked, masked)):
        delta = {"members": {"mean": 1.0, "std": 1.0, "skew": 0.3}, "nonmembers": {"mean": 0.0, "std": 1.0,
                                                                                   "skew": 0.05},
                 "separation": {"d_mean": 1.5, "d_skew": 0.2}}
        cells[f"c{i}"] = {"settings": {"mode": "dft"}, "paired": {"calibration unmasked_ratio": u, "calibration": mk},
                          "auc": {"calibration unmasked_ratio": [0.6, 0.0], "calibration": [0.7, 0.0]}, "delta": delta}
        if per_text:  # each seed's per-text skewness, members and non-members
            cells[f"c{i}"]["per_seed"] = [{"delta": {"members": {"per_text_skew": m},
                                                     "nonmembers": {"per_text_skew": n}}} for m, n in per_text]
    return {"cells": cells}


@pytest.mark.parametrize("unmasked, verdict", [([AHEAD, AHEAD], SMALLER), ([AHEAD, TIED], MIXED),
                                               ([BEHIND, BEHIND], AGAINST), ([TIED, TIED], NOT_REPRODUCED)])
def test_authors_calibration_judges_every_regime_against_the_papers_margin(unmasked, verdict):
    f = q.authors_calibration({"rg": regimes_record(unmasked, [BEHIND, BEHIND])}, name="rg", effect=0.097)
    assert f.verdict == verdict and "against the masked-ELBO calibration: ahead 0, tied 0, behind 2" in f.ours


def test_theorem_3_2_is_points_only_until_the_per_text_skews_are_stored():
    f = qt.asymmetry({"rg": regimes_record([TIED] * 5, [TIED] * 5)}, name="rg")  # five regimes of points: once
    # a sign test, now no interval at all
    assert f.verdict == POINTS_ONLY and "per_text_skew" in f.regime
    rng = np.random.default_rng(1)
    skewed = (list(0.4 + rng.normal(0, 0.1, 100)), list(rng.normal(0, 0.1, 100)))
    assert qt.asymmetry({"rg": regimes_record([TIED], [TIED], [skewed])}, name="rg").verdict == REPRODUCED
    flipped = (list(-0.4 + rng.normal(0, 0.1, 100)), list(0.4 + rng.normal(0, 0.1, 100)))
    assert qt.asymmetry({"rg": regimes_record([TIED], [TIED], [flipped])}, name="rg").verdict == AGAINST
    both = qt.asymmetry({"rg": regimes_record([TIED], [TIED], [skewed, flipped])}, name="rg")  # seed by seed
    assert both.verdict == MIXED and "2 seeds" in both.ours and not both.one_seed


def test_components_and_rho_read_each_comparison_and_seed():
    rec = {"paired": {"compare": "q_skew", "vs": {"mean": seeds(AHEAD), "random": seeds(TIED)}},
           "rows": {"q_skew": {"auc": [0.7, 0.0]}}, "experiment": {"budget": 8, "n_members": 60, "n_nonmembers": 60}}
    f = q.components_help({"ab": rec}, name="ab", effects={"mean": 0.027})
    assert f.verdict == MIXED and f.verdict.counts == "1 reproduced, 1 inconclusive"
    assert "the paper's drop: mean +2.7 points, random none given" in f.ours
    vs = {"ρ = 0.15": seeds(AHEAD, AHEAD), "ρ = 0.5": seeds(BEHIND, BEHIND)}
    rows = {k: {"auc": [0.7, 0.01]} for k in ("ρ = 0.15", "ρ = 0.35", "ρ = 0.5")}
    f = q.rho_maximises({"r": {"paired": {"compare": "ρ = 0.35", "vs": vs}, "rows": rows,
                               "experiment": {"budget": 16}}}, name="r")
    assert f.verdict == MIXED and "Ahead of ρ = 0.35 on every seed: ρ = 0.5." in f.regime


def test_over_epochs_reads_an_interval_per_epoch_not_points():
    def curves(qs, other):
        c = lambda v: {"per_seed": [{"auc": v}]}  # noqa: E731
        return {"dlm-epochs": {"curves": {"q_skew": {str(e + 1): c(v) for e, v in enumerate(qs)},
                                          "loss": {str(e + 1): c(other) for e in range(len(qs))}},
                               "experiment": {"seeds": [0], **SETS}}}

    assert q.over_epochs(curves((0.9, 0.95), 0.7)).verdict == REPRODUCED  # one seed: once inconclusive by fiat
    assert q.over_epochs(curves((0.6, 0.65), 0.9)).verdict == AGAINST


def test_gap_components_reads_the_smoothing_half_where_it_is_stored():
    rec = pretraining(**{"s: gap_k": 0.9, "s: gap_k smooth_eq_none": 0.7})
    f = g.gap_components(rec, name="pt")
    assert f.verdict == MIXED and f.verdict.counts == "3 reproduced, 1 not testable here"
    rec["pt"]["rows"] |= auc_rows(**{"s: min_k_pp smooth_eq_sequential": 0.7})
    assert g.gap_components(rec, name="pt").verdict == REPRODUCED


def test_smi_ranking_is_not_testable_without_a_known_share_and_judged_with_one():
    table = {"0.1 / npo / smi-m": {"mean": 0.9, "per_seed": [0.89, 0.91]},
             "0.1 / gradient_ascent / smi-m": {"mean": 0.5, "per_seed": [0.49, 0.51]},
             "0.1 / retrain / smi-m": {"mean": 1.0, "per_seed": [1.0, 1.0]}}
    rec = {"unlearning": table, "experiment": {"seeds": [0, 1]}}
    f = m.smi_ranking({"ul": rec}, name="ul")
    assert f.verdict == UNTESTABLE and "known_rho" in f.regime
    assert "npo 0.90 ± 0.01, gradient_ascent 0.50 ± 0.01" in f.ours  # ddof = 1: 0.014, not the population's 0.010
    rec["intervals"] = {k: [[v - 0.02, v + 0.02] for v in c["per_seed"]] for k, c in table.items()}
    rec["known_rho"] = {"0.1 / npo": 0.7, "0.1 / gradient_ascent": 0.3}
    assert m.smi_ranking({"ul": rec}, name="ul").verdict == REPRODUCED
    rec["known_rho"] = {"0.1 / npo": 0.1, "0.1 / gradient_ascent": 0.9}
    assert m.smi_ranking({"ul": rec}, name="ul").verdict == AGAINST


def test_row_9_tpr_is_points_only_without_paired_tprs_and_judged_with_them():
    def record(tpr, paired=None):
        n = len(tpr["q_skew"])
        rec = {"rows": {a: {"per_seed": [{"auc": 0.9, "tpr@1%fpr": t} for t in v]} for a, v in tpr.items()},
               "experiment": {"seeds": list(range(n)), "n_nonmembers": 200}}
        if paired:
            rec["paired"] = {"vs": {a: [{"tpr@1%fpr": p} for p in v] for a, v in paired.items()}}
        return rec

    tpr = {"q_skew": (0.51, 0.385, 0.19), "calibration": (0.94, 0.53, 0.675)}  # dlm-dft as once quoted
    f = h.tpr_at_1({"dlm-dft": record(tpr)})
    assert f.verdict == POINTS_ONLY and "calibration 94.0, 53.0, 67.5% (points)" in f.ours and "tpr@1%fpr" in f.regime
    behind = [{"diff": d, "ci95": [d - 0.08, d + 0.08]} for d in (-0.43, -0.145, -0.485)]
    f = h.tpr_at_1({"dlm-dft": record(tpr, {"calibration": behind})})
    assert f.verdict == AGAINST and "Q-Skew − calibration -43.0 [-51.0, -35.0]" in f.ours


def test_assumption_3_1_reads_gains_per_seed_with_an_interval_over_texts():
    rng = np.random.default_rng(2)

    def record(gains: dict[str, float], n_seeds: int):
        per = {r: [list(gain + rng.normal(0, 0.05, 50)) for _ in range(n_seeds)] for r, gain in gains.items()}
        return {"dlm-mask-ratio": {"ratios": {r: {"mean_gain": v, "mean_gain_per_exposure": v} for r, v in
                                              gains.items()}, "per_text_gains": per,
                                   "experiment": {"seeds": list(range(n_seeds)), "n_members": 50}}}

    rising = record({"0.25": 0.3, "0.5": 0.5, "0.75": 0.7}, 10)  # once inconclusive whatever the values
    assert qt.mask_ratio(rising).verdict == AGAINST
    assert qt.mask_ratio(record({"0.25": 0.7, "0.5": 0.5, "0.75": 0.3}, 10)).verdict == REPRODUCED
    pooled = record({"0.25": 0.7, "0.5": 0.5}, 5)["dlm-mask-ratio"]
    del pooled["per_text_gains"]
    pooled["gains"] = {"ratio_0.25": np.zeros(10), "ratio_0.5": np.zeros(10)}  # five seeds' tokens pooled
    assert qt.mask_ratio({"dlm-mask-ratio": pooled}).verdict == POINTS_ONLY
    one = {**pooled, "experiment": {"seeds": [0], "n_members": 10},
           "gains": {"ratio_0.25": 0.6 + rng.normal(0, 0.1, 200), "ratio_0.5": 0.3 + rng.normal(0, 0.1, 200)}}
    f = qt.mask_ratio({"dlm-mask-ratio": one})  # one seed's tokens, text by text: a block bootstrap
    assert f.verdict == REPRODUCED and "blocks of 20 consecutive tokens" in f.ours


def test_illusory_forgetting_reads_each_seed_that_can_tell_with_its_interval():
    table = {"0.1 / gradient_ascent / threshold-loss": {"mean": 1.0}}
    raw = {"0.1 / none / smi-m": [0.1, 2.4, 0.1], "0.1 / gradient_ascent / smi-m": [3.0, 2.9, 2.8]}
    iv = {k: [[x - 0.3, x + 0.3] for x in v] for k, v in raw.items()}
    f = m.smi_illusory({"ul": {"unlearning": table, "rho_unclipped": raw, "intervals_unclipped": iv}}, name="ul")
    # seed 1's untouched estimate is outside the band: it cannot tell, and is counted apart
    assert f.verdict == MIXED and f.verdict.counts == "2 reproduced, 1 not testable here"
    raw["0.1 / gradient_ascent / smi-m"] = [0.5, 0.5, 0.5]
    iv = {k: [[x - 0.1, x + 0.1] for x in v] for k, v in raw.items()}
    f = m.smi_illusory({"ul": {"unlearning": table, "rho_unclipped": raw, "intervals_unclipped": iv}}, name="ul")
    assert f.verdict.counts == "2 against the claim, 1 not testable here"


def test_p_hat_convergence_at_fewer_orders_than_the_papers_is_our_size_not_against():
    def record(moved, R):
        conv = {"not_converged_fraction": moved, "median_abs_change_half_to_full": 0.3}
        return {"st": {"experiment": {"extract": {"trajectories": R}}, "log_p_columns": {"1": [-5.0] * 60},
                       "steps": {"2": {"per_seed": [{"convergence": conv}]}}}}

    f = m.p_hat_converged(record(0.467, 4), name="st")  # SmolLM2-DLM: 46.7% moving at R = 4 (was 'against')
    assert f.verdict == AT_THIS_SIZE and "Not testable at R = 4" in f.regime
    assert m.p_hat_converged(record(0.467, 512), name="st").verdict == AGAINST  # at the paper's R it is against
    assert m.p_hat_converged(record(0.0, 4), name="st").verdict == REPRODUCED  # converged at R = 4: so at 512
    assert m.p_hat_converged(record(float("nan"), 512), name="st").verdict == AT_THIS_SIZE


def test_the_unlearning_std_is_ddof_1_in_the_stored_record_and_its_table():
    from lmaudit.experiments.types import unlearning_audit as ua  # the experiment layer: torch comes with it

    assert ua._seed_std([0.0, 0.0, 1.0]) == pytest.approx(0.57735, abs=1e-5)  # ddof = 0 would read 0.4714
    old = {"per_seed": [0.0, 0.0, 1.0], "mean": 1 / 3, "std": 0.4714, "n_undefined": 0}  # written with ddof = 0
    assert ua._std(old) == pytest.approx(0.57735, abs=1e-5)
    from lmaudit.claims.regimes import untouched_floor

    text = untouched_floor({"unlearning": {"0.5 / none / smi": old}})  # the report recomputes it from the seeds
    assert "0.33 ± 0.58" in text


def test_the_papers_effect_decides_between_the_five_categories():
    # SmolLM2-DLM Q-Skew − SAMA −5.1 [−16.2, +6.4] against the paper's +9.7: not reproduced, the rest reproduced
    rec = {"rows": {"q_skew": {"auc": [0.703, 0.0]}}, "experiment": {"seeds": [0]},
           "paired": {"vs": {"sama": seeds((-0.051, -0.162, 0.064)), "loss": seeds((0.174, 0.053, 0.298))}}}
    f = q.q_skew_beats_baselines("d", effect=0.097)({"d": rec})
    assert "sama -5.1 [-16.2, +6.4] (seeds: 1 not reproduced)" in f.ours
    assert f.verdict == MIXED and f.verdict.counts == "1 reproduced, 1 not reproduced" and f.one_seed
    assert q.q_skew_beats_baselines("d")({"d": {**rec, "paired": {"vs": {
        "sama": seeds((-0.051, -0.162, 0.064))}}}}).verdict == INCONCLUSIVE  # no effect given: the direction alone


def test_a_record_that_does_not_say_its_seeds_is_not_taken_as_several():
    from lmaudit.claims.base import one_seed, seed_count

    assert one_seed({}) and seed_count({}) == 1  # was counted as several seeds
    assert seed_count({"rows": {"a": {"per_seed": [{}, {}, {}]}}}) == 3  # read from what it stores
    assert seed_count({"paired": {"vs": {"b": [{}, {}]}}}) == 2 and not one_seed({"experiment": {"seeds": [0, 1]}})


def test_the_step_knob_judges_each_seed_and_never_pools_them():
    from lmaudit.claims import added_ext as x

    rng = np.random.default_rng(4)
    cols = [{s: list(m + rng.normal(0, 0.1, 30)) for s, m in (("1", -9.0), ("max", -8.0 + 2 * i))} for i in range(2)]
    steps = {s: {"per_seed": [{"discoverable@p=0.5": 3 if s == "max" else 0,
                               "convergence": {"not_converged_fraction": 0.0}}] * 2} for s in ("1", "max")}
    rec = {"steps": steps, "log_p_columns": cols[0], "log_p_columns_per_seed": cols,
           "experiment": {"seeds": [0, 1]}}
    f = x.step_knob({"extraction-steps": rec}, medians={"max": 3.18})
    assert "seed 0 1 → max" in f.ours and "seed 1 1 → max" in f.ours and not f.one_seed
    assert len(f.verdict.parts) == 4  # two seeds × (the gain, the records discoverable), each judged apart
    del rec["log_p_columns_per_seed"]  # two seeds run, the first one's columns stored: not judged as both
    assert x.step_knob({"extraction-steps": rec}, medians={"max": 3.18}).verdict == UNTESTABLE


def test_the_memorisation_shift_is_read_on_the_dlm_with_its_unseen_control():
    rng = np.random.default_rng(5)

    def rec(keys, train_k, unseen_k):
        shift = {k: {"train": list(-8 + rng.normal(0, 1, 100)), "unseen": list(-10 + rng.normal(0, 1, 100))}
                 for k in keys}
        rows = {k: [{"discoverable@p=0.5": train_k, "unseen_discoverable": {"discoverable@p=0.5": unseen_k}}]
                for k in keys}
        return {"pii": {"likelihood_shift": shift, "pii_rows": rows, "n_train": 200, "n_unseen": 200,
                        "experiment": {"seeds": [0]}}}

    # the AR model alone (SmolLM2's real-pii-extraction) says nothing of a DLM: it was read as 'reproduced'
    assert o.shift(rec(["email / AR"], 145, 103), name="pii").verdict == UNTESTABLE
    # the DLM's values more likely than unseen ones, but as discoverable as them: the control does not support it
    f = o.shift(rec(["email / DLM max-step"], 10, 10), name="pii")
    assert f.verdict == MIXED and f.verdict.counts == "1 reproduced, 1 inconclusive" and "10/200 vs 10/200" in f.ours
    assert o.shift(rec(["email / DLM max-step"], 60, 5), name="pii").verdict == REPRODUCED
