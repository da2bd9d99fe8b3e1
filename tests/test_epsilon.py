"""ε lower bounds from membership-inference scores: validity on a mechanism of known ε, hand-computed cases, CLI."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import beta, binom

from helpers import assert_ok, assert_user_error, lmaudit, synthetic_run
from lmaudit.errors import LmauditError
from lmaudit.folders import verify_folder, write_manifest
from lmaudit.privacy.bounds import clopper_pearson, epsilon_from_counts, epsilon_lower_bound, min_per_class


def randomized_response(eps: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n members and n non-members of ε-DP randomized response: score 1 w.p. e^ε/(1+e^ε) (members) or 1/(1+e^ε)."""
    rng = np.random.default_rng(seed)
    p = math.exp(eps) / (1 + math.exp(eps))
    labels = np.r_[np.ones(n), np.zeros(n)].astype(int)
    return labels, np.r_[rng.random(n) < p, rng.random(n) < 1 - p].astype(float)


# --- Clopper–Pearson and the bound's formula, by hand -------------------------------------------------------------

def test_clopper_pearson_bounds_are_the_beta_quantiles():
    assert clopper_pearson(7, 20, confidence=0.9, side="lower") == pytest.approx(beta.ppf(0.1, 7, 14), abs=1e-12)
    assert clopper_pearson(7, 20, confidence=0.9, side="upper") == pytest.approx(beta.ppf(0.9, 8, 13), abs=1e-12)
    # the edges: nothing seen → lower 0; everything seen → upper 1; and the closed forms of the other side
    assert clopper_pearson(0, 20, confidence=0.9, side="lower") == 0.0
    assert clopper_pearson(20, 20, confidence=0.9, side="upper") == 1.0
    assert clopper_pearson(20, 20, confidence=0.9, side="lower") == pytest.approx(0.1 ** (1 / 20), abs=1e-12)
    assert clopper_pearson(0, 20, confidence=0.9, side="upper") == pytest.approx(1 - 0.1 ** (1 / 20), abs=1e-12)
    # the defining property: P[Binomial(n, p_lo) ≥ k] = 1 − confidence
    lo = float(clopper_pearson(7, 20, confidence=0.9, side="lower"))
    assert binom.sf(6, 20, lo) == pytest.approx(0.1, abs=1e-9)


def test_epsilon_from_hand_set_counts():
    # 45 of 50 members and 5 of 50 non-members flagged, δ = 1e-3, 90% joint confidence (each bound at √0.9)
    eps, tpr_lo, fpr_hi, direction = epsilon_from_counts(45, 50, 5, 50, delta=1e-3, confidence=0.9)
    each = math.sqrt(0.9)
    t_lo, f_hi = beta.ppf(1 - each, 45, 6), beta.ppf(each, 6, 45)
    assert tpr_lo == pytest.approx(t_lo, abs=1e-12) and fpr_hi == pytest.approx(f_hi, abs=1e-12)
    up, down = math.log((t_lo - 1e-3) / f_hi), math.log((1 - f_hi - 1e-3) / (1 - t_lo))
    assert float(eps) == pytest.approx(max(up, down), abs=1e-12)
    assert int(direction) == int(down > up)
    assert 1.0 < float(eps) < math.log(0.9 / 0.1)  # below the point estimate (1.397)


def test_a_perfect_split_gives_the_closed_form_bound():
    # members all score 1, non-members 0: whatever the split, the held-out half flags 20/20 and 0/20
    labels, scores = np.r_[np.ones(40), np.zeros(40)].astype(int), np.r_[np.ones(40), np.zeros(40)]
    b = epsilon_lower_bound(labels, scores, delta=1e-5, confidence=0.95, seed=3)
    q = (1 - math.sqrt(0.95)) ** (1 / 20)  # TPR_lo = a^(1/n), FPR_hi = 1 − a^(1/n)
    assert (b.n_members, b.n_nonmembers, b.n_selection, b.threshold) == (20, 20, 40, 1.0)
    assert (b.tpr, b.fpr) == (1.0, 0.0)
    assert b.tpr_lo == pytest.approx(q, abs=1e-12) and b.fpr_hi == pytest.approx(1 - q, abs=1e-12)
    assert b.epsilon == pytest.approx(math.log((q - 1e-5) / (1 - q)), abs=1e-9)


# --- validity and tightness on randomized response of known ε ----------------------------------------------------

@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_bound_never_exceeds_the_true_epsilon_beyond_the_stated_failure_rate(eps):
    seeds, confidence = 200, 0.95
    bounds = np.array([epsilon_lower_bound(*randomized_response(eps, 1000, s), delta=1e-5, confidence=confidence,
                                           seed=s).epsilon for s in range(seeds)])
    violations = int((bounds > eps).sum())
    # at most 5% may fail; allow for the binomial spread of 200 draws (p < 0.001 of a valid bound exceeding it)
    assert violations <= binom.ppf(0.999, seeds, 1 - confidence)
    assert bounds.mean() > 0.75 * eps  # and not vacuous: 0.82 (ε = 1) and 3.54 (ε = 4) measured


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_bound_approaches_the_true_epsilon_as_n_grows(eps):
    means = [np.mean([epsilon_lower_bound(*randomized_response(eps, n, s), seed=s).epsilon for s in range(20)])
             for n in (100, 1000, 10000)]
    assert means[0] < means[1] < means[2] <= eps
    assert means[2] > eps - (0.3 if eps == 1 else 0.5)


def test_identical_distributions_give_zero():
    labels = np.r_[np.ones(1000), np.zeros(1000)].astype(int)
    bounds = [epsilon_lower_bound(labels, np.random.default_rng(s).normal(size=2000), seed=s).epsilon
              for s in range(20)]
    assert max(bounds) <= 0.05
    assert sum(b > 0 for b in bounds) <= 2  # a valid bound is 0 in at least 95% of such runs


def test_continuous_scores_and_determinism():
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(1000), np.zeros(1000)].astype(int)
    scores = rng.normal(size=2000) + 2 * labels
    a, b = (epsilon_lower_bound(labels, scores, seed=1) for _ in range(2))
    assert a == b  # same data and seed: the same bound
    assert 1.0 < a.epsilon < 8.0
    assert a.threshold in set(scores)  # the threshold is one of the scores (of the selection half)
    held_tp = a.tpr * a.n_members  # the reported rates are counts over the held-out half
    assert held_tp == pytest.approx(round(held_tp))


# --- refusals -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,needle", [
    (dict(delta=0.0), "delta must be a number strictly between 0 and 1"),
    (dict(delta=1.0), "delta"), (dict(delta=-0.1), "delta"),
    (dict(confidence=1.0), "confidence"), (dict(confidence=0.0), "confidence"), (dict(confidence=1.5), "confidence"),
])
def test_bad_levels_are_refused(kwargs, needle):
    labels, scores = randomized_response(1.0, 50, 0)
    with pytest.raises(LmauditError, match=needle):
        epsilon_lower_bound(labels, scores, **kwargs)


def test_the_minimum_sample_size_is_exact():
    need = min_per_class(delta=1e-5, confidence=0.95)
    assert need == 11  # a = 1 − √0.95: 2·a^(1/6) > 1 + δ ≥ 2·a^(1/5); a class of 11 keeps 6 for the bound
    n_eval = (need + 1) // 2
    # with one sample fewer, even a perfect test cannot give a positive bound; with `need`, it does
    assert float(epsilon_from_counts(n_eval - 1, n_eval - 1, 0, n_eval - 1, delta=1e-5, confidence=0.95)[0]) <= 0
    perfect = np.r_[np.ones(need), np.zeros(need)].astype(int)
    assert epsilon_lower_bound(perfect, perfect.astype(float)).epsilon > 0
    small = np.r_[np.ones(need - 1), np.zeros(need - 1)].astype(int)
    with pytest.raises(LmauditError, match=f"at least {need} samples"):
        epsilon_lower_bound(small, small.astype(float))
    with pytest.raises(LmauditError, match="single class"):
        epsilon_lower_bound(np.ones(30, dtype=int), np.ones(30))


# --- the command --------------------------------------------------------------------------------------------------

def test_cli_prints_the_table_and_writes_epsilon_json(tmp_path):
    run = synthetic_run(tmp_path)
    out = lmaudit("epsilon", run, "--seed", "2")
    assert_ok(out)
    for needle in ("ε_lb", "loss", "q_skew", "TPR_lo", "FPR_hi", "30+30", "held-out split"):
        assert needle in out.stdout
    res = json.loads((run / "epsilon.json").read_text())
    assert res["mode"] == "mia" and res["method"].startswith("held-out split")
    assert (res["delta"], res["confidence"], res["seed"]) == (1e-5, 0.95, 2)
    frame = pd.read_parquet(run / "scores.parquet")
    for attack in ("loss", "q_skew"):
        direct = epsilon_lower_bound(frame["label"], frame[attack], seed=2)
        assert res["attacks"][attack] == pytest.approx(direct.to_dict())
        assert f"{direct.epsilon:.3f}" in out.stdout
    assert res["attacks"]["q_skew"]["epsilon"] > res["attacks"]["loss"]["epsilon"]  # the stronger signal
    verify_folder(run)  # the run's own files are untouched


def test_cli_one_attack_and_out_folder(tmp_path):
    (tmp_path / "run").mkdir()
    run = synthetic_run(tmp_path / "run")
    out = lmaudit("epsilon", run, "--attack", "q_skew", "--out", tmp_path / "eps", "--delta", "1e-3",
                  "--confidence", "0.9")
    assert_ok(out)
    res = json.loads((tmp_path / "eps" / "epsilon.json").read_text())
    assert list(res["attacks"]) == ["q_skew"] and (res["delta"], res["confidence"]) == (1e-3, 0.9)
    assert not (run / "epsilon.json").exists()
    assert_user_error(lmaudit("epsilon", run, "--attack", "q_skw"), "no attack 'q_skw'", "did you mean 'q_skew'")


@pytest.mark.parametrize("args,needles", [
    (["--delta", "1"], ["--delta must be a number strictly between 0 and 1"]),
    (["--delta", "0"], ["--delta"]), (["--delta", "-1e-5"], ["--delta"]),
    (["--confidence", "1"], ["--confidence"]), (["--confidence", "0"], ["--confidence"]),
])
def test_cli_bad_levels(tmp_path, args, needles):
    assert_user_error(lmaudit("epsilon", synthetic_run(tmp_path), *args), *needles)
    assert not (tmp_path / "epsilon.json").exists()


def test_cli_refuses_folders_that_are_not_mia_runs(tmp_path):
    audit = tmp_path / "audit"
    audit.mkdir()
    (audit / "results.json").write_text(json.dumps({"type": "set-audit"}))
    write_manifest(audit, "run")
    assert_user_error(lmaudit("epsilon", audit), "not a membership-inference run", "no scores.parquet")
    assert_user_error(lmaudit("epsilon", tmp_path / "absent"), "no such folder")
    run = synthetic_run(tmp_path)
    (run / "scores.parquet").write_bytes((run / "scores.parquet").read_bytes()[:-10])
    assert_user_error(lmaudit("epsilon", run), "scores.parquet", "changed since the run wrote it")


def test_cli_too_few_samples_says_how_many(tmp_path):
    pd.DataFrame({"id": [f"s{i}" for i in range(16)], "label": [1] * 8 + [0] * 8,
                  "loss": np.arange(16.0)}).to_parquet(tmp_path / "scores.parquet")
    (tmp_path / "results.json").write_text(json.dumps({"attacks": {"loss": {}}, "target": {}}))
    write_manifest(tmp_path, "run")
    assert_user_error(lmaudit("epsilon", tmp_path), "too few samples", "8 members and 8 non-members",
                      "at least 11 samples")
