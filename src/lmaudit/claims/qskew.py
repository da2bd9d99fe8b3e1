"""The Q-Skew paper's membership claims on DLMs: Q-Skew against the baselines, the authors' calibration, its
components, ρ, a misaligned reference and the epochs (Theorem 3.2 and Assumption 3.1: qskew_theory; its PII
reconstruction: pii). Every verdict by the rule of :mod:`lmaudit.claims.verdicts`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lmaudit.claims.base import (
    AGAINST,
    REPRODUCED,
    Finding,
    auc_text,
    judged_lines,
    judged_seeds,
    one_seed,
    pct,
    row_stat,
)
from lmaudit.claims.intervals import UNPAIRED, auc_diffs, counts, row_diffs
from lmaudit.claims.models import weights
from lmaudit.claims.verdicts import against_paper, combine, effect_text, judge

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
    best (``effect``): each baseline one comparison, the claim all of them."""
    def judge_(recs: dict[str, dict]) -> Finding:
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
    return judge_


def authors_calibration(recs: dict[str, dict], name: str = "dlm-regimes", *, effect: float | None = None) -> Finding:
    """Q-Skew − the authors' (unmasked-ratio) calibration in every regime of the study, each one seed with its paired
    interval, against the paper's margin ``effect``; the claim is all of them."""
    rec = recs[name]
    cells = rec["cells"].values()
    verdict = judge([c["paired"]["calibration unmasked_ratio"][1:] for c in cells], effect=effect)
    where = [k for k, v in zip(rec["cells"], verdict.parts) if v == REPRODUCED]
    a2, t2, b2, _ = regimes_cells(rec, "calibration")
    n = len(verdict.parts)
    ours = (f"Over {n} regime(s) of {name} (one seed each, paired 95% intervals, {against_paper(effect)}): Q-Skew − "
            f"the unmasked-ratio calibration, regimes: {verdict.counts}"
            f"{' (reproduced in: ' + ', '.join(where) + ')' if where else ''}; against the masked-ELBO calibration: "
            f"ahead {a2}, tied {t2}, behind {b2}.")
    higher = sum(c["auc"]["calibration unmasked_ratio"][0] > c["auc"]["calibration"][0] for c in cells)
    weaker = ("neither variant is the weaker baseline everywhere" if 0 < higher < n else
              f"the {'masked ELBO' if higher == n else 'unmasked ratio'} is the weaker baseline in every regime")
    return Finding(ours, verdict, "The authors' calibration reads the clean text with no mask (AR-shifted logits); "
                   "lmaudit's default is the masked ELBO of the published definition, with the authors' way as "
                   f"`calibration.variant=unmasked_ratio`. Its AUC is above the masked ELBO's in {higher}/{n} regimes "
                   f"(points): {weaker}.", one_seed=True)


def components_help(recs: dict[str, dict], name: str = "dlm-ablation", *, effects: dict | None = None) -> Finding:
    """Full Q-Skew − each variant, per seed with its paired interval, against the paper's drop for that component
    (``effects``)."""
    rec = recs[name]
    lines, verdicts = judged_lines(rec, effects or {})
    hurts = [o for o, v in verdicts.items() if v == AGAINST]
    ours = (f"full Q-Skew AUC {auc_text(rec, rec['paired']['compare'])}; full − variant (the paper's drop: "
            + ", ".join(f"{o} {effect_text((effects or {}).get(o))}" for o in verdicts) + "): " + "; ".join(lines))
    why = "A component 'helps' where full − variant is above 0, by the paper's drop or a size it cannot exclude."
    if hurts:
        why += f" The variant(s) {', '.join(hurts)} beat the full method on every seed."
        if any("mean" in o for o in hurts):
            why += (" A mean of Δ reads a shift of its location, which a skewness discards by construction (the "
                    "regime rows compare the two shifts).")
    e = rec.get("experiment", {})
    if {"budget", "n_members", "n_nonmembers"} <= set(e):
        why += f" At {e['budget']} masked forwards and {e['n_members']} + {e['n_nonmembers']} texts."
    return Finding(ours, combine(verdicts.values()), why, one_seed=one_seed(rec))


def rho_maximises(recs: dict[str, dict], name: str = "dlm-rho") -> Finding:
    """ρ = 0.35 maximises Q-Skew's AUC over the swept mask ratios: AUC(0.35) − AUC(each other ρ) is one comparison
    per ρ, and the claim needs all of them (the authors give no sweep, so no size: read on the direction alone)."""
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


MISALIGNED_LEAD = 0.082  # ArXiv: Q-Skew with either misaligned reference 78.4 vs SAMA w/ ref 70.2 (Table 4)


def misaligned(recs: dict[str, dict], *, name: str = "dlm-misaligned-ref", cost: float = 0.05,
               lead: float | None = MISALIGNED_LEAD) -> Finding:
    """Two parts. 'Costs little': golden − misaligned Q-Skew per seed with its paired interval, oriented as
    ``cost`` − that drop (the paper's drop is what it calls little; no size beyond it, so read on the direction):
    a drop shown below the paper's supports the claim, one shown above it is against it. 'Still above the strongest
    golden-reference baseline': misaligned Q-Skew − that baseline per seed, the unpaired interval from the two AUCs
    (the experiment pairs every row with golden Q-Skew only), against the paper's lead ``lead``."""
    rec = recs[name]
    vs = rec["paired"]["vs"]
    verdicts, keep = [], []
    for k in (k for k in vs if k.endswith("/ q_skew")):
        oriented = [{"diff": cost - p["diff"], "ci95": [cost - p["ci95"][1], cost - p["ci95"][0]]} for p in vs[k]]
        v = judge(oriented)
        verdicts.append(v)
        drops = ", ".join(f"{100 * p['diff']:+.1f}" for p in vs[k])
        keep.append(f"{k} drop {drops}; the paper's {100 * cost:.1f} − drop {judged_seeds(oriented)[0]}")
    means = {k: row_stat(rec, k)[0] for k in rec["rows"]}
    strongest = max((k for k in means if k.startswith("golden /") and not k.endswith("q_skew")), key=means.get)
    mis = [k for k in means if k.endswith("/ q_skew") and not k.startswith("golden")]
    leads = []
    for k in mis:
        text, v = judged_seeds(row_diffs(rec, k, strongest), effect=lead)
        verdicts.append(v)
        leads.append(f"{k.split(' /')[0]} {auc_text(rec, k)}, − {strongest} {text}")
    ours = (f"golden Q-Skew − misaligned Q-Skew (paired): {'; '.join(keep)}. Misaligned Q-Skew − the strongest "
            f"golden-reference baseline ({strongest}, {auc_text(rec, strongest)}), {against_paper(lead)} "
            f"({UNPAIRED}): " + "; ".join(leads) + ".")
    below = [r.split(" /")[0] for r in means if r.endswith("/ q_skew")
             and means.get(r.replace("q_skew", "calibration"), -1) > means[r]]
    stored = (rec.get("experiment") or {}).get("references") or [k.split(" /")[0] for k in means]
    refs = [f"{r}, {REFERENCES.get(r, 'a reference lmaudit does not describe')}" for r in dict.fromkeys(stored)
            if r != "golden"]
    return Finding(ours, combine(verdicts), "Misaligned references here: " + ("; ".join(refs) or "none") + ". "
                   "Q-Skew's mean AUC is below calibration's with the same reference for: "
                   + (", ".join(below) or "none") + ".", one_seed=one_seed(rec))


# what each misaligned reference lmaudit builds is (lmaudit.experiments.types.membership.run_misaligned), beside the
# paper's counterpart
REFERENCES = {"other-seed": "a base pretrained with another seed (the paper: the Base/Instruct sibling)",
              "perturbed": "the base fine-tuned on perturbed other passages (the paper's para-modification)"}


def over_epochs(recs: dict[str, dict], *, name: str = "dlm-epochs") -> Finding:
    """Q-Skew ahead of every other attack at every epoch: per epoch and seed, Q-Skew − the strongest other attack of
    that seed, with the unpaired interval from the two AUCs (no pairing is stored), each epoch one comparison (the
    paper's Figure 2 gives no size: read on the direction)."""
    rec = recs[name]
    curves = rec["curves"]
    epochs = sorted(next(iter(curves.values())), key=int)
    n = counts(rec)
    others = [a for a in curves if a != "q_skew"]

    def seeds(a: str, e: str) -> np.ndarray:
        return np.array([x["auc"] for x in curves[a][e]["per_seed"]])

    parts, verdicts = [], []
    for e in epochs:
        q = seeds("q_skew", e)
        best = np.max([seeds(a, e) for a in others], axis=0)
        text, v = judged_seeds(auc_diffs(q, best, n))
        verdicts.append(v)
        leader = max(others, key=lambda a: seeds(a, e).mean())
        parts.append(f"{e}: q_skew {pct(q.mean())}, strongest other {leader} {pct(seeds(leader, e).mean())}; "
                     f"q_skew − the strongest {text}")
    return Finding(f"Q-Skew − the strongest other attack of each seed, per epoch ({UNPAIRED}): " + "; ".join(parts),
                   combine(verdicts), f"{len(rec['experiment']['seeds'])} seed(s), one fine-tuning per epoch and seed.",
                   one_seed=one_seed(rec))


def real_dlm_setting(rec: dict) -> str:
    """What the real-weights DLM of an experiment is, from its stored settings."""
    e = rec["experiment"]
    how = weights(e)
    return (f"`{e['base']}` adapted into a DLM on {e['adapt_tokens']:,} tokens, then fine-tuned ({how}, lr "
            f"{e['lr']:g}) {e['epochs']} epochs on {e['n_members']} passages; {e['n_members']} + "
            f"{e['n_nonmembers']} texts, {e['budget']} masked forwards per mask plan, {len(e['seeds'])} seed(s).")


