"""How often set-level audits' intervals hold the value ρ must take, where it is known.

An unlearning experiment knows ρ for two methods: ``none`` (the fine-tuned model itself:
nothing forgotten, ρ = 0) and ``retrain`` (the base fine-tuned without the forget set:
all of it, ρ = 1). Intervals are stored per "fraction / method / audit" key, one
``[lo, hi]`` per seed (``[None, None]`` where ρ was undefined).
"""

from __future__ import annotations

TRUTH = {"none": 0.0, "retrain": 1.0}  # the ρ each of these methods must read: nothing forgotten, all of it


def stored_intervals(record: dict) -> tuple[dict[str, list], str]:
    """The intervals coverage is judged on, and what they are: those of the unclipped estimates where the results
    hold them (their width says how well the data pin ρ down), else those of the clipped ones (older results)."""
    if record.get("intervals_unclipped"):
        return record["intervals_unclipped"], "unclipped estimate"
    return record["intervals"], "estimate clipped to [0, 1]"


def coverage(intervals: dict[str, list]) -> dict[str, dict]:
    """Per set-level audit: how many 90% intervals of ``none`` and ``retrain`` hold ρ = 0 and 1 (``covered``), of how
    many defined ones (``n``), over every forget fraction and seed; and apart from them the degenerate ones, which
    say nothing of coverage: ``clipped`` (zero width on a bound of [0, 1], an estimate clipped there on every
    resample) and ``vacuous`` (the whole of [0, 1]); ``widths``: the widths of the informative ones."""
    out: dict[str, dict] = {}
    for key, per_seed in intervals.items():
        _, method, audit = key.split(" / ")
        if method not in TRUTH:
            continue
        c = out.setdefault(audit, {"covered": 0, "n": 0, "clipped": 0, "vacuous": 0, "widths": []})
        for lo, hi in per_seed:
            if lo is None or hi is None:
                continue
            if hi - lo < 1e-9 and (abs(lo) < 1e-9 or abs(lo - 1) < 1e-9):
                c["clipped"] += 1
            elif lo <= 1e-9 and hi >= 1 - 1e-9:
                c["vacuous"] += 1
            else:
                c["n"] += 1
                c["covered"] += int(lo - 1e-9 <= TRUTH[method] <= hi + 1e-9)
                c["widths"].append(hi - lo)
    return out
