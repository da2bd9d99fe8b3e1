"""The verdicts of CLAIMS.md and the one rule every judge calls to reach them.

Vocabulary (:data:`VERDICTS`, in the order the counts are written):

- **reproduced**: the claim holds on every seed, each with its own paired 95% interval on the claim's side;
- **partly reproduced**: some of it holds (a comparison on some seeds only, or some comparisons of several);
- **not reproduced**: the data exclude the size the paper reports, without pointing the other way;
- **against the claim**: the difference points the other way, the interval below 0 on every seed;
- **inconclusive**: the data cannot decide (an interval holding both 0 and the paper's effect; points);
- **not testable here**: no experiment here can measure it (each such row says why);
- **not run**: the experiment that would test it has not been run.

The rule on one interval (:func:`interval_verdict`). Every difference is oriented so that the claim says
"d > threshold" (0 unless the claim names a size, e.g. "more than 10 points"); ``effect`` is the size the paper
reports, in the same units (each row states the one it takes; None where the paper gives none):

- lo > threshold: reproduced;
- hi < 0: against the claim;
- hi < threshold: not reproduced (above 0 perhaps, but short of the size claimed);
- hi < effect: not reproduced (the interval holds the threshold but excludes the paper's effect: the paper's
  figure is ruled out);
- otherwise (it holds both the threshold and the paper's effect, or the paper gives no effect): inconclusive;
- [0, 0] (a bootstrap in which nothing varied: two signals that agree on every record) measures no noise and is
  inconclusive too.

One comparison over seeds (:func:`comparison`), each seed judged by that rule: every seed reproduced →
reproduced; every seed against → against the claim; some seeds against and not all → not reproduced (seeds that
contradict each other, each significantly, do not reproduce a claim); some reproduced, none against → partly
reproduced; otherwise not reproduced when a seed excludes the paper's effect, else inconclusive. One seed is
judged by the same rule on its one interval, and the row says "one seed".

Points (no interval of the compared quantity is stored; :func:`points_verdict`): the seeds are the only measure
of noise, so the rule is the sign test across them: the difference above the threshold on every seed is reproduced,
below 0 on every seed against the claim, each only when that many seeds agreeing by chance is below 5% one-sided,
which takes :data:`SIGN_TEST_SEEDS` seeds (0.5⁵ = 3.1%); with fewer, seeds that disagree, or a difference above 0
but not above the threshold on every seed, inconclusive (the verdict cell says "on points"). A point cannot exclude
the paper's effect, so points never give "not reproduced". Which way the seeds point is read from their signs alone
(:func:`seed_side`: "above on every seed", "below on every seed", "mixed"), whether or not the sign test passes: it
is what the measured column says. One seed of points has nothing to measure its noise against
(:data:`ONE_SEED_POINTS`).

Several comparisons of one claim (:func:`combine`; e.g. "beats every baseline", or a claim with several parts):
"not testable here" parts are left out (none left: not testable here; a claim whose other parts all hold is then
only partly reproduced); any comparison against the claim → against the claim (a part that points the other way
refutes a claim that needs every part); all reproduced → reproduced; some reproduced (the rest inconclusive, not
reproduced or partly) → partly reproduced; no comparison reproduced on every seed: partly reproduced when some hold
on some seeds and none excludes the paper's effect, else not reproduced when any does, else inconclusive.
"""

from __future__ import annotations

from collections.abc import Iterable

REPRODUCED, PARTLY, NOT_REPRODUCED, AGAINST, INCONCLUSIVE, UNTESTABLE, NOT_RUN = (
    "reproduced", "partly reproduced", "not reproduced", "against the claim", "inconclusive", "not testable here",
    "not run")
VERDICTS = (REPRODUCED, PARTLY, NOT_REPRODUCED, AGAINST, INCONCLUSIVE, UNTESTABLE, NOT_RUN)

# how one seed's interval reads, in the measured column
SEED_WORDS = {REPRODUCED: "ahead", AGAINST: "behind", NOT_REPRODUCED: "short of the paper's effect",
              INCONCLUSIVE: "tied"}

ONE_SEED_POINTS = (" One seed of points (no interval stored) has nothing to measure its noise against: "
                   "inconclusive.")


def interval_verdict(lo: float, hi: float, *, effect: float | None = None, threshold: float = 0.0) -> str:
    """The verdict of one interval [lo, hi] of a difference the claim says is above ``threshold``, against the
    paper's ``effect`` (module docstring)."""
    if lo == hi == 0:  # every resample equal at 0: nothing varied, so nothing is measured
        return INCONCLUSIVE
    if lo > threshold:
        return REPRODUCED
    if hi < 0:
        return AGAINST
    if hi < threshold or (effect is not None and hi < effect):
        return NOT_REPRODUCED
    return INCONCLUSIVE


def across_seeds(verdicts: list[str]) -> str:
    """One comparison's verdict from its seeds' verdicts (each from :func:`interval_verdict`)."""
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
    """One comparison's verdict from its per-seed intervals, each ``(lo, hi)`` or ``{"ci95": [lo, hi]}``."""
    return across_seeds(seed_verdicts(intervals, effect=effect, threshold=threshold))


def seed_verdicts(intervals: Iterable, *, effect: float | None = None, threshold: float = 0.0) -> list[str]:
    """Each seed's verdict by :func:`interval_verdict`."""
    out = []
    for iv in intervals:
        lo, hi = iv["ci95"] if isinstance(iv, dict) else iv
        out.append(interval_verdict(lo, hi, effect=effect, threshold=threshold))
    return out


SIGN_TEST_SEEDS = 5  # the fewest seeds all on one side by chance with probability below 5% (one-sided sign test)


def points_verdict(diffs: Iterable[float], *, threshold: float = 0.0) -> str:
    """One comparison read on points (one oriented difference per seed, no interval), on :data:`SIGN_TEST_SEEDS`
    seeds or more (the one-sided sign test at 5%): above ``threshold`` on every seed → reproduced; below 0 on every
    seed → against the claim; else (fewer seeds, seeds that disagree, a tie, a difference above 0 but short of the
    threshold on some seed) inconclusive. As :func:`interval_verdict` says for an interval between 0 and the
    threshold, short of a claimed size is not evidence against the claim; and a point, unlike an interval, cannot
    exclude a size, so points never give "not reproduced"."""
    d = [float(x) for x in diffs]
    if len(d) < SIGN_TEST_SEEDS:
        return INCONCLUSIVE
    if all(x > threshold for x in d):
        return REPRODUCED
    if all(x < 0 for x in d):
        return AGAINST
    return INCONCLUSIVE


def direction(diffs: Iterable[float], *, threshold: float = 0.0) -> int:
    """Which way the seeds point, from the signs alone, whatever their number: +1 above ``threshold`` on every seed,
    −1 below it on every seed, 0 otherwise (seeds on both sides, a seed level with it, an undefined seed, none)."""
    d = [float(x) for x in diffs]
    if d and all(x > threshold for x in d):
        return 1
    if d and all(x < threshold for x in d):
        return -1
    return 0


def seed_side(diffs: Iterable[float], *, up: str = "above", down: str = "below", threshold: float = 0.0) -> str:
    """The measured column's words for a comparison on points, from the signs and not from the verdict (three seeds
    on one side read "below on every seed" though the sign test needs :data:`SIGN_TEST_SEEDS`): '{up} on every
    seed', '{down} on every seed', '{up}, one seed' (one seed), 'level on every seed', 'undefined on a seed' or
    'mixed'."""
    d = [float(x) for x in diffs]
    way = direction(d, threshold=threshold)
    if way:
        word = up if way > 0 else down
        return f"{word}, one seed" if len(d) == 1 else f"{word} on every seed"
    if not d:
        return "no seed"
    if any(x != x for x in d):
        return "undefined on a seed"
    return "level on every seed" if all(x == threshold for x in d) else "mixed"


def combine(verdicts: Iterable[str]) -> str:
    """One claim's verdict from the verdicts of its comparisons (module docstring)."""
    verdicts = list(verdicts)
    tested = [v for v in verdicts if v not in (UNTESTABLE, NOT_RUN)]
    if not tested:
        return NOT_RUN if verdicts and all(v == NOT_RUN for v in verdicts) else UNTESTABLE
    if AGAINST in tested:
        return AGAINST
    if all(v == REPRODUCED for v in tested):
        return REPRODUCED if len(tested) == len(verdicts) else PARTLY
    if REPRODUCED in tested:
        return PARTLY
    if NOT_REPRODUCED in tested:
        return NOT_REPRODUCED
    return PARTLY if PARTLY in tested else INCONCLUSIVE


def capped(verdict: str, cap: str = INCONCLUSIVE) -> str:
    """A verdict that some condition (an estimate not converged, values a model guesses unseen) keeps from
    counting as support: reproduced and partly become ``cap``; the others stand."""
    return cap if verdict in (REPRODUCED, PARTLY) else verdict


def effect_text(effect: float | None, *, scale: float = 100.0, unit: str = " points", digits: int = 1) -> str:
    """'+9.7 points' (or 'none given') for a row's stated effect."""
    return "none given" if effect is None else f"{scale * effect:+.{digits}f}{unit}"


def against_paper(effect: float | None, **kw) -> str:
    """'against the paper's +9.7 points', or 'the paper gives no effect' (then a tie is inconclusive)."""
    return "the paper gives no effect" if effect is None else f"against the paper's {effect_text(effect, **kw)}"
