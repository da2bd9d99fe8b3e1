"""Findings, the five verdicts, and the formatting every judge shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lmaudit.metrics import seed_std

REPRODUCED, PARTLY, NOT_REPRODUCED, UNTESTABLE, NOT_RUN = (
    "reproduced", "partly reproduced", "not reproduced", "not testable here", "not run")


@dataclass
class Finding:
    ours: str  # what we measured, with intervals where stored
    verdict: str  # one of the five verdicts above
    regime: str  # what in our regime explains a difference (or confirms the setting)
    points: bool = False  # the verdict rests on points (no interval of the compared quantity): said in its cell


@dataclass
class Claim:
    paper: str
    claim: str
    paper_figure: str
    experiments: tuple[str, ...]  # results/NAME folders the judge reads (the first is linked)
    judge: Callable[[dict[str, dict]], Finding]
    # the same claim judged on the real pretrained model (SmolLM2-135M): its experiments and judge, when there are
    real_experiments: tuple[str, ...] = ()
    real_judge: Callable[[dict[str, dict]], Finding] | None = None


def regime_text(regime, recs: dict[str, dict]) -> str | None:
    """A judge's ``regime`` argument as text: None, a fixed sentence, or a function of the results (whose figures
    then follow the data)."""
    return regime(recs) if callable(regime) else regime


def pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def ci(lo: float, hi: float) -> str:
    return f"[{100 * lo:+.1f}, {100 * hi:+.1f}]"


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def seeds_verdict(per_seed: list[dict]) -> tuple[int, int, int]:
    """(ahead, tied, behind) seeds of a list of ``{diff, ci95}``: ahead only when the interval excludes 0."""
    ahead = sum(p["ci95"][0] > 0 for p in per_seed)
    behind = sum(p["ci95"][1] < 0 for p in per_seed)
    return ahead, len(per_seed) - ahead - behind, behind


def count_text(ahead: int, tied: int, behind: int) -> str:
    n = ahead + tied + behind
    parts = ([f"ahead {ahead}/{n}"] * bool(ahead) + [f"tied {tied}/{n}"] * bool(tied)
             + [f"behind {behind}/{n}"] * bool(behind))
    return ", ".join(parts)


def seed_intervals(per_seed: list[dict]) -> str:
    """Each seed's paired difference and its own 95% interval: '−4.7 [−6.8, −3.0], −2.8 [−4.4, −1.3]' (intervals of
    different seeds are not averaged into one: that would be an interval of nothing)."""
    return ", ".join(f"{pts(p['diff'])} {ci(*p['ci95'])}" for p in per_seed)


def paired_lines(rec: dict) -> tuple[list[str], dict[str, tuple[int, int, int]]]:
    """Per compared row: 'row −4.7 [−6.8, −3.0], −2.8 [−4.4, −1.3] (behind 2/2)', each seed with its interval."""
    lines, counts = [], {}
    for other, per_seed in rec["paired"]["vs"].items():
        counts[other] = seeds_verdict(per_seed)
        lines.append(f"{other} {seed_intervals(per_seed)} ({count_text(*counts[other])})")
    return lines, counts


def row_stat(rec: dict, row: str, metric: str = "auc") -> tuple[float, float]:
    """(mean, sample std with ddof = 1) of a row's metric over seeds, from its per-seed values where stored."""
    entry = rec["rows"][row]
    if "per_seed" in entry:
        values = [s[metric] for s in entry["per_seed"]]
        return float(np.mean(values)), seed_std(values)
    return tuple(entry[metric])


UNCONVERGED_SHARE = 0.1  # an estimate p̂ with more of its records moving > 2× from R/2 to R orders has not converged

ONE_SEED = " With one seed a point difference has nothing to measure its noise against: not testable here."


def one_seed(*recs: dict) -> bool:
    """Whether any of these experiments ran one seed (a verdict on points then cannot be read)."""
    return any(len(r["experiment"]["seeds"]) < 2 for r in recs)


def per_seed(rec: dict, row: str, metric: str) -> list[float]:
    """A row's metric on each seed."""
    return [s[metric] for s in rec["rows"][row]["per_seed"]]


def seed_order(a: list[float], b: list[float]) -> str:
    """'above' / 'below' when every seed says so, else 'mixed' (points: no interval of the difference)."""
    return "above" if all(x > y for x, y in zip(a, b)) else "below" if all(x < y for x, y in zip(a, b)) else "mixed"


def auc_text(rec: dict, row: str) -> str:
    m, s = row_stat(rec, row)
    return f"{pct(m)} ± {pct(s)}"
