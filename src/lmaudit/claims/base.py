"""Findings, and the formatting and intervals every judge shares (the verdicts and their rule:
:mod:`lmaudit.claims.verdicts`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lmaudit.claims.verdicts import (  # noqa: F401  (re-exported: the judges import the vocabulary from here)
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
    Verdict,
    judge,
)
from lmaudit.extraction.reconstruct import wilson_interval
from lmaudit.seeds import seed_std


@dataclass
class Finding:
    ours: str  # what we measured, with intervals where stored or computed
    verdict: str  # one of lmaudit.claims.verdicts.VERDICTS (a Verdict carries its per-seed parts)
    regime: str  # what in our regime explains a difference (or confirms the setting)
    points: bool = False  # some part rests on points (no interval): said in its cell
    one_seed: bool = False  # the verdict rests on one seed: said in its cell


@dataclass
class Claim:
    paper: str
    claim: str
    paper_figure: str
    experiments: tuple[str, ...]  # results/NAME folders the judge reads (the first is linked)
    judge: Callable[[dict[str, dict]], Finding]
    effect: str  # the effect the verdict is judged against, as taken from the paper (or why there is none)
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


def seed_intervals(per_seed: list[dict], scale: float = 100.0, digits: int = 1) -> str:
    """Each seed's difference and its own 95% interval: '−4.7 [−6.8, −3.0], −2.8 [−4.4, −1.3]' (intervals of
    different seeds are not averaged into one: that would be an interval of nothing)."""
    f = f"+.{digits}f"
    return ", ".join(f"{scale * p['diff']:{f}} [{scale * p['ci95'][0]:{f}}, {scale * p['ci95'][1]:{f}}]"
                     for p in per_seed)


def judged_seeds(per_seed: list[dict], *, effect: float | None = None, sign: float = 1.0, scale: float = 100.0,
                 digits: int = 1) -> tuple[str, Verdict]:
    """Each seed's difference with its own 95% interval and the category each seed reads, and the comparison's
    verdict by the rule ('+6.8 [+4.0, +9.9], +1.0 [-2.0, +4.0] (seeds: 1 reproduced, 1 inconclusive)'). ``sign =
    −1`` orients a stored difference whose claim says it is below 0 (the text keeps the stored sign)."""
    verdict = judge(per_seed, effect=effect, sign=sign)
    return f"{seed_intervals(per_seed, scale, digits)} (seeds: {verdict.counts})", verdict


def judged_lines(rec: dict, effect: float | dict | None = None) -> tuple[list[str], dict[str, Verdict]]:
    """Per compared row of ``rec["paired"]["vs"]``: 'row −4.7 [−6.8, −3.0], … (seeds: 2 against the claim)' and the
    row's verdict, against ``effect`` (one for every row, or one per row; None: the paper gives none)."""
    lines, verdicts = [], {}
    for other, per_seed in rec["paired"]["vs"].items():
        text, verdicts[other] = judged_seeds(per_seed, effect=effect.get(other) if isinstance(effect, dict)
                                             else effect)
        lines.append(f"{other} {text}")
    return lines, verdicts


def row_stat(rec: dict, row: str, metric: str = "auc") -> tuple[float, float]:
    """(mean, sample std with ddof = 1) of a row's metric over seeds, recomputed from its per-seed values where stored
    (records written before ddof = 1 store the population std beside them); the stored pair otherwise."""
    entry = rec["rows"][row]
    if "per_seed" in entry:
        values = [s[metric] for s in entry["per_seed"]]
        return float(np.mean(values)), seed_std(values)
    return tuple(entry[metric])


def spread(values) -> tuple[float, float]:
    """(mean, sample std with ddof = 1) of the defined per-seed values (NaN, NaN with none)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return (float(v.mean()), seed_std(v)) if v.size else (float("nan"), float("nan"))


UNCONVERGED_SHARE = 0.1  # an estimate p̂ with more of its records moving > 2× from R/2 to R orders has not converged


def seed_count(rec: dict) -> int:
    """How many seeds a record holds: its stored ``experiment.seeds``, else the length of the first per-seed list it
    stores (rows, pairs, PII rows), else 1 (a record that does not say is not taken as several)."""
    seeds = (rec.get("experiment") or {}).get("seeds")
    if isinstance(seeds, list | tuple):
        return len(seeds)
    for entry in (rec.get("rows") or {}).values():
        if isinstance(entry, dict) and isinstance(entry.get("per_seed"), list):
            return len(entry["per_seed"])
    for group in ((rec.get("paired") or {}).get("vs") or {}, rec.get("pii_rows") or {}):
        for v in group.values():
            if isinstance(v, list):
                return len(v)
    return 1


def one_seed(*recs: dict) -> bool:
    """Whether any of these experiments holds one seed (:func:`seed_count`)."""
    return any(seed_count(r) < 2 for r in recs)


def per_seed(rec: dict, row: str, metric: str) -> list[float]:
    """A row's metric on each seed."""
    return [s[metric] for s in rec["rows"][row]["per_seed"]]


def auc_text(rec: dict, row: str) -> str:
    """'95.1 ± 0.7' (mean ± std over seeds, ddof = 1), or '70.3 (one seed)'."""
    m, s = row_stat(rec, row)
    entry = rec["rows"][row]
    single = len(entry["per_seed"]) < 2 if "per_seed" in entry else one_seed(rec)
    return f"{pct(m)} (one seed)" if single else f"{pct(m)} ± {pct(s)}"


def newcombe(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float, float]:
    """k1/n1 − k2/n2 with Newcombe's hybrid score 95% interval, built from the two Wilson intervals (fractions)."""
    p1, p2 = k1 / n1, k2 / n2
    (l1, u1), (l2, u2) = wilson_interval(k1, n1), wilson_interval(k2, n2)
    d = p1 - p2
    return d, d - float(np.hypot(p1 - l1, u2 - p2)), d + float(np.hypot(u1 - p1, p2 - l2))


def paired_median(a, b, *, n_resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """median(a − b) of paired values (pairs with both finite), with a percentile bootstrap 95% interval over the
    pairs."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    d = d[np.isfinite(d)]
    reps = np.median(d[np.random.default_rng(seed).integers(0, len(d), (n_resamples, len(d)))], axis=1)
    return float(np.median(d)), float(np.quantile(reps, 0.025)), float(np.quantile(reps, 0.975))


def seed_counts(per_seed: list[dict]) -> tuple[int, int, int]:
    """(ahead, tied, behind) seeds of a list of ``{diff, ci95}``, for text that describes a regime (a verdict comes
    from :func:`judged_seeds`): ahead only when the interval is above 0."""
    ahead = sum(p["ci95"][0] > 0 for p in per_seed)
    behind = sum(p["ci95"][1] < 0 for p in per_seed)
    return ahead, len(per_seed) - ahead - behind, behind


def count_text(ahead: int, tied: int, behind: int) -> str:
    n = ahead + tied + behind
    parts = ([f"ahead {ahead}/{n}"] * bool(ahead) + [f"tied {tied}/{n}"] * bool(tied)
             + [f"behind {behind}/{n}"] * bool(behind))
    return ", ".join(parts)
