"""How often set-level audits' intervals hold the value ρ must take, where it is known.

An unlearning experiment knows ρ for two methods: ``none`` (the fine-tuned model itself:
nothing forgotten, ρ = 0) and ``retrain`` (the base fine-tuned without the forget set:
all of it, ρ = 1). Intervals are stored per "fraction / method / audit" key, one
``[lo, hi]`` per seed (``[None, None]`` where ρ was undefined).
"""

from __future__ import annotations

TRUTH = {"none": 0.0, "retrain": 1.0}  # the ρ each of these methods must read: nothing forgotten, all of it


def coverage(intervals: dict[str, list]) -> dict[str, dict[str, int]]:
    """Per set-level audit: how many 90% intervals of ``none`` and ``retrain`` hold ρ = 0 and 1 (``covered``), of how
    many defined ones (``n``), over every forget fraction and seed."""
    out: dict[str, dict[str, int]] = {}
    for key, per_seed in intervals.items():
        _, method, audit = key.split(" / ")
        if method not in TRUTH:
            continue
        c = out.setdefault(audit, {"covered": 0, "n": 0})
        for lo, hi in per_seed:
            if lo is not None and hi is not None:
                c["n"] += 1
                c["covered"] += int(lo - 1e-9 <= TRUTH[method] <= hi + 1e-9)
    return out
