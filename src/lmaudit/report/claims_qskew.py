"""The Q-Skew paper's claims: membership inference on DLMs and the asymmetry (its PII reconstruction: claims_pii)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lmaudit.report.claims_base import (
    ONE_SEED,
    SEED_WORDS,
    Finding,
    auc_text,
    judged_lines,
    one_seed,
    pct,
    per_seed,
    row_stat,
    seed_intervals,
)
from lmaudit.report.claims_models import weights
from lmaudit.report.verdicts import (
    AGAINST,
    INCONCLUSIVE,
    REPRODUCED,
    SIGN_TEST_SEEDS,
    across_seeds,
    against_paper,
    combine,
    effect_text,
    interval_verdict,
    points_verdict,
    seed_side,
    seed_verdicts,
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

def q_skew_beats_baselines(name: str, regimes: str = "dlm-regimes", *, effect: float | None = None
                           ) -> Callable[[dict], Finding]:
    """Q-Skew − each baseline, per seed with its paired interval, against the paper's smallest margin over the next
    best (``effect``): each baseline one comparison, the claim all of them (any baseline ahead on every seed is
    against it)."""
    def judge(recs: dict[str, dict]) -> Finding:
        rec = recs[name]
        lines, verdicts = judged_lines(rec, effect)
        ahead_of_q = [o for o, v in verdicts.items() if v == AGAINST]
        ours = (f"Q-Skew AUC {auc_text(rec, 'q_skew')}; AUC(q_skew) − AUC(baseline), each seed with its paired "
                f"95% interval, {against_paper(effect)}: " + "; ".join(lines))
        if ahead_of_q:
            ours += f". Ahead of Q-Skew on every seed: {', '.join(ahead_of_q)}"
        return Finding(ours, combine(verdicts.values()),
                       (real_dlm_setting(rec) + " " if rec.get("experiment", {}).get("base") else "")
                       + regimes_why(recs, regimes), one_seed=one_seed(rec))
    return judge


def authors_calibration(recs: dict[str, dict], name: str = "dlm-regimes", *, effect: float | None = None) -> Finding:
    """Q-Skew − the authors' (unmasked-ratio) calibration in every regime of the study, each one seed with its paired
    interval, against the paper's margin ``effect``; the claim is all of them."""
    rec = recs[name]
    cells = rec["cells"].values()
    verdicts = [interval_verdict(*c["paired"]["calibration unmasked_ratio"][1:], effect=effect) for c in cells]
    where = [k for k, v in zip(rec["cells"], verdicts) if v == REPRODUCED]
    a2, t2, b2, _ = regimes_cells(rec, "calibration")
    n = len(verdicts)
    counts = ", ".join(f"{word} {verdicts.count(v)}" for v, word in SEED_WORDS.items() if v in verdicts)
    ours = (f"Over {n} regime(s) of {name} (one seed each, paired 95% intervals, "
            f"{against_paper(effect)}): Q-Skew − the unmasked-ratio calibration {counts}"
            f"{' (ahead: ' + ', '.join(where) + ')' if where else ''}; against the masked-ELBO calibration: ahead "
            f"{a2}, tied {t2}, behind {b2}.")
    higher = sum(c["auc"]["calibration unmasked_ratio"][0] > c["auc"]["calibration"][0] for c in cells)
    weaker = ("neither variant is the weaker baseline everywhere" if 0 < higher < n else
              f"the {'masked ELBO' if higher == n else 'unmasked ratio'} is the weaker baseline in every regime")
    return Finding(ours, combine(verdicts), "The authors' calibration reads the clean text with no mask (AR-shifted "
                   "logits); lmaudit's default is the masked ELBO of the published definition, with the authors' way "
                   f"as `calibration.variant=unmasked_ratio`. Its AUC is above the masked ELBO's in {higher}/{n} "
                   f"regimes (points): {weaker}.", one_seed=True)


def components_help(recs: dict[str, dict], name: str = "dlm-ablation", *, effects: dict | None = None) -> Finding:
    """Full Q-Skew − each variant, per seed with its paired interval, against the paper's drop for that component
    (``effects``); each component helps only where it is ahead on every seed."""
    rec = recs[name]
    lines, verdicts = judged_lines(rec, effects or {})
    helps = [o for o, v in verdicts.items() if v == REPRODUCED]
    hurts = [o for o, v in verdicts.items() if v == AGAINST]
    ours = (f"full Q-Skew AUC {auc_text(rec, rec['paired']['compare'])}; full − variant (the paper's drop: "
            + ", ".join(f"{o} {effect_text((effects or {}).get(o))}" for o in verdicts) + "): " + "; ".join(lines))
    why = "A component 'helps' only when full − variant is above 0 on every seed."
    if hurts:
        why += f" The variant(s) {', '.join(hurts)} beat the full method."
        if any("mean" in o for o in hurts):
            why += (" A mean of Δ reads a shift of its location, which a skewness discards by construction (the "
                    "regime rows compare the two shifts).")
    tied = [o for o in verdicts if o not in helps and o not in hurts]
    if tied:
        e = rec.get("experiment", {})
        size = (f" at {e['budget']} masked forwards and {e['n_members']} + {e['n_nonmembers']} texts"
                if {"budget", "n_members", "n_nonmembers"} <= set(e) else "")
        why += f" Neither ahead nor behind on every seed{size}: {', '.join(tied)}."
    return Finding(ours, combine(verdicts.values()), why, one_seed=one_seed(rec))


def rho_maximises(recs: dict[str, dict], name: str = "dlm-rho") -> Finding:
    """ρ = 0.35 maximises Q-Skew's AUC over the swept mask ratios: AUC(0.35) − AUC(each other ρ) is one comparison
    per ρ, and the claim needs all of them (the authors give no sweep, so no effect size: a tie is inconclusive; another
    ρ ahead on some seeds and behind on none leaves that comparison not reproduced)."""
    rec = recs[name]
    best = rec["paired"]["compare"]
    lines, verdicts = judged_lines(rec)
    above = [o for o, v in verdicts.items() if v == AGAINST]  # this ρ beats the compared one on every seed
    sometimes = [o for o, per in rec["paired"]["vs"].items() if o not in above
                 and any(p["ci95"][1] < 0 for p in per)]
    rows = list(rec["rows"])
    higher = [r for r in rows if r != best and row_stat(rec, r)[0] > row_stat(rec, best)[0]]
    ours = (f"Q-Skew AUC by mask ratio: {', '.join(f'{r} {auc_text(rec, r)}' for r in rows)}; AUC({best}) − "
            "AUC(other), each seed with its paired 95% interval: " + "; ".join(lines))
    e = rec.get("experiment", {})
    forwards = f"{e['budget']} masked forwards" if e.get("budget") else "number of masked forwards (not stored)"
    why = (f"Each ρ gets the same {forwards} per text (a cyclic plan of ⌈1/ρ⌉ chunks a "
           f"round, its last round partial). The gap is read as AUC. A maximum at {best}: ahead of every other ρ on "
           "every seed.")
    if above:
        why += f" Ahead of {best} on every seed: {', '.join(above)}."
    if sometimes:
        why += f" Ahead of {best} on some seeds: {', '.join(sometimes)}."
    if higher:
        why += f" A higher mean AUC than {best}: {', '.join(higher)}."
    return Finding(ours, combine(verdicts.values()), why, one_seed=one_seed(rec))


def misaligned(recs: dict[str, dict], *, cost: float = 0.05) -> Finding:
    """Two parts. 'Costs little': golden − misaligned Q-Skew per seed with its paired interval, oriented as
    ``cost`` − that drop (the paper's drop, 5.0 points on ArXiv, is what it calls little), so a drop shown below the
    paper's supports the claim and one shown above it is against it. 'Still above the strongest golden-reference
    baseline': misaligned Q-Skew − that baseline per seed, on points (the experiment pairs every row with golden
    Q-Skew only)."""
    rec = recs["dlm-misaligned-ref"]
    vs = rec["paired"]["vs"]
    drops = [k for k in vs if k.endswith("/ q_skew")]
    verdicts, keep = [], []
    words = {REPRODUCED: "smaller than the paper's", AGAINST: "larger", INCONCLUSIVE: "consistent with it"}
    for k in drops:
        seeds = seed_verdicts([(cost - p["ci95"][1], cost - p["ci95"][0]) for p in vs[k]])
        verdicts.append(across_seeds(seeds))
        counts = ", ".join(f"{w} {seeds.count(v)}/{len(seeds)}" for v, w in words.items() if v in seeds)
        keep.append(f"{k} {seed_intervals(vs[k])} (against the paper's drop of {100 * cost:.1f}: {counts}: "
                    f"{verdicts[-1]})")
    means = {k: v["auc"][0] for k, v in rec["rows"].items()}
    strongest = max((k for k in means if k.startswith("golden /") and not k.endswith("q_skew")), key=means.get)
    mis = [k for k in means if k.endswith("/ q_skew") and not k.startswith("golden")]
    lead = {k: np.subtract(per_seed(rec, k, "auc"), per_seed(rec, strongest, "auc")) for k in mis}
    verdicts += [points_verdict(d) for d in lead.values()]
    ours = (f"golden Q-Skew − misaligned Q-Skew (paired): {'; '.join(keep)}. The strongest golden-reference "
            f"baseline ({strongest}) {auc_text(rec, strongest)} vs misaligned Q-Skew AUC (above / below it on every "
            "seed, or mixed; points, seed by seed: the experiment pairs every row with golden Q-Skew only): "
            + ", ".join(f"{k.split(' /')[0]} {auc_text(rec, k)} ({seed_side(d)})" for k, d in lead.items()) + ".")
    below = [r.split(" /")[0] for r in means if r.endswith("/ q_skew")
             and means.get(r.replace("q_skew", "calibration"), -1) > means[r]]
    stored = (rec.get("experiment") or {}).get("references") or [k.split(" /")[0] for k in means]
    refs = [f"{r}, {REFERENCES.get(r, 'a reference lmaudit does not describe')}" for r in dict.fromkeys(stored)
            if r != "golden"]
    return Finding(ours, combine(verdicts), "Misaligned references here: " + ("; ".join(refs) or "none") + ". "
                   "Q-Skew's mean AUC is below calibration's with the same reference for: "
                   + (", ".join(below) or "none") + ".", points=True, one_seed=one_seed(rec))


# what each misaligned reference lmaudit builds is (lmaudit.experiments.types.membership.run_misaligned), beside the
# paper's counterpart
REFERENCES = {"other-seed": "a base pretrained with another seed (the paper: the Base/Instruct sibling)",
              "perturbed": "the base fine-tuned on perturbed other passages (the paper's para-modification)"}


def over_epochs(recs: dict[str, dict]) -> Finding:
    """Q-Skew ahead of every other attack at every epoch: per epoch, Q-Skew − the strongest other attack on points
    (per seed where stored; no interval), each epoch one comparison."""
    rec = recs["dlm-epochs"]
    curves = rec["curves"]
    epochs = sorted(next(iter(curves.values())), key=int)
    best = [max(curves, key=lambda a: curves[a][e]["auc"][0]) for e in epochs]
    others = [a for a in curves if a != "q_skew"]
    def seeds(a: str, e: str) -> np.ndarray:
        return np.array([x["auc"] for x in curves[a][e]["per_seed"]] if "per_seed" in curves[a][e]
                        else [curves[a][e]["auc"][0]])

    lead = [seeds("q_skew", e) - np.max([seeds(a, e) for a in others], axis=0) for e in epochs]
    verdicts = [points_verdict(d) for d in lead]
    single = one_seed(rec)
    ours = (f"best AUC per epoch ({'one seed, ' if single else ''}points; no interval stored; Q-Skew above / below "
            "the strongest other attack on every seed, or mixed): "
            + ", ".join(f"{e}: {b} {pct(curves[b][e]['auc'][0])} (q_skew {pct(curves['q_skew'][e]['auc'][0])}, "
                        f"{seed_side(d)})" for e, b, d in zip(epochs, best, lead)))
    leaders = {b: [e for e, x in zip(epochs, best) if x == b] for b in dict.fromkeys(best)}
    return Finding(ours, combine(verdicts), "Best attack by epoch: " + "; ".join(f"{b} at epoch(s) {', '.join(es)}"
                                                                              for b, es in leaders.items())
                   + f". {len(rec['experiment']['seeds'])} seed(s), points only: read with the paired rows above."
                   + ONE_SEED * single, points=True, one_seed=single)


def real_dlm_setting(rec: dict) -> str:
    """What the real-weights DLM of an experiment is, from its stored settings."""
    e = rec["experiment"]
    how = weights(e)
    return (f"`{e['base']}` adapted into a DLM on {e['adapt_tokens']:,} tokens, then fine-tuned ({how}, lr "
            f"{e['lr']:g}) {e['epochs']} epochs on {e['n_members']} passages; {e['n_members']} + "
            f"{e['n_nonmembers']} texts, {e['budget']} masked forwards per mask plan, {len(e['seeds'])} seed(s).")


SKEW_BAND = 0.1  # |g₁| below this is 'near symmetric'; g₁ at or above it is right-skewed (one band for both)


def asymmetry(recs: dict[str, dict], name: str = "dlm-regimes") -> Finding:
    """Theorem 3.2 in three parts, each read over the regimes on points (one seed per regime, no interval): members'
    Δ right-skewed (g₁ ≥ the band), above non-members', and non-members' near symmetric (|g₁| < the band), each by
    the sign test across regimes (:data:`SIGN_TEST_SEEDS` regimes or more). One band decides both 'symmetric' and
    'right-skewed', so a member skew inside it is not right-skewed."""
    rec = recs[name]
    cells = rec["cells"]
    ms = np.array([c["delta"]["members"]["skew"] for c in cells.values()])
    ns = np.array([c["delta"]["nonmembers"]["skew"] for c in cells.values()])
    parts = {"members right-skewed": ms - SKEW_BAND, "above non-members": ms - ns,
             "non-members near symmetric": SKEW_BAND - np.abs(ns)}
    verdicts = {k: points_verdict(v) for k, v in parts.items()}
    held = {k: int((v > 0).sum()) for k, v in parts.items()}
    n = len(cells)
    ours = (f"per-text skewness of Δ averaged over texts, {n} regime{'s' * (n > 1)}: members {ms.min():+.2f} to "
            f"{ms.max():+.2f} (mean {ms.mean():+.2f}), non-members {ns.min():+.2f} to {ns.max():+.2f} (mean "
            f"{ns.mean():+.2f}); members' skew ≥ {SKEW_BAND} in {held['members right-skewed']}/{n}, above "
            f"non-members' in {held['above non-members']}/{n}; non-members' |g₁| < {SKEW_BAND} in "
            f"{held['non-members near symmetric']}/{n} (points; one seed per regime).")
    right = int((ns >= SKEW_BAND).sum())
    why = ("Three parts, read separately over the regimes (each regime one point, a sign test across them: the part "
           f"holding in every regime → reproduced, in none → against it, either only on {SIGN_TEST_SEEDS} regimes or "
           f"more; fewer regimes (here {n}), or regimes that disagree, inconclusive): "
           + ", ".join(f"{k} {v}" for k, v in verdicts.items())
           + f". One band for both: |g₁| < {SKEW_BAND} is near symmetric, g₁ ≥ {SKEW_BAND} right-skewed; "
           f"non-members' Δ is right-skewed in {right}/{n}." + (" Non-members' Δ carries a skew of its own there, so "
                                                             "only the members-minus-non-members gap is evidence of "
                                                             "membership" if right else
                                                             " The members-minus-non-members gap is the evidence of "
                                                             "membership") + _skew_beside_location(cells) + ".")
    return Finding(ours, combine(verdicts.values()), why, points=True, one_seed=n < 2)


def _skew_beside_location(cells: dict) -> str:
    """How the skew gap's separation compares with the location shift's (Cohen's d over texts), where stored."""
    seps = [c["delta"].get("separation") for c in cells.values()]
    if not all(seps):
        return ""
    dm, ds = np.mean([x["d_mean"] for x in seps]), np.mean([x["d_skew"] for x in seps])
    return (f"; it separates members by Cohen's d = {ds:.2f} on average, the location shift (per-text mean Δ) by "
            f"d = {dm:.2f}")


def mask_ratio(recs: dict[str, dict]) -> Finding:
    """Assumption 3.1 on the paper's quantity, the mean gain per token at each training mask ratio: it falls from
    each ratio to the next. The experiment stores one value per ratio (the tokens of every seed pooled), so no step
    has a second value to measure its noise by, and no test is run: inconclusive whatever the values (the text says
    so). The gain per exposure is shown as context only: it divides by the ratio, so it falls by construction."""
    rec = recs["dlm-mask-ratio"]
    ratios = sorted(rec["ratios"], key=float)
    mean = [rec["ratios"][r]["mean_gain"] for r in ratios]
    per = [rec["ratios"][r]["mean_gain_per_exposure"] for r in ratios]
    falls = [f"{a} → {b}: {'falls' if x > y else 'rises'}" for a, b, x, y in zip(ratios, ratios[1:], mean, mean[1:])]
    single = one_seed(rec)
    stored = ("one seed stored" if single else
              f"one value per ratio stored, the tokens of {len(rec['experiment']['seeds'])} seeds pooled")
    ours = ("mean gain per token (nats) at mask ratio " + ", ".join(f"{r}: {g:.3f}" for r, g in zip(ratios, mean))
            + f" ({'; '.join(falls)}; {stored}: points). Context, not judged: per exposure "
            + ", ".join(f"{g:.3f}" for g in per) + ".")
    return Finding(ours, INCONCLUSIVE, f"Read on the paper's quantity (Figure 1: higher mean gain at lower ratios), "
                   f"step by step; {stored}: inconclusive whatever the values (the sign test across seeds needs one "
                   f"value per seed, on {SIGN_TEST_SEEDS} seeds or more, and the record keeps no interval). Per "
                   "exposure = mean gain / (ratio × epochs) falls "
                   "with the ratio by construction, so it is no evidence for the assumption.", points=True,
                   one_seed=single)
