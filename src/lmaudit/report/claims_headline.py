"""Headline claims of the papers that the main rows do not cover: Q-Skew's low-FPR lead, its average gain, IFT
being harder than DFT, Min-K / Min-K++ and SecMI on DLMs, extraction at p = 99%, and the claims no committed
experiment can test (each says why)."""

from __future__ import annotations

import numpy as np

from lmaudit.report.claims_base import (
    NOT_REPRODUCED,
    NOT_RUN,
    ONE_SEED,
    PARTLY,
    REPRODUCED,
    UNTESTABLE,
    Finding,
    count_text,
    one_seed,
    pct,
    per_seed,
    seed_intervals,
    seed_order,
    seeds_verdict,
)

MIA = ("dlm-dft", "dlm-ift")  # the DLM membership tables the headline rows read


def tpr_at_1(recs: dict[str, dict], *, names: tuple[str, ...] = MIA) -> Finding:
    """Q-Skew's TPR at 1% FPR against every baseline's, seed by seed (points: no paired interval of TPRs is stored)."""
    parts, orders = [], []
    for name in (n for n in names if n in recs):
        rec = recs[name]
        q = per_seed(rec, "q_skew", "tpr@1%fpr")
        if any(x is None or x != x for x in q):  # not measurable: fewer than 100 non-members
            return Finding(f"{name}: TPR at 1% FPR not measured", UNTESTABLE,
                           f"{rec['experiment']['n_nonmembers']} non-members cannot resolve a 1% false-positive rate "
                           "(it needs at least 100).")
        rows = [r for r in rec["rows"] if r != "q_skew"]
        got = {r: seed_order(q, per_seed(rec, r, "tpr@1%fpr")) for r in rows}
        orders += got.values()
        parts.append(f"{name}: Q-Skew {', '.join(pct(x) for x in q)}%; " + ", ".join(
            f"{r} {', '.join(pct(x) for x in per_seed(rec, r, 'tpr@1%fpr'))}% ({got[r]})" for r in rows))
    verdict = (REPRODUCED if all(o == "above" for o in orders) else NOT_REPRODUCED if "below" in orders
               and "above" not in orders else PARTLY)
    return Finding("TPR at 1% FPR per seed ('above' / 'below': Q-Skew's on every seed): " + "; ".join(parts), verdict,
                   "A baseline 'below' on every seed is beaten at low FPR; with a few hundred non-members 1% FPR is a "
                   "handful of texts, so seeds disagree often.", points=True)


def average_gain(recs: dict[str, dict], *, gain: float = 0.10, names: tuple[str, ...] = MIA) -> Finding:
    """The '> 10 points' average AUC gain over the next best: per experiment and seed, Q-Skew − the strongest
    baseline with its paired interval; shown above 10 points only where the interval's lower bound is."""
    parts, above, below = [], 0, 0
    for name in (n for n in names if n in recs):
        vs = recs[name]["paired"]["vs"]
        seeds = len(next(iter(vs.values())))
        strongest = [min((v[i] for v in vs.values()), key=lambda p: p["diff"]) for i in range(seeds)]
        above += sum(p["ci95"][0] > gain for p in strongest)
        below += sum(p["ci95"][1] < gain for p in strongest)
        parts.append(f"{name}: {seed_intervals(strongest)}")
    n = sum(len(next(iter(recs[m]["paired"]["vs"].values()))) for m in names if m in recs)
    verdict = REPRODUCED if above == n else NOT_REPRODUCED if below == n else PARTLY
    return Finding("AUC(Q-Skew) − AUC(the strongest baseline of that seed), in points, with its paired 95% interval: "
                   + "; ".join(parts), verdict,
                   f"Above +{100 * gain:.0f} only where the interval's lower bound is; below where its upper bound is "
                   f"({above} above, {below} below of {n} seed-experiments).")


def ift_harder(recs: dict[str, dict], *, dft: str = "dlm-dft", ift: str = "dlm-ift") -> Finding:
    """IFT is harder than DFT (so a DFT-only evaluation overestimates): every attack's AUC lower after IFT."""
    dft, ift = recs[dft], recs[ift]
    rows = [r for r in dft["rows"] if r in ift["rows"]]
    got = {r: seed_order(per_seed(ift, r, "auc"), per_seed(dft, r, "auc")) for r in rows}
    lower = [r for r in rows if got[r] == "below"]
    verdict = (UNTESTABLE if one_seed(dft, ift) else REPRODUCED if len(lower) == len(rows) else
               NOT_REPRODUCED if not lower else PARTLY)
    return Finding("AUC after IFT vs after DFT, per attack (seed by seed; different models, so no paired interval): "
                   + ", ".join(f"{r} {pct(np.mean(per_seed(dft, r, 'auc')))} → {pct(np.mean(per_seed(ift, r, 'auc')))}"
                               f" ({'lower' if got[r] == 'below' else 'higher' if got[r] == 'above' else 'mixed'})"
                               for r in rows), verdict,
                   f"Lower on every seed for {len(lower)} of {len(rows)} attacks; the IFT members here are "
                   "instruction-formatted versions of the corpus' passages, of varying length."
                   + ONE_SEED * one_seed(dft, ift), points=True)


def min_k_broken(recs: dict[str, dict], *, names: tuple[str, ...] = MIA) -> Finding:
    """Random masking breaks Min-K% / Min-K%++ on DLMs: read as 'no better than the DLM Loss baseline'."""
    parts, broken, fine = [], 0, 0
    single = one_seed(*(recs[n] for n in names if n in recs))
    for name in (n for n in names if n in recs):
        rec = recs[name]
        loss = per_seed(rec, "loss", "auc")
        for row in ("min_k", "min_k_pp"):
            o = seed_order(per_seed(rec, row, "auc"), loss)
            broken += o == "below"
            fine += o == "above"
            parts.append(f"{name} {row} {pct(np.mean(per_seed(rec, row, 'auc')))} vs loss {pct(np.mean(loss))} "
                         f"({o})")
    verdict = (UNTESTABLE if single else REPRODUCED if broken and not fine else
               NOT_REPRODUCED if fine and not broken else PARTLY)
    return Finding("AUC, mean over seeds; 'above' / 'below' the masked Loss baseline on every seed: "
                   + "; ".join(parts),
                   verdict, "Min-K% / Min-K%++ read the masked tokens' log-probabilities under the ELBO plan (every "
                   "masking ratio); 'broken' would put them at or below the plain masked loss." + ONE_SEED * single,
                   points=True)


def secmi_weak(recs: dict[str, dict], *, names: tuple[str, ...] = MIA) -> Finding:
    """SecMI, built for continuous diffusion, degrades on DLMs: behind Q-Skew in the paired intervals."""
    parts, counts = [], []
    for name in (n for n in names if n in recs):
        per_seed = recs[name]["paired"]["vs"]["secmi_dlm"]
        counts.append(seeds_verdict(per_seed))
        parts.append(f"{name}: Q-Skew − SecMI-DLM {seed_intervals(per_seed)} ({count_text(*counts[-1])})")
    ahead = sum(c[0] for c in counts)
    n = sum(sum(c) for c in counts)
    verdict = REPRODUCED if ahead == n else NOT_REPRODUCED if sum(c[2] for c in counts) == n else PARTLY
    return Finding("; ".join(parts), verdict, "Degraded read as: behind Q-Skew wherever the paired interval "
                   "excludes 0 (SecMI's own image-diffusion numbers are not a baseline here).")


def not_tested(why: str):
    """A judge for a claim no committed experiment tests: 'not run', with the reason and what would test it."""
    def judge(recs: dict[str, dict]) -> Finding:
        return Finding("no committed experiment tests this claim", NOT_RUN, why)
    return judge
