"""Headline claims of the papers that the main rows do not cover: Q-Skew's low-FPR lead, its average gain, IFT
being harder than DFT, Min-K / Min-K++ and SecMI on DLMs, and the claims no committed experiment can test (each
says why). Every verdict comes from the rule of :mod:`lmaudit.report.verdicts`."""

from __future__ import annotations

import numpy as np

from lmaudit.report.claims_base import (
    NOT_RUN,
    ONE_SEED,
    UNTESTABLE,
    Finding,
    judged_seeds,
    one_seed,
    pct,
    per_seed,
)
from lmaudit.report.verdicts import combine, direction, effect_text, points_verdict, seed_side

MIA = ("dlm-dft", "dlm-ift")  # the DLM membership tables the headline rows read


def tpr_at_1(recs: dict[str, dict], *, names: tuple[str, ...] = MIA) -> Finding:
    """Q-Skew's TPR at 1% FPR against every baseline's, seed by seed (points: no paired interval of TPRs is stored):
    each baseline is one comparison read on points, and the claim combines them (any baseline above Q-Skew on every
    seed is against it)."""
    parts, verdicts, single = [], [], one_seed(*(recs[n] for n in names if n in recs))
    for name in (n for n in names if n in recs):
        rec = recs[name]
        q = per_seed(rec, "q_skew", "tpr@1%fpr")
        if any(x is None or x != x for x in q):  # not measurable: fewer than 100 non-members
            return Finding(f"{name}: TPR at 1% FPR not measured", UNTESTABLE,
                           f"{rec['experiment']['n_nonmembers']} non-members cannot resolve a 1% false-positive rate "
                           "(it needs at least 100).")
        words = []
        for r in (r for r in rec["rows"] if r != "q_skew"):
            b = per_seed(rec, r, "tpr@1%fpr")
            verdicts.append(points_verdict(np.subtract(q, b)))
            words.append(f"{r} {', '.join(pct(x) for x in b)}% ({seed_side(np.subtract(q, b))})")
        parts.append(f"{name}: Q-Skew {', '.join(pct(x) for x in q)}%; " + ", ".join(words))
    return Finding("TPR at 1% FPR per seed (Q-Skew 'above' / 'below' the baseline on every seed, or 'mixed'): "
                   + "; ".join(parts),
                   combine(verdicts), "Each baseline is one comparison on points: Q-Skew above it on every seed "
                   "supports the claim, below it on every seed is against it, and seeds that disagree are "
                   "inconclusive" + _fpr_texts(recs, names) + "." + ONE_SEED * single, points=True, one_seed=single)


def _fpr_texts(recs: dict[str, dict], names: tuple[str, ...]) -> str:
    """'; 1% FPR is 2 of dlm-dft's 200 non-members, …', from each record's stored non-member count."""
    stored = [(n, recs[n]["experiment"]["n_nonmembers"]) for n in names
              if n in recs and recs[n].get("experiment", {}).get("n_nonmembers")]
    return ("; 1% FPR is " + ", ".join(f"{round(0.01 * k)} of {n}'s {k:,} non-members" for n, k in stored)
            if stored else "")


def average_gain(recs: dict[str, dict], *, gain: float = 0.10, names: tuple[str, ...] = MIA) -> Finding:
    """The '> 10 points' average AUC gain over the next best: per experiment and seed, Q-Skew − the strongest
    baseline of that seed with its paired interval, judged with the claimed 10 points as threshold and effect."""
    parts, verdicts = [], []
    recs_used = [recs[n] for n in names if n in recs]
    for name in (n for n in names if n in recs):
        vs = recs[name]["paired"]["vs"]
        seeds = len(next(iter(vs.values())))
        strongest = [min((v[i] for v in vs.values()), key=lambda p: p["diff"]) for i in range(seeds)]
        text, verdict = judged_seeds(strongest, effect=gain, threshold=gain)
        verdicts.append(verdict)
        parts.append(f"{name}: {text}")
    single = one_seed(*recs_used)
    return Finding("AUC(Q-Skew) − AUC(the strongest baseline of that seed), in points, with its paired 95% interval: "
                   + "; ".join(parts), combine(verdicts),
                   f"Judged against the claimed {effect_text(gain)}: ahead where the interval's lower bound is above "
                   "it, behind where its upper bound is below 0, short of it where its upper bound is below it.",
                   one_seed=single)


def ift_harder(recs: dict[str, dict], *, dft: str = "dlm-dft", ift: str = "dlm-ift") -> Finding:
    """IFT is harder than DFT (so a DFT-only evaluation overestimates): every attack's AUC lower after IFT, each
    attack one comparison on points (different models, so no paired interval)."""
    dft, ift = recs[dft], recs[ift]
    rows = [r for r in dft["rows"] if r in ift["rows"]]
    drop = {r: np.subtract(per_seed(dft, r, "auc"), per_seed(ift, r, "auc")) for r in rows}  # DFT − IFT per seed
    got = {r: points_verdict(d) for r, d in drop.items()}
    ways = [direction(d) for d in drop.values()]
    single = one_seed(dft, ift)
    return Finding("AUC after IFT vs after DFT, per attack (seed by seed; different models, so no paired interval): "
                   + ", ".join(f"{r} {pct(np.mean(per_seed(dft, r, 'auc')))} → {pct(np.mean(per_seed(ift, r, 'auc')))}"
                               f" ({seed_side(drop[r], up='lower', down='higher')})" for r in rows),
                   combine(got.values()),
                   f"Lower on every seed for {ways.count(1)} of {len(rows)} attacks, "
                   f"higher on every seed for {ways.count(-1)}; the IFT members here are "
                   "instruction-formatted versions of the corpus' passages, of varying length." + ONE_SEED * single,
                   points=True, one_seed=single)


def min_k_broken(recs: dict[str, dict], *, names: tuple[str, ...] = MIA) -> Finding:
    """Random masking breaks Min-K% / Min-K%++ on DLMs: read as 'no better than the DLM Loss baseline', each (table,
    attack) one comparison on points (Loss's AUC − the attack's, per seed)."""
    parts, verdicts = [], []
    single = one_seed(*(recs[n] for n in names if n in recs))
    for name in (n for n in names if n in recs):
        rec = recs[name]
        loss = per_seed(rec, "loss", "auc")
        for row in ("min_k", "min_k_pp"):
            gap = np.subtract(loss, per_seed(rec, row, "auc"))  # the claim: the attack at or below Loss
            verdicts.append(points_verdict(gap))
            parts.append(f"{name} {row} {pct(np.mean(per_seed(rec, row, 'auc')))} vs loss {pct(np.mean(loss))} "
                         f"({seed_side(gap, up='below', down='above')})")
    return Finding("AUC, mean over seeds; the attack 'above' / 'below' the masked Loss baseline on every seed, or "
                   "'mixed': "
                   + "; ".join(parts), combine(verdicts),
                   "Min-K% / Min-K%++ read the masked tokens' log-probabilities under the ELBO plan (every masking "
                   "ratio); 'broken' would put them at or below the plain masked loss." + ONE_SEED * single,
                   points=True, one_seed=single)


def secmi_weak(recs: dict[str, dict], *, names: tuple[str, ...] = MIA, effects: tuple[float, ...] = (0.097, 0.071)
               ) -> Finding:
    """SecMI, built for continuous diffusion, degrades on DLMs: behind Q-Skew in the paired intervals, against the
    paper's margin of Q-Skew over the next best (SecMI is below the next best, so its margin is at least that)."""
    parts, verdicts, used = [], [], []
    for name, effect in zip(names, effects):
        if name not in recs:
            continue
        used.append(recs[name])
        text, verdict = judged_seeds(recs[name]["paired"]["vs"]["secmi_dlm"], effect=effect)
        verdicts.append(verdict)
        parts.append(f"{name}: Q-Skew − SecMI-DLM {text}, against {effect_text(effect)}")
    single = one_seed(*used)
    return Finding("; ".join(parts), combine(verdicts), "Degraded read as: behind Q-Skew wherever the paired interval "
                   "is above 0 (SecMI's own image-diffusion numbers are not a baseline here).", one_seed=single)


def not_tested(why: str):
    """A judge for a claim no committed experiment tests: 'not run', with the reason and what would test it."""
    def judge(recs: dict[str, dict]) -> Finding:
        return Finding("no committed experiment tests this claim", NOT_RUN, why)
    return judge
