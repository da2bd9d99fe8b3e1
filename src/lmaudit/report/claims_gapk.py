"""The Gap-K% paper's claims: Gap-K% against Min-K%++ (with the members in a pretraining stream: pretraining from
scratch on the tiny model, continued pretraining of a model pretrained by others on the real one, the closest analogue
here to the paper's pretraining-data detection; and after fine-tuning), its smoothing, its k, paraphrase, Gap-K%
against Min-K%, at low FPR, and its component ablation. Intervals where the
experiment stores them (Gap-K% − Min-K%++), else points seed by seed; every verdict by the rule of
:mod:`lmaudit.report.verdicts`."""

from __future__ import annotations

import numpy as np

from lmaudit.data.instruct import PERTURB_RATE
from lmaudit.report.claims_base import (
    ONE_SEED,
    Finding,
    auc_text,
    judged_seeds,
    one_seed,
    pct,
    per_seed,
    regime_text,
    row_stat,
)
from lmaudit.report.claims_models import model, stream, weights
from lmaudit.report.verdicts import (
    UNTESTABLE,
    against_paper,
    combine,
    direction,
    points_verdict,
    seed_side,
)

PRETRAINING = "ar-pretraining-detection"
GAP_EFFECT = 0.021  # the paper's smallest WikiMIA gain of Gap-K% over Min-K%++ (length 32)
PEAK = (0.1, 0.2)  # 'best near k = 15%': the best k of a seed in this range


def pretraining_gap(recs: dict[str, dict], *, name: str = PRETRAINING, regime=None,
                    effect: float | None = GAP_EFFECT) -> Finding:
    """AUC(gap_k) − AUC(min_k_pp) per exposure setting, per seed with its paired interval, against the paper's gain
    ``effect``; each setting one comparison."""
    rec = recs[name]
    parts, verdicts = [], []
    for setting, seeds in rec["paired"].items():
        text, verdict = judged_seeds(seeds, effect=effect)
        verdicts.append(verdict)
        parts.append(f"{setting}: {text}")
    ours = (f"AUC(gap_k) − AUC(min_k_pp) per seed with paired 95% intervals, "
            f"{against_paper(effect)}: " + "; ".join(parts))
    if regime:
        return Finding(ours, combine(verdicts), regime_text(regime, recs), one_seed=one_seed(rec))
    attacks = rec["experiment"].get("attacks") or []
    spans = []
    for setting in rec["paired"]:
        aucs = [row_stat(rec, f"{setting}: {a}")[0] for a in attacks if f"{setting}: {a}" in rec["rows"]]
        if aucs:
            spans.append(f"{setting}, every attack's AUC {pct(min(aucs))}–{pct(max(aucs))}")
    e = rec["experiment"]
    how = "continued-pretrained" if e.get("base") else "pretrained from scratch"
    behind = [s for s, seeds in rec["paired"].items() if seeds and np.mean([p["diff"] for p in seeds]) < 0]
    why = (f"{_cap(model(e, 'a model'))} {how} on {stream(e)} (the "
           f"paper: Pythia/LLaMA on WikiMIA and MIMIR); {'; '.join(spans) or 'no attack AUC stored'}.")
    if behind:
        why += (f" Min-K%++ leads on the mean over seeds in {', '.join(behind)}. Possible reason: a small model's "
                "top-1 is rarely a confident wrong guess, the case Gap-K% is built on.")
    return Finding(ours, combine(verdicts), why, one_seed=one_seed(rec))


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def finetuned_gap(*names: str, effect: float | None = GAP_EFFECT):
    """The Gap-K% head-to-head on fine-tuned real models: AUC(gap_k) − AUC(min_k_pp) per seed in each experiment
    ``names`` (``compare = "gap_k"``), each experiment one comparison against the paper's gain ``effect``."""

    def judge(recs: dict[str, dict]) -> Finding:
        parts, verdicts, aucs, tuned = [], [], [], []
        for name in (n for n in names if n in recs):
            rec = recs[name]
            text, verdict = judged_seeds(rec["paired"]["vs"]["min_k_pp"], effect=effect)
            verdicts.append(verdict)
            aucs.append(f"{name}: gap_k {auc_text(rec, 'gap_k')}, min_k_pp {auc_text(rec, 'min_k_pp')}")
            parts.append(f"{name}: {text}")
            e = rec.get("experiment", {})
            tuned.append(f"{name}: {model(e)}, {weights(e)}")
        ours = (f"AUC(gap_k) − AUC(min_k_pp) per seed with paired 95% intervals, "
                f"{against_paper(effect)}: " + "; ".join(parts) + ". AUC mean ± std over seeds: " + "; ".join(aucs))
        return Finding(ours, combine(verdicts), f"Members are fine-tuned into a pretrained model ({'; '.join(tuned)}), "
                       "not met in pretraining as in the paper.")

    return judge


def real_gap(pretraining: str, finetuned: tuple[str, ...], regime, effect: float | None = GAP_EFFECT):
    """Gap-K% − Min-K%++ on the real model: judged on ``pretraining``, continued pretraining of a model pretrained by
    others with the members in the stream (the closest analogue here to the paper's pretraining-data detection), with
    the fine-tuned experiments (``finetuned``: members met in fine-tuning, further from the paper) beside it."""

    def judge(recs: dict[str, dict]) -> Finding:
        tuned = (finetuned_gap(*finetuned, effect=effect)(recs) if any(name in recs for name in finetuned)
                 else None)
        if pretraining not in recs:  # the fine-tuned experiments alone, until continued pretraining is run
            return tuned
        found = pretraining_gap(recs, name=pretraining, regime=regime, effect=effect)
        if tuned is None:
            return found
        return Finding(f"continued pretraining: {found.ours}. After fine-tuning (members met in fine-tuning, not in "
                       f"pretraining; {tuned.verdict} there): {tuned.ours.split(': ', 1)[1]}", found.verdict,
                       found.regime, one_seed=found.one_seed)

    return judge


def _diff(rec: dict, a: str, b: str, metric: str = "auc") -> np.ndarray:
    """Row ``a`` − row ``b`` of one metric, seed by seed."""
    return np.subtract(per_seed(rec, a, metric), per_seed(rec, b, metric))


def smoothing(recs: dict[str, dict], *, name: str = PRETRAINING, regime=None) -> Finding:
    """Sequential > shuffled > none, each '>' one comparison on points seed by seed, in every exposure setting."""
    rec = recs[name]
    parts, verdicts, unsmoothed = [], [], []
    for setting in rec["paired"]:
        rows = [f"{setting}: gap_k smooth={k}" for k in ("sequential", "shuffled", "none")]
        if not all(r in rec["rows"] for r in rows):
            continue
        means = [row_stat(rec, r)[0] for r in rows]
        if means[2] > max(means[:2]):
            unsmoothed.append(setting)
        pair = [points_verdict(_diff(rec, a, b)) for a, b in zip(rows, rows[1:])]
        verdicts += pair
        parts.append(f"{setting}: " + ", ".join(f"{k} {auc_text(rec, r)}" for k, r in
                                                zip(("sequential", "shuffled", "none"), rows))
                     + f" (sequential − shuffled {seed_side(_diff(rec, rows[0], rows[1]))}, shuffled − none "
                       f"{seed_side(_diff(rec, rows[1], rows[2]))})")
    return Finding("AUC, mean ± std over seeds (points; the paired interval is stored for Gap-K% − Min-K%++ "
                   "only): " + "; ".join(parts), combine(verdicts),
                   regime_text(regime, recs) or (f"Points over {len(rec['experiment']['seeds'])} seeds (mean ± std, "
                   "ddof = 1); each '>' is read seed by seed." + (
                       f" No smoothing has the highest mean AUC in {', '.join(unsmoothed)}. Possible reason: the few "
                       "tokens that separate members are isolated, and a smoothing window averages them with their "
                       "neighbours." if unsmoothed else "")) + ONE_SEED * one_seed(rec),
                   points=True, one_seed=one_seed(rec))


def k_sensitivity(recs: dict[str, dict], *, name: str = PRETRAINING, regime=None) -> Finding:
    """Two parts, each on points by the sign test across seeds. The peak's place: per seed, the best AUC at a k in
    10–20% (:data:`PEAK`) − the best at any other k; above 0 on every seed supports 'best near 15%', below 0 on
    every seed (the peak elsewhere) is against it, each on :data:`SIGN_TEST_SEEDS` seeds or more; not testable
    where the sweep has no k inside or none outside that range. Above Min-K%++ at every k: each k one comparison."""
    rec = recs[name]
    parts, verdicts = [], []
    for setting in rec["paired"]:
        ks = {float(k.split("k=")[1]): k for k in rec["rows"] if k.startswith(f"{setting}: gap_k k=")}
        if not ks:
            continue
        curves = {k: np.asarray(per_seed(rec, row, "auc"), dtype=float) for k, row in sorted(ks.items())}
        means = {k: float(v.mean()) for k, v in curves.items()}
        near = [v for k, v in curves.items() if PEAK[0] <= k <= PEAK[1]]
        far = [v for k, v in curves.items() if not PEAK[0] <= k <= PEAK[1]]
        best = [max(curves, key=lambda k: curves[k][i]) for i in range(len(next(iter(curves.values()))))]
        peak = f"best k per seed {', '.join(f'{k:g}' for k in best)}"
        if near and far:
            lead = np.max(near, axis=0) - np.max(far, axis=0)  # per seed: the best near 15% − the best elsewhere
            verdicts.append(points_verdict(lead))
            peak += f" (the best AUC at a k in {PEAK[0]:g}–{PEAK[1]:g} vs the best elsewhere: {seed_side(lead)})"
        else:
            verdicts.append(UNTESTABLE)
            peak += f" (the sweep needs a k inside {PEAK[0]:g}–{PEAK[1]:g} and one outside)"
        vs = [_diff(rec, row, f"{setting}: min_k_pp") for row in ks.values()]
        verdicts += [points_verdict(d) for d in vs]
        ways = [direction(d) for d in vs]
        parts.append(f"{setting}: {peak}; mean AUC {pct(min(means.values()))}–{pct(max(means.values()))}, highest at "
                     f"k = {max(means, key=means.get):g}, vs min_k_pp {pct(row_stat(rec, f'{setting}: min_k_pp')[0])}"
                     f"; above it on every seed at {ways.count(1)} of {len(vs)} k, below at {ways.count(-1)}")
    return Finding("AUC (points): " + "; ".join(parts), combine(verdicts),
                   regime_text(regime, recs) or (f"The peak's place: per seed, the best AUC at a k in {PEAK[0]:g}–"
                                                 f"{PEAK[1]:g} against the best elsewhere; Gap-K% is compared with "
                                                 "Min-K%++ at each k; both seed by seed (the sign test).")
                   + ONE_SEED * one_seed(rec), points=True, one_seed=one_seed(rec))


def paraphrase(recs: dict[str, dict], *, name: str = PRETRAINING, regime=None) -> Finding:
    """Perturbed gap_k − perturbed min_k_pp, one comparison on points per exposure setting, seed by seed."""
    rec = recs[name]
    parts, verdicts, orders = [], [], []
    for setting in rec["paired"]:
        g, m = f"{setting}: perturbed gap_k", f"{setting}: perturbed min_k_pp"
        if g not in rec["rows"] or m not in rec["rows"]:
            continue
        verdicts.append(points_verdict(_diff(rec, g, m)))
        parts.append(f"{setting}: gap_k {auc_text(rec, g)} vs min_k_pp {auc_text(rec, m)} "
                     f"({seed_side(_diff(rec, g, m))})")
        orders.append(f"{setting}: perturbed {_leader(rec, g, m)}, unperturbed "
                      + _leader(rec, f"{setting}: gap_k", f"{setting}: min_k_pp"))
    return Finding("word-swap perturbed members vs equally perturbed non-members, AUC mean ± std over seeds "
                   "(points, compared seed by seed): " + "; ".join(parts), combine(verdicts),
                   regime_text(regime, recs) or (f"Word swaps ({PERTURB_RATE:.0%} of words) stand in for DIPPER "
                   "paraphrases. The higher mean AUC: " + ("; ".join(orders) or "none stored") + ".")
                   + ONE_SEED * one_seed(rec), points=True, one_seed=one_seed(rec))


def _leader(rec: dict, gap: str, mink: str) -> str:
    """Which of two rows has the higher mean AUC over seeds ('gap_k ahead', 'min_k_pp ahead', 'level'), or that one of
    them is not stored."""
    if gap not in rec["rows"] or mink not in rec["rows"]:
        return "not stored"
    a, b = row_stat(rec, gap)[0], row_stat(rec, mink)[0]
    return "gap_k ahead" if a > b else "min_k_pp ahead" if b > a else "level"


def gap_beats_min_k(recs: dict[str, dict], *, name: str = PRETRAINING) -> Finding:
    """Gap-K% against plain Min-K% (not Min-K%++), seed by seed, in every exposure setting (points: the stored paired
    interval is of Gap-K% − Min-K%++)."""
    rec = recs[name]
    parts, verdicts = [], []
    for setting in rec["paired"]:
        g, m = (per_seed(rec, f"{setting}: {a}", "auc") for a in ("gap_k", "min_k"))
        verdicts.append(points_verdict(np.subtract(g, m)))
        parts.append(f"{setting}: gap_k {', '.join(pct(x) for x in g)} vs min_k {', '.join(pct(x) for x in m)} "
                     f"({seed_side(np.subtract(g, m))})")
    return Finding("AUC per seed: " + "; ".join(parts), combine(verdicts),
                   "Read seed by seed from the AUCs ('above' on every seed): no paired interval of this difference is "
                   "stored." + ONE_SEED * one_seed(rec), points=True, one_seed=one_seed(rec))


def gap_low_fpr(recs: dict[str, dict], *, name: str = PRETRAINING) -> Finding:
    """Gap-K% against Min-K%++ at low FPR. The paper reports TPR at 5% FPR; the experiments store it at 1% and 10%,
    which bracket it: judged on both, seed by seed."""
    rec = recs[name]
    parts, verdicts = [], []
    for setting in rec["paired"]:
        for metric in ("tpr@1%fpr", "tpr@10%fpr"):
            g, m = (per_seed(rec, f"{setting}: {a}", metric) for a in ("gap_k", "min_k_pp"))
            verdicts.append(points_verdict(np.subtract(g, m)))
            parts.append(f"{setting} {metric.replace('tpr@', 'TPR at ').replace('fpr', ' FPR')}: gap_k "
                         f"{', '.join(pct(x) for x in g)} vs min_k_pp {', '.join(pct(x) for x in m)} "
                         f"({seed_side(np.subtract(g, m))})")
    at5 = any("tpr@5%fpr" in s for r in rec["rows"].values() for s in r.get("per_seed", []))
    return Finding("per seed, % of members: " + "; ".join(parts), combine(verdicts),
                   ("TPR at 5% FPR is stored but not read here" if at5 else "TPR at 5% FPR is not stored")
                   + "; the stored 1% and 10% bracket it, and the verdict needs both. Read "
                   "seed by seed (no interval of a TPR difference is stored)." + ONE_SEED * one_seed(rec),
                   points=True, one_seed=one_seed(rec))


LOW_FPR_EFFECT = 0.030  # the paper's smallest TPR gain at 5% FPR of Gap-K% over Min-K%++ (WikiMIA, length 128)


def gap_low_fpr_paired(recs: dict[str, dict], *, name: str, fallback: str) -> Finding:
    """Gap-K% against Min-K%++ at low FPR from a membership run that stores paired TPR differences (``compare =
    "gap_k"``): TPR(gap_k) − TPR(min_k_pp) at 5% FPR (the paper's point) per seed with its paired interval, against
    the paper's smallest gain; the 1% FPR difference shown beside it. Without them, ``fallback``'s points."""
    rec = recs.get(name)
    per_seed = (rec or {}).get("paired", {}).get("vs", {}).get("min_k_pp", [])
    if not per_seed or not all(p.get("tpr@5%fpr") for p in per_seed):
        return gap_low_fpr(recs, name=fallback)
    exp = rec["experiment"]
    at5, verdict = judged_seeds([p["tpr@5%fpr"] for p in per_seed], effect=LOW_FPR_EFFECT)
    at1 = judged_seeds([p["tpr@1%fpr"] for p in per_seed if p.get("tpr@1%fpr")], effect=LOW_FPR_EFFECT)[0]
    auc_gap = judged_seeds(per_seed, effect=GAP_EFFECT)[0]
    return Finding(f"TPR(gap_k) − TPR(min_k_pp), points of the members, per seed with paired 95% intervals, "
                   f"{against_paper(LOW_FPR_EFFECT)}: at 5% FPR {at5}; at 1% FPR {at1}; the AUC difference on the "
                   f"same resamples {auc_gap}", verdict,
                   f"{exp['n_members']} members of a fine-tuning of {model(exp)} ({weights(exp)}, {exp['epochs']} "
                   f"epochs) against {exp['n_nonmembers']:,} non-members, so 5% FPR is "
                   f"{round(0.05 * exp['n_nonmembers'])} of them and 1% is {round(0.01 * exp['n_nonmembers'])}: "
                   f"fine-tuning data, not the paper's pretraining data ({_fallback_tprs(recs, fallback)}).",
                   one_seed=one_seed(rec))


def _fallback_tprs(recs: dict[str, dict], name: str) -> str:
    """What the continued-pretraining run ``name`` stores of paired TPR differences, read from it."""
    if name not in recs:
        return f"the continued-pretraining run, {name}, is not stored"
    paired = [p for per in recs[name].get("paired", {}).values() if isinstance(per, list) for p in per]
    if any("tpr@5%fpr" in p for p in paired):
        return f"the continued-pretraining run, {name}, stores paired TPR differences too"
    return f"the continued-pretraining run, {name}, stores no paired TPR interval"


def gap_components(recs: dict[str, dict], *, name: str = PRETRAINING) -> Finding:
    """The ablation's two halves: top-1 gap without smoothing (the 'smooth=none' row) below full Gap-K%, seed by
    seed, which can be tested; smoothing of Min-K%++ without the top-1 gap, which lmaudit does not implement (not
    testable here, so the claim is partly reproduced at best)."""
    rec = recs[name]
    parts, verdicts = [], [UNTESTABLE]
    for setting in rec["paired"]:
        full, top1 = f"{setting}: gap_k", f"{setting}: gap_k smooth=none"
        verdicts.append(points_verdict(_diff(rec, full, top1)))
        parts.append(f"{setting}: top-1 only {pct(np.mean(per_seed(rec, top1, 'auc')))} vs full "
                     f"{pct(np.mean(per_seed(rec, full, 'auc')))} (full {seed_side(_diff(rec, full, top1))})")
    return Finding("mean AUC over seeds: " + "; ".join(parts) + "; smoothing only: not measured", combine(verdicts),
                   "Partly at best: 'smoothing only' (Min-K%++ with sequential smoothing) is not an attack here, so "
                   "half of the ablation is untested; the other half holds only where top-1 only is below the full "
                   "score on every seed." + ONE_SEED * one_seed(rec), points=True, one_seed=one_seed(rec))
