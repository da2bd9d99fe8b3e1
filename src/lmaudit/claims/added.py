"""Thirteen headline claims beyond the main rows, as the tuple :data:`ADDED` that
:mod:`lmaudit.claims.table` appends to its claims, with the judges of the Q-Skew and Gap-K% ones (those of SMI and
DLM extraction: :mod:`lmaudit.claims.added_ext`): Q-Skew's growth of memorisation with epochs, Dream against
LLaDA, MIMIR-style sets, its PII examples; SMI-M against SMI, the false negatives of MIA audits at 0% FPR, the
collapse of shadow-model MIAs; Gap-K% on recent instruct models and its τ = 3 count; the generalised extraction
definition, a larger DLM against a smaller AR model, DLM size and the step count as a privacy knob. Every verdict by
the rule of :mod:`lmaudit.claims.verdicts`; a claim nothing here can measure says why, and what would."""

from __future__ import annotations

from functools import partial

import numpy as np

from lmaudit.claims import added_ext as x
from lmaudit.claims import gapk as g
from lmaudit.claims import regimes as rg
from lmaudit.claims.base import (
    NOT_RUN,
    UNTESTABLE,
    Claim,
    Finding,
    judged_seeds,
    one_seed,
    pct,
)
from lmaudit.claims.intervals import UNPAIRED, auc_diffs, counts, row_diffs
from lmaudit.claims.models import model, stream
from lmaudit.claims.verdicts import against_paper, combine, single, unless

# ---------------------------------------------------------------- Q-Skew

def epochs_grow(recs: dict[str, dict], *, name: str = "dlm-epochs", attack: str = "q_skew") -> Finding:
    """Memorisation grows with fine-tuning epochs, read as the attack's AUC: each epoch − the one before per seed,
    the unpaired interval from the two AUCs (one model per epoch and seed, the same texts), each step one comparison
    (Figure 2 gives no size: read on the direction)."""
    rec = recs[name]
    curves = rec["curves"]
    epochs = sorted(curves[attack], key=int)
    n = counts(rec)

    def auc(a: str, e: str) -> np.ndarray:
        return np.array([s["auc"] for s in curves[a][e]["per_seed"]])

    lines, verdicts = [], []
    for a, b in zip(epochs, epochs[1:]):
        text, v = judged_seeds(auc_diffs(auc(attack, b), auc(attack, a), n))
        verdicts.append(v)
        lines.append(f"{a} → {b} {text}")
    return Finding(f"{attack} AUC by epoch (mean over seeds): " + ", ".join(f"{e}: {pct(auc(attack, e).mean())}"
                                                                          for e in epochs)
                   + f"; each epoch − the one before, per seed ({UNPAIRED}): " + "; ".join(lines), combine(verdicts),
                   f"Each epoch is a separate fine-tuning run, {len(rec['experiment']['seeds'])} seed(s) each.",
                   one_seed=one_seed(rec))


def _origin(e: dict) -> str:
    """How an experiment's DLM was made, from its stored settings."""
    base = f"`{e['base']}`" if e.get("base") else f"the `{e['preset']}` AR base"
    return f"adapted from {base} on {e['adapt_tokens']:,} tokens"


FAMILY_GAP = 0.081  # LLaDA − Dream Q-Skew AUC, the smaller of the two: Tulu-3 IFT 67.2 vs 59.1


def two_families(recs: dict[str, dict], *, name: str = "dlm-dft", scratch: str = "dlm-dft-scratch") -> Finding:
    """Dream (adapted from an AR model, as every DLM here is) against LLaDA (trained as a DLM from scratch): Q-Skew's
    AUC on a DLM trained from scratch (``scratch``) − on the adapted one (``name``), fine-tuned alike, per seed with
    the unpaired interval, against the paper's smaller gap. Without a DLM trained from scratch, not testable here."""
    rec = recs[name]
    if scratch not in recs:
        return Finding(f"one DLM family in this regime: `{name}`'s DLM is {_origin(rec['experiment'])}",
                       single(UNTESTABLE), "The claim compares two DLM families fine-tuned on the same data: Dream, "
                       "adapted from an AR model, and LLaDA, trained as a DLM from scratch. Every DLM here is adapted "
                       f"from its own AR base; it needs the same membership table on a DLM pretrained as a DLM "
                       f"(`{scratch}`).")
    text, v = judged_seeds(row_diffs(recs[scratch], "q_skew", "q_skew", other=rec), effect=FAMILY_GAP)
    return Finding(f"Q-Skew AUC, DLM trained from scratch ({scratch}) − adapted ({name}), per seed ({UNPAIRED}), "
                   f"{against_paper(FAMILY_GAP)}: {text}", v, "Two DLMs of one size fine-tuned alike; the adapted one "
                   "plays Dream's part, the one trained from scratch LLaDA's.", one_seed=one_seed(rec, recs[scratch]))


def prior_separates(recs: dict[str, dict], *, name: str = "set-validity") -> Finding:
    """MIMIR-style sets are unsuitable: on a split whose non-members are drawn unlike the members, the untouched base
    model (its own best score, the experiment's 'reference's own') separates them before any training: its AUC − 0.5
    per seed with its 95% interval (no paper figure: read on the direction). Control: on the iid split the base must
    not separate them (its Bonferroni test); where it does, support does not count."""
    rec = recs[name]
    shifted, iid = rec["cells"]["shifted / fine-tuned"], rec["cells"]["iid / fine-tuned"]
    per = [{"diff": c["prior"]["auc"] - 0.5, "ci95": [x - 0.5 for x in c["prior"]["ci95"]]} for c in shifted]
    text, verdict = judged_seeds(per)
    leaky = [c["seed"] for c in iid if c["prior"]["differ"]]
    scores = ", ".join(c["prior"]["attack"] for c in shifted)
    ours = (f"untouched base model's AUC − 50 on the shifted split ({scores}), each seed with its 95% interval: "
            f"{text}; after fine-tuning the best attack reads "
            + ", ".join(f"{pct(c['best']['auc'])} ({c['best']['attack']})" for c in shifted)
            + "; the iid control: the base model's AUC " + ", ".join(
                f"{pct(c['prior']['auc'])} (Bonferroni p {c['prior']['p']:.2g})" for c in iid))
    e = rec["experiment"]
    unseen = ("the base model was pretrained here without either" if not e.get("base") else
              f"`{e['base']}` was not trained on either here (whether its authors' pretraining held them is not "
              "known here)")
    why = (f"The shifted split draws its non-members from another source than the members (as the experiment "
           f"describes), like MIMIR's sets, here on {e['kind'].upper()} models; {unseen}, so what separates them "
           "before fine-tuning is not this fine-tuning's membership, and an attack on the fine-tuned model reads it "
           "as membership.")
    if leaky:
        why += (f" The base model also separates the iid split on seed(s) {leaky}: the control fails, support does "
                "not count.")
    return Finding(ours, unless(verdict) if leaky else verdict, why, one_seed=one_seed(rec))


EXAMPLE_NEEDS = "each record's true value per field and seed (`values`: {field: [[value per record] per seed]})"


def _length_gap(a: list[int], b: list[int], n_resamples: int = 2000, seed: int = 0) -> dict:
    """mean(a) − mean(b) of two groups of lengths with a bootstrap interval, each group resampled apart."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    reps = [x[rng.integers(0, len(x), len(x))].mean() - y[rng.integers(0, len(y), len(y))].mean()
            for _ in range(n_resamples)]
    return {"diff": float(x.mean() - y.mean()), "ci95": [float(np.quantile(reps, 0.025)),
                                                         float(np.quantile(reps, 0.975))]}


def pii_examples(recs: dict[str, dict], *, name: str = "pii-reconstruction") -> Finding:
    """The PII examples, read on what they describe: the values Q-Skew (PII mask) alone ranks first are longer than
    those CE alone ranks first, per field and seed, mean length in characters with a bootstrap interval (the paper's
    figures are examples, no size: read on the direction). Where the record keeps ranks but not the values, the
    counts are shown and the claim is not testable here."""
    rec = recs[name]
    ranks, values = rec["ranks"], rec.get("values")
    parts, verdicts = [], []
    for f in ranks["ce"]:
        pairs = [(c == 1, s == 1) for cs, ss in zip(ranks["ce"][f], ranks["skew_pii"][f]) for c, s in zip(cs, ss)]
        parts.append(f"{f}: Q-Skew (PII mask) alone {sum(s and not c for c, s in pairs)}, CE alone "
                     f"{sum(c and not s for c, s in pairs)}, both {sum(c and s for c, s in pairs)} of {len(pairs)}")
        if not values:
            continue
        per = []
        for i, (cs, ss) in enumerate(zip(ranks["ce"][f], ranks["skew_pii"][f])):
            skew = [len(values[f][i][j]) for j, (c, s) in enumerate(zip(cs, ss)) if s == 1 and c != 1]
            ce = [len(values[f][i][j]) for j, (c, s) in enumerate(zip(cs, ss)) if c == 1 and s != 1]
            per.append(_length_gap(skew, ce) if len(skew) > 1 and len(ce) > 1 else None)
        if any(p is None for p in per):
            verdicts.append(single("not testable at this size"))
            parts[-1] += "; too few records ranked first by one signal alone to compare lengths"
            continue
        text, v = judged_seeds(per, scale=1, digits=1)
        verdicts.append(v)
        parts[-1] += f"; length (characters) Q-Skew alone − CE alone {text}"
    ours = "records whose true value ranks first, every seed pooled: " + "; ".join(parts)
    if not values:
        return Finding(ours, single(UNTESTABLE), "The claim describes the values each signal recovers (their length "
                       f"and form); the experiment stores each record's rank per signal, not the values: it needs "
                       f"{EXAMPLE_NEEDS}.")
    return Finding(ours, combine(verdicts), "Read on length, the measurable half of the description ('longer and more "
                   "structured'); 'closer to natural language' is not measured.")


# ---------------------------------------------------------------- Gap-K%

def not_recent(recs: dict[str, dict], *, name: str = "ar-pretraining-detection",
               real: str = "real-pretraining-share") -> Finding:
    """Gap-K% on recent and instruction-tuned models: a model pretrained here from scratch is neither (not testable
    here); a record on a released model (its ``base``) is judged as the real model's column is."""
    e = recs[name]["experiment"]
    if e.get("base"):
        return g.pretraining_gap(recs, name=name, effect=INSTRUCT_GAIN)
    judged = model(recs[real]["experiment"]) if real in recs else "the real model"
    return Finding(f"{model(e, 'the model')} is pretrained here from scratch on {e['pretrain_tokens']:,} tokens",
                   single(UNTESTABLE), "A model pretrained here is neither a recent released model nor "
                   f"instruction-tuned; the claim is judged on {judged} (its column).")


LARGE_GAP_SHIFT = 0.3994 - 0.3553  # share of tokens with |gap| > τ = 3: non-train 39.94% vs train 35.53%


def large_gaps(recs: dict[str, dict], *, name: str = "ar-pretraining-detection", tau: float = 3.0,
               effect: float = LARGE_GAP_SHIFT) -> Finding:
    """Non-training text has more large top-1 gaps: the share of non-member tokens with |g_t| > τ minus the members',
    per exposure setting and seed with its interval over texts, against the paper's shift ``effect``; each setting one
    comparison. A record from before the experiment stored the shares (or run with another τ) is not run."""
    rec = recs[name]
    large = rec.get("large_gaps") or {}
    stored_tau = {p["tau"] for seeds in large.values() for p in seeds}
    if not large or stored_tau != {tau}:
        attacks = ", ".join(rec["experiment"].get("attacks") or []) or "every attack"
        what = (f"shares at τ = {', '.join(f'{t:g}' for t in sorted(stored_tau))}" if stored_tau else
                f"each attack's AUC ({attacks}), not per-token gaps")
        return Finding(f"not stored: `{name}` stores {what}", NOT_RUN,
                       f"Measurable on these models but not run here: the share of member and of non-member tokens "
                       f"whose normalised top-1 gap |g_t| exceeds τ = {tau:g}, with an interval over texts, from the "
                       "forward pass Gap-K% reads. The experiment stores it (`large_gaps`) from a run made after the "
                       "shares were added; this record predates them.")
    parts, verdicts = [], []
    for setting, seeds in large.items():
        text, verdict = judged_seeds(seeds, effect=effect)
        verdicts.append(verdict)
        shares = ", ".join(f"{100 * p['members']:.1f}% vs {100 * p['nonmembers']:.1f}%" for p in seeds)
        parts.append(f"{setting}: members vs non-members {shares}; non-members − members {text}")
    ours = (f"share of tokens with |g_t| > τ = {tau:g} per seed, non-members − members with a 95% interval over "
            f"texts, {against_paper(effect)}: " + "; ".join(parts))
    e = rec["experiment"]
    how = "continued-pretrained" if e.get("base") else "pretrained from scratch"
    subject = model(e, "a model")
    why = (f"{subject[:1].upper() + subject[1:]} {how} on {stream(e)}. How many tokens have a large gap depends on the "
           "model and the text (the paper's 35.5% and 39.9% come from other models and texts), so the verdict reads "
           "the difference between members and non-members, not the level.")
    return Finding(ours, combine(verdicts), why, one_seed=one_seed(rec))


# ---------------------------------------------------------------- the rows

# as lmaudit.claims.table names them (a test keeps the two equal; this module cannot import that one, which imports it)
QS, SMI, GAP, EXT = ("Q-Skew (DLM MIA)", "SMI (unlearning audit)", "Gap-K% (pretraining detection)",
                     "DLM extraction")
REAL_MIA = ("real-dft-lora", "real-dft-full", "real-ift-lora")
REAL_PT, REAL_UL, REAL_DLM_PII = "real-pretraining-share", "real-unlearning-large", "real-dlm-pii-extraction"
REAL_DLM_MIA, REAL_DLM_RECON, REAL_DLM_STEPS = ("real-dlm-dft-lora", "real-dlm-pii-reconstruction",
                                                "real-dlm-extraction-steps")
# the effects taken from the papers, each stated in its row
STEP_MEDIANS = {"2": 0.65, "5": 1.42, "10": 2.05, "max": 3.18}  # DLM-1.1B median log(p̂_N / p̂_1), nats
INSTRUCT_GAIN = 0.035  # LLaMA 3.1 8B Instruct, WikiMIA-25: Gap-K% 76.6 vs Min-K%++ 73.1
LLADA_VS_ARM = (213 - 179) / 3000  # e-mails at p = 50%: ARM-1.1B 213 vs LLaDA-8B max-step 179, of 3,000


def _adjacent(medians: dict[str, float]) -> str:
    """The differences of the paper's medians from each step count to the next: '+0.65 / +0.77 / …'."""
    v = [0.0, *medians.values()]
    return " / ".join(f"{b - a:+.2f}" for a, b in zip(v, v[1:]))


ADDED: tuple[Claim, ...] = (
    Claim(QS, "Memorisation grows with fine-tuning epochs", "Figure 2: 'memorisation of the training data grows as "
          "fine-tuning proceeds' (the per-epoch values are not given in the text)", ("dlm-epochs",), epochs_grow,
          effect="a sign (Figure 2 not itemised): Q-Skew's AUC higher at each epoch than at the one before, read on "
          "the direction"),
    Claim(QS, "Dream is less vulnerable to membership inference than LLaDA", "Q-Skew AUC: Dream-Base XSUM 63.4 vs "
          "LLaDA-8B-Base 80.7; Dream-Instruct Tulu-3 59.1 vs LLaDA-8B-Instruct 67.2 (Tables 1–3)", ("dlm-dft",),
          two_families,
          effect="LLaDA − Dream Q-Skew AUC: +8.1 points (Tulu-3, IFT; the smaller of it and XSUM's +17.3)",
          real_experiments=(REAL_DLM_MIA,), real_judge=partial(two_families, name=REAL_DLM_MIA,
                                                               scratch="real-dlm-dft-scratch")),
    Claim(QS, "MIMIR-style benchmarks are unsuitable: their members and non-members differ on the model before "
          "fine-tuning", "MIMIR is not used: its sets differ a priori on the original model (Section D.1; no figure "
          "in the text)", ("set-validity",), prior_separates,
          effect="none given: the untouched model's AUC above 50 on a split whose non-members are drawn unlike the "
          "members; read on the direction", real_experiments=("real-set-validity",),
          real_judge=partial(prior_separates, name="real-set-validity")),
    Claim(QS, "PII reconstruction examples: values CE alone recovers are shorter and closer to natural language, "
          "those Q-Skew alone recovers longer and more structured", "Figures 7–9 (qualitative examples, Appendix F)",
          ("pii-reconstruction",), pii_examples,
          effect="none: examples; read on the length of the values each signal alone recovers (direction)",
          real_experiments=(REAL_DLM_RECON,), real_judge=partial(pii_examples, name=REAL_DLM_RECON)),
    Claim(SMI, "SMI-M's estimate is closer to the gold standard than SMI's", "retrained model's ρ*: SMI-M 92.44 vs "
          "SMI 88.89 (ResNet18-CIFAR10, 5%), 89.84 vs 79.64 (ResNet18-CIFAR100), 92.64 vs 81.22 and 93.95 vs 83.46 "
          "(ResNet50-CIFAR100, 5% and 10%), 92.27 vs 90.89 (ResNet50-CINIC10), 93.62 vs 91.44 (ViT-CINIC10)",
          ("unlearning-audit",), x.smi_m_beats_smi,
          effect="SMI-M closer in every setting, by 1.4 to 11.4 points of ρ*: the smallest, +1.4",
          real_experiments=(REAL_UL,), real_judge=partial(x.smi_m_beats_smi, name=REAL_UL)),
    Claim(SMI, "MIA audits' false-negative rate swings even at 0% FPR", "ResNet18-CIFAR10, forget 5%: FNR RULI 13.28%, "
          "LiRA 13.80% at FPR 0.00% (IAM 12.72% at 13.08%)", ("unlearning-audit",), x.fnr_at_zero_fpr,
          effect="an FNR of 13.3% at 0% FPR (RULI's)", real_experiments=(REAL_UL,),
          real_judge=partial(x.fnr_at_zero_fpr, name=REAL_UL)),
    Claim(SMI, "Shadow-model MIAs collapse where SMI-M holds (IAM and RMIA on ViT; here its AR analogue)",
          "ViT-CINIC10, forget 10%: the retrained model's ρ* IAM 41.01%, RMIA 15.33% vs SMI-M 93.62%",
          ("unlearning-audit",), x.shadow_collapse,
          effect="SMI-M above IAM by 52.6 and RMIA by 78.3 points of ρ*: the smaller, +52.6",
          real_experiments=(REAL_UL,), real_judge=partial(x.shadow_collapse, name=REAL_UL)),
    Claim(GAP, "Gap-K% works on recent and instruction-tuned models", "WikiMIA-25 AUROC: LLaMA 3.1 8B 84.1 vs "
          "Min-K%++ 82.7; LLaMA 3.1 8B Instruct 76.6 vs 73.1", ("ar-pretraining-detection",), not_recent,
          effect="+3.5 AUC points over Min-K%++ (the instruct model's gain)", real_experiments=(REAL_PT, *REAL_MIA),
          real_judge=g.real_gap(REAL_PT, REAL_MIA, partial(rg.pretraining, name=REAL_PT), effect=INSTRUCT_GAIN)),
    Claim(GAP, "Non-training text has more large top-1 gaps (|gap| > τ = 3)", "share of tokens with a gap magnitude "
          "above τ = 3: train 35.53% vs non-train 39.94%", ("ar-pretraining-detection",), large_gaps,
          effect="+4.4 points more large-gap tokens in non-members", real_experiments=(REAL_PT,),
          real_judge=partial(large_gaps, name=REAL_PT)),
    Claim(EXT, "The generalised (n, p) definition subsumes AR extraction: a suffix mask unmasked left to right",
          "(Section 3: AR prefix–suffix extraction is the special case M = the suffix; no figure)",
          ("extraction-steps",), x.ar_special_case,
          effect="an identity: no record differing beyond float rounding (1e-3 nats)"),
    Claim(EXT, "LLaDA-8B, larger and trained on far more tokens, leaks less PII than ARM-1.1B", "e-mails at p = 50%: "
          "LLaDA-8B max-step 179 vs ARM-1.1B 213 (of 3,000); at p = 99% 122 vs 139; phones the other way, 23 vs 5",
          ("pii-extraction",), partial(x.one_size, what="a DLM larger than its AR model", judge_=x.larger_dlm_vs_ar,
                                       effect=LLADA_VS_ARM),
          effect="smaller AR − larger DLM share of e-mails +1.1 points ((213 − 179) / 3,000)",
          real_experiments=(REAL_DLM_PII, "pii-extraction"), real_judge=partial(x.larger_dlm_vs_ar,
                                                                                effect=LLADA_VS_ARM)),
    Claim(EXT, "Leakage grows with DLM size", "max-step e-mails at p = 50%: DLM-170M 2, DLM-629M (690M in the text) "
          "10, DLM-1.1B 16; one step 0 at every size", ("pii-extraction",),
          partial(x.one_size, what="DLMs of two sizes", judge_=x.dlm_size),
          effect="none given as a share (the smaller models' totals are not stated): read on the direction",
          real_experiments=(REAL_DLM_PII, "pii-extraction"), real_judge=x.dlm_size),
    Claim(EXT, "The number of sampling steps is a privacy knob: fewer steps, less memorisation", "DLM-1.1B median "
          "Δ log p̂ +0.65 / +1.42 / +2.05 / +3.18 at 2 / 5 / 10 / max steps against one; 'compressing the steps can "
          "serve as a defence'", ("extraction-steps",), partial(x.step_knob, medians=STEP_MEDIANS),
          effect="each step count above the one before by the difference of the paper's medians, "
          + _adjacent(STEP_MEDIANS) + " nats; more records discoverable at the most steps than at one (none given: a "
          "tie is inconclusive)", real_experiments=(REAL_DLM_STEPS,),
          real_judge=partial(x.step_knob, name=REAL_DLM_STEPS, medians=STEP_MEDIANS)),
)
