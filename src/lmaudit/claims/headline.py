"""Headline claims of the papers that the main rows do not cover: Q-Skew's low-FPR lead, its average gain, IFT
being harder than DFT, Min-K / Min-K++ and SecMI on DLMs. Every verdict comes from the rule of
:mod:`lmaudit.claims.verdicts`."""

from __future__ import annotations

import numpy as np

from lmaudit.claims.base import (
    AT_THIS_SIZE,
    POINTS_ONLY,
    Finding,
    judged_seeds,
    one_seed,
    pct,
    per_seed,
)
from lmaudit.claims.intervals import UNPAIRED, row_diffs
from lmaudit.claims.verdicts import combine, effect_text, single

MIA = ("dlm-dft", "dlm-ift")  # the DLM membership tables the headline rows read
TPR_NEEDS = ("the paired difference of TPRs at 1% FPR per seed with its interval (`paired.vs.ROW[i]['tpr@1%fpr']`, "
             "which the membership experiment stores with `compare = \"q_skew\"` since paired TPRs were added)")


def tpr_at_1(recs: dict[str, dict], *, names: tuple[str, ...] = MIA) -> Finding:
    """Q-Skew's TPR at 1% FPR − every baseline's, per seed with the paired interval the experiment stores
    (resampling members and non-members together); each baseline one comparison (the paper gives no margin here:
    read on the direction). A record written before paired TPRs were stored shows its points and is points only."""
    parts, verdicts, used = [], [], [recs[n] for n in names if n in recs]
    for name in (n for n in names if n in recs):
        rec = recs[name]
        q = per_seed(rec, "q_skew", "tpr@1%fpr")
        if any(x is None or x != x for x in q):  # not measurable: fewer than 100 non-members
            return Finding(f"{name}: TPR at 1% FPR not measured", single(AT_THIS_SIZE),
                           f"{rec['experiment']['n_nonmembers']} non-members cannot resolve a 1% false-positive rate "
                           "(it needs at least 100): a limit of this experiment's size.")
        words = []
        for r in (r for r in rec["rows"] if r != "q_skew"):
            paired = [p.get("tpr@1%fpr") for p in ((rec.get("paired") or {}).get("vs") or {}).get(r, [])]
            b = per_seed(rec, r, "tpr@1%fpr")
            if paired and all(paired):
                text, v = judged_seeds(paired)
                words.append(f"{r} {', '.join(pct(x) for x in b)}%, Q-Skew − {r} {text}")
            else:
                v = single(POINTS_ONLY)
                words.append(f"{r} {', '.join(pct(x) for x in b)}% (points)")
            verdicts.append(v)
        parts.append(f"{name}: Q-Skew {', '.join(pct(x) for x in q)}%; " + "; ".join(words))
    points = any(v == POINTS_ONLY for v in verdicts)
    return Finding("TPR at 1% FPR per seed: " + "; ".join(parts), combine(verdicts),
                   "Each baseline is one comparison, per seed" + _fpr_texts(recs, names) + "."
                   + (f" Points only where no paired interval is stored: it needs {TPR_NEEDS}." if points else ""),
                   points=points, one_seed=one_seed(*used))


def _fpr_texts(recs: dict[str, dict], names: tuple[str, ...]) -> str:
    """'; 1% FPR is 2 of dlm-dft's 200 non-members, …', from each record's stored non-member count."""
    stored = [(n, recs[n]["experiment"]["n_nonmembers"]) for n in names
              if n in recs and recs[n].get("experiment", {}).get("n_nonmembers")]
    return ("; 1% FPR is " + ", ".join(f"{round(0.01 * k)} of {n}'s {k:,} non-members" for n, k in stored)
            if stored else "")


def average_gain(recs: dict[str, dict], *, gain: float = 0.10, names: tuple[str, ...] = MIA) -> Finding:
    """The '> 10 points' average AUC gain over the next best: per experiment and seed, Q-Skew − the strongest
    baseline of that seed with its paired interval, against the claimed 10 points as the paper's effect."""
    parts, verdicts = [], []
    for name in (n for n in names if n in recs):
        vs = recs[name]["paired"]["vs"]
        seeds = len(next(iter(vs.values())))
        strongest = [min((v[i] for v in vs.values()), key=lambda p: p["diff"]) for i in range(seeds)]
        text, verdict = judged_seeds(strongest, effect=gain)
        verdicts.append(verdict)
        parts.append(f"{name}: {text}")
    return Finding("AUC(Q-Skew) − AUC(the strongest baseline of that seed), in points, with its paired 95% interval, "
                   f"against the claimed {effect_text(gain)}: " + "; ".join(parts), combine(verdicts),
                   "A gain above 0 whose interval excludes the claimed size is smaller than the claim.",
                   one_seed=one_seed(*(recs[n] for n in names if n in recs)))


def ift_harder(recs: dict[str, dict], *, dft: str = "dlm-dft", ift: str = "dlm-ift") -> Finding:
    """IFT is harder than DFT (so a DFT-only evaluation overestimates): per attack and seed, its AUC after DFT −
    after IFT, the unpaired interval from the two AUCs (different models and texts), each attack one comparison (the
    paper's figures are TPRs of other models: read on the direction)."""
    d_rec, i_rec = recs[dft], recs[ift]
    rows = [r for r in d_rec["rows"] if r in i_rec["rows"]]
    parts, verdicts = [], []
    for r in rows:
        text, v = judged_seeds(row_diffs(d_rec, r, r, other=i_rec))
        verdicts.append(v)
        parts.append(f"{r} {pct(np.mean(per_seed(d_rec, r, 'auc')))} → {pct(np.mean(per_seed(i_rec, r, 'auc')))}, "
                     f"DFT − IFT {text}")
    return Finding(f"AUC after DFT → after IFT, per attack, DFT − IFT per seed ({UNPAIRED}): " + "; ".join(parts),
                   combine(verdicts), "The IFT members here are instruction-formatted versions of the corpus' "
                   "passages, of varying length.", one_seed=one_seed(d_rec, i_rec))


def min_k_broken(recs: dict[str, dict], *, names: tuple[str, ...] = MIA) -> Finding:
    """Random masking breaks Min-K% / Min-K%++ on DLMs, read as 'no better than the DLM Loss baseline': per (table,
    attack) and seed, Loss's AUC − the attack's with the unpaired interval (the paper gives no figure: read on the
    direction)."""
    parts, verdicts = [], []
    for name in (n for n in names if n in recs):
        rec = recs[name]
        for row in ("min_k", "min_k_pp"):
            text, v = judged_seeds(row_diffs(rec, "loss", row))
            verdicts.append(v)
            parts.append(f"{name} {row} {pct(np.mean(per_seed(rec, row, 'auc')))} vs loss "
                         f"{pct(np.mean(per_seed(rec, 'loss', 'auc')))}, loss − {row} {text}")
    return Finding(f"AUC, mean over seeds; Loss − the attack per seed ({UNPAIRED}): " + "; ".join(parts),
                   combine(verdicts), "Min-K% / Min-K%++ read the masked tokens' log-probabilities under the ELBO plan "
                   "(every masking ratio); 'broken' puts them at or below the plain masked loss.",
                   one_seed=one_seed(*(recs[n] for n in names if n in recs)))


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
    return Finding("; ".join(parts), combine(verdicts), "Degraded read as: behind Q-Skew (SecMI's own image-diffusion "
                   "numbers are not a baseline here).", one_seed=one_seed(*used))
