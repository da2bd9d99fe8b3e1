"""The Q-Skew paper's claims: membership inference on DLMs and the asymmetry (its PII reconstruction: claims_pii)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lmaudit.report.claims_base import (
    NOT_REPRODUCED,
    PARTLY,
    REPRODUCED,
    UNTESTABLE,
    Finding,
    auc_text,
    paired_lines,
    pct,
)

# ---------------------------------------------------------------- the Q-Skew regime study, shared by several claims

def regimes_cells(rec: dict, vs: str) -> tuple[int, int, int, list[str]]:
    """Over the cells of dlm-regimes: (ahead, tied, behind) of q_skew − ``vs`` and the cells where Q-Skew is ahead."""
    ahead = tied = behind = 0
    where = []
    for label, cell in rec["cells"].items():
        _, lo, hi = cell["paired"][vs]
        if lo > 0:
            ahead += 1
            where.append(label)
        elif hi < 0:
            behind += 1
        else:
            tied += 1
    return ahead, tied, behind, where


def regimes_why(recs: dict[str, dict], name: str = "dlm-regimes") -> str:
    """One sentence from a regimes experiment: where the ordering flips, and the Δ statistics that say why."""
    rec = recs.get(name)
    if rec is None:
        return f"The regime study (`experiments/{name}.toml`) has not been run."
    a, t, b, where = regimes_cells(rec, "calibration")
    n = a + t + b
    dm = np.array([[c["delta"]["members"][k] for k in ("mean", "skew")] for c in rec["cells"].values()])
    dn = np.array([[c["delta"]["nonmembers"][k] for k in ("mean", "skew")] for c in rec["cells"].values()])
    flips = f"ahead in {a} ({', '.join(where)})" if a else "ahead in none"
    seps = [c["delta"].get("separation") for c in rec["cells"].values()]
    sep = ""
    if all(seps):
        dmean, dskew = np.array([x["d_mean"] for x in seps]), np.array([x["d_skew"] for x in seps])
        sep = (f" Across texts, the per-text mean Δ separates members from non-members by d = {dmean.mean():.2f} "
               f"on average (range {dmean.min():.2f}–{dmean.max():.2f}), the per-text skewness by d = "
               f"{dskew.mean():.2f} ({dskew.min():.2f}–{dskew.max():.2f}); d(mean) > d(skew) in "
               f"{int((dmean > dskew).sum())}/{len(seps)} regimes.")
    modes = [c["settings"].get("mode", "dft") for c in rec["cells"].values()]
    kinds = ", ".join(f"{modes.count(m)} {m.upper()}" for m in dict.fromkeys(modes))
    return (f"{name} ({n} fine-tuning regime{'s' * (n > 1)}: {kinds}): Q-Skew − masked calibration is {flips}, tied in "
            f"{t}, behind in {b}. Over the cells, members' mean Δ is {dm[:, 0].mean():.2f} vs non-members' "
            f"{dn[:, 0].mean():.2f} (a shift of location), while members' Δ skewness is {dm[:, 1].mean():+.2f} vs "
            f"non-members' {dn[:, 1].mean():+.2f}: a mean of loss gaps (calibration) reads the location shift, which a "
            f"skewness ignores by construction.{sep} Possible reason for the papers' ordering: 8B models fine-tuned "
            "on a few thousand texts may sit where Theorem 3.2's right skew dominates the shift.")


# ---------------------------------------------------------------- judges

def q_skew_beats_baselines(name: str, regimes: str = "dlm-regimes") -> Callable[[dict], Finding]:
    def judge(recs: dict[str, dict]) -> Finding:
        rec = recs[name]
        lines, counts = paired_lines(rec)
        beaten = [o for o, (a, t, b) in counts.items() if a == a + t + b]
        ahead_of_q = [o for o, (a, t, b) in counts.items() if b == a + t + b]
        verdict = (REPRODUCED if len(beaten) == len(counts) else NOT_REPRODUCED if ahead_of_q else PARTLY)
        ours = (f"Q-Skew AUC {auc_text(rec, 'q_skew')}; AUC(q_skew) − AUC(baseline), each seed with its paired "
                f"95% interval: " + "; ".join(lines))
        if ahead_of_q:
            ours += f". Ahead of Q-Skew on every seed: {', '.join(ahead_of_q)}"
        return Finding(ours, verdict, (real_dlm_setting(rec) + " " if rec.get("experiment", {}).get("base") else "")
                       + regimes_why(recs, regimes))
    return judge


def authors_calibration(recs: dict[str, dict], name: str = "dlm-regimes") -> Finding:
    rec = recs[name]
    a, t, b, where = regimes_cells(rec, "calibration unmasked_ratio")
    a2, t2, b2, _ = regimes_cells(rec, "calibration")
    n = a + t + b
    verdict = REPRODUCED if a == n else NOT_REPRODUCED if a == 0 else PARTLY
    ours = (f"Over {n} regime(s) of {name} (one seed each, paired 95% intervals): Q-Skew ahead of the unmasked-ratio "
            f"calibration in {a}{' (' + ', '.join(where) + ')' if where else ''}, tied {t}, behind {b}; against the "
            f"masked-ELBO calibration: ahead {a2}, tied {t2}, behind {b2}.")
    cells = rec["cells"].values()
    higher = sum(c["auc"]["calibration unmasked_ratio"][0] > c["auc"]["calibration"][0] for c in cells)
    weaker = ("neither variant is the weaker baseline everywhere" if 0 < higher < n else
              f"the {'masked ELBO' if higher == n else 'unmasked ratio'} is the weaker baseline in every regime")
    return Finding(ours, verdict, "The authors' calibration reads the clean text with no mask (AR-shifted logits); "
                   "lmaudit's default is the masked ELBO of the published definition, with the authors' way as "
                   f"`calibration.variant=unmasked_ratio`. Its AUC is above the masked ELBO's in {higher}/{n} regimes "
                   f"(points): {weaker}.")


def components_help(recs: dict[str, dict], name: str = "dlm-ablation") -> Finding:
    rec = recs[name]
    lines, counts = paired_lines(rec)
    helps = [o for o, (a, t, b) in counts.items() if a == a + t + b]
    hurts = [o for o, (a, t, b) in counts.items() if b == a + t + b]
    verdict = REPRODUCED if len(helps) == len(counts) else NOT_REPRODUCED if not helps else PARTLY
    ours = f"full Q-Skew AUC {auc_text(rec, rec['paired']['compare'])}; full − variant: " + "; ".join(lines)
    why = "A component 'helps' only when full − variant is above 0 on every seed."
    if hurts:
        why += f" The variant(s) {', '.join(hurts)} beat the full method."
        if any("mean" in o for o in hurts):
            why += (" A mean of Δ reads a shift of its location, which a skewness discards by construction (the "
                    "regime rows compare the two shifts).")
    tied = [o for o in counts if o not in helps and o not in hurts]
    if tied:
        e = rec.get("experiment", {})
        size = (f" at {e['budget']} masked forwards and {e['n_members']} + {e['n_nonmembers']} texts"
                if {"budget", "n_members", "n_nonmembers"} <= set(e) else "")
        why += f" Neither ahead nor behind on every seed{size}: {', '.join(tied)}."
    return Finding(ours, verdict, why)


def rho_maximises(recs: dict[str, dict], name: str = "dlm-rho") -> Finding:
    """ρ = 0.35 is a maximum of Q-Skew's AUC over the swept mask ratios: no other ρ ahead of it on any seed, and the
    curve not flat (it is ahead of some ρ on every seed); another ρ ahead on every seed refutes it; an all-tied sweep
    cannot locate a maximum."""
    rec = recs[name]
    best = rec["paired"]["compare"]
    lines, counts = paired_lines(rec)
    above = [o for o, (a, t, b) in counts.items() if b == a + t + b]  # this ρ beats the compared one on every seed
    sometimes = [o for o, (a, t, b) in counts.items() if b]
    below = [o for o, (a, t, b) in counts.items() if a == a + t + b]
    flat = not sometimes and not any(a for a, _, _ in counts.values())
    verdict = (NOT_REPRODUCED if above else UNTESTABLE if flat else PARTLY if sometimes or not below else REPRODUCED)
    rows = list(rec["rows"])
    ours = (f"Q-Skew AUC by mask ratio: {', '.join(f'{r} {auc_text(rec, r)}' for r in rows)}; AUC({best}) − "
            "AUC(other), each seed with its paired 95% interval: " + "; ".join(lines))
    e = rec.get("experiment", {})
    why = (f"Each ρ gets the same {e.get('budget', 16)} masked forwards per text (a cyclic plan of ⌈1/ρ⌉ chunks a "
           f"round, its last round partial). The gap is read as AUC. A maximum at {best}: no ρ ahead of it on any seed "
           "and it ahead of some ρ on every seed.")
    if above:
        why += f" Ahead of {best} on every seed: {', '.join(above)}."
    elif flat:
        why += " Every ρ is tied with it on every seed: at this size the sweep cannot locate a maximum."
    elif sometimes:
        why += f" Ahead of {best} on some seeds: {', '.join(sometimes)}."
    return Finding(ours, verdict, why)


def misaligned(recs: dict[str, dict]) -> Finding:
    rec = recs["dlm-misaligned-ref"]
    lines, counts = paired_lines(rec)
    keep = [line for line in lines if "/ q_skew" in line]
    costs = {o: c for o, c in counts.items() if o.endswith("/ q_skew")}
    small = all(a < a + t + b for o, (a, t, b) in costs.items())  # golden never ahead on every seed
    means = {k: v["auc"][0] for k, v in rec["rows"].items()}
    strongest = max((k for k in means if k.startswith("golden /") and not k.endswith("q_skew")), key=means.get)
    mis = [k for k in means if k.endswith("/ q_skew") and not k.startswith("golden")]
    above = [k for k in mis if means[k] > means[strongest]]
    verdict = REPRODUCED if small and len(above) == len(mis) else NOT_REPRODUCED if not above else PARTLY
    ours = (f"golden Q-Skew − misaligned Q-Skew (paired): {'; '.join(keep)}. Misaligned Q-Skew AUC "
            + ", ".join(f"{k.split(' /')[0]} {auc_text(rec, k)}" for k in mis)
            + f" vs the strongest golden-reference baseline ({strongest}) {auc_text(rec, strongest)} (points: the "
              "experiment pairs every row with golden Q-Skew only).")
    below = [r.split(" /")[0] for r in means if r.endswith("/ q_skew")
             and means.get(r.replace("q_skew", "calibration"), -1) > means[r]]
    return Finding(ours, verdict, "Misaligned references here: a base pretrained with another seed (the paper: the "
                   "Base/Instruct sibling) and the base fine-tuned on perturbed other passages (the paper's "
                   "para-modification). Q-Skew's mean AUC is below calibration's with the same reference for: "
                   + (", ".join(below) or "none") + ".", points=True)


def over_epochs(recs: dict[str, dict]) -> Finding:
    rec = recs["dlm-epochs"]
    curves = rec["curves"]
    epochs = sorted(next(iter(curves.values())), key=int)
    best = [max(curves, key=lambda a: curves[a][e]["auc"][0]) for e in epochs]
    q_best = [e for e, b in zip(epochs, best) if b == "q_skew"]
    verdict = REPRODUCED if len(q_best) == len(epochs) else NOT_REPRODUCED if not q_best else PARTLY
    ours = ("best AUC per epoch (one seed, points; no interval stored): "
            + ", ".join(f"{e}: {b} {pct(curves[b][e]['auc'][0])} (q_skew {pct(curves['q_skew'][e]['auc'][0])})"
                        for e, b in zip(epochs, best)))
    leaders = {b: [e for e, x in zip(epochs, best) if x == b] for b in dict.fromkeys(best)}
    return Finding(ours, verdict, "Best attack by epoch: " + "; ".join(f"{b} at epoch(s) {', '.join(es)}"
                                                                     for b, es in leaders.items())
                   + f". {len(rec['experiment']['seeds'])} seed(s), points only: read with the paired rows above.",
                   points=True)


def real_dlm_setting(rec: dict) -> str:
    """What the real-weights DLM of an experiment is, from its stored settings."""
    e = rec["experiment"]
    how = f"LoRA rank {e['lora']}" if e.get("lora") else "every weight"
    return (f"`{e['base']}` adapted into a DLM on {e['adapt_tokens']:,} tokens, then fine-tuned ({how}, lr "
            f"{e['lr']:g}) {e['epochs']} epochs on {e['n_members']} passages; {e['n_members']} + "
            f"{e['n_nonmembers']} texts, {e['budget']} masked forwards per mask plan, {len(e['seeds'])} seed(s).")


def asymmetry(recs: dict[str, dict], name: str = "dlm-regimes") -> Finding:
    rec = recs[name]
    cells = rec["cells"]
    m = {k: c["delta"]["members"] for k, c in cells.items()}
    n = {k: c["delta"]["nonmembers"] for k, c in cells.items()}
    pos = [k for k in cells if m[k]["skew"] > 0]
    above = [k for k in cells if m[k]["skew"] > n[k]["skew"]]
    symmetric = [k for k in cells if abs(n[k]["skew"]) < 0.1]  # 'near symmetric': |g₁| below 0.1
    verdict = (REPRODUCED if len(pos) == len(above) == len(symmetric) == len(cells)
               else NOT_REPRODUCED if not above else PARTLY)
    ms = np.array([m[k]["skew"] for k in cells])
    ns = np.array([n[k]["skew"] for k in cells])
    ours = (f"per-text skewness of Δ averaged over texts, {len(cells)} regimes: members {ms.min():+.2f} to "
            f"{ms.max():+.2f} (mean {ms.mean():+.2f}), non-members {ns.min():+.2f} to {ns.max():+.2f} (mean "
            f"{ns.mean():+.2f}); members' skew > 0 in {len(pos)}/{len(cells)}, above non-members' in "
            f"{len(above)}/{len(cells)} (points; one seed per regime).")
    right = sum(v >= 0.1 for v in ns)
    return Finding(ours, verdict, f"Three parts, read separately: members' Δ right-skewed ({len(pos)}/{len(cells)}), "
                   f"more than non-members' ({len(above)}/{len(cells)}, by {np.mean(ms - ns):+.2f} on average), and "
                   f"non-members' near symmetric (|g₁| < 0.1 in {len(symmetric)}/{len(cells)}; right-skewed, g₁ ≥ 0.1, "
                   f"in {right})." + (" Non-members' Δ carries a skew of its own there, so only the members-minus-"
                                      "non-members gap is evidence of membership" if right else
                                      " The members-minus-non-members gap is the evidence of membership")
                   + _skew_beside_location(cells) + ".", points=True)


def _skew_beside_location(cells: dict) -> str:
    """How the skew gap's separation compares with the location shift's (Cohen's d over texts), where stored."""
    seps = [c["delta"].get("separation") for c in cells.values()]
    if not all(seps):
        return ""
    dm, ds = np.mean([x["d_mean"] for x in seps]), np.mean([x["d_skew"] for x in seps])
    return (f"; it separates members by Cohen's d = {ds:.2f} on average, the location shift (per-text mean Δ) by "
            f"d = {dm:.2f}")


def mask_ratio(recs: dict[str, dict]) -> Finding:
    rec = recs["dlm-mask-ratio"]
    ratios = sorted(rec["ratios"], key=float)
    mean = [rec["ratios"][r]["mean_gain"] for r in ratios]
    per = [rec["ratios"][r]["mean_gain_per_exposure"] for r in ratios]
    dec = all(a > b for a, b in zip(mean, mean[1:]))
    dec_per = all(a > b for a, b in zip(per, per[1:]))
    verdict = REPRODUCED if dec else PARTLY if dec_per else NOT_REPRODUCED
    ours = ("mean gain (nats) at mask ratio " + ", ".join(f"{r}: {g:.3f}" for r, g in zip(ratios, mean))
            + "; per exposure " + ", ".join(f"{g:.3f}" for g in per) + " (one seed, points).")
    return Finding(ours, verdict, "Per exposure = mean gain / (ratio × epochs): the gain per time a token is "
                   "masked and trained falls with the ratio (the assumption's per-step form), but a higher ratio "
                   "trains each token more often, so the mean gain per token need not fall.", points=True)
