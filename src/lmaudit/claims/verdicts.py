"""The verdicts of CLAIMS.md and the one rule every judge calls to reach them.

The rule (:func:`category`). Every row states the paper's effect E, oriented so that E > 0 is the paper's direction.
Per seed, the paired 95% interval [lo, hi] of the same difference on our data, oriented the same way, falls in exactly
one of five categories:

- **reproduced**: lo > 0 and hi ≥ E (the paper's direction, and its size not excluded);
- **smaller**: lo > 0 and hi < E (the direction holds, the paper's size is excluded);
- **inconclusive**: lo ≤ 0 and hi ≥ E (the interval holds both 0 and the paper's effect);
- **not reproduced**: lo ≤ 0 and 0 ≤ hi < E (the paper's effect excluded, no effect not);
- **against the claim**: hi < 0 (the other direction).

A row whose paper gives no size (E is None) is read on its direction alone: with no size to exclude, it is never
"smaller" or "not reproduced" (lo > 0 reproduced, hi < 0 against the claim, else inconclusive), and its effect
column says so. The interval [0, 0] (nothing varied over the resamples and no difference: two signals that agree on
every one of a few records) measures no noise: that is a limit of our sample, **not testable at this size**.

A row's verdict (:func:`combine`): the category all its seeds share (over every comparison of the row: a claim of
several comparisons is judged on each comparison's seeds). Seeds that disagree make it **mixed**, shown with the
per-seed categories ("mixed: 1 reproduced, 2 inconclusive"); an inconclusive seed never counts as support, and no
majority turns a mixed row into a verdict. Parts of a row that are not judged (points only, not testable at this
size, not testable here, not run) are counted beside the categories in the same way; a row where every part is one
of them reads that word.

Outside the five categories, none of which is a verdict on the claim:

- **points only**: no interval is stored and none can be computed from what is stored (the row says what the
  experiment must store);
- **not testable at this size**: a limit of ours (too few orders, texts or seeds), never "against";
- **not testable here**: no experiment here can measure it (the row says why);
- **not run**: the experiment that would test it has not been run (the row says which).

The unlearning check (:mod:`lmaudit.runs.unlearning_check`) reads one interval against a smallest return that counts;
that reading is not a verdict of CLAIMS.md and keeps its own functions at the end of this module.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

REPRODUCED, SMALLER, INCONCLUSIVE, NOT_REPRODUCED, AGAINST = (
    "reproduced", "smaller", "inconclusive", "not reproduced", "against the claim")
CATEGORIES = (REPRODUCED, SMALLER, INCONCLUSIVE, NOT_REPRODUCED, AGAINST)  # the five, in the order counts are written
MIXED = "mixed"
POINTS_ONLY, AT_THIS_SIZE, UNTESTABLE, NOT_RUN = (
    "points only", "not testable at this size", "not testable here", "not run")
UNJUDGED = (POINTS_ONLY, AT_THIS_SIZE, UNTESTABLE, NOT_RUN)  # parts of a row with no category
VERDICTS = (*CATEGORIES, MIXED, *UNJUDGED)  # every word a row can read, in the order the summary counts them


class Verdict(str):
    """A row's (or one comparison's) verdict: the word, with the per-seed parts it was read from (``parts``) and,
    per interval judged against a stated effect, its half-width ÷ that effect (``ratios``)."""

    parts: tuple[str, ...]
    ratios: tuple[float, ...]

    def __new__(cls, parts: Iterable[str], ratios: Iterable[float] = ()) -> Verdict:
        parts = tuple(parts)
        if not parts:
            word = UNTESTABLE
        elif len(set(parts)) == 1:
            word = parts[0]
        else:
            word = MIXED
        out = super().__new__(cls, word)
        out.parts, out.ratios = parts, tuple(ratios)
        return out

    @property
    def counts(self) -> str:
        """'1 reproduced, 2 inconclusive': how many parts read each word, in the order of :data:`VERDICTS`."""
        return ", ".join(f"{self.parts.count(v)} {v}" for v in VERDICTS if v in self.parts)

    @property
    def text(self) -> str:
        """The word, and for a mixed row its counts: 'mixed: 1 reproduced, 2 inconclusive'."""
        return f"{self}: {self.counts}" if self == MIXED else str(self)


def category(lo: float, hi: float, effect: float | None = None) -> str:
    """The category of one oriented interval [lo, hi] against the paper's effect ``effect`` (> 0; None: the paper
    gives no size) by the rule of this module; an undefined bound is not testable here, [0, 0] not testable at this
    size."""
    if effect is not None and not effect > 0:
        raise ValueError(f"the paper's effect is oriented to be above 0, got {effect}")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return UNTESTABLE
    lo, hi = min(lo, hi), max(lo, hi)
    if lo == hi == 0:
        return AT_THIS_SIZE
    if hi < 0:
        return AGAINST
    if lo > 0:
        return REPRODUCED if effect is None or hi >= effect else SMALLER
    return INCONCLUSIVE if effect is None or hi >= effect else NOT_REPRODUCED


def _bounds(iv) -> tuple[float, float]:
    lo, hi = iv["ci95"] if isinstance(iv, dict) else iv
    return float(lo), float(hi)


def judge(intervals: Iterable, *, effect: float | None = None, sign: float = 1.0) -> Verdict:
    """One comparison over its seeds: each seed's interval (``(lo, hi)`` or ``{"ci95": [lo, hi]}``) oriented by
    ``sign`` (−1: the claim says the stored difference is below 0) and sorted by :func:`category`."""
    parts, ratios = [], []
    for iv in intervals:
        lo, hi = sorted(sign * b for b in _bounds(iv))
        parts.append(category(lo, hi, effect))
        if effect is not None and parts[-1] in CATEGORIES:  # an interval that measured something
            ratios.append((hi - lo) / 2 / effect)
    return Verdict(parts, ratios)


def combine(verdicts: Iterable[str]) -> Verdict:
    """One row from its comparisons (each a :class:`Verdict` of its seeds, or a single word): the word all their
    parts share, else mixed."""
    parts, ratios = [], []
    for v in verdicts:
        parts += getattr(v, "parts", (str(v),))
        ratios += getattr(v, "ratios", ())
    return Verdict(parts, ratios)


def single(word: str) -> Verdict:
    """A verdict of one part (a row that is points only, not run, not testable …)."""
    return Verdict((word,))


def unless(verdict: Verdict, word: str = INCONCLUSIVE) -> Verdict:
    """A verdict whose support does not count (a control that fails, values a model guesses unseen): its reproduced
    and smaller seeds read ``word``, the others stand."""
    return Verdict([word if p in (REPRODUCED, SMALLER) else p for p in verdict.parts], verdict.ratios)


def at_this_size(verdict: Verdict) -> Verdict:
    """A verdict resting on an estimate our size cannot settle (too few orders, texts or seeds): every judged seed
    reads not testable at this size."""
    return Verdict([AT_THIS_SIZE if p in CATEGORIES else p for p in verdict.parts], verdict.ratios)


def half_width_ratio(verdict) -> tuple[float, float] | None:
    """The smallest and largest interval half-width ÷ the paper's effect over a verdict's intervals (None: none
    judged against a stated effect). Above 0.5 an interval centred on the paper's effect still holds 0."""
    r = getattr(verdict, "ratios", ())
    return (min(r), max(r)) if r else None


def effect_text(effect: float | None, *, scale: float = 100.0, unit: str = " points", digits: int = 1) -> str:
    """'+9.7 points' (or 'none given') for a row's stated effect."""
    return "none given" if effect is None else f"{scale * effect:+.{digits}f}{unit}"


def against_paper(effect: float | None, **kw) -> str:
    """'against the paper's +9.7 points', or 'the paper gives no size (read on the direction alone)'."""
    return ("the paper gives no size (read on the direction alone)" if effect is None
            else f"against the paper's {effect_text(effect, **kw)}")


# ---------------------------------------------------------------- the unlearning check's reading (not CLAIMS.md)

PARTLY = "partly reproduced"  # the unlearning check's word for a return on some seeds


def interval_verdict(lo: float, hi: float, *, effect: float | None = None, threshold: float = 0.0) -> str:
    """The unlearning check's reading of one interval of a return the check counts above ``threshold``: above it
    'reproduced' (came back), below 0 'against the claim', below the threshold (or ``effect``) 'not reproduced',
    else 'inconclusive'; [0, 0] measures nothing and is inconclusive."""
    if lo == hi == 0:
        return INCONCLUSIVE
    if lo > threshold:
        return REPRODUCED
    if hi < 0:
        return AGAINST
    if hi < threshold or (effect is not None and hi < effect):
        return NOT_REPRODUCED
    return INCONCLUSIVE


def seed_verdicts(intervals: Iterable, *, effect: float | None = None, threshold: float = 0.0) -> list[str]:
    """Each seed's reading by :func:`interval_verdict`."""
    return [interval_verdict(*_bounds(iv), effect=effect, threshold=threshold) for iv in intervals]


def across_seeds(verdicts: list[str]) -> str:
    """The unlearning check's seeds read together: every seed came back → reproduced, every seed less than
    retrained → against the claim, some of each → not reproduced, some came back → partly reproduced, else not
    reproduced where a seed rules the return out, else inconclusive."""
    if not verdicts:
        return UNTESTABLE
    if all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    if all(v == AGAINST for v in verdicts):
        return AGAINST
    if AGAINST in verdicts:
        return NOT_REPRODUCED
    if REPRODUCED in verdicts:
        return PARTLY
    return NOT_REPRODUCED if NOT_REPRODUCED in verdicts else INCONCLUSIVE


def comparison(intervals: Iterable, *, effect: float | None = None, threshold: float = 0.0) -> str:
    """The unlearning check's verdict of one row from its per-seed intervals."""
    return across_seeds(seed_verdicts(intervals, effect=effect, threshold=threshold))
