"""Claims of the SMI and DLM-extraction papers beyond their main rows: SMI's illusory forgetting, its ranking of
approximate unlearning methods, its bandwidth and sample-size sensitivity, and the convergence of the extraction
estimate p̂ in the number of trajectories. Every verdict by the rule of :mod:`lmaudit.claims.verdicts`; each SMI
error carries the interval of :data:`lmaudit.claims.smi.ERRORS`."""

from __future__ import annotations

import numpy as np

from lmaudit.claims.base import (
    AT_THIS_SIZE,
    REPRODUCED,
    UNCONVERGED_SHARE,
    UNTESTABLE,
    Finding,
    judged_seeds,
    pct,
    seed_count,
    spread,
)
from lmaudit.claims.intervals import rho_interval
from lmaudit.claims.smi import ERRORS, gap, judged, truth_error
from lmaudit.claims.verdicts import category, combine, single
from lmaudit.extraction.reconstruct import wilson_interval

THRESHOLD_FORGOTTEN = 0.9  # a per-sample audit reads the forget set as forgotten at this ρ
ANOMALY_TOL = 0.1  # the audits' anomaly band [−0.1, 1.1] (lmaudit.audit.smi's default anomaly_tol)
ANOMALY = 1 + ANOMALY_TOL  # an unclipped SMI-M estimate above this puts the forget set beyond the non-members
TOLERANCE = round(1 - THRESHOLD_FORGOTTEN, 6)  # an error below this still reads 'none' as kept, 'retrain' forgotten
MISREAD = 0.25  # a mean error at or above this on the largest forget set: the audit misreads every set


def smi_illusory(recs: dict[str, dict], *, name: str = "unlearning-audit", audit: str = "smi-m") -> Finding:
    """Illusory forgetting: where the per-sample (threshold) audits read an approximate method's forget set as
    forgotten, its unclipped SMI-M estimate lies beyond the anomaly band (the forget set past the non-members):
    per seed, unclipped ρ − 1.1 with the 95% interval widened from the stored 90% one (no size: read on the
    direction). A seed whose untouched model's estimate lies outside the band [−0.1, 1.1] (or is undefined) misplaces
    even a set nobody unlearned: that seed is not testable here."""
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
        seeds, per = [], []
        for i, (x, c) in enumerate(zip(raw[key], control)):
            iv = rho_interval(rec, key, i, unclipped=True)
            if x is None or not np.isfinite(x) or c is None or not -ANOMALY_TOL <= c <= ANOMALY:
                per.append(None)
                continue
            seeds.append(i)
            per.append({"diff": x - ANOMALY, "ci95": [iv[0] - ANOMALY, iv[1] - ANOMALY]} if iv else "points")
        judged_ = [p for p in per if isinstance(p, dict)]
        text, v = judged_seeds(judged_, scale=1, digits=2) if judged_ else ("", single(UNTESTABLE))
        v = combine([v] * bool(judged_) + [single(UNTESTABLE)] * per.count(None)
                    + [single("points only")] * per.count("points"))
        verdicts.append(v)
        parts.append(f"{frac} {method}: per-sample audits ρ ≥ {min(thresholds):.2f}, unclipped {audit} "
                     + ", ".join(f"{x:.2f}" for x in raw[key]) + " (untouched model: "
                     + ", ".join(f"{c:.2f}" for c in control) + f"; seeds that can tell: {len(seeds)}/{len(raw[key])})"
                     + (f"; ρ − {ANOMALY} on them {text}" if judged_ else ""))
        if not seeds:
            blind.append(f"{frac} {method}")
    why = (f"Judged where every per-sample audit reads ρ ≥ {THRESHOLD_FORGOTTEN} (forgotten): the claim holds there "
           f"when the unclipped {audit} estimate exceeds {ANOMALY} (a forget set past the non-members, which a "
           "member-vs-non-member classifier mistakes for forgotten). A seed can tell when its estimate is defined and "
           f"the untouched model's own estimate lies inside the anomaly band [{-ANOMALY_TOL}, {ANOMALY}]. Not "
           "testable where no approximate method is read as forgotten.")
    if blind:
        why += (f" No seed can tell for {', '.join(blind)}: the untouched model's estimate is itself outside the band "
                "or undefined (nan: the mixture is not identifiable) on every seed.")
    return Finding("forget fraction and method: " + "; ".join(parts),
                   combine(verdicts) if verdicts else single(UNTESTABLE), why)


RANK_NEEDS = ("the known forgotten share of each approximate method's forget set (`known_rho`: {\"FRAC / METHOD\": "
              "ρ}), which no unlearning here can give")


def smi_ranking(recs: dict[str, dict], *, name: str = "unlearning-audit", audit: str = "smi-m") -> Finding:
    """SMI-M's ranking of the approximate unlearning methods: for each pair of methods whose true forgotten shares are
    stored (``known_rho``), SMI-M's ρ of the one that forgot more − the other's per seed with the interval from their
    far ends, against the true difference. No unlearning here knows what an approximate method forgot: without
    ``known_rho`` the ranking is shown and the claim is not testable here."""
    rec = recs[name]
    table, known = rec["unlearning"], rec.get("known_rho") or {}
    parts, verdicts = [], []
    for frac in dict.fromkeys(k.split(" / ")[0] for k in table):
        cells = {k.split(" / ")[1]: v for k, v in table.items()
                 if k.startswith(f"{frac} / ") and k.endswith(f" / {audit}")
                 and k.split(" / ")[1] not in ("none", "retrain") and np.isfinite(v["mean"])}
        ranked = sorted(cells, key=lambda m: -cells[m]["mean"])
        std = {m: spread(cells[m]["per_seed"])[1] if np.isfinite(cells[m]["per_seed"]).sum() > 1 else float("nan")
               for m in ranked}
        parts.append(f"forget {float(frac):.0%}: " + ", ".join(f"{m} {cells[m]['mean']:.2f} ± {std[m]:.2f}"
                                                             for m in ranked))
        truth = {m: known[f"{frac} / {m}"] for m in ranked if f"{frac} / {m}" in known}
        order = sorted(truth, key=lambda m: -truth[m])
        for a, b in zip(order, order[1:]):
            if truth[a] <= truth[b]:
                continue
            diffs = []
            for i in range(seed_count(rec)):
                ia, ib = (rho_interval(rec, f"{frac} / {m} / {audit}", i) for m in (a, b))
                ra, rb = (cells[m]["per_seed"][i] for m in (a, b))
                diffs.append(gap((ra, *ia), (rb, *ib)) if ia and ib else None)
            text, v = judged(diffs, effect=truth[a] - truth[b])
            verdicts.append(v)
            parts[-1] += f"; {a} − {b} {text} (truth {truth[a] - truth[b]:+.2f})"
    ours = (f"{audit} ρ of the forget set, mean ± std over seeds (ddof = 1; nan where one seed is defined): "
            + "; ".join(parts))
    if not verdicts:
        return Finding(ours, single(UNTESTABLE), "What an approximate method truly forgot is unknown here (only "
                       "'none' and 'retrain' have a known ρ), so a ranking cannot be checked against the truth; it "
                       f"needs {RANK_NEEDS}.")
    return Finding(ours, combine(verdicts), "Each pair of methods with a known forgotten share, per seed.")


PAPER_ORDERS = 512  # the DLM-extraction paper's number of sampled unmasking orders R


def p_hat_converged(recs: dict[str, dict], *, name: str = "extraction-steps", share: float = UNCONVERGED_SHARE
                    ) -> Finding:
    """The Monte Carlo estimate p̂ has converged in the number of trajectories R: at every step count and seed, the
    share of records whose p̂ moved by more than 2× between R/2 and R, with its Wilson 95% interval, oriented as
    ``share`` − that share (lmaudit's criterion; no size: read on the direction). At an R below the paper's
    :data:`PAPER_ORDERS`, an estimate not shown to converge says our R is too small, not that the paper's estimate
    moves: not testable at R. One step is left out (every order gives the same p̂); a seed where every p̂ is 0 cannot
    be checked (not testable at this size)."""
    rec = recs[name]
    R = rec["experiment"]["extract"].get("trajectories")
    n = len(next(iter(rec["log_p_columns"].values())))
    parts, verdicts = [], []
    for label, entry in rec["steps"].items():
        conv = [s["convergence"] for s in entry["per_seed"]]  # missing in older results: 'not run', said by the caller
        shares = [c["not_converged_fraction"] for c in conv]
        if label == "1":  # one step unmasks everything at once: every order gives the same p̂, nothing to converge
            continue
        seeds = []
        for x in shares:
            if not np.isfinite(x):
                seeds.append((AT_THIS_SIZE, "every p̂ is 0, not checkable"))
                continue
            lo, hi = wilson_interval(int(round(x * n)), n)
            word = category(share - hi, share - lo)
            if R is not None and R < PAPER_ORDERS and word != REPRODUCED:
                word = AT_THIS_SIZE
            seeds.append((word, f"{pct(x)}% [{pct(lo)}, {pct(hi)}]"))
        verdicts.append(combine(w for w, _ in seeds))
        parts.append(f"N = {label}: " + ", ".join(t for _, t in seeds) + " moved > 2×, median |Δ log p̂| R/2 → R "
                     f"{np.mean([c['median_abs_change_half_to_full'] for c in conv]):.2f} nats "
                     f"({verdicts[-1].counts})")
    small = R is not None and R < PAPER_ORDERS
    return Finding(f"R = {R} trajectories, {n} records; share whose p̂ moved by more than 2× from R/2 to R, per seed "
                   "with its Wilson 95% interval: " + "; ".join(parts), combine(verdicts) if verdicts else
                   single(UNTESTABLE),
                   f"Converged: fewer than {pct(share)}% of records move by more than 2× from R/2 to R at every step "
                   "count (one step is left out). A median change of log 2 = 0.69 nats is one order carrying the whole "
                   "mean." + (f" Not testable at R = {R}: the paper samples {PAPER_ORDERS} orders, and an estimate not "
                              f"yet converged at {R} says nothing of one at {PAPER_ORDERS}." if small else ""),
                   one_seed=seed_count(rec) < 2)


def _errors(rec: dict, frac: str, audit: str) -> list[tuple | None]:
    return [truth_error(rec, frac, audit, i) for i in range(seed_count(rec))]


def _err_text(errs: list[tuple | None]) -> str:
    m, s = spread([e[0] for e in errs if e is not None])
    return f"{m:.2f} ± {s:.2f}"


NARROW_EFFECT = 0.898 - 0.244  # RBF at 1× 89.8% vs 0.25× 24.4% (CIFAR-100, forget 5%)
KERNEL_EFFECT = NARROW_EFFECT - (0.898 - 0.801)  # the narrow bandwidth's move beyond the largest kernel's (Laplacian)


def smi_bandwidth(recs: dict[str, dict], *, name: str = "unlearning-sensitivity") -> Finding:
    """SMI-M is sensitive to a too-narrow bandwidth, less to the kernel: at the largest forget set, per seed, the
    narrowest rbf bandwidth's error − the default's (against the paper's move :data:`NARROW_EFFECT`), and for each
    other kernel that move − the kernel's |move| (against :data:`KERNEL_EFFECT`), each with the interval from the far
    ends of the errors'."""
    rec = recs[name]
    variants = rec["experiment"].get("smi_m_variants", {})
    frac = max(dict.fromkeys(k.split(" / ")[0] for k in rec["unlearning"]), key=float)
    narrow = sorted((label for label, v in variants.items() if v.get("kernel", "rbf") == "rbf"
                     and v.get("bandwidth_factor", 1.0) < 1), key=lambda label: variants[label]["bandwidth_factor"])
    kernels = [label for label, v in variants.items()
               if v.get("kernel", "rbf") != "rbf" and v.get("bandwidth_factor", 1.0) == 1]
    errs = {"rbf 1× (default)": _errors(rec, frac, "smi-m-scores")}
    errs |= {label: _errors(rec, frac, f"smi-m-scores {label}") for label in variants}
    ours = (f"SMI-M on attack-score features, mean |ρ − truth| over 'none' (0) and 'retrain' (1), forget "
            f"{float(frac):.0%}, mean ± std over seeds (ddof = 1): "
            + ", ".join(f"{k} {_err_text(v)}" for k, v in errs.items()))
    if not narrow or not kernels:
        return Finding(ours, single(UNTESTABLE), "Needs a bandwidth below the default and another kernel.")
    default = errs["rbf 1× (default)"]
    moves = [gap(x, d) for x, d in zip(errs[narrow[0]], default)]
    text, sensitive = judged(moves, effect=NARROW_EFFECT)
    verdicts, lines = [sensitive], [f"narrowest ({narrow[0]}) − default {text}"]
    for k in kernels:
        per = []
        for move, x, d in zip(moves, errs[k], default):
            km = gap(x, d)
            if move is None or km is None:
                per.append(None)
                continue
            lo, hi = km["ci95"]
            a_lo, a_hi = (0.0, max(-lo, hi)) if lo <= 0 <= hi else sorted((abs(lo), abs(hi)))
            per.append({"diff": move["diff"] - abs(km["diff"]), "ci95": [move["ci95"][0] - a_hi,
                                                                         move["ci95"][1] - a_lo]})
        text, v = judged(per, effect=KERNEL_EFFECT)
        verdicts.append(v)
        lines.append(f"the narrow move − {k}'s |move| {text}")
    return Finding(ours + f"; per seed ({ERRORS}): " + "; ".join(lines), combine(verdicts),
                   f"Only 'none' and 'retrain' have a known ρ; the paper's moves: bandwidth {NARROW_EFFECT:+.3f}, "
                   f"beyond the kernel's {KERNEL_EFFECT:+.3f}.", one_seed=seed_count(rec) < 2)


def smi_min_samples(recs: dict[str, dict], *, name: str = "unlearning-sensitivity", audit: str = "smi-m-scores",
                    enough: int = 20) -> Finding:
    """SMI needs about ``enough`` samples: per set and seed, below it the audit's error past the tolerance (error −
    tolerance above 0: it misreads 'none' or 'retrain'), at or above it under it (tolerance − error above 0), each
    with the error's interval (no size: read on the direction). Not testable here where the audit misreads even the
    largest set (mean error ≥ :data:`MISREAD`)."""
    rec = recs[name]
    n = rec["n_train"]
    fracs = sorted(dict.fromkeys(k.split(" / ")[0] for k in rec["unlearning"]), key=float)
    size = {f: max(2, int(round(float(f) * n))) for f in fracs}
    errs = {f: _errors(rec, f, audit) for f in fracs}
    ours = (f"{audit}, mean |ρ − truth| over 'none' (0) and 'retrain' (1), mean ± std over seeds (ddof = 1), by forget "
            "set size: " + ", ".join(f"{size[f]} texts {_err_text(errs[f])}" for f in fracs))
    small, big = [f for f in fracs if size[f] < enough], [f for f in fracs if size[f] >= enough]
    why = (f"Each forget set against {rec['n_nonmembers'] // 2} retain and {rec['n_nonmembers'] // 2} held-out "
           f"reference texts (the paper's 'per class' read as the forget set's size). Needs about {enough}: below it "
           f"the error past the tolerance {TOLERANCE:.1f}, at or above it under it.")
    if not small or not big:
        return Finding(ours, single(UNTESTABLE), why + " Needs a set below and one at or above that size.")
    largest = [e[0] for e in errs[fracs[-1]] if e is not None]
    if largest and np.mean(largest) >= MISREAD:
        return Finding(ours, single(UNTESTABLE), why + f" The audit misreads even {size[fracs[-1]]} texts (error "
                       f"{np.mean(largest):.2f} ≥ {MISREAD:g}), so no sample-size limit can show.")
    verdicts, lines = [], []
    for f in fracs:
        sign = 1 if f in small else -1
        per = [None if e is None else {"diff": sign * (e[0] - TOLERANCE),
                                       "ci95": sorted([sign * (e[1] - TOLERANCE), sign * (e[2] - TOLERANCE)])}
               for e in errs[f]]
        text, v = judged(per)
        verdicts.append(v)
        lines.append(f"{size[f]} texts, {'error − tolerance' if sign > 0 else 'tolerance − error'} {text}")
    return Finding(ours + f"; per seed ({ERRORS}): " + "; ".join(lines), combine(verdicts), why,
                   one_seed=seed_count(rec) < 2)
