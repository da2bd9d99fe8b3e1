"""The one verdict rule of CLAIMS.md (lmaudit.report.verdicts): each branch on intervals, over seeds, on points and
over the comparisons of a claim, so that a wrong rule fails a test."""

import numpy as np
import pytest

from lmaudit.report.claims import _verdict_cell
from lmaudit.report.claims_base import Finding, judged_seeds
from lmaudit.report.verdicts import (
    AGAINST,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    NOT_RUN,
    PARTLY,
    REPRODUCED,
    SIGN_TEST_SEEDS,
    UNTESTABLE,
    VERDICTS,
    across_seeds,
    against_paper,
    capped,
    combine,
    comparison,
    direction,
    interval_verdict,
    points_verdict,
    seed_side,
)


@pytest.mark.parametrize("lo, hi, effect, verdict", [
    (0.01, 0.08, 0.05, REPRODUCED),  # above 0
    (0.01, 0.02, 0.05, REPRODUCED),  # above 0 though short of the paper's effect: the claim says > 0
    (-0.08, -0.01, 0.05, AGAINST),  # below 0
    (-0.03, 0.09, 0.05, INCONCLUSIVE),  # holds both 0 and the paper's effect
    (-0.058, 0.005, 0.021, NOT_REPRODUCED),  # the Gap-K% − Min-K%++ [−5.8, +0.5] vs the paper's +2.1
    (-0.162, 0.064, 0.097, NOT_REPRODUCED),  # the Q-Skew − SAMA [−16.2, +6.4] vs the paper's +9.7
    (-0.162, 0.064, None, INCONCLUSIVE),  # no paper effect: a tie cannot exclude it
    (0.0, 0.0, 0.05, INCONCLUSIVE),  # nothing varied: no noise measured, nothing excluded
])
def test_one_interval(lo, hi, effect, verdict):
    assert interval_verdict(lo, hi, effect=effect) == verdict


@pytest.mark.parametrize("lo, hi, verdict", [
    (0.12, 0.2, REPRODUCED),  # above the claimed 10 points
    (0.02, 0.08, NOT_REPRODUCED),  # above 0, short of the claimed size
    (0.05, 0.17, INCONCLUSIVE),  # holds the threshold (and the effect, here the same)
    (-0.2, -0.05, AGAINST),
])
def test_a_claimed_size_is_a_threshold(lo, hi, verdict):
    assert interval_verdict(lo, hi, effect=0.1, threshold=0.1) == verdict


UP, DOWN, TIE, SHORT = (0.01, 0.05), (-0.05, -0.01), (-0.03, 0.09), (-0.05, 0.02)  # vs an effect of 0.05


@pytest.mark.parametrize("seeds, verdict", [
    ([UP, UP, UP], REPRODUCED),
    ([DOWN, DOWN, DOWN], AGAINST),
    ([UP, TIE, TIE], PARTLY),  # seeds disagree, none against
    ([UP, SHORT, UP], PARTLY),
    ([UP, DOWN, UP], NOT_REPRODUCED),  # seeds contradict each other: not reproduced, never partly
    ([TIE, DOWN, TIE], NOT_REPRODUCED),
    ([TIE, SHORT, TIE], NOT_REPRODUCED),  # a seed excludes the paper's effect
    ([TIE, TIE, TIE], INCONCLUSIVE),
    ([UP], REPRODUCED), ([DOWN], AGAINST), ([TIE], INCONCLUSIVE), ([SHORT], NOT_REPRODUCED),  # one seed, same rule
])
def test_one_comparison_over_seeds(seeds, verdict):
    assert comparison(seeds, effect=0.05) == verdict
    assert comparison([{"diff": 0.0, "ci95": list(s)} for s in seeds], effect=0.05) == verdict


@pytest.mark.parametrize("parts, verdict", [
    ([REPRODUCED, REPRODUCED], REPRODUCED),
    ([REPRODUCED, AGAINST], AGAINST),  # any comparison against: against, never partly
    ([PARTLY, AGAINST, REPRODUCED], AGAINST),
    ([REPRODUCED, INCONCLUSIVE], PARTLY),
    ([REPRODUCED, NOT_REPRODUCED], PARTLY),
    ([PARTLY, INCONCLUSIVE], PARTLY),
    ([PARTLY, NOT_REPRODUCED], NOT_REPRODUCED),  # nothing reproduced on every seed, and an effect excluded
    ([INCONCLUSIVE, NOT_REPRODUCED], NOT_REPRODUCED),
    ([INCONCLUSIVE, INCONCLUSIVE], INCONCLUSIVE),
    ([REPRODUCED, UNTESTABLE], PARTLY),  # a part not testable here keeps a claim from full reproduction
    ([INCONCLUSIVE, UNTESTABLE], INCONCLUSIVE),
    ([UNTESTABLE, UNTESTABLE], UNTESTABLE), ([NOT_RUN], NOT_RUN), ([], UNTESTABLE),
])
def test_combining_the_comparisons_of_a_claim(parts, verdict):
    assert combine(parts) == verdict


@pytest.mark.parametrize("diffs, verdict", [
    ([0.1, 0.2, 0.05, 0.3, 0.01], REPRODUCED), ([-0.1, -0.2, -0.05, -0.3, -0.01], AGAINST),  # 5 seeds: 0.5⁵ = 3.1%
    ([0.1, 0.2, 0.05, 0.3, 0.01, 0.4], REPRODUCED),  # more seeds than the sign test needs
    ([0.1, 0.2, 0.05], INCONCLUSIVE), ([-0.1, -0.2, -0.05], INCONCLUSIVE),  # 3 seeds on one side: 0.5³ = 12.5%
    ([0.1, 0.2, 0.05, 0.3], INCONCLUSIVE),  # 4 seeds: 0.5⁴ = 6.25%, not below 5%
    ([-0.1, -0.2], INCONCLUSIVE),
    ([0.1, -0.2, 0.3, 0.2, 0.1], INCONCLUSIVE), ([-0.1, -0.2, -0.3, 0.2, -0.1], INCONCLUSIVE),  # seeds disagree
    ([0.1, 0.0, 0.2, 0.3, 0.1], INCONCLUSIVE),  # a tie on a seed
    ([0.3], INCONCLUSIVE), ([-0.3], INCONCLUSIVE),  # one seed of points: nothing to measure its noise against
])
def test_points_never_exclude_an_effect(diffs, verdict):
    assert points_verdict(diffs) == verdict
    assert points_verdict(np.asarray(diffs)) == verdict  # judges pass numpy differences


def test_points_need_the_sign_test_seeds_and_read_a_claimed_size_as_the_threshold():
    # the fewest seeds that, all on one side, are below 5% by chance (one-sided sign test): 5, not 4
    assert SIGN_TEST_SEEDS == 5 and 0.5 ** SIGN_TEST_SEEDS < 0.05 <= 0.5 ** (SIGN_TEST_SEEDS - 1)
    assert points_verdict([0.15] * 5, threshold=0.1) == REPRODUCED
    assert points_verdict([0.05] * 3, threshold=0.1) == INCONCLUSIVE


@pytest.mark.parametrize("diffs, verdict", [
    ([0.15, 0.12, 0.2, 0.11, 0.3], REPRODUCED),  # above the claimed size on every seed
    ([0.05] * 5, INCONCLUSIVE),  # above 0 but short of the size on every seed: an interval there is 'not
    # reproduced'; a point cannot exclude the size, and it is not evidence against the claim (it was 'against')
    ([0.05, 0.15, 0.2, 0.3, 0.12], INCONCLUSIVE),  # short of it on one seed
    ([0.05, -0.02, 0.01, 0.03, 0.04], INCONCLUSIVE),  # below 0 on one seed only
    ([-0.05, -0.02, -0.01, -0.03, -0.04], AGAINST),  # below 0 on every seed
    ([-0.05, -0.02, -0.01], INCONCLUSIVE),  # ... on 3 seeds: too few for the sign test
])
def test_points_with_a_claimed_size_are_against_only_below_0(diffs, verdict):
    assert points_verdict(diffs, threshold=0.1) == verdict


def test_points_never_give_not_reproduced():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n, threshold = int(rng.integers(1, 9)), float(rng.choice([0.0, 0.05, 0.1]))
        assert points_verdict(rng.normal(0.05, 0.1, n), threshold=threshold) != NOT_REPRODUCED


@pytest.mark.parametrize("diffs, kw, text", [
    ([-0.43, -0.145, -0.485], {}, "below on every seed"),  # Q-Skew − calibration, TPR at 1% FPR, 3 seeds
    ([0.1, 0.2, 0.3], {}, "above on every seed"),
    ([0.1, -0.2, 0.3], {}, "mixed"),
    ([0.1, 0.0, 0.3], {}, "mixed"),  # level on one seed
    ([0.0, 0.0], {}, "level on every seed"),
    ([0.3], {}, "above, one seed"), ([-0.3], {}, "below, one seed"),
    ([0.1, float("nan")], {}, "undefined on a seed"), ([], {}, "no seed"),
    ([0.05] * 3, {"threshold": 0.1}, "below on every seed"),  # a threshold moves the side the words read
    ([0.2, 0.3], {"up": "lower", "down": "higher"}, "lower on every seed"),
])
def test_the_measured_words_read_the_signs_not_the_sign_test(diffs, kw, text):
    assert seed_side(diffs, **kw) == text
    assert seed_side(np.asarray(diffs, dtype=float), **kw) == text  # judges pass numpy differences


def test_three_seeds_on_one_side_read_so_though_the_verdict_is_inconclusive():
    three = [-0.43, -0.145, -0.485]
    assert points_verdict(three) == INCONCLUSIVE and seed_side(three) == "below on every seed"
    assert direction(three) == -1 and direction([0.1, 0.2]) == 1 and direction([0.1, -0.1]) == 0
    assert direction([]) == 0


def test_seed_verdicts_and_caps():
    assert across_seeds([]) == UNTESTABLE
    assert capped(REPRODUCED) == capped(PARTLY) == INCONCLUSIVE
    assert capped(AGAINST) == AGAINST and capped(NOT_REPRODUCED) == NOT_REPRODUCED
    assert VERDICTS == (REPRODUCED, PARTLY, NOT_REPRODUCED, AGAINST, INCONCLUSIVE, UNTESTABLE, NOT_RUN)
    assert VERDICTS[3:5] == ("against the claim", "inconclusive")
    assert against_paper(0.097) == "against the paper's +9.7 points" and "no effect" in against_paper(None)


def test_each_seed_is_counted_and_the_comparison_named():
    per_seed = [{"diff": d, "ci95": [lo, hi]} for d, lo, hi in ((0.03, 0.01, 0.05), (0.0, -0.03, 0.09))]
    text, verdict = judged_seeds(per_seed, effect=0.05)
    assert verdict == PARTLY and text == "+3.0 [+1.0, +5.0], +0.0 [-3.0, +9.0] (ahead 1/2, tied 1/2: partly reproduced)"
    # a stored difference whose claim says it is below 0 is oriented by its sign, shown as stored
    text, verdict = judged_seeds([{"diff": -0.03, "ci95": [-0.05, -0.01]}], sign=-1.0)
    assert verdict == REPRODUCED and text.startswith("-3.0 [-5.0, -1.0] (ahead 1/1")


def test_the_verdict_cell_says_one_seed_and_points():
    assert _verdict_cell(Finding("", REPRODUCED, "", one_seed=True)) == "**reproduced** (one seed)"
    assert _verdict_cell(Finding("", INCONCLUSIVE, "", points=True, one_seed=True)) == \
        "**inconclusive** (one seed; on points: no interval)"
    assert _verdict_cell(Finding("", UNTESTABLE, "", points=True, one_seed=True)) == "**not testable here**"
