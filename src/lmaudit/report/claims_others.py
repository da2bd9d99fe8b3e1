"""The Gap-K%, SMI and DLM-extraction papers' claims."""

from __future__ import annotations

import numpy as np

from lmaudit.audit.coverage import coverage, stored_intervals
from lmaudit.data.instruct import PERTURB_RATE
from lmaudit.extraction.reconstruct import wilson_interval
from lmaudit.metrics import median_shift, seed_std
from lmaudit.report.claims_base import (
    NOT_REPRODUCED,
    PARTLY,
    REPRODUCED,
    UNTESTABLE,
    Finding,
    auc_text,
    ci,
    count_text,
    pct,
    pts,
    regime_text,
    row_stat,
    seeds_verdict,
)


def pretraining_gap(recs: dict[str, dict], *, name: str = "ar-pretraining-detection", regime=None) -> Finding:
    rec = recs[name]
    parts, any_ahead, any_behind = [], False, False
    for setting, per_seed in rec["paired"].items():
        a, t, b = seeds_verdict(per_seed)
        any_ahead |= a == len(per_seed)
        any_behind |= b > 0
        parts.append(f"{setting}: " + ", ".join(f"{pts(p['diff'])} {ci(*p['ci95'])}" for p in per_seed)
                     + f" ({count_text(a, t, b)})")
    verdict = REPRODUCED if any_ahead and not any_behind else NOT_REPRODUCED
    ours = "AUC(gap_k) − AUC(min_k_pp) per seed with paired 95% intervals: " + "; ".join(parts)
    if regime:
        return Finding(ours, verdict, regime_text(regime, recs))
    attacks = rec["experiment"].get("attacks") or []
    spans = []
    for setting in rec["paired"]:
        aucs = [row_stat(rec, f"{setting}: {a}")[0] for a in attacks if f"{setting}: {a}" in rec["rows"]]
        if aucs:
            spans.append(f"{setting}, every attack's AUC {pct(min(aucs))}–{pct(max(aucs))}")
    return Finding(ours, verdict, (f"A tiny AR model pretrained from scratch on "
                   f"{rec['experiment']['pretrain_tokens']:,} tokens with the members in the stream (the paper: "
                   f"Pythia/LLaMA on WikiMIA and MIMIR); {'; '.join(spans)}. Possible reason where Min-K%++ leads: a "
                   "small model's top-1 is rarely a confident wrong guess, the case Gap-K% is built on."))


def finetuned_gap(*names: str):
    """The Gap-K% head-to-head on fine-tuned real models: AUC(gap_k) − AUC(min_k_pp) per seed in each experiment
    ``names`` (``compare = "gap_k"``), ahead only where the paired interval excludes 0."""

    def judge(recs: dict[str, dict]) -> Finding:
        parts, counts, aucs = [], [], []
        for name in names:
            if name not in recs:
                continue
            rec = recs[name]
            per_seed = rec["paired"]["vs"]["min_k_pp"]
            counts.append(seeds_verdict(per_seed))
            aucs.append(f"{name}: gap_k {auc_text(rec, 'gap_k')}, min_k_pp {auc_text(rec, 'min_k_pp')}")
            parts.append(f"{name}: " + ", ".join(f"{pts(p['diff'])} {ci(*p['ci95'])}" for p in per_seed)
                         + f" ({count_text(*counts[-1])})")
        ahead, tied, behind = (sum(c[i] for c in counts) for i in range(3))
        verdict = REPRODUCED if ahead and not tied and not behind else PARTLY if ahead else NOT_REPRODUCED
        ours = ("AUC(gap_k) − AUC(min_k_pp) per seed with paired 95% intervals: " + "; ".join(parts)
                + ". AUC mean ± std over seeds: " + "; ".join(aucs))
        return Finding(ours, verdict, "Members are fine-tuned into the pretrained SmolLM2-135M-Instruct (see the "
                       "experiment's description), not met in pretraining as in the paper.")

    return judge


def real_gap(pretraining: str, finetuned: tuple[str, ...], regime):
    """Gap-K% − Min-K%++ on the real model: judged in the paper's regime (``pretraining``: continued pretraining with
    the members in the stream), with the fine-tuned experiments (``finetuned``, not the paper's regime) beside it."""

    def judge(recs: dict[str, dict]) -> Finding:
        tuned = finetuned_gap(*finetuned)(recs) if any(name in recs for name in finetuned) else None
        if pretraining not in recs:  # the fine-tuned experiments alone, until the paper's regime is run
            return tuned
        found = pretraining_gap(recs, name=pretraining, regime=regime)
        if tuned is None:
            return found
        return Finding(f"continued pretraining: {found.ours}. After fine-tuning (not the paper's regime, "
                       f"{tuned.verdict} there): {tuned.ours.split(': ', 1)[1]}", found.verdict, found.regime)

    return judge


def _setting_rows(rec: dict, setting: str, labels: list[str]) -> dict[str, tuple[float, float]]:
    return {lab: row_stat(rec, f"{setting}: {lab}") for lab in labels if f"{setting}: {lab}" in rec["rows"]}


def smoothing(recs: dict[str, dict], *, name: str = "ar-pretraining-detection", regime=None) -> Finding:
    rec = recs[name]
    parts, orders = [], []
    for setting in rec["paired"]:
        r = _setting_rows(rec, setting, ["gap_k smooth=sequential", "gap_k smooth=shuffled", "gap_k smooth=none"])
        if len(r) < 3:
            continue
        seq, shu, non = (r[k][0] for k in ("gap_k smooth=sequential", "gap_k smooth=shuffled", "gap_k smooth=none"))
        orders.append(seq > shu > non)
        parts.append(f"{setting}: sequential {pct(seq)} ± {pct(r['gap_k smooth=sequential'][1])}, shuffled "
                     f"{pct(shu)} ± {pct(r['gap_k smooth=shuffled'][1])}, none {pct(non)} ± "
                     f"{pct(r['gap_k smooth=none'][1])}")
    verdict = REPRODUCED if orders and all(orders) else NOT_REPRODUCED if not any(orders) else PARTLY
    return Finding("AUC, mean ± std over seeds (points; the paired interval is stored for Gap-K% − Min-K%++ "
                   "only): " + "; ".join(parts), verdict,
                   regime_text(regime, recs) or (f"Points over {len(rec['experiment']['seeds'])} seeds (mean ± std, "
                   "ddof = 1); the ordering is read from the means. Possible reason where no smoothing leads: the few "
                   "tokens that separate members are isolated, and a smoothing window averages them with their "
                   "neighbours."), points=True)


def k_sensitivity(recs: dict[str, dict], *, name: str = "ar-pretraining-detection", regime=None) -> Finding:
    """The peak's place is judged only where the k curve spans more than twice the seeds' spread (ddof = 1) of its
    points; a flatter curve (or one seed) cannot place a peak: that part is not testable."""
    rec = recs[name]
    parts, best_near, above_all, flat = [], [], [], []
    for setting in rec["paired"]:
        ks = {float(k.split("k=")[1]): row_stat(rec, k) for k in rec["rows"] if k.startswith(f"{setting}: gap_k k=")}
        if not ks:
            continue
        means = {k: m for k, (m, _) in ks.items()}
        best = max(means, key=means.get)
        spread = float(np.mean([sd for _, sd in ks.values()]))
        span = max(means.values()) - min(means.values())
        mkpp = row_stat(rec, f"{setting}: min_k_pp")[0]
        flat.append(spread == 0 or span <= 2 * spread)
        best_near.append(0.1 <= best <= 0.2)
        above_all.append(all(v > mkpp for v in means.values()))
        parts.append(f"{setting}: best k = {best:g} ({pct(means[best])}), range {pct(min(means.values()))}–"
                     f"{pct(max(means.values()))} (span {100 * span:.1f} points, "
                     + ("one seed: no spread to place a peak against" if spread == 0 else
                        f"seed std {100 * spread:.1f}" + (": within noise" if flat[-1] else ""))
                     + f") vs min_k_pp {pct(mkpp)}")
    peak_ok = [b for b, f in zip(best_near, flat) if not f]  # settings whose curve can place a peak
    halves = ([all(peak_ok)] if peak_ok else []) + [all(above_all)]
    verdict = (REPRODUCED if len(halves) == 2 and all(halves) else
               NOT_REPRODUCED if not any(above_all) and not any(peak_ok) else PARTLY)
    return Finding("mean AUC over seeds (points): " + "; ".join(parts), verdict,
                   regime_text(regime, recs) or ("The peak's place is read only where the k curve spans more than "
                              "twice the seeds' spread; Gap-K% is compared with Min-K%++ point by point."), points=True)


def paraphrase(recs: dict[str, dict], *, name: str = "ar-pretraining-detection", regime=None) -> Finding:
    rec = recs[name]
    parts, ahead = [], []
    for setting in rec["paired"]:
        r = _setting_rows(rec, setting, ["perturbed gap_k", "perturbed min_k_pp"])
        if len(r) < 2:
            continue
        g, m = r["perturbed gap_k"], r["perturbed min_k_pp"]
        ahead.append(g[0] - g[1] > m[0] + m[1])  # points: ahead beyond one std of each
        parts.append(f"{setting}: gap_k {pct(g[0])} ± {pct(g[1])} vs min_k_pp {pct(m[0])} ± {pct(m[1])}")
    verdict = REPRODUCED if ahead and all(ahead) else NOT_REPRODUCED
    return Finding("word-swap perturbed members vs equally perturbed non-members, AUC mean ± std over seeds "
                   "(points): " + "; ".join(parts), verdict,
                   regime_text(regime, recs) or (f"Word swaps ({PERTURB_RATE:.0%} of words) stand in for DIPPER "
                   "paraphrases; the ordering follows the unperturbed one (Min-K%++ ahead)."), points=True)


def _cell(v: dict) -> tuple[float, float] | None:
    """(mean, seed std with ddof = 1) of an audit cell, from its per-seed ρ; None where ρ was undefined on a seed."""
    if v["n_undefined"]:
        return None
    return float(np.mean(v["per_seed"])), seed_std(v["per_seed"])


def smi_closest(recs: dict[str, dict], *, name: str = "unlearning-audit", audit: str = "smi-m",
                regime=None) -> Finding:
    """The paper's SMI-M (one named audit, no choosing the better variant after the fact) is closest to the truth on
    both models whose ρ is known: 'none' (ρ = 0) and 'retrain' (ρ = 1), within one seed std of the closest audit.
    A constant estimator is right on one of them and wrong on the other, so it cannot pass."""
    rec = recs[name]["unlearning"]
    fracs = sorted({k.split(" / ")[0] for k in rec}, key=float)
    parts, closest_ok = [], []
    for f in fracs:
        shown, ok = [], True
        for method, truth in (("none", 0.0), ("retrain", 1.0)):
            cells = {k.split(" / ")[2]: _cell(v) for k, v in rec.items() if k.startswith(f"{f} / {method} / ")}
            err = {a: abs(truth - c[0]) for a, c in cells.items() if c is not None}
            mine = cells.get(audit)
            best = min(err, key=err.get) if err else "none defined"
            ok &= bool(err) and mine is not None and err[audit] <= err[best] + cells[best][1]  # the closest's std
            shown.append(f"{method} (ρ = {truth:g}): {audit} " + (f"{mine[0]:.2f} ± {mine[1]:.2f}" if mine else
                                                                 "undefined on a seed")
                         + (f", closest {best} {cells[best][0]:.2f}" if err and best != audit else ", the closest"))
        closest_ok.append(ok)
        parts.append(f"forget {float(f):.0%}: " + "; ".join(shown))
    verdict = REPRODUCED if all(closest_ok) else PARTLY if any(closest_ok) else NOT_REPRODUCED
    return Finding(f"ρ of the forget set, mean ± std over seeds (ddof = 1), of {audit} against the closest audit, "
                   "on the untouched model and on the retrained one: " + "; ".join(parts), verdict,
                   regime_text(regime, recs) or ("A tiny AR model on text (the paper: ResNet/ViT on CIFAR). 'Closest' "
                              "allows one seed std of the closest audit (a noisy estimate does not pass on its own "
                              "spread), and must hold for 'none' and for 'retrain' both."), points=True)


def smi_cost(recs: dict[str, dict]) -> Finding:
    r = recs["unlearning-audit"]
    c = r["cost_s"]
    ours = (f"seconds per audit: SMI {c['smi']:.3f} and SMI-M {c['smi-m']:.3f} on hidden features (+ "
            f"{c['features']:.2f} to extract them), on score features {c['smi-scores']:.3f} / {c['smi-m-scores']:.3f}; "
            f"LiRA: probes {c['lira_probes']:.2f} per audited model, plus {c['lira_shadow_training']:.1f} per seed to "
            "train the shadow models (near 0 when they come from the model cache)")
    cheap = max(c["smi"], c["smi-m"]) < c["lira_probes"]
    return Finding(ours, REPRODUCED if cheap else NOT_REPRODUCED,
                   "SMI needs no shadow model; its estimate costs milliseconds once features or scores exist "
                   "(seconds on a CPU with the tiny models).", points=True)


COVERAGE_FLOOR = 0.8  # 'reliable' needs the data to show coverage of at least this (nominal 90%)


def smi_coverage(recs: dict[str, dict], *, name: str = "unlearning-audit", regime=None) -> Finding:
    """Reliable: the Wilson 95% interval of the coverage of informative intervals holds 90% and lies above 80%;
    unreliable: it lies below 90%; else too few intervals to tell (9 of 12 is not enough to pass)."""
    rec = recs[name]
    intervals, which = stored_intervals(rec)
    cov = coverage(intervals)
    parts, verdicts = [], []
    for audit, c in cov.items():
        degenerate = f"; {c['clipped']} clipped to a point, {c['vacuous']} the whole [0, 1], not counted"
        if not c["n"]:
            parts.append(f"{audit}: no informative interval{degenerate}")
            continue
        lo, hi = wilson_interval(c["covered"], c["n"])
        verdicts.append(REPRODUCED if lo >= COVERAGE_FLOOR and hi >= 0.9 else NOT_REPRODUCED if hi < 0.9
                        else UNTESTABLE)
        parts.append(f"{audit} {c['covered']}/{c['n']} (Wilson 95% {pct(lo)}–{pct(hi)}%, median width "
                     f"{float(np.median(c['widths'])):.2f}){degenerate}")
    verdict = (UNTESTABLE if not verdicts or all(v == UNTESTABLE for v in verdicts) else
               REPRODUCED if all(v == REPRODUCED for v in verdicts) else
               NOT_REPRODUCED if NOT_REPRODUCED in verdicts and REPRODUCED not in verdicts else PARTLY)
    return Finding(f"90% intervals of ρ, of the {which}, that hold the known value ('none': 0, 'retrain': 1), over "
                   "forget fractions and seeds: " + "; ".join(parts), verdict,
                   regime_text(regime, recs) or (f"'Reliable': coverage shown to be at least {pct(COVERAGE_FLOOR)}% "
                   "(the Wilson 95% lower bound) and consistent with the nominal 90% (its upper bound); below 90% with "
                   "confidence is unreliable; in between, too few intervals to tell. Intervals of an estimate clipped "
                   "to 0 or 1 on every resample, and intervals spanning all of [0, 1], hold the truth whatever the "
                   "audit does and are not counted. The bootstrap resamples the forget set only, so it cannot cover "
                   "the variation that comes from the reference sets and from training."))


def steps_monotone(recs: dict[str, dict], *, name: str = "extraction-steps") -> Finding:
    rec = recs[name]
    steps = list(rec["steps"])
    med = [rec["steps"][s]["median_delta_log_p"][0] for s in steps]
    mono = all(a <= b for a, b in zip(med, med[1:]))
    frac = rec["monotone_fraction"][0]
    cols = {s: np.asarray(v, dtype=np.float64) for s, v in rec["log_p_columns"].items()}
    n_rec = len(next(iter(cols.values())))
    ours = ("median Δ log p̂ = log(p̂_N / p̂_1) (nats) at N = "
            + ", ".join(f"{s}: {m:+.2f}" for s, m in zip(steps, med))
            + f"; per record, log p̂ never fell as N grew on {pct(frac)}% of masks (first seed, {n_rec} masks)")
    nested, other = [], []
    for a, b in zip(steps, steps[1:]):  # the same orders at every N: N' refines N when N divides N' (or N' = |M|)
        fell = float(np.mean(cols[b] < cols[a]))
        (nested if b == "max" or int(b) % int(a) == 0 else other).append(f"{a} → {b}: {pct(fell)}%")
    return Finding(ours, REPRODUCED if mono else NOT_REPRODUCED,
                   "Every N unmasks along the same random orders, so a step count that divides a larger one (and |M| "
                   "steps, one token each) refines its partition, where Theorem 4.3 says p̂ cannot fall. Records whose "
                   "p̂ fell on a refinement: " + ", ".join(nested) + (f"; on a step that is not one: {', '.join(other)}"
                   if other else "") + ". With the orders shared, a fall on a refinement is not noise of the sampled "
                   "orders: for that record the model's coarser (more tokens at once) prediction gave the value more "
                   "probability than its finer one, which the theorem's idealised model (conditionals of one joint "
                   "distribution) excludes; they are evidence on how far a trained DLM is from it.", points=True)


MIN_INFORMATIVE_EPS = 5  # tolerances at which a model's empirical rate is neither ≈ 0 nor ≈ 1, needed to judge a fit


def gaussian_fit(recs: dict[str, dict]) -> Finding:
    full = recs["extraction-relaxed"]
    rec, exp = full["relaxed"], full["experiment"]
    err, informative, parts = {}, {}, []
    for model in ("DLM", "AR"):
        e, p = np.asarray(rec[model]["empirical"]), np.asarray(rec[model]["predicted"])
        keep = (e >= 0.01) & (e <= 0.99)  # where the empirical rate says something (not zeros against zeros)
        informative[model] = int(keep.sum())
        err[model] = float(np.abs(e - p)[keep].mean()) if keep.any() else float("nan")
        zero = int(np.asarray(rec[model]["eps"])[e > 0][0]) if (e > 0).any() else None
        parts.append(f"{model} {err[model]:.3f} over its {informative[model]} informative ε (all-ε mean "
                     f"{rec[model]['mean_abs_error']:.3f}; empirical rate 0 below ε = {zero})")
    ours = ("mean |Gaussian − empirical| of Pr(Hamming ≤ ε) where the empirical rate is in [1%, 99%]: "
            + "; ".join(parts) + f" ({exp['extract']['samples']} generations per record, {exp['n_relaxed']} records, "
            f"{exp['extract']['relaxed']} masked tokens, one seed; points)")
    if min(informative.values()) < MIN_INFORMATIVE_EPS:
        thin = [m for m, n in informative.items() if n < MIN_INFORMATIVE_EPS]
        return Finding(ours, UNTESTABLE,
                       f"{' and '.join(thin)}: fewer than {MIN_INFORMATIVE_EPS} tolerances where its empirical rate "
                       "is neither 0 nor 1: the model gets almost every masked token wrong, so over most ε a near-zero "
                       "prediction is compared with a zero rate and the fit's error says nothing about its shape.")
    return Finding(ours, REPRODUCED if err["DLM"] < err["AR"] else NOT_REPRODUCED,
                   "Possible reason (the paper's): an AR model's errors cascade (one wrong token derails the rest), "
                   "which a sum of near-independent errors does not describe.", points=True)


def sublinear_budget(recs: dict[str, dict]) -> Finding:
    b = recs["extraction-relaxed"]["budget"]
    n = np.array(b["n"], dtype=float)
    parts, sub, sat = [], [], []
    for model, fr in b["fractions"].items():
        fr = np.array(fr)
        if fr[-1] == 0:
            parts.append(f"{model}: 0 at every n up to {int(n[-1]):,}")
            continue
        decades = [float(fr[np.searchsorted(n, 10 ** e)]) for e in range(0, int(np.log10(n[-1])) + 1)
                   if np.searchsorted(n, 10 ** e) < len(n)]
        nz = [(x, y) for x, y in zip(decades, decades[1:]) if x > 0]
        sub.append(all(y / x < 10 for x, y in nz))
        steps = np.diff(decades)
        sat.append(len(steps) >= 2 and steps[-1] < steps[-2])
        parts.append(f"{model}: " + ", ".join(f"n=10^{e}: {pct(v)}%" for e, v in enumerate(decades)))
    verdict = (REPRODUCED if sub and all(sub) and all(sat) else PARTLY if sub and all(sub) else
               UNTESTABLE if not sub else NOT_REPRODUCED)
    return Finding(f"extractable at p = {b['p']}, mask {b['mask']}: " + "; ".join(parts), verdict,
                   "Sublinear: each 10× more queries gives less than 10× more records. Saturation: the last decade's "
                   "gain below the one before it" + (" (holds)." if sat and all(sat) else " (does not hold: still "
                   "rising at the largest n)."), points=True)


def shift(recs: dict[str, dict], *, name: str = "pii-extraction", regime=None) -> Finding:
    rec = recs[name]
    parts, up = [], []
    for key, lp in rec["likelihood_shift"].items():  # per-record log p̂ of the first seed
        d = median_shift(lp["train"], lp["unseen"], seed=0)
        up.append(d.lo > 0)
        parts.append(f"{key} {d.diff:+.1f} [{d.lo:+.1f}, {d.hi:+.1f}]")
    verdict = REPRODUCED if all(up) else PARTLY if any(up) else NOT_REPRODUCED
    return Finding(f"median log p̂ of the value, training − unseen messages ({rec['n_train']} and {rec['n_unseen']}; "
                   "nats, first seed) with a bootstrap 95% interval, higher only when it excludes 0: "
                   + "; ".join(parts), verdict,
                   regime_text(regime, recs) or ("Unseen messages come from the same generator (names, addresses, "
                              "phones), so the shift measures memorisation, not format."))
