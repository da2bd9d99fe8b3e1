"""The one verdict rule of CLAIMS.md (lmaudit.claims.verdicts): the five categories of one interval against the
paper's effect, a row over its seeds and comparisons, the words outside the categories, and that every judge of
CLAIMS.md reaches its verdict through this rule and no other."""

import math
import re
from pathlib import Path

import pytest

from lmaudit.claims.base import Finding, judged_seeds
from lmaudit.claims.render import RULE, counts, verdict_cell
from lmaudit.claims.verdicts import (
    AGAINST,
    AT_THIS_SIZE,
    CATEGORIES,
    INCONCLUSIVE,
    MIXED,
    NOT_REPRODUCED,
    NOT_RUN,
    PARTLY,
    POINTS_ONLY,
    REPRODUCED,
    SMALLER,
    UNTESTABLE,
    VERDICTS,
    Verdict,
    against_paper,
    at_this_size,
    category,
    combine,
    comparison,
    half_width_ratio,
    interval_verdict,
    judge,
    single,
    unless,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "lmaudit" / "claims"


@pytest.mark.parametrize("lo, hi, effect, word", [
    (0.005, 0.020, 0.097, SMALLER),  # [+0.5, +2.0] vs the paper's +9.7: the direction holds, the size is excluded
    # (the rule tested lo > 0 first and read it reproduced)
    (-0.001, 0.020, 0.097, NOT_REPRODUCED),  # [−0.1, +2.0] vs +9.7: the effect excluded, no effect not
    (0.06, 0.10, 1.13, SMALLER),  # step counts 10 → max, +0.08 [+0.06, +0.10] nats vs the paper's +1.13
    (0.02, 0.12, 0.097, REPRODUCED),  # above 0, the paper's size inside
    (0.02, 0.097, 0.097, REPRODUCED),  # hi = E: the size not excluded
    (-0.03, 0.12, 0.097, INCONCLUSIVE),  # holds both 0 and the paper's effect
    (0.0, 0.12, 0.097, INCONCLUSIVE),  # lo = 0 is not above 0
    (-0.08, 0.0, 0.097, NOT_REPRODUCED),  # hi = 0: not the other direction
    (-0.08, -0.01, 0.097, AGAINST),
    (-0.162, 0.064, 0.097, NOT_REPRODUCED),  # SmolLM2-DLM Q-Skew − SAMA [−16.2, +6.4] against +9.7
    (0.12, 0.02, 0.097, REPRODUCED),  # bounds given the wrong way round are sorted
])
def test_five_categories_by_direction_and_size(lo, hi, effect, word):
    assert category(lo, hi, effect) == word
    assert word in CATEGORIES


@pytest.mark.parametrize("lo, hi, word", [(0.01, 0.02, REPRODUCED), (-0.01, 0.02, INCONCLUSIVE), (-0.01, 0.0,
                                                                                                  INCONCLUSIVE),
                                          (-0.03, -0.01, AGAINST)])
def test_a_row_whose_paper_gives_no_size_reads_the_direction_alone(lo, hi, word):
    # nothing to exclude, so never smaller or not reproduced
    assert category(lo, hi) == word


def test_what_is_not_a_category():
    assert category(0.0, 0.0, 0.05) == AT_THIS_SIZE  # no width: nothing varied, no noise measured (a small sample)
    assert category(-1.0, -1.0, 0.05) == AGAINST  # every record of every resample the other way: no noise to doubt
    assert category(float("nan"), 0.1, 0.05) == UNTESTABLE
    with pytest.raises(ValueError):
        category(0.01, 0.02, -0.05)  # the effect is oriented to be above 0


def test_inconclusive_seeds_never_count_as_support():
    up, tie = (0.02, 0.12), (-0.03, 0.12)
    v = judge([up, tie, tie], effect=0.097)
    assert v == MIXED and v != PARTLY and v.text == "mixed: 1 reproduced, 2 inconclusive"
    assert v.parts == (REPRODUCED, INCONCLUSIVE, INCONCLUSIVE)
    assert judge([(-0.03, 0.12)] * 3, effect=0.097) == INCONCLUSIVE


def test_five_reproduced_and_two_not_is_mixed_not_partly():
    v = judge([(0.02, 0.3)] * 5 + [(-0.05, 0.06)] * 2, effect=0.097)
    assert v == MIXED and v.counts == "5 reproduced, 2 not reproduced"


@pytest.mark.parametrize("seeds, word", [([(0.02, 0.12)] * 3, REPRODUCED), ([(0.005, 0.02)] * 3, SMALLER),
                                         ([(-0.08, -0.01)] * 3, AGAINST), ([(-0.03, 0.02)] * 2, NOT_REPRODUCED),
                                         ([(0.02, 0.12), (-0.08, -0.01)], MIXED)])
def test_a_comparison_is_the_category_its_seeds_share(seeds, word):
    assert judge(seeds, effect=0.097) == word
    assert judge([{"diff": 0, "ci95": list(s)} for s in seeds], effect=0.097) == word


def test_a_stored_difference_the_claim_says_is_below_zero_is_oriented_by_its_sign():
    assert judge([(-0.2, -0.1)], effect=0.05, sign=-1.0) == REPRODUCED
    text, v = judged_seeds([{"diff": -0.15, "ci95": [-0.2, -0.1]}], sign=-1.0, effect=0.05)
    assert v == REPRODUCED and text == "-15.0 [-20.0, -10.0] (seeds: 1 reproduced)"


def test_a_row_of_several_comparisons_reads_every_seed_of_every_comparison():
    a, b = judge([(0.02, 0.12)] * 2, effect=0.097), judge([(-0.08, -0.01)] * 2, effect=0.097)
    row = combine([a, b])
    assert row == MIXED and row.counts == "2 reproduced, 2 against the claim"  # no 'any against' shortcut
    assert combine([a, a]) == REPRODUCED and combine([]) == UNTESTABLE
    # parts that are not judged are counted beside the categories
    assert combine([a, single(POINTS_ONLY)]).counts == "2 reproduced, 1 points only"
    assert combine([single(NOT_RUN), single(NOT_RUN)]) == NOT_RUN
    assert combine([single(UNTESTABLE)]) == UNTESTABLE


def test_support_that_does_not_count_and_a_limit_of_ours():
    v = Verdict([REPRODUCED, SMALLER, AGAINST])
    assert unless(v).parts == (INCONCLUSIVE, INCONCLUSIVE, AGAINST)
    assert at_this_size(v) == AT_THIS_SIZE  # too few orders: never against
    assert at_this_size(Verdict([AGAINST, NOT_RUN])).parts == (AT_THIS_SIZE, NOT_RUN)


def test_half_width_over_the_effect():
    v = judge([(0.0, 0.2), (0.1, 0.5)], effect=0.1)  # half-widths 0.1 and 0.2
    assert v.ratios == pytest.approx((1.0, 2.0)) and half_width_ratio(v) == pytest.approx((1.0, 2.0))
    assert half_width_ratio(judge([(0.0, 0.2)])) is None  # no effect stated: no ratio
    assert judge([(0.0, 0.0)], effect=0.1).ratios == ()  # [0, 0] measured nothing: no ratio
    assert half_width_ratio(combine([v, judge([(0.0, 0.6)], effect=0.1)])) == pytest.approx((1.0, 3.0))


def test_the_summary_counts_each_category_and_mixed_apart():
    fs = [Finding("", v, "") for v in (Verdict([REPRODUCED]), Verdict([SMALLER]), Verdict([REPRODUCED, AGAINST]),
                                       Verdict([AGAINST]), Verdict([POINTS_ONLY]))] + [None]
    assert counts(fs) == "reproduced 1, smaller 1, against the claim 1, mixed 1, points only 1, not run 1"
    assert VERDICTS.index(MIXED) == len(CATEGORIES)


def test_the_verdict_cell_shows_a_mixed_rows_seeds_and_h_over_e():
    f = Finding("", judge([(0.02, 0.12), (-0.03, 0.12), (-0.03, 0.12)], effect=0.1), "", one_seed=False)
    assert verdict_cell(f) == "**mixed**: 1 reproduced, 2 inconclusive"
    assert verdict_cell(f, power=True) == "**mixed**: 1 reproduced, 2 inconclusive (h/E 0.5–0.75)"
    one = Finding("", judge([(0.02, 0.12)], effect=0.1), "", one_seed=True)
    assert verdict_cell(one) == "**reproduced** (one seed)"
    assert verdict_cell(Finding("", single(POINTS_ONLY), "", one_seed=True, points=True)) == "**points only**"


def test_effect_texts():
    assert against_paper(0.097) == "against the paper's +9.7 points" and "direction alone" in against_paper(None)
    assert "smaller" in RULE and "mixed" in RULE and "points only" in RULE and "h/E" in RULE


def test_the_unlearning_check_keeps_its_own_reading():
    # lmaudit.runs.unlearning_check reads a return against a smallest return that counts; not a CLAIMS.md verdict
    assert interval_verdict(0.06, 0.2, threshold=0.05) == REPRODUCED
    assert interval_verdict(-0.01, 0.04, threshold=0.05) == NOT_REPRODUCED
    assert comparison([(0.06, 0.2), (-0.01, 0.1)], threshold=0.05) == PARTLY


def test_every_claims_judge_reaches_its_verdict_through_the_one_rule():
    legacy = re.compile(r"\b(interval_verdict|seed_verdicts|across_seeds|points_verdict|capped)\b|\bcomparison\(")
    judges = sorted(p for p in SRC.glob("*.py") if p.name not in ("verdicts.py", "__init__.py"))
    assert len(judges) >= 15  # the package's judges, found where they live
    for path in judges:
        text = path.read_text()
        assert not legacy.search(text), f"{path.name} reads a verdict outside lmaudit.claims.verdicts' rule"
        # no verdict word is returned as a constant string by a judge: every judged verdict comes from the rule
        assert not re.search(r'Finding\([^)]*,\s*(REPRODUCED|SMALLER|AGAINST|NOT_REPRODUCED|INCONCLUSIVE)\s*[,)]',
                             text), path.name
    assert math.isclose(judge([(0.01, 0.03)], effect=0.02).ratios[0], 0.5)
