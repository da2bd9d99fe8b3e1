"""Claims of the SMI and DLM-extraction papers beyond their main rows: SMI's illusory forgetting, its ranking of
approximate unlearning methods, its bandwidth and sample-size sensitivity, and the convergence of the extraction
estimate p̂ in the number of trajectories. Every verdict by the rule of :mod:`lmaudit.report.verdicts`."""

from __future__ import annotations

import numpy as np

from lmaudit.extraction.reconstruct import wilson_interval
from lmaudit.metrics import seed_std
from lmaudit.report.claims_base import (
    ONE_SEED,
    UNCONVERGED_SHARE,
    UNTESTABLE,
    Finding,
    one_seed,
    pct,
)
from lmaudit.report.verdicts import (
    INCONCLUSIVE,
    SIGN_TEST_SEEDS,
    across_seeds,
    combine,
    interval_verdict,
    points_verdict,
    seed_side,
)

THRESHOLD_FORGOTTEN = 0.9  # a per-sample audit reads the forget set as forgotten at this ρ
ANOMALY_TOL = 0.1  # the audits' anomaly band [−0.1, 1.1] (lmaudit.audit.smi's default anomaly_tol)
ANOMALY = 1 + ANOMALY_TOL  # an unclipped SMI-M estimate above this puts the forget set beyond the non-members


def smi_illusory(recs: dict[str, dict], *, name: str = "unlearning-audit", audit: str = "smi-m") -> Finding:
    """Illusory forgetting: where the per-sample (threshold) audits read an approximate method's forget set as
    forgotten, the set is not a mixture of members and non-members: its unclipped SMI-M estimate lies beyond the
    anomaly band (the forget set sits past the non-members, as the negative gradient pushes it). Judged on points,
    seed by seed, on the seeds where the audit can tell: its estimate is defined, and the untouched model's
    (``none``) is inside the band [−0.1, 1.1] on that seed (an untouched control outside it says the audit
    misplaces even a set nobody unlearned). Fewer than :data:`SIGN_TEST_SEEDS` such seeds (the sign test across
    seeds): inconclusive."""
    rec = recs[name]
    table, raw = rec["unlearning"], rec["rho_unclipped"]  # missing in older results: 'not run', said by the caller
    parts, verdicts, blind = [], [], []
    for key in raw:
        frac, method, a = key.split(" / ")
        if a != audit or method in ("none", "retrain"):
            continue
        thresholds = [v["mean"] for k, v in table.items() if k.startswith(f"{frac} / {method} / threshold-")
                      and np.isfinite(v["mean"])]
        if not thresholds or min(thresholds) < THRESHOLD_FORGOTTEN:
            parts.append(f"{frac} {method}: per-sample audits do not all read it forgotten")
            continue
        control = raw.get(f"{frac} / none / {a}", [float("nan")] * len(raw[key]))
        seeds = [i for i, (x, c) in enumerate(zip(raw[key], control))
                 if x is not None and np.isfinite(x) and c is not None and -ANOMALY_TOL <= c <= ANOMALY]
        parts.append(f"{frac} {method}: per-sample audits ρ ≥ {min(thresholds):.2f}, unclipped {audit} "
                     + ", ".join(f"{x:.2f}" for x in raw[key]) + " (untouched model: "
                     + ", ".join(f"{c:.2f}" for c in control) + f"; seeds that can tell: {len(seeds)}/{len(raw[key])})")
        if not seeds:
            blind.append(f"{frac} {method}")
            verdicts.append(UNTESTABLE)
            continue
        beyond = [raw[key][i] - ANOMALY for i in seeds]
        verdicts.append(points_verdict(beyond))
        parts[-1] += f"; on the seeds that can tell: {seed_side(beyond, up='beyond the band', down='inside it')}"
    why = (f"Judged where every per-sample audit reads ρ ≥ {THRESHOLD_FORGOTTEN} (forgotten): the claim holds there "
           f"when the unclipped {audit} estimate exceeds {ANOMALY} on every seed that can tell (a forget set past the "
           "non-members, which a member-vs-non-member classifier mistakes for forgotten), on "
           f"{SIGN_TEST_SEEDS} such seeds at least (the one-sided sign test at 5%; inside the band on every one of "
           f"them is against it; fewer seeds, or seeds that disagree, inconclusive). A "
           f"seed can tell when its estimate is defined and the untouched model's own estimate lies inside the "
           f"anomaly band [{-ANOMALY_TOL}, {ANOMALY}]; otherwise the audit misplaces even a forget set nobody "
           "unlearned, and a value beyond 1 says nothing of the method. Not testable where no approximate method is "
           "read as forgotten.")
    if blind:
        why += (f" No seed can tell for {', '.join(blind)}: the untouched model's estimate is itself outside the band "
                "or undefined (nan: the mixture is not identifiable) on every seed.")
    return Finding("forget fraction and method: " + "; ".join(parts), combine(verdicts) if verdicts else UNTESTABLE,
                   why, points=True)


def _defined_std(per_seed: list[float]) -> float:
    """The seeds' sample std (ddof = 1) of the defined estimates; NaN with fewer than two (no spread to read)."""
    v = np.asarray(per_seed, dtype=float)
    v = v[np.isfinite(v)]
    return seed_std(v) if v.size > 1 else float("nan")


def smi_ranking(recs: dict[str, dict], *, name: str = "unlearning-audit", audit: str = "smi-m") -> Finding:
    """SMI-M's ranking of the approximate unlearning methods, with which neighbours it separates beyond the seeds'
    spread. The paper reads its ranking as the methods' true quality; no ground truth exists for approximate
    methods here, so the claim is not testable: the ranking is shown."""
    table = recs[name]["unlearning"]
    parts = []
    for frac in dict.fromkeys(k.split(" / ")[0] for k in table):
        cells = {k.split(" / ")[1]: v for k, v in table.items()
                 if k.startswith(f"{frac} / ") and k.endswith(f" / {audit}")
                 and k.split(" / ")[1] not in ("none", "retrain") and np.isfinite(v["mean"])}
        ranked = sorted(cells, key=lambda m: -cells[m]["mean"])
        std = {m: _defined_std(cells[m]["per_seed"]) for m in ranked}  # ddof = 1 over the seeds where ρ is defined
        apart = [cells[a]["mean"] - cells[b]["mean"] > std[a] + std[b] for a, b in zip(ranked, ranked[1:])]
        parts.append(f"forget {float(frac):.0%}: " + "".join(
            f"{m} {cells[m]['mean']:.2f} ± {std[m]:.2f}" + ("" if i == len(ranked) - 1 else
                                                                     " > " if apart[i] else " ≈ ")
            for i, m in enumerate(ranked)))
    return Finding(f"{audit} ρ of the forget set, mean ± std over seeds (ddof = 1; nan where one seed is defined; "
                   "'>' where two neighbours differ by more "
                   "than their stds' sum): " + "; ".join(parts), UNTESTABLE,
                   "What an approximate method truly forgot is unknown here (only 'none' and 'retrain' have a known "
                   "ρ), so a ranking cannot be checked against the truth.")


def p_hat_converged(recs: dict[str, dict], *, name: str = "extraction-steps", share: float = UNCONVERGED_SHARE
                    ) -> Finding:
    """The Monte Carlo estimate p̂ has converged in the number of trajectories R: at every step count, the share of
    records whose p̂ moved by more than 2× between R/2 and R is below ``share``, read per seed with its Wilson 95%
    interval over the records (shown below it: converged; above it: against; holding it: inconclusive). One step is
    left out (every order gives the same p̂); a seed where every p̂ is 0 cannot be checked (inconclusive)."""
    rec = recs[name]
    R = rec["experiment"]["extract"].get("trajectories")
    n = len(next(iter(rec["log_p_columns"].values())))
    parts, verdicts = [], []
    for label, entry in rec["steps"].items():
        conv = [s["convergence"] for s in entry["per_seed"]]  # missing in older results: 'not run', said by the caller
        shares = [c["not_converged_fraction"] for c in conv]
        if np.isnan(shares).any():  # a seed where every p̂ is 0: nothing finite to compare, convergence unconfirmed
            if label != "1":
                verdicts.append(INCONCLUSIVE)
            parts.append(f"N = {label}: every p̂ is 0 in a seed, convergence cannot be checked")
            continue
        bounds = [wilson_interval(int(round(x * n)), n) for x in shares]
        if label != "1":  # one step unmasks everything at once: every order gives the same p̂, nothing to converge
            verdicts.append(across_seeds([interval_verdict(share - hi, share - lo) for lo, hi in bounds]))
        parts.append(f"N = {label}: " + ", ".join(f"{pct(x)}% [{pct(lo)}, {pct(hi)}]" for x, (lo, hi) in
                                                    zip(shares, bounds))
                     + f" moved > 2×, median |Δ log p̂| R/2 → R "
                     f"{np.mean([c['median_abs_change_half_to_full'] for c in conv]):.2f} nats")
    return Finding(f"R = {R} trajectories, {n} records; share whose p̂ moved by more than 2× from R/2 to R, per seed "
                   "with its Wilson 95% interval: " + "; ".join(parts), combine(verdicts) if verdicts else UNTESTABLE,
                   f"Converged: fewer than {pct(share)}% of records move by more than 2× from R/2 to R at every step "
                   "count (one step is left out: every order gives it the same p̂). Where more do, the discoverable "
                   "counts at that step count rest on an estimate still moving; a median change of log 2 = 0.69 nats "
                   "is one order carrying the whole mean.", one_seed=one_seed(rec))


UNDEFINED_ERROR = 0.5  # an undefined ρ counts as the mean |ρ − truth| of a guess drawn uniformly from [0, 1]
# an error below this still reads 'none' as kept and 'retrain' as forgotten
TOLERANCE = round(1 - THRESHOLD_FORGOTTEN, 6)
MISREAD = 0.25  # a mean error at or above this on the largest forget set: the audit misreads every set


def _truth_errors(rec: dict, frac: str, audit: str) -> list[float]:
    """Per seed: the mean |ρ − truth| of an audit over 'none' (ρ = 0) and 'retrain' (ρ = 1) at one forget fraction."""
    table = rec["unlearning"]
    per = [[UNDEFINED_ERROR if not np.isfinite(x) else abs(x - truth)
            for x in table[f"{frac} / {m} / {audit}"]["per_seed"]]
           for m, truth in (("none", 0.0), ("retrain", 1.0))]
    return [float(np.mean(pair)) for pair in zip(*per)]


def _err_text(errs: list[float]) -> str:
    return f"{np.mean(errs):.2f} ± {seed_std(errs):.2f}"


def smi_bandwidth(recs: dict[str, dict], *, name: str = "unlearning-sensitivity") -> Finding:
    """SMI-M is sensitive to a too-narrow bandwidth, less to the kernel: at the largest forget set, seed by seed on
    points, the narrowest rbf bandwidth's error above the default's (sensitive), and each other kernel moving the error
    by less than that narrow bandwidth does (less to the kernel); each one comparison."""
    rec = recs[name]
    variants = rec["experiment"].get("smi_m_variants", {})
    frac = max(dict.fromkeys(k.split(" / ")[0] for k in rec["unlearning"]), key=float)
    narrow = sorted((label for label, v in variants.items() if v.get("kernel", "rbf") == "rbf"
                     and v.get("bandwidth_factor", 1.0) < 1), key=lambda label: variants[label]["bandwidth_factor"])
    kernels = [label for label, v in variants.items()
               if v.get("kernel", "rbf") != "rbf" and v.get("bandwidth_factor", 1.0) == 1]
    errs = {"rbf 1× (default)": _truth_errors(rec, frac, "smi-m-scores")}
    errs |= {label: _truth_errors(rec, frac, f"smi-m-scores {label}") for label in variants}
    ours = (f"SMI-M on attack-score features, mean |ρ − truth| over 'none' (0) and 'retrain' (1), forget "
            f"{float(frac):.0%}, mean ± std over seeds (ddof = 1): "
            + ", ".join(f"{k} {_err_text(v)}" for k, v in errs.items()))
    if not narrow or not kernels:
        return Finding(ours, UNTESTABLE, "Needs a bandwidth below the default and another kernel.", points=True)
    default = np.asarray(errs["rbf 1× (default)"])
    gain = np.asarray(errs[narrow[0]]) - default
    sensitive = points_verdict(gain)
    margin = {k: gain - np.abs(np.asarray(errs[k]) - default) for k in kernels}  # > 0: the kernel moves it less
    less = {k: points_verdict(d) for k, d in margin.items()}
    why = (f"Sensitive: the narrowest bandwidth ({narrow[0]}) changes the error by {np.mean(gain):+.2f} on average, "
           f"{seed_side(gain, up='worse than the default', down='better than the default')}; less to the kernel: "
           + ", ".join(f"{k} moves it by {np.mean(np.abs(np.asarray(errs[k]) - default)):.2f}, "
                       + seed_side(d, up="less than the narrow bandwidth", down="more than the narrow bandwidth")
                       for k, d in margin.items())
           + f". Only 'none' and 'retrain' have a known ρ; an undefined estimate counts as an error of "
           f"{UNDEFINED_ERROR} (a uniform guess)." + ONE_SEED * one_seed(rec))
    return Finding(ours, combine([sensitive, *less.values()]), why, points=True, one_seed=one_seed(rec))


def smi_min_samples(recs: dict[str, dict], *, name: str = "unlearning-sensitivity", audit: str = "smi-m-scores",
                    enough: int = 20) -> Finding:
    """SMI needs about ``enough`` samples: below it the audit misreads the known ρ ('none' 0, 'retrain' 1: its error
    at or past the tolerance, under which it still reads both right), at or above it reads them right; each set one
    comparison on points, seed by seed. Not testable where the audit misreads even the largest set (error ≥
    :data:`MISREAD`)."""
    rec = recs[name]
    n = rec["n_train"]
    fracs = sorted(dict.fromkeys(k.split(" / ")[0] for k in rec["unlearning"]), key=float)
    size = {f: max(2, int(round(float(f) * n))) for f in fracs}
    errs = {f: np.asarray(_truth_errors(rec, f, audit)) for f in fracs}
    ours = (f"{audit}, mean |ρ − truth| over 'none' (0) and 'retrain' (1), mean ± std over seeds (ddof = 1), by forget "
            "set size: " + ", ".join(f"{size[f]} texts {_err_text(errs[f])}" for f in fracs))
    small, big = [f for f in fracs if size[f] < enough], [f for f in fracs if size[f] >= enough]
    why = (f"Each forget set against {rec['n_nonmembers'] // 2} retain and {rec['n_nonmembers'] // 2} held-out "
           f"reference texts (the paper's 'per class' read as the forget set's size). Needs about {enough}: below it "
           f"the error reaches the tolerance {TOLERANCE:.1f} on every seed (it misreads 'none' or 'retrain'), at or "
           "above it stays under it on every seed.")
    if not small or not big:
        return Finding(ours, UNTESTABLE, why + " Needs a set below and one at or above that size.", points=True)
    if np.mean(errs[fracs[-1]]) >= MISREAD:
        return Finding(ours, UNTESTABLE, why + f" The audit misreads even {size[fracs[-1]]} texts (error "
                       f"{np.mean(errs[fracs[-1]]):.2f} ≥ {MISREAD:g}), so no sample-size limit can show.", points=True)
    below = {f: points_verdict(errs[f] - TOLERANCE) for f in small}
    above = {f: points_verdict(TOLERANCE - errs[f]) for f in big}
    why += (f" Below {enough}: " + ", ".join(f"{size[f]} texts "
                                           + seed_side(errs[f] - TOLERANCE, up="past the tolerance", down="under it")
                                           for f in small)
            + "; at or above: " + ", ".join(f"{size[f]} texts "
                                            + seed_side(TOLERANCE - errs[f], up="under it", down="past it")
                                            for f in big) + "." + ONE_SEED * one_seed(rec))
    return Finding(ours, combine([*below.values(), *above.values()]), why, points=True, one_seed=one_seed(rec))
