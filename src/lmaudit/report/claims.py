"""``results/CLAIMS.md``: every claim of the four papers against the committed experiments.

One :class:`Claim` per row: the paper, what it claims, the paper's own figure (from the
paper; the only constants here), and a ``judge`` that reads the experiments' ``results.json``
and returns what we measured (with its interval where the experiment stores one), the
verdict and the regime that explains a difference. Every verdict follows the one rule of
:mod:`lmaudit.report.verdicts`, judged against the effect each row takes from the paper
(``Claim.effect``); a claim whose experiment stores no interval says so, and a claim that
a small CPU model cannot test says why. :func:`build_claims` writes nothing; ``lmaudit
claims`` writes the file.

This module holds the list of claims and the Markdown; :mod:`lmaudit.report.claims_base`
the findings, verdicts and formatting; :mod:`lmaudit.report.claims_qskew` the Q-Skew paper's
judges; :mod:`lmaudit.report.claims_pii` the PII extraction and reconstruction judges of two papers;
:mod:`lmaudit.report.claims_gapk` those of Gap-K%; :mod:`lmaudit.report.claims_others` and
:mod:`lmaudit.report.claims_more` those of SMI and DLM extraction; :mod:`lmaudit.report.claims_models` what the two
regimes' models are, read from the results (the header and the regime texts).
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from lmaudit.data.snapshot import embedded_hash
from lmaudit.errors import LmauditError
from lmaudit.report import claims_gapk as g
from lmaudit.report import claims_headline as h
from lmaudit.report import claims_models as md
from lmaudit.report import claims_more as m
from lmaudit.report import claims_others as o
from lmaudit.report import claims_pii as pii
from lmaudit.report import claims_qskew as q
from lmaudit.report import claims_regimes as rg
from lmaudit.report.claims_added import ADDED
from lmaudit.report.claims_base import Claim, Finding
from lmaudit.report.verdicts import NOT_RUN, SIGN_TEST_SEEDS, UNTESTABLE, VERDICTS

# ---------------------------------------------------------------- the claims

QS, SMI, GAP, EXT = ("Q-Skew (DLM MIA)", "SMI (unlearning audit)", "Gap-K% (pretraining detection)",
                     "DLM extraction")
REAL_MIA = ("real-dft-lora", "real-dft-full", "real-ift-lora")
MIA_TABLES = ("dlm-dft", "dlm-ift")  # the tiny DLM membership tables
# SmolLM2-135M adapted into a DLM
REAL_DLM_MIA, REAL_DLM_REGIMES, REAL_DLM_ABLATION = (  # membership on SmolLM2-135M fine-tunings
    "real-dlm-dft-lora", "real-dlm-regimes", "real-dlm-ablation")
REAL_DLM_STEPS, REAL_DLM_IFT = "real-dlm-extraction-steps", "real-dlm-ift-lora"
# continued pretraining of SmolLM2 with the members at 5% of the stream (real-pretraining-detection, 10-45%, is
# kept as a results folder but no longer judged)
REAL_PT, REAL_UL, REAL_PII = "real-pretraining-share", "real-unlearning-large", "real-pii-extraction"
REAL_TPR = "real-dft-lora-tpr"  # 1,000 non-members: TPR at 1% FPR with its interval
REAL_DLM_PII, REAL_DLM_RECON = "real-dlm-pii-extraction", "real-dlm-pii-reconstruction"  # SmolLM2 and its DLM
REAL = "SmolLM2-135M"
# what the real model's experiments do differently from the tiny ones (the regime column of the SmolLM2 verdicts),
# each read from the results it describes
REAL_PT_REGIME = partial(rg.pretraining, name=REAL_PT)
REAL_UL_REGIME = partial(rg.unlearning, name=REAL_UL, targets=REAL_MIA[0])
REAL_PII_REGIME = partial(rg.pii, name=REAL_PII)


# the effects taken from the papers (fractions of AUC or of records; nats for log p̂), each stated in its row
DFT_MARGIN = 0.097  # LLaDA-8B-Base, XSUM: Q-Skew 80.7 vs SAMA 71.0, the smallest DFT margin over the next best
IFT_MARGIN = 0.071  # LLaDA-8B-Instruct, Tulu-3: Q-Skew 67.2 vs Calibration 60.1, the smallest IFT margin
ABLATION = {"random masks instead of cyclic": 0.018, "mean of gaps instead of skew": 0.027, "unweighted skew": 0.021}
STEP_GAINS = {"2": 0.65, "5": 1.42, "10": 2.05, "max": 3.18}  # DLM-1.1B median log(p̂_N / p̂_1), nats
POINTS = "none used: judged on points (no interval is stored), seed by seed"


def _dlm_mia_claim(claim: str, figure: str, judge, effect: str) -> Claim:
    """A Q-Skew claim read from the DLM membership tables: the tiny models' two, and the real-weights DLM's."""
    return Claim(QS, claim, figure, MIA_TABLES, judge, effect=effect, real_experiments=(REAL_DLM_MIA, REAL_DLM_IFT),
                 real_judge=partial(judge, names=(REAL_DLM_MIA, REAL_DLM_IFT)))


CLAIMS: tuple[Claim, ...] = (
    Claim(QS, "Q-Skew beats every baseline in AUC, domain fine-tuning (DFT)",
          "LLaDA-8B-Base: 83.4 / 80.3 / 80.7 AUC on ArXiv / WikiText / XSUM vs the next best (SAMA) 70.2 / 70.3 / "
          "71.0; Dream-Base XSUM 63.4 vs 60.7 (Tables 1, 3)", ("dlm-dft", "dlm-regimes"),
          q.q_skew_beats_baselines("dlm-dft", effect=DFT_MARGIN),
          effect="+9.7 AUC points over every baseline: LLaDA-8B's smallest DFT margin over the next best (XSUM 80.7 "
          "vs 71.0)", real_experiments=(REAL_DLM_MIA, REAL_DLM_REGIMES),
          real_judge=q.q_skew_beats_baselines(REAL_DLM_MIA, REAL_DLM_REGIMES, effect=DFT_MARGIN)),
    Claim(QS, "Q-Skew beats every baseline in AUC, instruction fine-tuning (IFT)",
          "LLaDA-8B-Instruct: 72.8 / 81.4 / 67.2 on MedQA / Alpaca / Tulu-3 vs SAMA 65.1 / SAMA 69.1 / Calibration "
          "60.1; Dream-Instruct Tulu-3 59.1 vs 55.1 (Tables 2, 3)", ("dlm-ift", "dlm-regimes"),
          q.q_skew_beats_baselines("dlm-ift", effect=IFT_MARGIN),
          effect="+7.1 AUC points over every baseline: LLaDA-8B-Instruct's smallest margin over the next best "
          "(Tulu-3 67.2 vs 60.1)", real_experiments=(REAL_DLM_IFT, REAL_DLM_REGIMES),
          real_judge=q.q_skew_beats_baselines(REAL_DLM_IFT, REAL_DLM_REGIMES, effect=IFT_MARGIN)),
    Claim(QS, "Q-Skew beats Calibration as the authors ran it (unmasked likelihood ratio)",
          "Calibration is the runner-up on Tulu-3 (60.1 vs 67.2) and below Q-Skew everywhere (Tables 1–3)",
          ("dlm-regimes",), partial(q.authors_calibration, effect=IFT_MARGIN),
          effect="+7.1 AUC points: the smallest margin over Calibration (Tulu-3, where it is the runner-up)",
          real_experiments=(REAL_DLM_REGIMES,),
          real_judge=partial(q.authors_calibration, name=REAL_DLM_REGIMES, effect=IFT_MARGIN)),
    Claim(QS, "Each component helps: cyclic sampling, skewness (not the mean), quantile weighting",
          "WikiText DFT AUC: full 80.3; random masks 78.5; mean instead of skew 77.6; unweighted 78.2 (Table 5)",
          ("dlm-ablation",), partial(q.components_help, effects=ABLATION),
          effect="the full method's lead in Table 5: cyclic +1.8, skewness +2.7, weighting +2.1 AUC points",
          real_experiments=(REAL_DLM_ABLATION,),
          real_judge=partial(q.components_help, name=REAL_DLM_ABLATION, effects=ABLATION)),
    Claim(QS, "A misaligned reference costs little; Q-Skew stays above the strongest baseline",
          "ArXiv: golden 83.4 → 78.4 (other reference) and 78.4 (para-modified), still above SAMA w/ ref 70.2 "
          "(Table 4)", ("dlm-misaligned-ref",), q.misaligned,
          effect="a drop of 5.0 AUC points is 'little' (ArXiv); above the strongest baseline: none used (points)"),
    Claim(QS, "The advantage holds across fine-tuning epochs", "Q-Skew above every baseline at every epoch (Figure 2; "
          "points not given in text)", ("dlm-epochs",), q.over_epochs, effect=POINTS),
    Claim(QS, "Token-level memorisation asymmetry: members' Δ right-skewed, non-members' near symmetric",
          "Theorem 3.2: Skew(G) > 0 for members, ≈ 0 for non-members", ("dlm-regimes",), q.asymmetry,
          effect="a sign; one band for both: |g₁| < 0.1 near symmetric, g₁ ≥ 0.1 right-skewed; points",
          real_experiments=(REAL_DLM_REGIMES,), real_judge=partial(q.asymmetry, name=REAL_DLM_REGIMES)),
    Claim(QS, "Per-token gain falls as the training mask ratio rises (Assumption 3.1)",
          "LLaDA, XSUM, 4 epochs at fixed ratios 0.25 / 0.5 / 0.75: higher mean gain at lower ratios (Figure 1)",
          ("dlm-mask-ratio",), q.mask_ratio, effect="a sign (Figure 1 not itemised); points"),
    _dlm_mia_claim("Q-Skew has the highest TPR at 1% FPR", "ArXiv DFT 50.6 (LLaDA-8B, Table 1); the exception: "
                   "Dream XSUM, SAMA 4.4 vs Q-Skew 4.2 (Table 3)", h.tpr_at_1, POINTS),
    _dlm_mia_claim("Q-Skew's average AUC gain over the next best exceeds 10 points", "'more than 10 points on average' "
                   "(Section 4; not itemised in the text)", h.average_gain,
                   "+10 AUC points, the claimed gain, as threshold and effect"),
    Claim(QS, "Evaluating on DFT alone overestimates: IFT is harder", "Q-Skew TPR@1%FPR 6.7 / 4.3 on MedQA / "
          "Tulu-3 IFT vs 50.6 on ArXiv DFT (Tables 1, 2)", MIA_TABLES, h.ift_harder, effect=POINTS,
          real_experiments=(REAL_DLM_IFT,), real_judge=partial(h.ift_harder, dft=REAL_DLM_MIA, ift=REAL_DLM_IFT)),
    _dlm_mia_claim("Random masking breaks Min-K% and Min-K%++ on DLMs", "(Section 2: lower-tail token scores are "
                   "broken by masking; no figure)", h.min_k_broken, POINTS),
    _dlm_mia_claim("SecMI, built for continuous diffusion, degrades on DLMs", "SecMI-DLM below Q-Skew in every table "
                   "(Tables 1–3)", partial(h.secmi_weak, effects=(DFT_MARGIN, IFT_MARGIN)),
                   "at least the margin over the next best (SecMI is below it): +9.7 DFT, +7.1 IFT AUC points"),
    Claim(QS, "ρ = 0.35 maximises the members / non-members gap", "(Section 3: the authors' choice; no sweep shown)",
          ("dlm-rho",), q.rho_maximises, effect="none given (no sweep shown): a tie is inconclusive",
          real_experiments=("real-dlm-rho",), real_judge=partial(q.rho_maximises, name="real-dlm-rho")),
    Claim(QS, "PII reconstruction: Combine (CE + Q-Skew) beats CE ranking",
          "top-1 ASR on 50 records: phone 34% vs 30%, e-mail 24% vs 20% (Combine-0.1, Table 6)",
          ("pii-reconstruction",), pii.pii_combined("combined_paper", "ce", better=True, beside="combined",
                                                    effects={"email": 0.04, "phone": 0.04}),
          effect="+4 points of top-1 ASR in each field (34 vs 30, 24 vs 20)", real_experiments=(REAL_DLM_RECON,),
          real_judge=pii.pii_combined("combined_paper", "ce", better=True, beside="combined", name=REAL_DLM_RECON,
                                      effects={"email": 0.04, "phone": 0.04})),
    Claim(QS, "PII reconstruction: Q-Skew alone ranks worse than CE",
          "phone 22% (PII mask) / 10% (context mask) vs CE 30%; e-mail 16% / 8% vs 20% (Table 6)",
          ("pii-reconstruction",), pii.pii_combined("skew_pii", "ce", better=False,
                                                    effects={"email": 0.04, "phone": 0.08}),
          effect="CE − Q-Skew (PII mask): phone +8, e-mail +4 points of top-1 ASR", real_experiments=(REAL_DLM_RECON,),
          real_judge=pii.pii_combined("skew_pii", "ce", better=False, name=REAL_DLM_RECON,
                                      effects={"email": 0.04, "phone": 0.08})),
    Claim(GAP, "Gap-K% beats Min-K%++ at detecting pretraining data",
          "WikiMIA AUC +2.1 / +2.6 / +2.6 (lengths 32 / 64 / 128); MIMIR Pythia-12B 57.3 vs 57.1",
          ("ar-pretraining-detection",), g.pretraining_gap,
          effect="+2.1 AUC points (WikiMIA, length 32: the smallest WikiMIA gain)",
          real_experiments=(REAL_PT, *REAL_MIA), real_judge=g.real_gap(REAL_PT, REAL_MIA, REAL_PT_REGIME)),
    Claim(GAP, "Sequential smoothing beats shuffled, which beats none", "AUC 74.8 > 72.9 > 72.3 (ablation)",
          ("ar-pretraining-detection",), g.smoothing, effect=POINTS,
          real_experiments=(REAL_PT,), real_judge=partial(g.smoothing, name=REAL_PT, regime=REAL_PT_REGIME)),
    Claim(GAP, "Best near k = 15%, and above Min-K%++ at every k in 5–50%", "k-sensitivity figure",
          ("ar-pretraining-detection",), g.k_sensitivity, effect=POINTS,
          real_experiments=(REAL_PT,), real_judge=partial(g.k_sensitivity, name=REAL_PT, regime=REAL_PT_REGIME)),
    Claim(GAP, "Gap-K% stays ahead under paraphrase", "WikiMIA paraphrased 74.3 vs 73.4 (length 32); DIPPER 66.6 vs "
          "65.5", ("ar-pretraining-detection",), g.paraphrase, effect=POINTS,
          real_experiments=(REAL_PT,), real_judge=partial(g.paraphrase, name=REAL_PT, regime=REAL_PT_REGIME)),
    Claim(GAP, "Gap-K% beats Min-K%", "above Min-K% and Min-K%++ at every k in 5–50% (sensitivity analysis) and in "
          "the main tables", ("ar-pretraining-detection",), g.gap_beats_min_k, effect=POINTS,
          real_experiments=(REAL_PT,), real_judge=partial(g.gap_beats_min_k, name=REAL_PT)),
    Claim(GAP, "Gap-K%'s gain over Min-K%++ is larger at low FPR", "TPR at 5% FPR +7.1 / +7.9 / +3.0 points over "
          "Min-K%++ (WikiMIA original, lengths 32 / 64 / 128)", ("ar-pretraining-detection",), g.gap_low_fpr,
          effect="+3.0 points of TPR at 5% FPR, the smallest of the three, where a paired TPR interval is stored "
          "(SmolLM2); the tiny run stores none: judged on points there, seed by seed",
          real_experiments=(REAL_TPR, REAL_PT),
          real_judge=partial(g.gap_low_fpr_paired, name=REAL_TPR, fallback=REAL_PT)),
    Claim(GAP, "Both components help: the top-1 gap alone and smoothing alone are each below Gap-K%",
          "AUC: top-1 only 72.3, smoothing only 73.8, full 74.8 (ablation)", ("ar-pretraining-detection",),
          g.gap_components, effect=POINTS, real_experiments=(REAL_PT,),
          real_judge=partial(g.gap_components, name=REAL_PT)),
    Claim(SMI, "SMI-M's estimate for a retrained model is the closest to the gold standard",
          "ResNet18-CIFAR10, forget 5%: SMI-M 92.44%, SMI 88.89%, RULI 87.94%, LiRA 87.84%",
          ("unlearning-audit",), o.smi_closest, effect=POINTS,
          real_experiments=(REAL_UL,), real_judge=partial(o.smi_closest, name=REAL_UL, regime=REAL_UL_REGIME)),
    Claim(SMI, "SMI's 90% bootstrap intervals are reliable", "90% interval from 200 resamples of the forget set",
          ("unlearning-audit",), o.smi_coverage, effect="90% coverage, shown at least 80% (Wilson lower bound)",
          real_experiments=(REAL_UL,), real_judge=partial(o.smi_coverage, name=REAL_UL, regime=REAL_UL_REGIME)),
    Claim(SMI, "No shadow models: an audit costs seconds", "SMI 0.93 s, SMI-M 4.3 s vs LiRA 1.46 s + 8–64 shadow "
          "models at ~41 min each", ("unlearning-audit",), o.smi_cost,
          effect="seconds vs tens of minutes, a ratio of magnitudes: SMI's audit (features + estimate) at least 10× "
          "cheaper than LiRA's (shadow training + probes), mean seconds over the runs"),
    Claim(SMI, "MIA audits show illusory forgetting: negative gradients push forget samples past the non-members, "
          "where a member / non-member classifier reads them as forgotten", "alignment bias bounded by a Rényi "
          "divergence (PAC-Bayes, § theory)", ("unlearning-audit",), m.smi_illusory,
          effect="an unclipped estimate beyond the anomaly band (above 1.1) on every seed that can tell; points",
          real_experiments=(REAL_UL,), real_judge=partial(m.smi_illusory, name=REAL_UL)),
    Claim(SMI, "SMI-M ranks approximate unlearning methods by how much they forget", "Scrub 72–77%, FineTune "
          "≈ 60%, Fisher < 45%", ("unlearning-audit",), m.smi_ranking, effect="none: no ground truth here",
          real_experiments=(REAL_UL,), real_judge=partial(m.smi_ranking, name=REAL_UL)),
    Claim(SMI, "Forged unlearning shows as an estimate far outside [0, 1]", "ρ* ≫ 10 under adversarially forged "
          "unlearning", ("unlearning-audit",), h.not_tested(
              "Forging needs adversarially perturbed forget sets, which no experiment here builds. The detector "
              "exists: every SMI / SMI-M estimate carries its unclipped ρ and an `anomaly` flag outside [−0.1, 1.1]."),
          effect="ρ* ≫ 10 (not run)"),
    Claim(SMI, "SMI-M is sensitive to a too-narrow bandwidth, less to the kernel", "RBF 1.0× 89.8%, 0.25× 24.4%, "
          "0.5× 77.7%, 2.0× 86.9%; Laplacian 80.1%, linear 86.7% (CIFAR-100, forget 5%)", ("unlearning-sensitivity",),
          m.smi_bandwidth, effect=POINTS),
    Claim(SMI, "SMI needs about 20 samples per class", "about 20 per class; single-sample forgetting is noisy",
          ("unlearning-sensitivity",), m.smi_min_samples,
          effect="an error of 0.1 (under it the audit reads 'none' and 'retrain' right); points"),
    Claim(EXT, "Exact extraction probability rises monotonically with the number of sampling steps (Theorem 4.3)",
          "DLM-1.1B median Δ log p̂: +0.65 / +1.42 / +2.05 / +3.18 at 2 / 5 / 10 / max steps",
          ("extraction-steps",), partial(o.steps_monotone, effects=STEP_GAINS),
          effect="the median gains +0.65 / +1.42 / +2.05 / +3.18 nats; no record falling on a refinement",
          real_experiments=(REAL_DLM_STEPS,),
          real_judge=partial(o.steps_monotone, name=REAL_DLM_STEPS, effects=STEP_GAINS)),
    Claim(EXT, "The Monte Carlo estimate p̂ has converged in the number of sampled orders R",
          "p̂ averaged over sampled unmasking orders", ("extraction-steps",), m.p_hat_converged,
          effect="none given: fewer than 10% of records moving more than 2× from R/2 to R, per Wilson interval "
          "(lmaudit's criterion)",
          real_experiments=(REAL_DLM_STEPS,), real_judge=partial(m.p_hat_converged, name=REAL_DLM_STEPS)),
    Claim(EXT, "A DLM leaks less PII than an AR model of the same data",
          "e-mails discoverable at p = 50%: AR-1.1B 213 vs DLM-1.1B max-step 16 (of 3,000)", ("pii-extraction",),
          partial(pii.ar_leaks_more, effects={"email": 197 / 3000, "phone": 5 / 3000}),
          effect="AR − DLM share of values: e-mail +6.6 points ((213 − 16) / 3,000), phone +0.2 (5 / 3,000)",
          real_experiments=(REAL_DLM_PII,),
          real_judge=partial(pii.ar_leaks_more, name=REAL_DLM_PII, effects={"email": 197 / 3000, "phone": 5 / 3000})),
    Claim(EXT, "A DLM leaks less PII than an AR model of the same data: reconstruction of redacted values",
          "(the extraction paper's claim, tested with the Q-Skew paper's reconstruction attack)",
          ("pii-reconstruction",), pii.ar_reconstructs_more, effect="none given: a tie is inconclusive",
          real_experiments=(REAL_DLM_RECON,), real_judge=partial(pii.ar_reconstructs_more, name=REAL_DLM_RECON)),
    Claim(EXT, "A DLM leaks less PII than an AR model of the same data, at p = 99%",
          "e-mails discoverable at p = 99%: AR-1.1B 139 vs DLM-1.1B max-step 7 (of 3,000); phones 3 vs 0",
          ("pii-extraction",), partial(pii.ar_leaks_more, p=0.99, effects={"email": 132 / 3000, "phone": 3 / 3000}),
          effect="AR − DLM share of values: e-mail +4.4 points ((139 − 7) / 3,000), phone +0.1 (3 / 3,000)",
          real_experiments=(REAL_DLM_PII,),
          real_judge=partial(pii.ar_leaks_more, p=0.99, name=REAL_DLM_PII,
                             effects={"email": 132 / 3000, "phone": 3 / 3000})),
    Claim(EXT, "Max-step sampling leaks more than one-step", "DLM-1.1B e-mails 16 vs 0; LLaDA-8B 179 vs 9",
          ("pii-extraction",), partial(pii.one_vs_max_step, effects={"email": 16 / 3000}),
          effect="max-step − one-step share of e-mails +0.5 points (DLM-1.1B, 16 / 3,000); phones none (0 vs 0)",
          real_experiments=(REAL_DLM_PII,),
          real_judge=partial(pii.one_vs_max_step, name=REAL_DLM_PII, effects={"email": 16 / 3000})),
    Claim(EXT, "A Gaussian predicts relaxed (Hamming) extraction for DLMs, not for AR models",
          "DLM errors close to a Gaussian; AR errors cascade", ("extraction-relaxed",), o.gaussian_fit,
          effect="none given: one error per model (points)"),
    Claim(EXT, "Extractable records grow sublinearly with the query budget and saturate early",
          "most extractable records appear at small n", ("extraction-relaxed",), o.sublinear_budget,
          effect="shares of records: above 10% of those found at 10n found at n (sublinear); above 50% of those "
          "found at the largest n found at 1/1,000 of it ('most at small n', lmaudit's reading)"),
    Claim(EXT, "Training records' values are more likely than unseen records' (memorisation, not generalisation)",
          "Enron (trained) vs TREC 2007 (unseen): the trained distribution shifts up", ("pii-extraction",), o.shift,
          effect="none given (a shift up): a tie is inconclusive",
          real_experiments=(REAL_PII,), real_judge=partial(o.shift, name=REAL_PII, regime=REAL_PII_REGIME)),
) + ADDED  # the thirteen headline claims issue 42 found without a row: lmaudit.report.claims_added


def load_results(root: Path) -> dict[str, dict]:
    """``{name: results.json}`` of every experiment folder under ``root`` (unreadable files are errors)."""
    out = {}
    for f in sorted(root.glob("*/results.json")):
        try:
            out[f.parent.name] = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise LmauditError(f"{f}: cannot read ({e})",
                               hint=f"rerun the experiment: lmaudit run experiments/{f.parent.name}.toml") from None
    return out


def _judge(experiments: tuple[str, ...], judge, recs: dict[str, dict], *, any_of: bool = False) -> Finding:
    """One judge's finding; a missing experiment is 'not run', one written before a field existed says which.

    ``any_of``: the judge reads whichever of ``experiments`` exist (it needs one), else the first must exist.
    """
    present = [e for e in experiments if e in recs]
    if not present or (not any_of and experiments[0] not in recs):
        return Finding(f"`results/{experiments[0]}` is missing", NOT_RUN,
                       f"run `lmaudit run experiments/{experiments[0]}.toml`")
    try:
        return judge(recs)
    except KeyError as e:
        return Finding(f"`results/{present[0]}/results.json` lacks {e} (written by an older lmaudit)", NOT_RUN,
                       f"rerun `lmaudit run experiments/{present[0]}.toml`")


def judge_all(recs: dict[str, dict]) -> list[tuple[Claim, Finding, Finding | None]]:
    """Every claim's finding on the tiny models, and on the real model (None: no experiment of it tests the claim)."""
    out = []
    for claim in CLAIMS:
        real = (_judge(claim.real_experiments, claim.real_judge, recs, any_of=True) if claim.real_judge else None)
        out.append((claim, _judge(claim.experiments, claim.judge, recs), real))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _verdict_cell(f: Finding, other_corpus: bool = False) -> str:
    judged = f.verdict not in (NOT_RUN, UNTESTABLE)
    notes = (["one seed"] * (f.one_seed and judged) + ["on points: no interval"] * (f.points and judged)
             + ["from another corpus than the header's"] * (other_corpus and judged))
    return f"**{f.verdict}**" + (f" ({'; '.join(notes)})" if notes else "")


def _counts(findings: list[Finding | None]) -> str:
    verdicts = [f.verdict if f else NOT_RUN for f in findings]
    return ", ".join(f"{v} {n}" for v in VERDICTS if (n := verdicts.count(v)))


RULE = ("Every verdict follows one rule (`lmaudit/report/verdicts.py`). A difference is oriented so that the claim "
        "says it is above 0 (or above a size the claim names), and each row states the effect it takes from the "
        "paper (the size the paper reports, in the same units). Per seed, with its paired bootstrap 95% interval: "
        "above 0 (the threshold) is **reproduced**; below 0 is **against the claim**; holding 0 but excluding the "
        "paper's effect (or below the claimed threshold) is **not reproduced**; holding both 0 and the paper's "
        "effect (or 0 where the paper gives no effect) is **inconclusive**. Over seeds: reproduced or against on "
        "every seed stands; seeds some reproduced, none against, are **partly reproduced**; seeds against and "
        "others not are not reproduced; otherwise not reproduced if a seed excludes the paper's effect, else "
        "inconclusive. One seed is judged by the same rule on its one interval and the verdict says 'one seed'. "
        "Points (no interval stored): the seeds are the only measure of noise, so a difference on one side on "
        "every seed counts only when that is unlikely by chance (a one-sided sign test at 5%: "
        f"{SIGN_TEST_SEEDS} seeds or more): above the threshold on every seed is reproduced, below 0 on every seed "
        "against the claim; fewer seeds, seeds that disagree, or a difference above 0 but short of a claimed size "
        "are inconclusive (the verdict says 'on points'; the measured column says which way the seeds point, "
        "whether or not the test passes), and points never give not reproduced. A claim of several comparisons: "
        "any against makes it against the claim; all reproduced, "
        "reproduced; some reproduced, partly; none reproduced on every seed: partly if some hold on some seeds and "
        "none excludes the paper's effect, else not reproduced if any does, else inconclusive; a part not testable "
        "here is left out (and a claim whose other parts all hold is then partly reproduced). **Not testable "
        "here**: no experiment here can measure it (the row says why); **not run**: its experiment has not been "
        "run.")


def build_claims(root: Path, command: str = "lmaudit claims") -> str:
    """The Markdown of CLAIMS.md from the experiments under ``root``: each claim judged on the tiny models and,
    where an experiment tests it there, on the real pretrained model, side by side."""
    recs = load_results(root)
    judged = judge_all(recs)
    corpus = embedded_hash()
    other = {n: r["corpus"] for n, r in recs.items() if r.get("corpus") not in (None, corpus)}
    lines = ["# The papers' claims, tested here", "",
             f"Generated by `{command}` from the `results.json` of every experiment in this folder; do not edit by "
             "hand. Each row: the claim, the paper's own figure and the effect the verdict is judged against, what "
             "lmaudit measured (paired bootstrap 95% intervals where the experiment stores them, else points, said "
             f"so), the verdict and the regime that explains a difference. Two regimes: **tiny models** "
             f"{md.tiny_models(recs)}; and **{REAL}**: {md.real_models(recs)}. Every model trained here is built "
             f"from the embedded corpus `{corpus[:8]}…` ({md.embedded_corpus_text()}); a row that reads a result "
             "built from another corpus says so in its verdict and names that corpus beside the experiment. A "
             "verdict is about its regime, not about the papers' 1–12B models; a claim no experiment on the real "
             "model tests yet says 'not run' there. Text marked 'possible reason' is a hypothesis no experiment "
             "here has tested.", "", RULE, "",
             f"Verdicts, tiny models: {_counts([f for _, f, _ in judged])}. On {REAL}: "
             f"{_counts([r for _, _, r in judged])}.", ""]
    for paper in dict.fromkeys(c.paper for c, _, _ in judged):
        lines += [f"## {paper}", "",
                  f"| claim | paper | tiny models | verdict | {REAL} | verdict | regime / why | experiment |",
                  "|---|---|---|---|---|---|---|---|"]
        for c, f, r in judged:
            if c.paper != paper:
                continue
            names = [*c.experiments, *c.real_experiments]
            links = ", ".join(f"[{e}]({e}/table.md)" + (f" (corpus `{other[e][:8]}…`)" if e in other else "")
                              for e in names if e in recs) or c.experiments[0]
            mixed = [any(e in other for e in group) for group in (c.experiments, c.real_experiments)]
            real_ours, real_verdict = (r.ours, _verdict_cell(r, mixed[1])) if r else (
                "no experiment on the real model tests this claim yet", NOT_RUN)
            why = f.regime + (f" {REAL}: {r.regime}" if r and r.verdict != NOT_RUN else "")
            figure = f"{c.paper_figure}. Effect judged against: {c.effect}"
            lines.append("| " + " | ".join(_cell(x) for x in (c.claim, figure, f.ours, _verdict_cell(f, mixed[0]),
                                                              real_ours, real_verdict, why, links)) + " |")
        lines.append("")
    return "\n".join(lines)
