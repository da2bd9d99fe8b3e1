"""The SMI and DLM-extraction papers' claims: SMI-M against the gold standard, its cost and intervals, and
extraction's step count, relaxed fit, query budget and the memorisation shift (the Gap-K% paper's: claims_gapk).
Every verdict by the rule of :mod:`lmaudit.report.verdicts`."""

from __future__ import annotations

import numpy as np

from lmaudit.audit.coverage import coverage, stored_intervals
from lmaudit.extraction.reconstruct import wilson_interval
from lmaudit.metrics import seed_std
from lmaudit.report import claims_models as md
from lmaudit.report.claims_base import (
    ONE_SEED,
    UNCONVERGED_SHARE,
    UNTESTABLE,
    Finding,
    paired_median,
    pct,
    regime_text,
)
from lmaudit.report.verdicts import (
    AGAINST,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    capped,
    combine,
    direction,
    effect_text,
    interval_verdict,
    points_verdict,
)
from lmaudit.shifts import median_shift


def _spread(values) -> str:
    """'0.42 ± 0.52' over the defined seeds (ddof = 1), 'undefined' with none, '(one seed)' with one."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return "undefined"
    return f"{v.mean():.2f}" + (" (one seed)" if v.size == 1 else f" ± {seed_std(v):.2f}")


def smi_closest(recs: dict[str, dict], *, name: str = "unlearning-audit", audit: str = "smi-m",
                regime=None) -> Finding:
    """The paper's SMI-M (one named audit, no choosing the better variant after the fact) is closest to the truth on
    both models whose ρ is known: 'none' (ρ = 0) and 'retrain' (ρ = 1). Against each other audit, |ρ − truth| is
    compared seed by seed on points (seeds where both are defined): SMI-M closer on every seed supports it, farther on
    every seed is against it. A constant estimator is right on one model and wrong on the other, so it cannot pass."""
    rec = recs[name]["unlearning"]
    fracs = sorted({k.split(" / ")[0] for k in rec}, key=float)
    parts, verdicts = [], []
    for f in fracs:
        shown = []
        for method, truth in (("none", 0.0), ("retrain", 1.0)):
            err = {k.split(" / ")[2]: np.abs(np.asarray(v["per_seed"], dtype=float) - truth)
                   for k, v in rec.items() if k.startswith(f"{f} / {method} / ")}
            mine = err.pop(audit)
            farther = []
            for other, e in err.items():
                both = np.isfinite(mine) & np.isfinite(e)
                verdicts.append(points_verdict((e - mine)[both]))
                if direction((e - mine)[both]) < 0:  # the signs, whether or not the sign test passes
                    farther.append(other)
            means = {o: float(np.nanmean(e)) for o, e in err.items() if np.isfinite(e).any()}
            best = min(means, key=means.get) if means else None
            shown.append(f"{method} (ρ = {truth:g}): {audit} {_spread(rec[f'{f} / {method} / {audit}']['per_seed'])}"
                         + (f", the closest other audit {best} {_spread(rec[f'{f} / {method} / {best}']['per_seed'])}"
                            if best else "")
                         + (f"; farther from it on every seed than {', '.join(farther)}" if farther else ""))
        parts.append(f"forget {float(f):.0%}: " + "; ".join(shown))
    return Finding(f"ρ of the forget set, mean ± std over seeds (ddof = 1), of {audit} on the untouched model and on "
                   "the retrained one, beside the other audit closest on average, and the audits closer to the truth "
                   "than it on every seed: " + "; ".join(parts),
                   combine(verdicts),
                   regime_text(regime, recs) or (f"{_cap(md.model(recs[name].get('experiment', {}), 'a model'))} on "
                                                 "text (the paper: ResNet/ViT on CIFAR). 'Closest' is read seed by "
                                                 "seed against every other audit, for 'none' and for 'retrain' both; "
                                                 "seeds that disagree are inconclusive."),
                   points=True)


ORDER = 10.0  # 'seconds vs tens of minutes' is a ratio of magnitudes: an order of magnitude either way decides


def smi_cost(recs: dict[str, dict]) -> Finding:
    """An SMI or SMI-M audit costs seconds where LiRA needs shadow models: the costlier of the two SMI audits
    (feature extraction + estimate) against LiRA's (shadow training + probes), mean seconds over the runs. A
    cost claim of 'seconds vs tens of minutes' is a comparison of magnitudes, not a membership-style difference of
    a few points that noise across seeds could flip: at least :data:`ORDER` times cheaper is reproduced, at least
    :data:`ORDER` times dearer is against the claim, and a ratio within one order of magnitude either way (which
    machine load or caching can move) is inconclusive. Without shadow models (no LiRA) it is not testable."""
    c = recs["unlearning-audit"]["cost_s"]
    ours = (f"seconds per audit: SMI {c['smi']:.3f} and SMI-M {c['smi-m']:.3f} on hidden features (+ "
            f"{c['features']:.2f} to extract them), on score features {c['smi-scores']:.3f} / {c['smi-m-scores']:.3f}; "
            f"LiRA: probes {c['lira_probes']:.2f} per audited model, plus {c['lira_shadow_training'] or 0:.1f} per "
            "seed to train the shadow models (near 0 when they come from the model cache)")
    if c.get("lira_shadow_training") is None:
        return Finding(ours, UNTESTABLE, "No shadow models were trained, so there is no LiRA cost to compare with.",
                       points=True)
    smi = (c["features"] or 0) + max(c["smi"], c["smi-m"])
    lira = c["lira_shadow_training"] + c["lira_probes"]
    ratio = lira / smi if smi > 0 else float("inf")
    verdict = REPRODUCED if ratio >= ORDER else AGAINST if ratio <= 1 / ORDER else INCONCLUSIVE
    return Finding(ours + f"; SMI's audit {smi:.2f} vs LiRA's {lira:.1f}: LiRA / SMI = {ratio:.3g}", verdict,
                   f"A ratio of magnitudes (the paper: seconds vs tens of minutes), not a difference that needs seeds "
                   f"to tell from noise: at least {ORDER:g}× cheaper is reproduced, at least {ORDER:g}× dearer against "
                   f"the claim, within one order of magnitude either way inconclusive. SMI's audit counts its feature "
                   "extraction and the costlier estimate (SMI or SMI-M), LiRA's its shadow training and probes (one "
                   f"audited model). SMI needs no shadow model: here its costlier estimate took "
                   f"{_seconds(max(c['smi'], c['smi-m']))} once the features existed, and extracting them "
                   f"{_seconds(c['features'] or 0)}.", points=True)


def _seconds(x: float) -> str:
    """0.0052 as '5.2 ms', 0.88 as '0.88 s'."""
    return f"{1000 * x:.1f} ms" if x < 0.1 else f"{x:.2f} s"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


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
                        else INCONCLUSIVE)
        parts.append(f"{audit} {c['covered']}/{c['n']} (Wilson 95% {pct(lo)}–{pct(hi)}%, median width "
                     f"{float(np.median(c['widths'])):.2f}){degenerate}")
    verdict = combine(verdicts) if verdicts else UNTESTABLE
    return Finding(f"90% intervals of ρ, of the {which}, that hold the known value ('none': 0, 'retrain': 1), over "
                   "forget fractions and seeds: " + "; ".join(parts), verdict,
                   regime_text(regime, recs) or (f"'Reliable': coverage shown to be at least {pct(COVERAGE_FLOOR)}% "
                   "(the Wilson 95% lower bound) and consistent with the nominal 90% (its upper bound); below 90% with "
                   "confidence is unreliable; in between, too few intervals to tell (inconclusive). Intervals of an "
                   "estimate clipped to 0 or 1 on every resample, and intervals spanning all of [0, 1], hold the "
                   "truth whatever the audit does and are not counted. The bootstrap resamples the forget set only, "
                   "so it cannot cover the variation that comes from the reference sets and from training."))


def steps_monotone(recs: dict[str, dict], *, name: str = "extraction-steps", effects: dict[str, float] | None = None,
                   share: float = UNCONVERGED_SHARE) -> Finding:
    """Theorem 4.3 in two parts, on the per-record log p̂ stored for the first seed. The paper's quantity: the median
    gain log(p̂_N / p̂_1) at each N, with a bootstrap interval over records, against the paper's median at that N
    (``effects``); where p̂ at N has not converged in the number of orders (more than ``share`` of records moved by
    more than 2× from R/2 to R, or not checkable), its support does not count. The theorem itself, one more part: on
    a refinement (N divides N', or N' = |M|, along the same orders) p̂ cannot fall for any record; a record whose p̂
    fell on any refinement makes that part not reproduced."""
    rec = recs[name]
    steps = list(rec["steps"])
    effects = effects or {}
    cols = {s: np.asarray(v, dtype=np.float64) for s, v in rec["log_p_columns"].items()}
    n_rec = len(cols[steps[0]])
    moved = {s: max((c["convergence"]["not_converged_fraction"] for c in rec["steps"][s].get("per_seed", [])
                     if "convergence" in c), default=None) for s in steps}
    verdicts, gains, falls = [], [], []
    for s in steps[1:]:
        d, lo, hi = paired_median(cols[s], cols[steps[0]])
        verdict = interval_verdict(lo, hi, effect=effects.get(s))
        unconverged = moved[s] is not None and not moved[s] <= share
        verdicts.append(capped(verdict) if unconverged else verdict)
        paper = effect_text(effects.get(s), scale=1, unit="", digits=2)
        gains.append(f"{s}: {d:+.2f} [{lo:+.2f}, {hi:+.2f}] vs {paper}" + (" (p̂ not converged)" if unconverged else ""))
    fell_any = False
    for a, b in zip(steps, steps[1:]):  # the same orders at every N: N' refines N when N divides N' (or N' = |M|)
        fell = int(np.sum(cols[b] < cols[a]))
        if b == "max" or int(b) % int(a) == 0:
            fell_any |= fell > 0
            falls.append(f"{a} → {b}: {pct(fell / n_rec)}%")
        else:
            falls.append(f"{a} → {b} (not a refinement): {pct(fell / n_rec)}%")
    verdicts.append(NOT_REPRODUCED if fell_any else REPRODUCED)  # the theorem: no record falls on any refinement
    ours = (f"median gain log(p̂_N / p̂_1) (nats) per record, bootstrap 95% interval over {n_rec} masks (first seed), "
            "against the paper's: " + ", ".join(gains) + f"; log p̂ never fell as N grew on "
            f"{pct(rec['monotone_fraction'][0])}% of masks; records whose p̂ fell: " + ", ".join(falls))
    return Finding(ours, combine(verdicts),
                   "Every N unmasks along the same random orders, so a step count that divides a larger one (and |M| "
                   "steps, one token each) refines its partition, where Theorem 4.3 says p̂ cannot fall. With the "
                   "orders shared, a fall on a refinement is not noise of the sampled orders: for that record the "
                   "model's coarser (more tokens at once) prediction gave the value more probability than its finer "
                   "one, which the theorem's assumption (recovery monotonicity, Assumption 4.2) excludes. The medians "
                   "count only where p̂ has converged in the number of orders (at most "
                   f"{pct(share)}% of records moving by more than 2× from R/2 to R).", one_seed=True)


MIN_INFORMATIVE_EPS = 5  # tolerances at which a model's empirical rate is neither ≈ 0 nor ≈ 1, needed to judge a fit


def gaussian_fit(recs: dict[str, dict]) -> Finding:
    full = recs["extraction-relaxed"]
    rec, exp = full["relaxed"], full["experiment"]
    err, informative, parts, flat = {}, {}, [], {}
    for model in ("DLM", "AR"):
        e, p = np.asarray(rec[model]["empirical"]), np.asarray(rec[model]["predicted"])
        keep = (e >= 0.01) & (e <= 0.99)  # where the empirical rate says something (not zeros against zeros)
        informative[model] = int(keep.sum())
        flat[model] = "0" if (e < 0.01).sum() >= (e > 0.99).sum() else "1"  # the rate most uninformative ε read
        err[model] = float(np.abs(e - p)[keep].mean()) if keep.any() else float("nan")
        zero = int(np.asarray(rec[model]["eps"])[e > 0][0]) if (e > 0).any() else None
        parts.append(f"{model} {err[model]:.3f} over its {informative[model]} informative ε (all-ε mean "
                     f"{rec[model]['mean_abs_error']:.3f}; empirical rate 0 below ε = {zero})")
    ours = ("mean |Gaussian − empirical| of Pr(Hamming ≤ ε) where the empirical rate is in [1%, 99%]: "
            + "; ".join(parts) + f" ({exp['extract']['samples']} generations per record, {exp['n_relaxed']} records, "
            f"{exp['extract']['relaxed']} masked tokens, one seed; points)")
    if min(informative.values()) < MIN_INFORMATIVE_EPS:
        thin = [m for m, n in informative.items() if n < MIN_INFORMATIVE_EPS]
        return Finding(ours, UNTESTABLE, "; ".join(
            f"{m}: fewer than {MIN_INFORMATIVE_EPS} tolerances where its empirical rate is neither 0 nor 1 (it is "
            f"{flat[m]} at most of the others), so over most ε a prediction near {flat[m]} is compared with a rate of "
            f"{flat[m]} and the fit's error says nothing about its shape" for m in thin) + ".")
    better = "DLM" if err["DLM"] < err["AR"] else "AR"
    return Finding(ours, INCONCLUSIVE, f"On points, the Gaussian fits the {better} model better. Possible reason "
                   "(the paper's): an AR model's errors cascade (one wrong token derails the rest), which a sum of "
                   "near-independent errors does not describe." + ONE_SEED, points=True, one_seed=True)


def sublinear_budget(recs: dict[str, dict], *, small: float = 1e-3) -> Finding:
    """Two parts per model, each read on the records extractable at each budget n (Wilson 95% intervals): sublinear
    growth, each 10× more queries giving less than 10× more records (the share of those found at 10n already found
    at n above 10%), and most records appearing at small n (the share of those found at the largest n already found
    at ``small`` × that n above 50%). A model with nothing extractable at any n cannot be read (not testable, and
    said)."""
    b = recs["extraction-relaxed"]["budget"]
    n = np.array(b["n"], dtype=float)
    total = b["n_records"]
    parts, verdicts = [], []
    for model, fr in b["fractions"].items():
        k = np.rint(np.array(fr) * total).astype(int)
        if k[-1] == 0:
            parts.append(f"{model}: 0 at every n up to {int(n[-1]):,} (nothing extractable: not testable)")
            verdicts.append(UNTESTABLE)
            continue
        at = {e: int(k[np.searchsorted(n, 10 ** e)]) for e in range(0, int(np.log10(n[-1])) + 1)
              if np.searchsorted(n, 10 ** e) < len(n)}
        steps = []
        for e in (e for e in at if e + 1 in at and at[e + 1]):
            lo, hi = wilson_interval(at[e], at[e + 1])
            verdicts.append(interval_verdict(lo - 0.1, hi - 0.1))
            steps.append(f"10^{e} → 10^{e + 1}: {at[e]}/{at[e + 1]} [{pct(lo)}, {pct(hi)}]%")
        i = int(np.searchsorted(n, n[-1] * small))
        lo, hi = wilson_interval(int(k[i]), int(k[-1]))
        verdicts.append(interval_verdict(lo - 0.5, hi - 0.5))
        parts.append(f"{model}: extractable " + ", ".join(f"n=10^{e}: {pct(v / total)}%" for e, v in at.items())
                     + "; found at n already found at n/10 (sublinear above 10%): " + ", ".join(steps)
                     + f"; at n = {int(n[i]):,} already {k[i]}/{k[-1]} of those at {int(n[-1]):,} "
                     f"[{pct(lo)}, {pct(hi)}]% ('most' above 50%)")
    return Finding(f"records extractable at p = {b['p']}, mask {b['mask']}, of {total} (one seed): " + "; ".join(parts),
                   combine(verdicts), "Sublinear: each 10× more queries gives less than 10× more records, read as the "
                   "share of the records found at 10n already found at n, above 10% (Wilson interval). Saturating "
                   f"early: most of the records found at the largest n already found at 1/{1 / small:,.0f} of it, its "
                   "share above 50%; below it is against the claim.", one_seed=True)


def shift(recs: dict[str, dict], *, name: str = "pii-extraction", regime=None) -> Finding:
    """Training values more likely than unseen ones: per model and field, median log p̂ of training − unseen values
    (first seed) with a bootstrap interval, each one comparison (no paper figure: a tie is inconclusive)."""
    rec = recs[name]
    parts, verdicts = [], []
    for key, lp in rec["likelihood_shift"].items():  # per-record log p̂ of the first seed
        d = median_shift(lp["train"], lp["unseen"], seed=0)
        verdicts.append(interval_verdict(d.lo, d.hi))
        parts.append(f"{key} {d.diff:+.1f} [{d.lo:+.1f}, {d.hi:+.1f}]")
    return Finding(f"median log p̂ of the value, training − unseen messages ({rec['n_train']} and {rec['n_unseen']}; "
                   "nats, first seed) with a bootstrap 95% interval, higher only when it excludes 0: "
                   + "; ".join(parts), combine(verdicts),
                   regime_text(regime, recs) or ("Unseen messages come from the same generator (names, addresses, "
                              "phones), so the shift measures memorisation, not format."), one_seed=True)
