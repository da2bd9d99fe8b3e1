"""The Gap-K% paper's claims: Gap-K% against Min-K%++ (with the members in a pretraining stream: pretraining from
scratch on the tiny model, continued pretraining of a model pretrained by others on the real one, the closest analogue
here to the paper's pretraining-data detection; and after fine-tuning), its smoothing, its k, paraphrase, Gap-K%
against Min-K%, at low FPR, and its component ablation. Paired intervals where the
experiment stores them (Gap-K% − Min-K%++), else unpaired ones from the AUCs; every verdict by the rule of
:mod:`lmaudit.claims.verdicts`."""

from __future__ import annotations

import numpy as np

from lmaudit.claims.base import (
    POINTS_ONLY,
    UNTESTABLE,
    Finding,
    auc_text,
    judged_seeds,
    one_seed,
    pct,
    per_seed,
    regime_text,
    row_stat,
)
from lmaudit.claims.intervals import UNPAIRED, auc_diffs, counts, row_diffs
from lmaudit.claims.models import model, stream, weights
from lmaudit.claims.verdicts import against_paper, combine, effect_text, single
from lmaudit.data.instruct import PERTURB_RATE

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


SMOOTHING = (0.019, 0.006)  # the ablation's AUC 74.8 (sequential) > 72.9 (shuffled) > 72.3 (none)
PARAPHRASE = 0.009  # WikiMIA paraphrased, length 32: Gap-K% 74.3 vs Min-K%++ 73.4
TOP1_ONLY = 0.025  # the ablation: full 74.8 vs top-1 only 72.3


def _judged(rec: dict, a: str, b: str, effect: float | None = None) -> tuple[str, object]:
    """Row ``a`` − row ``b`` of one record's AUCs per seed with the unpaired interval, judged against ``effect``."""
    return judged_seeds(row_diffs(rec, a, b), effect=effect)


def smoothing(recs: dict[str, dict], *, name: str = PRETRAINING, regime=None) -> Finding:
    """Sequential > shuffled > none, each '>' one comparison per seed with the unpaired interval from the AUCs, against
    the ablation's differences (:data:`SMOOTHING`), in every exposure setting."""
    rec = recs[name]
    parts, verdicts, unsmoothed = [], [], []
    for setting in rec["paired"]:
        rows = [f"{setting}: gap_k smooth={k}" for k in ("sequential", "shuffled", "none")]
        if not all(r in rec["rows"] for r in rows):
            continue
        means = [row_stat(rec, r)[0] for r in rows]
        if means[2] > max(means[:2]):
            unsmoothed.append(setting)
        texts = []
        for (x, y), effect, label in zip(zip(rows, rows[1:]), SMOOTHING, ("sequential − shuffled", "shuffled − none")):
            text, v = _judged(rec, x, y, effect)
            verdicts.append(v)
            texts.append(f"{label} {text}")
        parts.append(f"{setting}: " + ", ".join(f"{k} {auc_text(rec, r)}" for k, r in
                                                zip(("sequential", "shuffled", "none"), rows))
                     + f"; {'; '.join(texts)}")
    return Finding(f"AUC, mean ± std over seeds, and each '>' per seed ({UNPAIRED}), against the paper's "
                   f"{effect_text(SMOOTHING[0])} and {effect_text(SMOOTHING[1])}: " + "; ".join(parts),
                   combine(verdicts),
                   regime_text(regime, recs) or (f"{len(rec['experiment']['seeds'])} seeds (std ddof = 1)." + (
                       f" No smoothing has the highest mean AUC in {', '.join(unsmoothed)}. Possible reason: the few "
                       "tokens that separate members are isolated, and a smoothing window averages them with their "
                       "neighbours." if unsmoothed else "")), one_seed=one_seed(rec))


def k_sensitivity(recs: dict[str, dict], *, name: str = PRETRAINING, regime=None) -> Finding:
    """Two parts per exposure setting and seed, each with the unpaired interval from the AUCs (the paper's figure is
    not itemised: read on the direction). The peak's place: the best AUC at a k in 10–20% (:data:`PEAK`) − the best
    at any other k (not testable where the sweep has no k inside or none outside that range). Above Min-K%++ at every
    k: each k one comparison."""
    rec = recs[name]
    n = counts(rec)
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
            text, v = judged_seeds(auc_diffs(np.max(near, axis=0), np.max(far, axis=0), n))
            verdicts.append(v)
            peak += f"; the best AUC at a k in {PEAK[0]:g}–{PEAK[1]:g} − the best elsewhere {text}"
        else:
            verdicts.append(single(UNTESTABLE))
            peak += f" (the sweep needs a k inside {PEAK[0]:g}–{PEAK[1]:g} and one outside)"
        above = []
        for k, row in ks.items():
            text, v = _judged(rec, row, f"{setting}: min_k_pp")
            verdicts.append(v)
            above.append(f"k = {k:g} {v.counts}")
        parts.append(f"{setting}: {peak}; mean AUC {pct(min(means.values()))}–{pct(max(means.values()))}, highest at "
                     f"k = {max(means, key=means.get):g}, vs min_k_pp {pct(row_stat(rec, f'{setting}: min_k_pp')[0])}"
                     f"; Gap-K% − Min-K%++ by k, seeds: {', '.join(above)}")
    return Finding(f"AUC per seed ({UNPAIRED}; a best-of-k is the highest of several, so it leans high on both "
                   "sides): " + "; ".join(parts), combine(verdicts),
                   regime_text(regime, recs) or (f"The peak's place: per seed, the best AUC at a k in {PEAK[0]:g}–"
                                                 f"{PEAK[1]:g} against the best elsewhere; Gap-K% is compared with "
                                                 "Min-K%++ at each k."), one_seed=one_seed(rec))


def paraphrase(recs: dict[str, dict], *, name: str = PRETRAINING, regime=None) -> Finding:
    """Perturbed gap_k − perturbed min_k_pp per seed with the unpaired interval, one comparison per exposure setting,
    against the paper's paraphrased lead (:data:`PARAPHRASE`)."""
    rec = recs[name]
    parts, verdicts, orders = [], [], []
    for setting in rec["paired"]:
        g, m = f"{setting}: perturbed gap_k", f"{setting}: perturbed min_k_pp"
        if g not in rec["rows"] or m not in rec["rows"]:
            continue
        text, v = _judged(rec, g, m, PARAPHRASE)
        verdicts.append(v)
        parts.append(f"{setting}: gap_k {auc_text(rec, g)} vs min_k_pp {auc_text(rec, m)}, difference {text}")
        orders.append(f"{setting}: perturbed {_leader(rec, g, m)}, unperturbed "
                      + _leader(rec, f"{setting}: gap_k", f"{setting}: min_k_pp"))
    return Finding(f"word-swap perturbed members vs equally perturbed non-members, AUC mean ± std over seeds, gap_k − "
                   f"min_k_pp per seed ({UNPAIRED}), {against_paper(PARAPHRASE)}: " + "; ".join(parts),
                   combine(verdicts),
                   regime_text(regime, recs) or (f"Word swaps ({PERTURB_RATE:.0%} of words) stand in for DIPPER "
                   "paraphrases. The higher mean AUC: " + ("; ".join(orders) or "none stored") + "."),
                   one_seed=one_seed(rec))


def _leader(rec: dict, gap: str, mink: str) -> str:
    """Which of two rows has the higher mean AUC over seeds ('gap_k ahead', 'min_k_pp ahead', 'level'), or that one of
    them is not stored."""
    if gap not in rec["rows"] or mink not in rec["rows"]:
        return "not stored"
    a, b = row_stat(rec, gap)[0], row_stat(rec, mink)[0]
    return "gap_k ahead" if a > b else "min_k_pp ahead" if b > a else "level"


def gap_beats_min_k(recs: dict[str, dict], *, name: str = PRETRAINING) -> Finding:
    """Gap-K% against plain Min-K% (not Min-K%++) per seed with the unpaired interval from the AUCs, in every exposure
    setting (the paper's margin over Min-K% is not itemised in the row: read on the direction)."""
    rec = recs[name]
    parts, verdicts = [], []
    for setting in rec["paired"]:
        g, m = (per_seed(rec, f"{setting}: {a}", "auc") for a in ("gap_k", "min_k"))
        text, v = _judged(rec, f"{setting}: gap_k", f"{setting}: min_k")
        verdicts.append(v)
        parts.append(f"{setting}: gap_k {', '.join(pct(x) for x in g)} vs min_k {', '.join(pct(x) for x in m)}, "
                     f"difference {text}")
    return Finding(f"AUC per seed, gap_k − min_k ({UNPAIRED}): " + "; ".join(parts), combine(verdicts),
                   "No paired interval of this difference is stored (the experiment pairs Gap-K% with Min-K%++ only).",
                   one_seed=one_seed(rec))


LOW_FPR_NEEDS = ("TPR(gap_k) − TPR(min_k_pp) at 5% FPR per seed with its paired interval (`tpr@5%fpr` in each "
                 "paired entry, as a membership run with `compare = \"gap_k\"` stores it)")


def gap_low_fpr(recs: dict[str, dict], *, name: str = PRETRAINING) -> Finding:
    """Gap-K% against Min-K%++ at low FPR on a run that stores paired TPRs at 5% FPR in its per-setting pairs
    (judged against :data:`LOW_FPR_EFFECT`), else its TPRs at 1% and 10% FPR as points only."""
    rec = recs[name]
    parts, verdicts = [], []
    for setting, pairs in rec["paired"].items():
        if pairs and all(p.get("tpr@5%fpr") for p in pairs):
            text, v = judged_seeds([p["tpr@5%fpr"] for p in pairs], effect=LOW_FPR_EFFECT)
            verdicts.append(v)
            parts.append(f"{setting} TPR at 5% FPR, gap_k − min_k_pp {text}")
            continue
        verdicts.append(single(POINTS_ONLY))
        for metric in ("tpr@1%fpr", "tpr@10%fpr"):
            g, m = (per_seed(rec, f"{setting}: {a}", metric) for a in ("gap_k", "min_k_pp"))
            parts.append(f"{setting} {metric.replace('tpr@', 'TPR at ').replace('fpr', ' FPR')}: gap_k "
                         f"{', '.join(pct(x) for x in g)} vs min_k_pp {', '.join(pct(x) for x in m)}")
    points = any(v == POINTS_ONLY for v in verdicts)
    return Finding("per seed, % of members: " + "; ".join(parts), combine(verdicts),
                   (f"Points only: no interval of a TPR difference is stored; it needs {LOW_FPR_NEEDS}." if points
                    else f"Against the paper's {effect_text(LOW_FPR_EFFECT)}."), points=points, one_seed=one_seed(rec))


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


SMOOTHING_ONLY = 0.010  # the ablation: full 74.8 vs smoothing only (Min-K%++ smoothed, no top-1 gap) 73.8


def gap_components(recs: dict[str, dict], *, name: str = PRETRAINING) -> Finding:
    """The ablation's two halves, per exposure setting and seed with the unpaired interval: full Gap-K% − top-1 gap
    without smoothing (the 'smooth=none' row) against :data:`TOP1_ONLY`; full − smoothing without the top-1 gap
    (Min-K%++ smoothed, the 'min_k_pp smooth=sequential' row) against :data:`SMOOTHING_ONLY` where the record stores
    it, else that half is not testable here (lmaudit runs no such attack), counted beside the other."""
    rec = recs[name]
    parts, verdicts = [], []
    for setting in rec["paired"]:
        full = f"{setting}: gap_k"
        for label, row, effect in (("top-1 only", f"{setting}: gap_k smooth=none", TOP1_ONLY),
                                   ("smoothing only", f"{setting}: min_k_pp smooth=sequential", SMOOTHING_ONLY)):
            if row not in rec["rows"]:
                verdicts.append(single(UNTESTABLE))
                parts.append(f"{setting}: {label} not measured")
                continue
            text, v = _judged(rec, full, row, effect)
            verdicts.append(v)
            parts.append(f"{setting}: {label} {pct(np.mean(per_seed(rec, row, 'auc')))} vs full "
                         f"{pct(np.mean(per_seed(rec, full, 'auc')))}, full − {label} {text}")
    return Finding(f"mean AUC over seeds, full − each half per seed ({UNPAIRED}), against the paper's "
                   f"{effect_text(TOP1_ONLY)} (top-1 only) and {effect_text(SMOOTHING_ONLY)} (smoothing only): "
                   + "; ".join(parts), combine(verdicts),
                   "'Smoothing only' is Min-K%++ with sequential smoothing and no top-1 gap; where it is not run, "
                   "that half of the ablation is not testable here.", one_seed=one_seed(rec))
