"""Eight claims of the papers beyond the other rows, as the tuple :data:`EXTRA` that :mod:`lmaudit.claims.table`
appends, with their judges: the context-mask skew as the weakest reconstruction signal and the IFT side of the
misaligned reference (Q-Skew); Gap-K% best or tied among every attack and ahead of the neighbourhood attack under
paraphrase; SMI-M across settings and SMI's Rényi bound; the sample count a Gaussian fit needs and p̂ at the paper's
number of orders (DLM extraction). Every verdict by the rule of :mod:`lmaudit.claims.verdicts`; a claim that needs what
no experiment stores says what it needs."""

from __future__ import annotations

from functools import partial

import numpy as np

from lmaudit.claims import pii as pii
from lmaudit.claims import qskew as q
from lmaudit.claims.base import (
    AT_THIS_SIZE,
    NOT_RUN,
    UNTESTABLE,
    Claim,
    Finding,
    judged_seeds,
    one_seed,
    pct,
    seed_count,
)
from lmaudit.claims.intervals import UNPAIRED, rho_interval, row_diffs
from lmaudit.claims.more import PAPER_ORDERS
from lmaudit.claims.smi import RHO, gap, judged
from lmaudit.claims.verdicts import against_paper, category, combine, single
from lmaudit.extraction.reconstruct import wilson_interval

# as lmaudit.claims.table names them (a test keeps the two equal)
QS, SMI, GAP, EXT = ("Q-Skew (DLM MIA)", "SMI (unlearning audit)", "Gap-K% (pretraining detection)",
                     "DLM extraction")
PT = "ar-pretraining-detection"

# ---------------------------------------------------------------- Gap-K%

BEST_OR_TIED = 0.002  # MIMIR, Pythia-12B: Gap-K% 57.3 vs Min-K%++ 57.1, its smallest lead
OWN = ("gap_k ", "perturbed ")  # Gap-K%'s own variants and the perturbed rows are not other attacks


def gap_best(recs: dict[str, dict], *, name: str = PT) -> Finding:
    """Gap-K% best or tied among every attack: per exposure setting, attack and seed, AUC(gap_k) − AUC(attack) with
    the unpaired interval, against the paper's smallest lead; 'or tied' is the claim's own allowance, so an
    interval that holds 0 (inconclusive) does not refute it, and only another attack ahead (against) does."""
    rec = recs[name]
    parts, verdicts = [], []
    for setting in rec["paired"]:
        others = [r.split(": ", 1)[1] for r in rec["rows"] if r.startswith(f"{setting}: ")
                  and r.split(": ", 1)[1] != "gap_k" and not r.split(": ", 1)[1].startswith(OWN)]
        shown = []
        for o in others:
            text, v = judged_seeds(row_diffs(rec, f"{setting}: gap_k", f"{setting}: {o}"), effect=BEST_OR_TIED)
            verdicts.append(v)
            shown.append(f"{o} {text}")
        parts.append(f"{setting}: gap_k − " + "; ".join(shown))
    ahead = sum(v == "against the claim" for v in verdicts)
    return Finding(f"AUC(gap_k) − AUC(each other attack) per seed ({UNPAIRED}), {against_paper(BEST_OR_TIED)}: "
                   + " | ".join(parts), combine(verdicts),
                   f"Another attack ahead of Gap-K% on every seed in {ahead} of {len(verdicts)} comparisons; an "
                   "inconclusive comparison is the tie the claim allows, not support for 'best'.",
                   one_seed=one_seed(rec))


NEIGHBOUR = 0.666 - 0.603  # DIPPER paraphrases: Gap-K% 66.6 vs Neighbour 60.3


def gap_vs_neighbour(recs: dict[str, dict], *, name: str = PT) -> Finding:
    """Gap-K% beats the neighbourhood attack on paraphrased members: per exposure setting and seed, perturbed gap_k −
    perturbed neighbourhood with the unpaired interval, against the paper's lead; without a neighbourhood attack,
    not testable here."""
    rec = recs[name]
    parts, verdicts = [], []
    for setting in rec["paired"]:
        g, nb = f"{setting}: perturbed gap_k", f"{setting}: perturbed neighbourhood"
        if g in rec["rows"] and nb in rec["rows"]:
            text, v = judged_seeds(row_diffs(rec, g, nb), effect=NEIGHBOUR)
            verdicts.append(v)
            parts.append(f"{setting}: {text}")
    if not verdicts:
        return Finding(f"`{name}` stores no perturbed neighbourhood attack", single(UNTESTABLE), "The neighbourhood "
                       "attack was not run on the perturbed sets here; it needs `neighbourhood` among the attacks.")
    return Finding(f"word-swap perturbed sets, perturbed gap_k − perturbed neighbourhood per seed ({UNPAIRED}), "
                   f"{against_paper(NEIGHBOUR)}: " + "; ".join(parts), combine(verdicts), "Word swaps stand in for "
                   "DIPPER paraphrases; the neighbourhood attack's neighbours are word swaps too.",
                   one_seed=one_seed(rec))


# ---------------------------------------------------------------- SMI


SETTINGS_EFFECT = 0.9227  # the lowest of SMI-M's six retrained estimates (ResNet50-CINIC10), the untouched one as 0


def smi_m_settings(recs: dict[str, dict], *, names: tuple[str, ...] = ("unlearning-audit",),
                   audit: str = "smi-m-scores") -> Finding:
    """SMI-M holds across settings: per experiment and forget fraction (a setting) and seed, SMI-M's ρ of the
    retrained model − of the untouched one (truth 1 − 0) with the interval from their far ends, against the paper's
    lowest retrained estimate :data:`SETTINGS_EFFECT`."""
    parts, verdicts, used = [], [], []
    for name in (n for n in names if n in recs):
        rec = recs[name]
        used.append(rec)
        for frac in dict.fromkeys(k.split(" / ")[0] for k in rec["unlearning"]):
            keys = [f"{frac} / {m} / {audit}" for m in ("retrain", "none")]
            if not all(k in rec["unlearning"] for k in keys):
                continue
            diffs = []
            for i in range(seed_count(rec)):
                vals = [rec["unlearning"][k]["per_seed"][i] for k in keys]
                ivs = [rho_interval(rec, k, i) for k in keys]
                diffs.append(gap((vals[0], *ivs[0]), (vals[1], *ivs[1])) if all(ivs) else None)
            text, v = judged(diffs, effect=SETTINGS_EFFECT)
            verdicts.append(v)
            parts.append(f"{name}, forget {float(frac):.0%}: {text}")
    return Finding(f"{audit} ρ of the retrained model − of the untouched one per setting and seed (95% intervals "
                   "widened from the stored 90% ones, combined at their far ends), "
                   f"{against_paper(SETTINGS_EFFECT, **RHO)}: "
                   + "; ".join(parts), combine(verdicts), "A setting here is an experiment and a forget fraction "
                   "(the paper's: six model and data set pairs).", one_seed=one_seed(*used))


RENYI_NEEDS = ("per seed, the alignment bias of a member / non-member audit on the forget set and the Rényi bound "
               "computed for it, with an interval of bound − bias (`renyi`: [{\"bound\": b, \"bias\": x, \"ci95\": "
               "[lo, hi]}] per seed)")


def renyi_bound(recs: dict[str, dict], *, name: str = "unlearning-audit") -> Finding:
    """SMI's PAC-Bayes bound: the alignment bias of MIA audits is at most a Rényi-divergence term. Per seed, bound −
    bias with its stored interval (a bound that holds is above 0; no size); without it, not testable here: the bound
    needs a divergence between the unlearned and retrained models' output distributions, which no experiment
    estimates."""
    stored = recs[name].get("renyi")
    if not stored:
        return Finding("no divergence estimated", single(UNTESTABLE), "A theoretical bound: testing it needs "
                       f"{RENYI_NEEDS}.")
    per = [{"diff": s["bound"] - s["bias"], "ci95": s["ci95"]} for s in stored]
    text, v = judged_seeds(per, scale=1, digits=3)
    return Finding(f"Rényi bound − alignment bias per seed: {text}", v, "A bound that holds leaves the bias below it.")


# ---------------------------------------------------------------- DLM extraction

FIT_SAMPLES = 128  # 'about 128 samples' for the Gaussian fit of relaxed extraction
SAMPLES_NEEDS = ("the DLM fit's mean |Gaussian − empirical| at several generation counts per record, each with a "
                 "bootstrap interval over records (`relaxed.DLM.by_samples`: {count: {\"error\": e, \"ci95\": "
                 "[lo, hi]}}, 128 among the counts)")


def fit_samples(recs: dict[str, dict], *, name: str = "extraction-relaxed") -> Finding:
    """A Gaussian fit needs about 128 generations per record: at each count below 128, the DLM fit's error − its
    error at 128, with the interval from their far ends (no size: read on the direction). One count stored: not
    run."""
    rec = recs[name]
    by = (rec["relaxed"].get("DLM") or {}).get("by_samples") or {}
    if str(FIT_SAMPLES) not in by or len(by) < 2:
        return Finding(f"one generation count stored ({rec['experiment']['extract'].get('samples')} per record)",
                       single(NOT_RUN), f"The relaxed extraction fits one count; the claim needs {SAMPLES_NEEDS}.")
    ref = by[str(FIT_SAMPLES)]
    parts, verdicts = [], []
    for count in sorted((c for c in by if int(c) < FIT_SAMPLES), key=int):
        e = by[count]
        text, v = judged_seeds([gap((e["error"], *e["ci95"]), (ref["error"], *ref["ci95"]))], scale=1, digits=3)
        verdicts.append(v)
        parts.append(f"{count} − {FIT_SAMPLES}: {text}")
    return Finding("DLM fit error at each count − at 128: " + "; ".join(parts), combine(verdicts),
                   "Fewer generations than the paper's 128 should fit worse.", one_seed=True)


MATCH_TOLERANCE = 0.1  # nats between p̂ and the exact log-likelihood that still reads as a match
MATCH_NEEDS = "per record, the exact log-likelihood beside log p̂ (`exact_log_p`: [..], in the order of the records)"


def p_hat_matches(recs: dict[str, dict], *, name: str = "extraction-steps", step: str = "max") -> Finding:
    """p̂ at R = 512 orders matches the exact log-likelihood: the share of records whose log p̂ differs from it by
    more than :data:`MATCH_TOLERANCE`, oriented as −share with its Wilson interval (a mismatch refutes it; none
    cannot prove it). At fewer orders than the paper's, not testable at that R."""
    rec = recs[name]
    R = rec["experiment"]["extract"].get("trajectories")
    if R is not None and R < PAPER_ORDERS:
        return Finding(f"R = {R} sampled orders", single(AT_THIS_SIZE), f"Not testable at R = {R}: the paper's claim "
                       f"is about p̂ at R = {PAPER_ORDERS}; a mismatch at {R} orders would say our R is too small.")
    exact = rec.get("exact_log_p")
    if not exact:
        return Finding(f"R = {R} sampled orders; no exact likelihood stored", single(UNTESTABLE),
                       f"It needs {MATCH_NEEDS}.")
    d = np.abs(np.asarray(rec["log_p_columns"][step], dtype=float) - np.asarray(exact, dtype=float))
    k, n = int((d > MATCH_TOLERANCE).sum()), len(d)
    lo, hi = wilson_interval(k, n)
    return Finding(f"R = {R}: records whose log p̂ (N = {step}) differs from the exact log-likelihood by more than "
                   f"{MATCH_TOLERANCE:g} nats: {k}/{n} [{pct(lo)}, {pct(hi)}]%", single(category(-hi, -lo)),
                   "A match is a claim of none differing: a difference refutes it.", one_seed=seed_count(rec) < 2)


# ---------------------------------------------------------------- the rows

CONTEXT = {"ce": {"email": 0.12, "phone": 0.20}, "skew_pii": {"email": 0.08, "phone": 0.12},
           "combined_paper": {"email": 0.16, "phone": 0.24}}  # Table 6, top-1 ASR over Q-Skew with a context mask


def _weakest(name: str):
    return pii.pii_combined("ce", "skew_context", better=True, name=name, effects=CONTEXT["ce"],
                            more=(("skew_pii", CONTEXT["skew_pii"]), ("combined_paper", CONTEXT["combined_paper"])))


REAL_DLM_RECON, REAL_PT, REAL_UL = "real-dlm-pii-reconstruction", "real-pretraining-share", "real-unlearning-large"
REAL_DLM_STEPS = "real-dlm-extraction-steps"

EXTRA: tuple[Claim, ...] = (
    Claim(QS, "PII reconstruction: Q-Skew with a context mask is the weakest signal", "top-1 ASR, phone / e-mail: "
          "context mask 10% / 8% vs PII mask 22% / 16%, CE 30% / 20%, Combine 34% / 24% (Table 6)",
          ("pii-reconstruction",), _weakest("pii-reconstruction"),
          effect="each signal − Q-Skew (context mask): CE +20 / +12, PII mask +12 / +8, Combine +24 / +16 points "
          "(phone / e-mail)", real_experiments=(REAL_DLM_RECON,), real_judge=_weakest(REAL_DLM_RECON)),
    Claim(QS, "A misaligned reference costs little after instruction fine-tuning too", "IFT side of Table 4: a "
          "misaligned reference costs at most 2.8 points", ("dlm-misaligned-ref-ift",),
          partial(q.misaligned, name="dlm-misaligned-ref-ift", cost=0.028, lead=None),
          effect="a drop of 2.8 AUC points is 'little'; above the strongest baseline: none given (direction)"),
    Claim(GAP, "Gap-K% is best or tied among every attack", "MIMIR, Pythia: Gap-K% best or tied (Pythia-12B 57.3 vs "
          "Min-K%++ 57.1)", (PT,), gap_best, effect="+0.2 AUC points over every other attack (its smallest lead)",
          real_experiments=(REAL_PT,), real_judge=partial(gap_best, name=REAL_PT)),
    Claim(GAP, "Gap-K% beats the neighbourhood attack on paraphrased text", "DIPPER paraphrases: Gap-K% 66.6 vs "
          "Neighbour 60.3", (PT,), gap_vs_neighbour, effect="+6.3 AUC points",
          real_experiments=(REAL_PT,), real_judge=partial(gap_vs_neighbour, name=REAL_PT)),
    Claim(SMI, "SMI-M holds across settings", "six settings (ResNet18/50, ViT; CIFAR-10/100, CINIC-10): SMI-M's "
          "retrained ρ* 92.3–94.0%", ("unlearning-audit",), smi_m_settings,
          effect="retrained − untouched ρ of +0.92 (the lowest of the six, the untouched taken as 0)",
          real_experiments=(REAL_UL,), real_judge=partial(smi_m_settings, names=(REAL_UL,))),
    Claim(SMI, "The alignment bias of MIA audits is bounded by a Rényi divergence", "PAC-Bayes bound (theory)",
          ("unlearning-audit",), renyi_bound, effect="none: a bound (bound − bias above 0)"),
    Claim(EXT, "A Gaussian fit of relaxed extraction needs about 128 samples", "about 128 generations per record",
          ("extraction-relaxed",), fit_samples, effect="none given: fewer than 128 fit worse (direction)"),
    Claim(EXT, "p̂ at R = 512 orders matches the log-likelihood", "R = 512 sampled orders", ("extraction-steps",),
          p_hat_matches, effect=f"none: a match within {MATCH_TOLERANCE:g} nats on every record",
          real_experiments=(REAL_DLM_STEPS,), real_judge=partial(p_hat_matches, name=REAL_DLM_STEPS)),
)


FORGED = 10.0 - 1.1  # ρ* ≫ 10 under forged unlearning, read beyond the top of the anomaly band [−0.1, 1.1]


def forged(recs: dict[str, dict], *, name: str = "unlearning-audit", audit: str = "smi-m") -> Finding:
    """Forged unlearning shows as an estimate far outside [0, 1]: per forget fraction and seed of a method named
    'forged', the unclipped estimate − 1.1 with its interval (widened from the stored 90% one), against ρ* = 10.
    Without a forged unlearning, not run."""
    rec = recs[name]
    keys = [k for k in rec.get("rho_unclipped") or {} if k.split(" / ")[1] == "forged" and k.endswith(f" / {audit}")]
    if not keys:
        return Finding("no forged unlearning stored", single(NOT_RUN), "Forging needs adversarially perturbed forget "
                       "sets, which no experiment here builds (an unlearning method 'forged' in the audit). The "
                       "detector exists: every SMI / SMI-M estimate carries its unclipped ρ and an `anomaly` flag "
                       "outside [−0.1, 1.1].")
    parts, verdicts = [], []
    for key in keys:
        per = []
        for i, x in enumerate(rec["rho_unclipped"][key]):
            iv = rho_interval(rec, key, i, unclipped=True)
            per.append({"diff": x - 1.1, "ci95": [iv[0] - 1.1, iv[1] - 1.1]} if iv else None)
        text, v = judged(per, effect=FORGED)
        verdicts.append(v)
        parts.append(f"{key}: unclipped ρ − 1.1 {text}")
    return Finding("; ".join(parts), combine(verdicts), "Beyond the anomaly band by ρ* − 1.1.", one_seed=one_seed(rec))
