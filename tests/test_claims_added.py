"""The rows of the headline claims beyond the main rows (lmaudit.claims.added, lmaudit.claims.extra): each judge given
stored values that make each verdict it can give, its figures following the values planted (a judge that can only say
"not testable" or "not run" says so, with the figures it reads), and the identity one row cites as its evidence."""

import math

import numpy as np
import pytest
import torch

from lmaudit.claims import added as a
from lmaudit.claims import added_ext as x
from lmaudit.claims import extra as e
from lmaudit.claims import rag as rag
from lmaudit.claims import table as claims
from lmaudit.claims.base import Claim
from lmaudit.claims.verdicts import (
    AGAINST,
    AT_THIS_SIZE,
    INCONCLUSIVE,
    MIXED,
    NOT_REPRODUCED,
    NOT_RUN,
    POINTS_ONLY,
    REPRODUCED,
    SMALLER,
    UNTESTABLE,
)
from lmaudit.extraction.discoverable import discoverable, queries_needed
from lmaudit.models.adapters import ARAdapter
from lmaudit.probes import trajectories as traj
from lmaudit.probes.trajectories import Target, ar_suffix_logp, dlm_trajectories

SETS = {"n_members": 200, "n_nonmembers": 200}


def test_the_further_rows_are_appended_with_the_names_of_the_claims_module():
    assert len(a.ADDED) == 13 and len(e.EXTRA) == 8 and len(rag.RAG_CLAIMS) == 4
    assert claims.CLAIMS[-25:] == a.ADDED + e.EXTRA + rag.RAG_CLAIMS
    assert all(isinstance(c, Claim) for c in a.ADDED + e.EXTRA)
    assert (a.QS, a.SMI, a.GAP, a.EXT) == (claims.QS, claims.SMI, claims.GAP, claims.EXT)
    assert (e.QS, e.SMI, e.GAP, e.EXT) == (claims.QS, claims.SMI, claims.GAP, claims.EXT)
    assert a.STEP_MEDIANS == claims.STEP_GAINS and a.REAL_MIA == claims.REAL_MIA
    assert (a.REAL_PT, a.REAL_UL, a.REAL_DLM_PII) == (claims.REAL_PT, claims.REAL_UL, claims.REAL_DLM_PII)
    assert len({c.claim for c in claims.CLAIMS}) == len(claims.CLAIMS)  # no claim twice
    assert a._adjacent(a.STEP_MEDIANS) == "+0.65 / +0.77 / +0.63 / +1.13"


# ---------------------------------------------------------------- Q-Skew

def epochs_record(*per_epoch):
    """dlm-epochs with q_skew's per-seed AUCs at each epoch (and a flat baseline)."""
    curve = {str(e + 1): {"per_seed": [{"auc": v} for v in seeds]} for e, seeds in enumerate(per_epoch)}
    flat = {e: {"per_seed": [{"auc": 0.5}] * len(per_epoch[0])} for e in curve}
    return {"dlm-epochs": {"curves": {"q_skew": curve, "loss": flat},
                           "experiment": {"seeds": list(range(len(per_epoch[0]))), **SETS}}}


@pytest.mark.parametrize("per_epoch, verdict", [
    (((0.6,) * 3, (0.7,) * 3, (0.8,) * 3), REPRODUCED),  # +10 points an epoch, beyond the unpaired noise
    (((0.8,) * 3, (0.7,) * 3, (0.6,) * 3), AGAINST),
    (((0.6,) * 3, (0.7, 0.7, 0.6), (0.8,) * 3), MIXED),  # one seed flat at one step
    (((0.70,) * 3, (0.71,) * 3, (0.72,) * 3), INCONCLUSIVE),  # +1 point: within the noise
])
def test_epochs_are_read_per_seed_each_epoch_against_the_one_before(per_epoch, verdict):
    f = a.epochs_grow(epochs_record(*per_epoch))
    assert f.verdict == verdict and not f.points and "Hanley and McNeil" in f.ours
    assert f"1: {100 * np.mean(per_epoch[0]):.1f}" in f.ours


def test_one_seed_of_epochs_is_judged_by_its_own_interval():
    f = a.epochs_grow(epochs_record((0.65,), (0.81,), (0.88,)))  # was inconclusive whatever the values
    assert f.verdict == REPRODUCED and f.one_seed and "1: 65.0, 2: 81.0, 3: 88.0" in f.ours


def test_two_families_is_not_testable_and_reads_how_the_dlm_was_made():
    e = {"base": "", "preset": "tiny", "adapt_tokens": 123_456}
    f = a.two_families({"dlm-dft": {"experiment": e}})
    assert f.verdict == UNTESTABLE and "adapted from the `tiny` AR base on 123,456 tokens" in f.ours
    f = a.two_families({"x": {"experiment": {**e, "base": "smollm2-135m"}}}, name="x")
    assert "adapted from `smollm2-135m`" in f.ours


def split(seed, lo, hi, differ=False):
    return {"seed": seed, "prior": {"attack": "zlib", "auc": (lo + hi) / 2, "ci95": [lo, hi], "p": 0.01 if differ
                                    else 1.0, "differ": differ},
            "best": {"attack": "gap_k", "auc": 0.99}}


def validity(shifted, iid_differ=(False, False)):
    return {"set-validity": {"experiment": {"kind": "ar", "seeds": [0, 1]}, "cells": {
        "shifted / fine-tuned": [split(i, lo, hi) for i, (lo, hi) in enumerate(shifted)],
        "iid / fine-tuned": [split(i, 0.45, 0.6, d) for i, d in enumerate(iid_differ)]}}}


@pytest.mark.parametrize("shifted, verdict", [
    (((0.93, 0.97), (0.94, 0.98)), REPRODUCED),  # the untouched model separates the sets on every seed
    (((0.93, 0.97), (0.45, 0.6)), MIXED),
    (((0.45, 0.6), (0.45, 0.6)), INCONCLUSIVE),  # holds 0.5: no paper figure, a tie
    (((0.3, 0.4), (0.3, 0.45)), AGAINST),
])
def test_a_mimir_style_split_is_read_from_the_untouched_models_interval(shifted, verdict):
    f = a.prior_separates(validity(shifted))
    assert f.verdict == verdict
    assert f"{100 * (sum(shifted[0]) / 2 - 0.5):+.1f} [{100 * (shifted[0][0] - 0.5):+.1f}," in f.ours


def test_a_failed_iid_control_keeps_the_split_from_counting():
    f = a.prior_separates(validity(((0.93, 0.97), (0.94, 0.98)), iid_differ=(False, True)))
    assert f.verdict == INCONCLUSIVE and "seed(s) [1]" in f.regime and "(Bonferroni p 0.01)" in f.ours


def test_pii_examples_are_not_testable_without_the_values_and_read_their_length_with_them():
    ranks = {"ce": {"email": [[1, 1, 2, None], [1, 3]]}, "skew_pii": {"email": [[1, 2, 1, 1], [4, 1]]}}
    f = a.pii_examples({"pii-reconstruction": {"ranks": ranks}})
    assert f.verdict == UNTESTABLE and "`values`" in f.regime
    assert "email: Q-Skew (PII mask) alone 3, CE alone 2, both 1 of 6" in f.ours
    ranks = {"ce": {"email": [[1] * 6 + [2] * 6]}, "skew_pii": {"email": [[2] * 6 + [1] * 6]}}
    long_q = {"email": [["a" * (5 + i % 3) for i in range(6)] + ["b" * (20 + i % 3) for i in range(6)]]}
    f = a.pii_examples({"pii-reconstruction": {"ranks": ranks, "values": long_q}})
    assert f.verdict == REPRODUCED and "length (characters) Q-Skew alone − CE alone +15.0" in f.ours


# ---------------------------------------------------------------- SMI

def unlearning(cells, *, seeds=3, half=0.02, intervals=True, **experiment):
    """An unlearning-audit record from {"frac / method / audit": per-seed ρ}, each with a 90% interval ± ``half``
    (a thresholded MIA's under ``threshold_intervals``, as the experiment stores it)."""
    table = {k: {"per_seed": list(v)} for k, v in cells.items()}
    iv = {k: [[x - half, x + half] for x in v] for k, v in cells.items()} if intervals else {}
    return {"unlearning-audit": {"unlearning": table,
                                 "intervals": {k: v for k, v in iv.items() if " / threshold-" not in k},
                                 "threshold_intervals": {k: v for k, v in iv.items() if " / threshold-" in k},
                                 "experiment": {"seeds": list(range(seeds)), **experiment}}}


def smi_cells(smi_none, smi_retrain, smim_none, smim_retrain, n=3):
    return {"0.1 / none / smi": [smi_none] * n, "0.1 / retrain / smi": [smi_retrain] * n,
            "0.1 / none / smi-m": [smim_none] * n, "0.1 / retrain / smi-m": [smim_retrain] * n}


@pytest.mark.parametrize("values, verdict", [
    ((0.3, 0.7, 0.0, 0.95), REPRODUCED),  # SMI-M closer to 0 and 1 on every seed, by more than the paper's 1.4
    ((0.0, 0.95, 0.3, 0.7), AGAINST),
    ((0.01, 0.99, 0.01, 0.99), NOT_REPRODUCED),  # level: the paper's +0.014 excluded, 0 not
])
def test_smi_m_against_smi_is_the_error_against_the_known_rho_per_seed_with_its_interval(values, verdict):
    f = x.smi_m_beats_smi(unlearning(smi_cells(*values), half=0.001))
    assert f.verdict == verdict and not f.points
    assert "forget 10%, hidden features: SMI " in f.ours


def test_an_undefined_estimate_is_not_testable_at_this_size_on_its_seed_and_the_others_are_judged():
    f = x.smi_m_beats_smi(unlearning(smi_cells(0.3, 0.7, float("nan"), float("nan"))))
    assert f.verdict == AT_THIS_SIZE and "seeds 0, 1, 2: ρ undefined" in f.ours  # not identifiable: no storing helps
    one = smi_cells(0.3, 0.7, 0.0, 0.95)
    one["0.1 / none / smi-m"] = [0.0, float("nan"), 0.0]  # SMI-M's references indistinguishable on seed 1
    f = x.smi_m_beats_smi(unlearning(one, half=0.001))
    assert f.verdict == MIXED and f.verdict.counts == "2 reproduced, 1 not testable at this size"
    assert "seed 1: ρ undefined" in f.ours
    f = x.smi_m_beats_smi(unlearning(smi_cells(0.3, 0.7, 0.0, 0.95), intervals=False))
    assert f.verdict == POINTS_ONLY  # defined estimates the audit stores no interval of: what it must store


def test_fnr_at_zero_fpr_is_not_run_and_reads_the_stored_threshold():
    f = x.fnr_at_zero_fpr(unlearning({"0.1 / retrain / threshold-lira": [0.83, 1.0]}, audit_fpr=0.05))
    assert f.verdict == NOT_RUN and "thresholded at 5% FPR" in f.ours and "threshold-lira 0.83, 1.00" in f.ours


@pytest.mark.parametrize("smi_m, verdict", [(0.95, SMALLER), (0.3, AGAINST), (0.55, SMALLER)])
def test_a_shadow_audit_collapses_where_smi_m_is_above_it_by_the_papers_gap(smi_m, verdict):
    cells = {"0.1 / retrain / threshold-lira": [0.5] * 3, "0.1 / retrain / smi-m": [smi_m] * 3,
             "0.1 / retrain / smi-m-scores": [smi_m] * 3}
    f = x.shadow_collapse(unlearning(cells, n_shadows=8))
    assert f.verdict == verdict and "offline LiRA with 8 shadow models" in f.ours and "LiRA 0.50, 0.50" in f.ours
    # a record from before the audit stored LiRA's interval (threshold_intervals): points only
    assert x.shadow_collapse(unlearning(cells, intervals=False, n_shadows=8)).verdict == POINTS_ONLY


def test_no_shadow_models_no_shadow_audit():
    f = x.shadow_collapse(unlearning({"0.1 / retrain / smi-m": [0.9, 0.9]}, n_shadows=0))
    assert f.verdict == NOT_RUN and "n_shadows = 0" in f.ours


# ---------------------------------------------------------------- Gap-K%

@pytest.mark.parametrize("interval, verdict", [((0.01, 0.06), REPRODUCED), ((-0.01, 0.05), INCONCLUSIVE),
                                               ((-0.058, 0.005), NOT_REPRODUCED), ((-0.06, -0.01), AGAINST)])
def test_recent_instruct_models_are_judged_against_the_instruct_gain(interval, verdict):
    row = next(c for c in a.ADDED if c.claim.startswith("Gap-K% works on recent"))
    pt = {"paired": {"seen 1×": [{"seed": 0, "diff": sum(interval) / 2, "ci95": list(interval)}]},
          "experiment": {"lr": 3e-5, "pretrain_tokens": 60_000, "seeds": [0], "attacks": ["gap_k", "min_k_pp"]},
          "rows": {"seen 1×: gap_k": {"auc": [0.6, 0.0]}, "seen 1×: min_k_pp": {"auc": [0.6, 0.0]}}}
    f = row.real_judge({claims.REAL_PT: pt})
    assert f.verdict == verdict and "against the paper's +3.5 points" in f.ours and "60,000 tokens" in f.regime
    tiny = row.judge({"ar-pretraining-detection": {"experiment": {"pretrain_tokens": 300_000}}})
    assert tiny.verdict == UNTESTABLE and "300,000 tokens" in tiny.ours


def test_large_gaps_are_not_run_on_a_record_that_stores_no_shares_or_another_tau():
    f = a.large_gaps({"ar-pretraining-detection": {"experiment": {"attacks": ["loss", "gap_k"]}}})
    assert f.verdict == NOT_RUN and "(loss, gap_k)" in f.ours and "τ = 3" in f.regime
    other = {"experiment": {}, "large_gaps": {"seen 1×": [{"seed": 0, "tau": 2.0, "members": 0.1, "nonmembers": 0.2,
                                                           "diff": 0.1, "ci95": [0.05, 0.15]}]}}
    f = a.large_gaps({"ar-pretraining-detection": other})
    assert f.verdict == NOT_RUN and "shares at τ = 2" in f.ours


def _large(per_setting: dict, **experiment) -> dict:
    return {"experiment": {"preset": "tiny", "kind": "ar", "pretrain_tokens": 300_000, **experiment},
            "large_gaps": {s: [{"seed": i, "tau": 3.0, "members": m, "nonmembers": n, "diff": n - m, "ci95": list(ci)}
                               for i, (m, n, ci) in enumerate(seeds)] for s, seeds in per_setting.items()}}


@pytest.mark.parametrize("seeds, verdict", [
    # the paper's shift is +4.4 points: every seed's interval above 0 reproduces it
    ([(0.355, 0.399, (0.02, 0.07)), (0.30, 0.33, (0.01, 0.05))], REPRODUCED),
    # both intervals hold 0 and exclude +4.4: not reproduced
    ([(0.35, 0.351, (-0.01, 0.012)), (0.35, 0.352, (-0.012, 0.015))], NOT_REPRODUCED),
    # members have more large gaps on every seed: against the claim
    ([(0.40, 0.35, (-0.08, -0.02)), (0.41, 0.36, (-0.07, -0.03))], AGAINST),
    # one seed above 0, one holding both 0 and +4.4: mixed
    ([(0.35, 0.40, (0.02, 0.08)), (0.35, 0.37, (-0.01, 0.06))], MIXED),
])
def test_large_gaps_read_each_seeds_interval_against_the_papers_shift(seeds, verdict):
    f = a.large_gaps({"ar-pretraining-detection": _large({"seen 1×": seeds})})
    assert f.verdict == verdict and "against the paper's +4.4 points" in f.ours
    assert f"members vs non-members {100 * seeds[0][0]:.1f}% vs {100 * seeds[0][1]:.1f}%" in f.ours
    assert f.regime.startswith("The `tiny` AR model pretrained from scratch on 300,000 tokens")


def test_large_gaps_combine_the_exposure_settings_and_say_one_seed():
    up, tied = (0.30, 0.36, (0.03, 0.09)), (0.30, 0.31, (-0.02, 0.05))
    f = a.large_gaps({"ar-pretraining-detection": _large({"seen 1×": [up], "seen 4×": [tied]}, seeds=[0])})
    assert f.verdict == MIXED and f.one_seed and "seen 4×: members vs non-members 30.0% vs 31.0%" in f.ours


# ---------------------------------------------------------------- DLM extraction

class _CausalAsMasked(ARAdapter):
    """A causal LM handed to the DLM estimator: masked positions get a mask token, which a causal model never reads
    for the positions before it."""

    mask_token_id = 3

    def insert_masks(self, input_ids: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        return torch.where(masked, torch.full_like(input_ids, self.mask_token_id), input_ids)


def test_ar_extraction_is_the_dlm_definition_with_a_suffix_read_left_to_right(tiny_model, tokenizer, monkeypatch):
    """The evidence of the row 'the generalised (n, p) definition subsumes AR extraction': lmaudit's DLM estimator
    with M a suffix unmasked one token per step left to right gives the AR suffix probability, and so the same
    (n, p)-discoverability; any other order gives another value."""
    ids = np.asarray(tokenizer("the model data train token layer value array matrix")["input_ids"], dtype=np.int64)
    target = Target("s", ids, np.arange(len(ids) - 4, len(ids)))
    adapter = _CausalAsMasked(tiny_model, tokenizer)
    exact = ar_suffix_logp(ARAdapter(tiny_model, tokenizer).handle(), [target])[0]
    with monkeypatch.context() as m:
        m.setattr(traj, "random_orders", lambda t, r, s: np.repeat(np.sort(t.masked)[None], r, axis=0))
        left_to_right = dlm_trajectories(adapter.handle(), [target], steps=[4], trajectories=3, max_tokens=4096)[0]
    assert left_to_right.logp == pytest.approx([exact.logp[0]] * 3, abs=1e-4)
    assert left_to_right.p_hat == pytest.approx(exact.p_hat, rel=1e-4)
    n = queries_needed(exact.p_hat, 0.5)  # the fewest queries that make the suffix (n, 0.5)-discoverable
    # the same p̂ to float32 rounding, so the same fewest queries up to that rounding (at the boundary itself a
    # relative 1e-6 can move n by one), and the same verdict away from it
    assert abs(queries_needed(left_to_right.p_hat, 0.5) - n) <= max(1, n // 1000)
    for queries in (max(1, n // 2), 2 * n):
        assert discoverable([left_to_right.p_hat], n=queries, p=0.5) == discoverable([exact.p_hat], n=queries, p=0.5)
    shuffled = dlm_trajectories(adapter.handle(), [target], steps=[4], trajectories=16, seed=1, max_tokens=4096)[0]
    assert not math.isclose(shuffled.log_p_hat, exact.log_p_hat, rel_tol=1e-3)
    assert x.IDENTITY_TEST.endswith(test_ar_extraction_is_the_dlm_definition_with_a_suffix_read_left_to_right.__name__)


def test_the_identity_row_reads_a_stored_check_or_says_it_is_not_testable_here():
    f = x.ar_special_case({"extraction-steps": {}})  # once 'reproduced' without reading a result
    assert f.verdict == UNTESTABLE and x.IDENTITY_TEST in f.regime
    same = {"dlm": [-5.0, -7.0], "ar": [-5.0 + 1e-5, -7.0]}
    assert x.ar_special_case({"extraction-steps": {"ar_identity": same}}).verdict == INCONCLUSIVE  # none differs
    apart = {"dlm": [-5.0] * 20, "ar": [-4.0] * 20}
    assert x.ar_special_case({"extraction-steps": {"ar_identity": apart}}).verdict == AGAINST


def pii(n_train, **rows):
    """A PII-extraction record: {'email / AR': (count, not_converged_fraction or None)} on one seed."""
    out = {}
    for key, (k, moved) in rows.items():
        row = {"discoverable@p=0.5": k}
        if moved is not None:
            row["convergence"] = {"not_converged_fraction": moved}
        out[key.replace("_", " / ", 1).replace("_", " ")] = [row]
    return {"n_train": n_train, "pii_rows": out, "experiment": {"seeds": [0], "preset": "tiny", "base": "",
                                                                "n_members": n_train, "epochs": 20, "lora": 0}}


@pytest.mark.parametrize("ar, dlm, moved, effect, verdict", [
    (60, 0, 0.0, 0.011, REPRODUCED),  # 30% of 200 vs 0 of 60
    (60, 0, 0.5, 0.011, AT_THIS_SIZE),  # the DLM's p̂ still moving: too few orders, our size
    (10, 0, 0.0, 0.011, INCONCLUSIVE),  # [−1.4, +9.0] holds 0 and the paper's +1.1 (the committed figures)
    (2, 0, 0.0, 0.2, NOT_REPRODUCED),  # holds 0, excludes a paper's +20
    (0, 30, 0.0, 0.011, AGAINST),
])
def test_a_larger_dlm_against_a_smaller_ar_model_across_experiments(ar, dlm, moved, effect, verdict):
    recs = {"pii-extraction": pii(200, email_AR=(ar, None)), "big": pii(60, **{"email_DLM max-step": (dlm, moved)})}
    f = x.larger_dlm_vs_ar(recs, dlm="big", effect=effect)
    assert f.verdict == verdict and f"{ar}/200 vs {dlm}/60" in f.ours and "confounded" in f.regime
    assert x.larger_dlm_vs_ar({"pii-extraction": recs["pii-extraction"]}, dlm="big").verdict == NOT_RUN


@pytest.mark.parametrize("large, small, verdict", [(20, 0, REPRODUCED), (0, 40, AGAINST), (2, 1, INCONCLUSIVE),
                                                   (0, 0, UNTESTABLE)])
def test_dlm_size_compares_the_larger_dlm_with_the_smaller(large, small, verdict):
    rows = lambda k: {"email_DLM max-step": (k, 0.0), "phone_DLM max-step": (0, 0.0)}  # noqa: E731
    recs = {"pii-extraction": pii(200, **rows(small)), "real-dlm-pii-extraction": pii(60, **rows(large))}
    f = x.dlm_size(recs)
    assert f.verdict == verdict and f"{large}/60 vs {small}/200" in f.ours
    assert x.one_size(recs, what="two sizes").verdict == NOT_RUN


def knob(gains, *, moved=0.0, discoverable=(0, 0), seed=0):
    """extraction-steps with per-record log p̂ rising by ``gains`` (median) from each step count to the next."""
    rng = np.random.default_rng(seed)
    col = np.full(60, -40.0)
    cols = {"1": col.tolist()}
    for label, g in zip(("2", "5", "10", "max"), gains):
        col = col + g + rng.permutation(np.tile([-0.05, 0.05], 30))  # symmetric noise: a zero gain's median is 0
        cols[label] = col.tolist()
    k = dict(zip(("1", "max"), discoverable))
    steps = {s: {"per_seed": [{"discoverable@p=0.5": k.get(s, 0), "convergence": {
        "not_converged_fraction": 0.0 if s == "1" else moved}}]} for s in cols}
    return {"extraction-steps": {"steps": steps, "log_p_columns": cols, "experiment": {"seeds": [0]}}}


@pytest.mark.parametrize("gains, moved, discovered, counts", [
    ((1.0, 1.0, 1.0, 1.5), 0.0, (0, 12), "5 reproduced"),  # each step by the paper's size, and 12 more leak
    ((1.0, 1.0, 1.0, 1.5), 0.0, (0, 0), "4 reproduced, 1 not testable here"),  # nothing leaks at either
    ((1.0, 1.0, 1.0, 1.5), 0.3, (0, 0), "4 not testable at this size, 1 not testable here"),  # p̂ not converged
    ((1.0, 1.0, 0.0, 0.0), 0.0, (0, 0), "2 reproduced, 2 not reproduced, 1 not testable here"),
    ((1.0, -1.0, 1.0, 1.0), 0.0, (0, 0), "2 reproduced, 1 smaller, 1 against the claim, 1 not testable here"),
])
def test_the_step_knob_reads_each_step_count_against_the_one_before(gains, moved, discovered, counts):
    f = x.step_knob(knob(gains, moved=moved, discoverable=discovered), medians=a.STEP_MEDIANS)
    assert f.verdict.counts == counts and f.one_seed


def test_row_53s_last_step_is_smaller_than_the_papers():
    # 10 → max: +0.08 [+0.06, +0.10] nats against the paper's +1.13 (read 'reproduced' while only lo > 0 was tested)
    f = x.step_knob(knob((1.0, 1.0, 1.0, 0.08)), medians=a.STEP_MEDIANS)
    assert "10 → max: +0.08 [" in f.ours and f.verdict.parts[3] == SMALLER
