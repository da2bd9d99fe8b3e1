import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from lmaudit.errors import LmauditError
from lmaudit.metrics import auc, auc_bootstrap_ci, roc_curve, summarize, tpr_at_fpr
from lmaudit.report.cells import tpr_text


def test_auc_and_roc_match_scikit_learn_with_ties():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    s = np.round(rng.normal(size=400) + 0.7 * y, 1)  # many ties
    assert auc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    f, t, th = roc_curve(y, s)
    f2, t2, th2 = sk_roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(f, f2)
    np.testing.assert_allclose(t, t2)


def test_tpr_at_fpr_hand_computed():
    # scores sorted: members at 9, 8, 6, 3; non-members at 7, 5, 2, 1
    y = np.array([1, 1, 0, 1, 0, 1, 0, 0])
    s = np.array([9, 8, 7, 6, 5, 3, 2, 1], dtype=float)
    assert tpr_at_fpr(y, s, fpr=0.0) == 0.5  # two members above every non-member
    assert tpr_at_fpr(y, s, fpr=0.25) == 0.75  # one non-member (7) allowed, then 6 counts
    assert tpr_at_fpr(y, s, fpr=0.5) == 1.0
    assert auc(y, s) == pytest.approx(13 / 16)


def test_bootstrap_ci_is_seeded_and_brackets_auc():
    rng = np.random.default_rng(1)
    y = np.r_[np.ones(200), np.zeros(200)].astype(int)
    s = rng.normal(size=400) + y
    lo, hi = auc_bootstrap_ci(y, s, n_resamples=1000, seed=3)
    assert lo < auc(y, s) < hi and hi - lo < 0.15
    assert (lo, hi) == auc_bootstrap_ci(y, s, n_resamples=1000, seed=3)
    assert (lo, hi) != auc_bootstrap_ci(y, s, n_resamples=1000, seed=4)


def test_single_class_and_nan_are_clear_errors():
    with pytest.raises(LmauditError, match="single class"):
        auc([1, 1, 1], [0.1, 0.2, 0.3])
    with pytest.raises(LmauditError, match="NaN or infinite"):
        summarize([1, 0], [np.nan, 0.0])


def test_a_tpr_finer_than_one_nonmember_is_not_resolvable():
    """With 300 non-members the finest FPR step is 0.33%: TPR@0.1%FPR would be the TPR at zero false positives."""
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(300), np.zeros(300)].astype(int)
    s = rng.normal(size=600) + y
    out = summarize(y, s, n_resamples=20)
    assert out["tpr@0.1%fpr"] is None and out["unresolved"] == {"tpr@0.1%fpr": "n/a (needs ≥ 1,000 non-members)"}
    assert out["tpr@1%fpr"] == tpr_at_fpr(y, s, fpr=0.01)
    assert tpr_text(out, "tpr@0.1%fpr") == "n/a (needs ≥ 1,000 non-members)"
    assert tpr_text(out, "tpr@10%fpr") == f"{100 * tpr_at_fpr(y, s, fpr=0.1):.1f}%"
    y = np.r_[np.ones(10), np.zeros(1000)].astype(int)  # 1,000 non-members resolve 0.1%
    out = summarize(y, rng.normal(size=1010), n_resamples=20)
    assert "unresolved" not in out and out["tpr@0.1%fpr"] is not None


def test_median_shift_interval_holds_a_known_shift_and_zero_for_equal_samples():
    from lmaudit.shifts import median_shift

    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 1.0, 400), rng.normal(0.0, 1.0, 400)
    d = median_shift(np.r_[a, -np.inf], b, seed=1)  # a non-finite value is left out
    assert d.diff == pytest.approx(np.median(a) - np.median(b)) and d.lo < 1.0 < d.hi and d.lo > 0.7
    same = median_shift(b, b, seed=1)
    assert same.diff == 0.0 and same.lo < 0 < same.hi
    with pytest.raises(LmauditError, match="2 finite values"):
        median_shift([1.0, np.inf], b)


def test_share_shift_pools_tokens_over_texts_and_resamples_whole_texts():
    from lmaudit.shifts import share_shift

    # a: 5 of 10 and 3 of 30 tokens → pooled 8 / 40 = 0.2 (the mean of the texts' shares would be 0.3)
    d = share_shift([5, 3], [10, 30], [1, 1], [10, 10], seed=0)
    assert d.diff == pytest.approx(0.2 - 0.1)
    same = share_shift([2, 2, 2], [10, 10, 10], [1, 1], [10, 10])  # every text alike: nothing varies
    assert same == (pytest.approx(0.1), pytest.approx(0.1), pytest.approx(0.1))
    rng = np.random.default_rng(0)  # 300 texts of 50 tokens each side, shares 0.40 vs 0.35: the interval holds 0.05
    tot = np.full(300, 50)
    big = share_shift(rng.binomial(50, 0.40, 300), tot, rng.binomial(50, 0.35, 300), tot, seed=3)
    assert 0.03 < big.lo < 0.05 < big.hi < 0.07
    with pytest.raises(LmauditError, match="set b needs 0 <= count <= total"):
        share_shift([1, 1], [2, 2], [3, 1], [2, 2])
    with pytest.raises(LmauditError, match="set a needs counts and totals of the same length, 2 texts"):
        share_shift([1], [2], [1, 1], [2, 2])


def test_paired_tpr_diffs_hand_computed_and_unresolved_below_one_nonmember():
    from lmaudit.metrics import paired_tpr_diffs

    # 100 members, 100 non-members: a ranks every member above every non-member; b ranks exactly half of the
    # members above every non-member and the rest below them all.
    y = np.r_[np.ones(100), np.zeros(100)]
    a = np.r_[np.arange(100) + 1000.0, np.arange(100)]
    b = np.r_[np.arange(50) + 1000.0, np.arange(50) - 1000.0, np.arange(100)]
    out = paired_tpr_diffs(y, a, b, n_resamples=200, seed=0)
    assert out["tpr@1%fpr"]["diff"] == pytest.approx(0.5)  # 1.0 − 0.5 at one allowed false positive
    assert out["tpr@5%fpr"]["diff"] == pytest.approx(0.5)
    lo, hi = out["tpr@1%fpr"]["ci95"]
    assert 0.3 < lo <= 0.5 <= hi < 0.7  # the members b passes vary by resample; a passes all of them always
    assert paired_tpr_diffs(y, a, a, n_resamples=50)["tpr@5%fpr"] == {"diff": 0.0, "ci95": [0.0, 0.0]}
    # 50 non-members cannot resolve 1% FPR (it would be the TPR at zero false positives); 5% is 2 of them
    few = paired_tpr_diffs(np.r_[np.ones(100), np.zeros(50)], a[:150], b[:150], n_resamples=50)
    assert few["tpr@1%fpr"] is None and few["tpr@5%fpr"] is not None
