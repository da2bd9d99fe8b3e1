"""Claims of the Gap-K%, SMI and DLM-extraction papers beyond their main rows: Gap-K% against Min-K% and at low FPR,
its component ablation, SMI's illusory forgetting and its ranking of approximate unlearning methods, and the
convergence of the extraction estimate p̂ in the number of trajectories."""

from __future__ import annotations

import numpy as np

from lmaudit.metrics import seed_std
from lmaudit.report.claims_base import (
    NOT_REPRODUCED,
    ONE_SEED,
    PARTLY,
    REPRODUCED,
    UNCONVERGED_SHARE,
    UNTESTABLE,
    Finding,
    one_seed,
    pct,
    per_seed,
    seed_order,
)

PRETRAINING = "ar-pretraining-detection"


def _verdict(orders: list[str], rec: dict) -> str:
    """Reproduced when every cell is 'above' (on every seed), not reproduced when none is, else partly; one seed
    leaves a point difference with nothing to measure its noise against: not testable."""
    if one_seed(rec):
        return UNTESTABLE
    above = sum(o == "above" for o in orders)
    return REPRODUCED if orders and above == len(orders) else NOT_REPRODUCED if not above else PARTLY



def gap_beats_min_k(recs: dict[str, dict], *, name: str = PRETRAINING) -> Finding:
    """Gap-K% against plain Min-K% (not Min-K%++), seed by seed, in every exposure setting (points: the stored paired
    interval is of Gap-K% − Min-K%++)."""
    rec = recs[name]
    parts, orders = [], []
    for setting in rec["paired"]:
        g, m = (per_seed(rec, f"{setting}: {a}", "auc") for a in ("gap_k", "min_k"))
        orders.append(seed_order(g, m))
        parts.append(f"{setting}: gap_k {', '.join(pct(x) for x in g)} vs min_k {', '.join(pct(x) for x in m)} "
                     f"({orders[-1]})")
    return Finding("AUC per seed: " + "; ".join(parts), _verdict(orders, rec),
                   "Read seed by seed from the AUCs ('above' on every seed): no paired interval of this difference is "
                   "stored." + ONE_SEED * one_seed(rec), points=True)


def gap_low_fpr(recs: dict[str, dict], *, name: str = PRETRAINING) -> Finding:
    """Gap-K% against Min-K%++ at low FPR. The paper reports TPR at 5% FPR; the experiments store it at 1% and 10%,
    which bracket it: judged on both, seed by seed."""
    rec = recs[name]
    parts, orders = [], []
    for setting in rec["paired"]:
        for metric in ("tpr@1%fpr", "tpr@10%fpr"):
            g, m = (per_seed(rec, f"{setting}: {a}", metric) for a in ("gap_k", "min_k_pp"))
            orders.append(seed_order(g, m))
            parts.append(f"{setting} {metric.replace('tpr@', 'TPR at ').replace('fpr', ' FPR')}: gap_k "
                         f"{', '.join(pct(x) for x in g)} vs min_k_pp {', '.join(pct(x) for x in m)} ({orders[-1]})")
    return Finding("per seed, % of members: " + "; ".join(parts), _verdict(orders, rec),
                   "TPR at 5% FPR is not stored; the stored 1% and 10% bracket it, and the verdict needs both. Read "
                   "seed by seed (no interval of a TPR difference is stored)."
                   + ONE_SEED * one_seed(rec), points=True)


def gap_components(recs: dict[str, dict], *, name: str = PRETRAINING) -> Finding:
    """The ablation's two halves: top-1 gap without smoothing (the 'smooth=none' row) against full Gap-K%, which can
    be tested; smoothing of Min-K%++ without the top-1 gap, which lmaudit does not implement."""
    rec = recs[name]
    parts, below = [], []
    for setting in rec["paired"]:
        full, top1 = (per_seed(rec, f"{setting}: {row}", "auc") for row in ("gap_k", "gap_k smooth=none"))
        below.append(seed_order(top1, full) == "below")
        parts.append(f"{setting}: top-1 only {pct(np.mean(top1))} vs full {pct(np.mean(full))}")
    verdict = UNTESTABLE if one_seed(rec) else PARTLY if below and all(below) else NOT_REPRODUCED
    return Finding("mean AUC over seeds: " + "; ".join(parts) + "; smoothing only: not measured", verdict,
                   "Partly at best: 'smoothing only' (Min-K%++ with sequential smoothing) is not an attack here, so "
                   "half of the ablation is untested; the other half holds only where top-1 only is below the full "
                   "score on every seed." + ONE_SEED * one_seed(rec), points=True)


THRESHOLD_FORGOTTEN = 0.9  # a per-sample audit reads the forget set as forgotten at this ρ
ANOMALY = 1.1  # an unclipped SMI-M estimate above this puts the forget set beyond the non-members


def smi_illusory(recs: dict[str, dict], *, name: str = "unlearning-audit", audit: str = "smi-m") -> Finding:
    """Illusory forgetting: where the per-sample (threshold) audits read an approximate method's forget set as
    forgotten, the set is not a mixture of members and non-members: its unclipped SMI-M estimate lies beyond 1 (the
    forget set sits past the non-members, as the negative gradient pushes it). Judged on the seeds where the audit
    can tell: its estimate is defined, and the untouched model's (``none``) is not itself beyond 1 on that seed."""
    rec = recs[name]
    table, raw = rec["unlearning"], rec["rho_unclipped"]  # missing in older results: 'not run', said by the caller
    parts, flags, blind = [], [], []
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
                 if x is not None and np.isfinite(x) and c is not None and np.isfinite(c) and c <= ANOMALY]
        parts.append(f"{frac} {method}: per-sample audits ρ ≥ {min(thresholds):.2f}, unclipped {audit} "
                     + ", ".join(f"{x:.2f}" for x in raw[key]) + " (untouched model: "
                     + ", ".join(f"{c:.2f}" for c in control) + f"; seeds that can tell: {len(seeds)}/{len(raw[key])})")
        if not seeds:
            blind.append(f"{frac} {method}")
            continue
        flags.append(all(raw[key][i] > ANOMALY for i in seeds))
    verdict = (UNTESTABLE if not flags else REPRODUCED if all(flags) else PARTLY if any(flags) else NOT_REPRODUCED)
    why = (f"Judged where every per-sample audit reads ρ ≥ {THRESHOLD_FORGOTTEN} (forgotten): the claim holds there "
           f"when the unclipped {audit} estimate exceeds {ANOMALY} on every seed that can tell (a forget set past the "
           "non-members, which a member-vs-non-member classifier mistakes for forgotten). A seed can tell when its "
           f"estimate is defined and the untouched model's own estimate is not beyond {ANOMALY} too; otherwise the "
           "audit places even a forget set nobody unlearned past the non-members, and a high value says nothing of "
           "the method. Not testable where no approximate method is read as forgotten.")
    if blind:
        why += (f" No seed can tell for {', '.join(blind)}: the untouched model's estimate is itself beyond "
                f"{ANOMALY} or undefined (nan: the mixture is not identifiable) on every seed.")
    return Finding("forget fraction and method: " + "; ".join(parts), verdict, why, points=True)


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
    """The Monte Carlo estimate p̂ has converged in the number of trajectories R: at every step count, at most
    ``share`` of the records moved by more than 2× between R/2 and R (one step: every order gives the same p̂)."""
    rec = recs[name]
    R = rec["experiment"]["extract"].get("trajectories")
    parts, ok = [], []
    for label, entry in rec["steps"].items():
        conv = [s["convergence"] for s in entry["per_seed"]]  # missing in older results: 'not run', said by the caller
        shares = [c["not_converged_fraction"] for c in conv]
        if np.isnan(shares).any():  # a seed where every p̂ is 0: nothing finite to compare, convergence unconfirmed
            if label != "1":
                ok.append(False)
            parts.append(f"N = {label}: every p̂ is 0 in a seed, convergence cannot be checked")
            continue
        moved = max(shares)
        if label != "1":  # one step unmasks everything at once: every order gives the same p̂, nothing to converge
            ok.append(moved <= share)
        parts.append(f"N = {label}: {pct(moved)}% moved > 2×, median |Δ log p̂| R/2 → R "
                     f"{np.mean([c['median_abs_change_half_to_full'] for c in conv]):.2f} nats")
    verdict = UNTESTABLE if not ok else REPRODUCED if all(ok) else PARTLY if any(ok) else NOT_REPRODUCED
    return Finding(f"R = {R} trajectories; records whose p̂ moved by more than 2× from R/2 to R: " + "; ".join(parts),
                   verdict, f"Converged: at most {pct(share)}% of records move by more than 2× from R/2 to R at every "
                   "step count (one step is left out: every order gives it the same p̂). Where more do, the "
                   "discoverable counts at that step count rest on an estimate still moving; a median change of "
                   "log 2 = 0.69 nats is one order carrying the whole mean.", points=True)


UNDEFINED_ERROR = 0.5  # an undefined ρ counts as the mean |ρ − truth| of a guess drawn uniformly from [0, 1]
# an error below this still reads 'none' as kept and 'retrain' as forgotten
TOLERANCE = round(1 - THRESHOLD_FORGOTTEN, 6)


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
    """SMI-M is sensitive to a too-narrow bandwidth, less to the kernel: at the largest forget set, the error of the
    narrowest rbf bandwidth exceeds the default's by more than the seeds' spread (sum of stds, ddof = 1), and every
    other kernel moves the error by less than that narrow bandwidth does (points)."""
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
    if not narrow or not kernels or one_seed(rec):
        return Finding(ours, UNTESTABLE, "Needs a bandwidth below the default, another kernel and two seeds.",
                       points=True)
    default, worst = errs["rbf 1× (default)"], errs[narrow[0]]
    gain = np.mean(worst) - np.mean(default)
    sensitive = gain > seed_std(worst) + seed_std(default)
    moves = {k: abs(np.mean(errs[k]) - np.mean(default)) for k in kernels}
    less = all(v < gain for v in moves.values())
    verdict = REPRODUCED if sensitive and less else PARTLY if sensitive or less else NOT_REPRODUCED
    why = (f"Sensitive: the narrowest bandwidth ({narrow[0]}) changes the error by {gain:+.2f}, "
           + ("more" if sensitive else "not more") + " than the seeds' spread; less to the kernel: "
           + ", ".join(f"{k} moves it by {v:.2f}" for k, v in moves.items())
           + (" (each less)" if less else " (not all less)") + ". Only 'none' and 'retrain' have a known ρ; an "
           f"undefined estimate counts as an error of {UNDEFINED_ERROR} (a uniform guess).")
    return Finding(ours, verdict, why, points=True)


def smi_min_samples(recs: dict[str, dict], *, name: str = "unlearning-sensitivity", audit: str = "smi-m-scores",
                    enough: int = 20) -> Finding:
    """SMI needs about ``enough`` samples: below it the error against the known ρ ('none' 0, 'retrain' 1) exceeds the
    largest forget set's by more than the seeds' spread and is past the tolerance (an error under it still reads
    both right), and at or above it the error is within that spread of it (points). Not testable where the audit
    misreads even the largest set (error ≥ 0.25)."""
    rec = recs[name]
    n = rec["n_train"]
    fracs = sorted(dict.fromkeys(k.split(" / ")[0] for k in rec["unlearning"]), key=float)
    size = {f: max(2, int(round(float(f) * n))) for f in fracs}
    errs = {f: _truth_errors(rec, f, audit) for f in fracs}
    ours = (f"{audit}, mean |ρ − truth| over 'none' (0) and 'retrain' (1), mean ± std over seeds (ddof = 1), by forget "
            "set size: " + ", ".join(f"{size[f]} texts {_err_text(errs[f])}" for f in fracs))
    small, big = [f for f in fracs if size[f] < enough], [f for f in fracs if size[f] >= enough]
    largest = errs[fracs[-1]]
    why = (f"Each forget set against {rec['n_nonmembers'] // 2} retain and {rec['n_nonmembers'] // 2} held-out "
           f"reference texts (the paper's 'per class' read as the forget set's size). Needs about {enough}: below it "
           f"the error exceeds the largest set's by more than the seeds' spread and reaches {TOLERANCE:.1f}, at or "
           "above it stays within that spread.")
    if not small or len(big) < 2 or one_seed(rec):
        return Finding(ours, UNTESTABLE, why + " Needs a set below and two at or above that size, and two seeds.",
                       points=True)
    if np.mean(largest) >= 0.25:
        return Finding(ours, UNTESTABLE, why + f" The audit misreads even {size[fracs[-1]]} texts (error "
                       f"{np.mean(largest):.2f} ≥ 0.25), so no sample-size limit can show.", points=True)
    spread = lambda f: seed_std(errs[f]) + seed_std(largest)  # noqa: E731
    worse = all(np.mean(errs[f]) - np.mean(largest) > spread(f) for f in small)
    degrades = worse and all(np.mean(errs[f]) >= TOLERANCE for f in small)
    stable = all(abs(np.mean(errs[f]) - np.mean(largest)) <= spread(f) for f in big)
    verdict = REPRODUCED if degrades and stable else PARTLY if degrades or stable else NOT_REPRODUCED
    why += (f" Below {enough}: " + ("worse beyond the spread and past the tolerance" if degrades else
                                    f"worse beyond the spread, but its error stays under {TOLERANCE:.1f}, so it still "
                                    "reads 'none' as kept and 'retrain' as forgotten" if worse else
                                    "not worse beyond the spread")
            + "; at or above: " + ("within the spread" if stable else "not within the spread") + ".")
    return Finding(ours, verdict, why, points=True)
