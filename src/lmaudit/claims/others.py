"""The DLM-extraction paper's claims on the step count, the relaxed fit, the query budget and the memorisation shift
(the SMI paper's main rows: :mod:`lmaudit.claims.smi`). Each reads the per-record values its experiment stores, seed
by seed, and says what it needs where the record keeps the first seed's only. Every verdict by the rule of
:mod:`lmaudit.claims.verdicts`."""

from __future__ import annotations

import numpy as np

from lmaudit.claims.base import (
    AT_THIS_SIZE,
    POINTS_ONLY,
    UNCONVERGED_SHARE,
    UNTESTABLE,
    Finding,
    judged_seeds,
    newcombe,
    paired_median,
    pct,
    regime_text,
    seed_count,
)
from lmaudit.claims.verdicts import at_this_size, category, combine, effect_text, judge, single
from lmaudit.extraction.reconstruct import wilson_interval
from lmaudit.shifts import median_shift

FALL_TOLERANCE = 1e-3  # nats: a fall of log p̂ smaller than this on a refinement is float32 rounding, not a fall


def seed_columns(rec: dict, key: str) -> list[dict] | None:
    """A record's per-record values for each seed: ``KEY_per_seed`` where stored, else ``KEY`` as the one seed's
    when the record holds one seed; None where it ran several seeds and kept the first one's only."""
    if rec.get(f"{key}_per_seed"):
        return rec[f"{key}_per_seed"]
    return [rec[key]] if seed_count(rec) == 1 else None


def first_only(rec: dict, key: str) -> Finding:
    """'not testable here' for a record that ran several seeds and stored per-record values of the first only."""
    return Finding(f"per-record values stored for the first of {seed_count(rec)} seeds only", single(UNTESTABLE),
                   f"Seeds are judged one by one, and this record keeps `{key}` for its first seed only: a verdict "
                   f"needs `{key}_per_seed` (the same values, one entry per seed).")


def _moved(rec: dict, step: str, seed: int) -> float | None:
    per = rec["steps"][step].get("per_seed", [])
    c = per[seed].get("convergence") if seed < len(per) else None
    return None if c is None else c["not_converged_fraction"]


def steps_monotone(recs: dict[str, dict], *, name: str = "extraction-steps", effects: dict[str, float] | None = None,
                   share: float = UNCONVERGED_SHARE) -> Finding:
    """Theorem 4.3 in two parts, per seed on the per-record log p̂. The paper's quantity: the median gain
    log(p̂_N / p̂_1) at each N, with a bootstrap interval over records, against the paper's median at that N
    (``effects``); where p̂ at N has not converged in the number of orders (more than ``share`` of records moved by
    more than 2× from R/2 to R), too few orders: not testable at this size. The theorem itself: on a refinement (N
    divides N', or N' = |M|, along the same orders) p̂ cannot fall for any record; the share of records falling by more
    than :data:`FALL_TOLERANCE` (float rounding) with its Wilson interval, oriented as −share (a claim of none can be
    refuted, not shown: no fall reads inconclusive)."""
    rec = recs[name]
    seeds = seed_columns(rec, "log_p_columns")
    if seeds is None:
        return first_only(rec, "log_p_columns")
    steps, effects = list(rec["steps"]), effects or {}
    verdicts, gains, falls = [], [], []
    for i, raw in enumerate(seeds):
        cols = {s: np.asarray(v, dtype=np.float64) for s, v in raw.items()}
        n_rec = len(cols[steps[0]])
        for s in steps[1:]:
            d, lo, hi = paired_median(cols[s], cols[steps[0]])
            v = judge([(lo, hi)], effect=effects.get(s))
            moved = _moved(rec, s, i)
            loose = moved is not None and not moved <= share
            verdicts.append(at_this_size(v) if loose else v)
            gains.append(f"seed {i} N = {s}: {d:+.2f} [{lo:+.2f}, {hi:+.2f}] vs "
                         f"{effect_text(effects.get(s), scale=1, unit='', digits=2)} ({'p̂ not converged: ' * loose}"
                         f"{verdicts[-1].counts})")
        for a, b in zip(steps, steps[1:]):  # the same orders at every N: N' refines N when N divides N' (or N' = |M|)
            k = int(np.sum(cols[b] < cols[a] - FALL_TOLERANCE))
            if b == "max" or int(b) % int(a) == 0:
                lo, hi = wilson_interval(k, n_rec)
                verdicts.append(single(category(-hi, -lo)))
                falls.append(f"seed {i} {a} → {b}: {k}/{n_rec} [{pct(lo)}, {pct(hi)}]%")
            else:
                falls.append(f"seed {i} {a} → {b} (not a refinement): {k}/{n_rec}")
    return Finding("median gain log(p̂_N / p̂_1) (nats) per record, bootstrap 95% interval over records, against the "
                   "paper's: " + ", ".join(gains) + f"; records whose log p̂ fell by more than {FALL_TOLERANCE:g} nats "
                   "on each step: " + ", ".join(falls), combine(verdicts),
                   "Every N unmasks along the same random orders, so a step count that divides a larger one (and |M| "
                   "steps, one token each) refines its partition, where Theorem 4.3 says p̂ cannot fall. With the "
                   "orders shared, a fall on a refinement is not noise of the sampled orders: for that record the "
                   "model's coarser prediction gave the value more probability than its finer one, which the "
                   "theorem's assumption (recovery monotonicity, Assumption 4.2) excludes. A median is judged only "
                   f"where p̂ has converged in the number of orders (at most {pct(share)}% of records moving by more "
                   "than 2× from R/2 to R).", one_seed=len(seeds) < 2)


MIN_INFORMATIVE_EPS = 5  # tolerances at which a model's empirical rate is neither ≈ 0 nor ≈ 1, needed to judge a fit
FIT_NEEDS = ("each record's empirical and Gaussian-predicted Pr(d ≤ ε) per model (`relaxed.MODEL.per_record`: "
             "{\"empirical\": [[rate per ε] per record], \"predicted\": [[…] per record]}), the same records for both "
             "models")


def _fit_error(emp: np.ndarray, pred: np.ndarray) -> float:
    """The mean |predicted − empirical| of mean-over-records rates, where the empirical rate is in [1%, 99%]."""
    e, p = emp.mean(axis=0), pred.mean(axis=0)
    keep = (e >= 0.01) & (e <= 0.99)
    return float(np.abs(e - p)[keep].mean()) if keep.any() else float("nan")


def gaussian_fit(recs: dict[str, dict], *, n_resamples: int = 1000) -> Finding:
    """A Gaussian predicts relaxed extraction for DLMs, not for AR models: the AR fit's error − the DLM's (mean
    |Gaussian − empirical| over the informative tolerances), with a paired bootstrap interval over the records (the
    paper gives no size: read on the direction). Where the record stores the mean curves only, points only."""
    full = recs["extraction-relaxed"]
    rec, exp = full["relaxed"], full["experiment"]
    informative = {m: int(((np.asarray(rec[m]["empirical"]) >= 0.01) & (np.asarray(rec[m]["empirical"]) <= 0.99))
                          .sum()) for m in ("DLM", "AR")}
    ours = ("mean |Gaussian − empirical| of Pr(Hamming ≤ ε): " + "; ".join(
        f"{m} {rec[m]['mean_abs_error']:.3f} over every ε ({informative[m]} informative)" for m in ("DLM", "AR"))
        + f" ({exp['extract']['samples']} generations per record, {exp['n_relaxed']} records, "
        f"{exp['extract']['relaxed']} masked tokens, one seed)")
    thin = [m for m, n in informative.items() if n < MIN_INFORMATIVE_EPS]
    if thin:
        return Finding(ours, single(AT_THIS_SIZE), f"{', '.join(thin)}: fewer than {MIN_INFORMATIVE_EPS} tolerances "
                       "where the empirical rate is neither 0 nor 1, so the fit's error says nothing of its shape at "
                       "this number of records and generations.", one_seed=True)
    if not all("per_record" in rec[m] for m in ("DLM", "AR")):
        return Finding(ours + " (points)", single(POINTS_ONLY), f"One error per model, no interval: it needs "
                       f"{FIT_NEEDS}.", points=True, one_seed=True)
    arr = {m: {k: np.asarray(rec[m]["per_record"][k], dtype=float) for k in ("empirical", "predicted")}
           for m in ("DLM", "AR")}
    n = len(arr["DLM"]["empirical"])

    def stat(idx) -> float:
        return (_fit_error(arr["AR"]["empirical"][idx], arr["AR"]["predicted"][idx])
                - _fit_error(arr["DLM"]["empirical"][idx], arr["DLM"]["predicted"][idx]))

    rng = np.random.default_rng(0)
    reps = np.array([stat(rng.integers(0, n, n)) for _ in range(n_resamples)])
    reps = reps[np.isfinite(reps)]
    per = [{"diff": stat(np.arange(n)), "ci95": [float(np.quantile(reps, 0.025)), float(np.quantile(reps, 0.975))]}]
    text, verdict = judged_seeds(per, scale=1, digits=3)
    return Finding(ours + f"; AR error − DLM error, bootstrap over records: {text}", verdict,
                   "Possible reason (the paper's): an AR model's errors cascade (one wrong token derails the rest), "
                   "which a sum of near-independent errors does not describe.", one_seed=True)


def sublinear_budget(recs: dict[str, dict], *, small: float = 1e-3) -> Finding:
    """Two parts per model, each read on the records extractable at each budget n (Wilson 95% intervals, the paper
    gives no size: read on the direction): sublinear growth, the share of those found at 10n already found at n
    above 10%; and most records appearing at small n, the share of those found at the largest n already found at
    ``small`` × that n above 50%. A model with nothing extractable at any n cannot be read (not testable here)."""
    full = recs["extraction-relaxed"]
    b = full["budget"]
    n = np.array(b["n"], dtype=float)
    total = b["n_records"]
    parts, verdicts = [], []
    for model, fr in b["fractions"].items():
        k = np.rint(np.array(fr) * total).astype(int)
        if k[-1] == 0:
            parts.append(f"{model}: 0 at every n up to {int(n[-1]):,} (nothing extractable: not testable)")
            verdicts.append(single(UNTESTABLE))
            continue
        at = {e: int(k[np.searchsorted(n, 10 ** e)]) for e in range(0, int(np.log10(n[-1])) + 1)
              if np.searchsorted(n, 10 ** e) < len(n)}
        steps = []
        for e in (e for e in at if e + 1 in at and at[e + 1]):
            lo, hi = wilson_interval(at[e], at[e + 1])
            verdicts.append(single(category(lo - 0.1, hi - 0.1)))
            steps.append(f"10^{e} → 10^{e + 1}: {at[e]}/{at[e + 1]} [{pct(lo)}, {pct(hi)}]%")
        i = int(np.searchsorted(n, n[-1] * small))
        lo, hi = wilson_interval(int(k[i]), int(k[-1]))
        verdicts.append(single(category(lo - 0.5, hi - 0.5)))
        parts.append(f"{model}: extractable " + ", ".join(f"n=10^{e}: {pct(v / total)}%" for e, v in at.items())
                     + "; found at n already found at n/10 (sublinear above 10%): " + ", ".join(steps)
                     + f"; at n = {int(n[i]):,} already {k[i]}/{k[-1]} of those at {int(n[-1]):,} "
                     f"[{pct(lo)}, {pct(hi)}]% ('most' above 50%)")
    seeds = seed_count(full)
    return Finding(f"records extractable at p = {b['p']}, mask {b['mask']}, of {total} (the first seed's models): "
                   + "; ".join(parts), combine(verdicts), "Sublinear: each 10× more queries gives less than 10× more "
                   "records, read as the share of the records found at 10n already found at n, above 10% (Wilson "
                   "interval). Saturating early: most of the records found at the largest n already found at "
                   f"1/{1 / small:,.0f} of it, its share above 50%; below it is against the claim."
                   + (f" The experiment ran {seeds} seeds and builds the curve on the first one's models." if seeds > 1
                      else ""), one_seed=True)


def shift(recs: dict[str, dict], *, name: str = "pii-extraction", regime=None, p: float = 0.5) -> Finding:
    """Training values more likely than unseen ones, on the DLMs the paper's claim is about (AR rows are not judged):
    per DLM row, field and seed two parts with the paper's direction (no size): the median log p̂ of training −
    unseen values with a bootstrap interval, and the share of training − of unseen values (n, p)-discoverable, the
    unseen-value control, with Newcombe's interval."""
    rec = recs[name]
    seeds = seed_columns(rec, "likelihood_shift")
    if seeds is None:
        return first_only(rec, "likelihood_shift")
    dlm = [k for k in seeds[0] if "DLM" in k]
    if not dlm:
        return Finding(f"`{name}` stores the AR model's values only", single(UNTESTABLE), "The paper's claim is about "
                       "DLMs; this experiment extracts with an AR model alone, so it cannot test it (its AR rows are "
                       "no evidence about a DLM).")
    parts, verdicts = [], []
    for i, shifts in enumerate(seeds):
        for key in dlm:
            d = median_shift(shifts[key]["train"], shifts[key]["unseen"], seed=0)
            v1 = judge([(d.lo, d.hi)])
            row = rec["pii_rows"][key][i]
            kt, ku = row[f"discoverable@p={p:g}"], row["unseen_discoverable"][f"discoverable@p={p:g}"]
            dd, lo, hi = newcombe(kt, rec["n_train"], ku, rec["n_unseen"])
            v2 = judge([(lo, hi)])
            verdicts += [v1, v2]
            parts.append(f"{key}{f' seed {i}' if len(seeds) > 1 else ''}: median log p̂ {d.diff:+.1f} [{d.lo:+.1f}, "
                         f"{d.hi:+.1f}] nats ({v1.counts}); discoverable {kt}/{rec['n_train']} vs {ku}/"
                         f"{rec['n_unseen']}, {100 * dd:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] points ({v2.counts})")
    return Finding(f"training − unseen messages ({rec['n_train']} and {rec['n_unseen']}), each DLM row: " + "; ".join(
        parts), combine(verdicts), regime_text(regime, recs) or (
        "Unseen messages come from the same generator (names, addresses, phones), so values the model finds on them "
        "are guessable; a training value ahead of them in likelihood and in discoverable share is memorised."),
        one_seed=len(seeds) < 2)
