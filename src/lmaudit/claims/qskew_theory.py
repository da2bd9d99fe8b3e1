"""The Q-Skew paper's two statements about memorisation itself: Theorem 3.2's asymmetry (members' Δ right-skewed,
non-members' near symmetric) and Assumption 3.1 (the per-token gain falls as the training mask ratio rises). Each is
read per regime or step with an interval over texts where the experiment stores the per-text values, and says which
values it needs where it does not. Every verdict by the rule of :mod:`lmaudit.claims.verdicts`."""

from __future__ import annotations

import numpy as np

from lmaudit.claims.base import AT_THIS_SIZE, POINTS_ONLY, Finding, judged_seeds, seed_count
from lmaudit.claims.intervals import bootstrap_mean
from lmaudit.claims.verdicts import combine, single

SKEW_BAND = 0.1  # |g₁| below this is 'near symmetric'; g₁ at or above it is right-skewed (one band for both)
SKEW_NEEDS = ("each text's skewness of Δ, members and non-members, per regime and seed (`per_seed[i].delta.members"
              ".per_text_skew`, `per_seed[i].delta.nonmembers.per_text_skew`)")


def _boot(fn, groups: list[np.ndarray], n_resamples: int = 2000, seed: int = 0) -> dict:
    """fn(*groups) with a percentile bootstrap 95% interval, each group resampled apart (over its texts)."""
    rng = np.random.default_rng(seed)
    reps = [fn(*(g[rng.integers(0, len(g), len(g))] for g in groups)) for _ in range(n_resamples)]
    return {"diff": float(fn(*groups)), "ci95": [float(np.quantile(reps, 0.025)), float(np.quantile(reps, 0.975))]}


PARTS = {"members right-skewed": lambda m, n: m.mean() - SKEW_BAND,
         "above non-members": lambda m, n: m.mean() - n.mean(),
         "non-members near symmetric": lambda m, n: SKEW_BAND - abs(n.mean())}


def asymmetry(recs: dict[str, dict], name: str = "dlm-regimes") -> Finding:
    """Theorem 3.2 in three parts, per regime with a bootstrap interval over texts (the paper gives a sign, no size:
    read on the direction): members' mean skewness of Δ at or above the band (right-skewed), above non-members', and
    non-members' within the band (near symmetric). Where the regimes store only the mean skewness, points only."""
    rec = recs[name]
    cells = rec["cells"]
    ms = np.array([c["delta"]["members"]["skew"] for c in cells.values()])
    ns = np.array([c["delta"]["nonmembers"]["skew"] for c in cells.values()])
    n = len(cells)
    shown = (f"per-text skewness of Δ averaged over texts, {n} regime{'s' * (n > 1)}: members {ms.min():+.2f} to "
             f"{ms.max():+.2f} (mean {ms.mean():+.2f}), non-members {ns.min():+.2f} to {ns.max():+.2f} (mean "
             f"{ns.mean():+.2f}); band |g₁| < {SKEW_BAND} near symmetric, g₁ ≥ {SKEW_BAND} right-skewed")
    why = ("Three parts per regime: members right-skewed, above non-members, non-members near symmetric"
           + _skew_beside_location(cells) + ".")
    seeds = [p for c in cells.values() for p in c.get("per_seed", [])]
    stored = bool(seeds) and all("per_text_skew" in p["delta"][part] for p in seeds
                                 for part in ("members", "nonmembers"))
    if not stored:
        return Finding(shown + " (points: one mean per regime and part, one seed).", single(POINTS_ONLY),
                       why + f" No interval: the experiment stores one mean skewness per regime; an interval over "
                       f"texts needs {SKEW_NEEDS}.", points=True, one_seed=True)
    lines, verdicts = [], []
    for label, c in cells.items():
        for part, fn in PARTS.items():
            intervals = [_boot(fn, [np.asarray(p["delta"][k]["per_text_skew"], dtype=float)
                                    for k in ("members", "nonmembers")]) for p in c["per_seed"]]
            text, v = judged_seeds(intervals, scale=1, digits=2)
            verdicts.append(v)
            lines.append(f"{label} {part} {text}")
    n_seeds = len(cells[next(iter(cells))]["per_seed"])
    return Finding(shown + f"; per regime and seed, bootstrap 95% interval over texts ({n_seeds} seed"
                   f"{'s' * (n_seeds > 1)}): " + "; ".join(lines), combine(verdicts), why, one_seed=n_seeds < 2)


def _skew_beside_location(cells: dict) -> str:
    """How the skew gap's separation compares with the location shift's (Cohen's d over texts), where stored."""
    seps = [c["delta"].get("separation") for c in cells.values()]
    if not all(seps):
        return ""
    dm, ds = np.mean([x["d_mean"] for x in seps]), np.mean([x["d_skew"] for x in seps])
    return (f"; the skew gap separates members by Cohen's d = {ds:.2f} on average, the location shift (per-text mean "
            f"Δ) by d = {dm:.2f}")


GAIN_NEEDS = ("each member text's mean gain per ratio and seed, the texts in the same order at every ratio "
              "(`per_text_gains`: {ratio: [[gain per text] per seed]})")


def _gain_columns(rec: dict) -> tuple[dict[str, list[np.ndarray]], int, str] | None:
    """Per ratio and seed the paired values to bootstrap, the block length and how they are read; None: not stored
    in a form that can be split by seed."""
    if rec.get("per_text_gains"):
        return ({r: [np.asarray(s, dtype=float) for s in v] for r, v in rec["per_text_gains"].items()}, 1,
                "per member text (bootstrap over texts)")
    gains = rec.get("gains")
    if gains and seed_count(rec) == 1:
        cols = {k.removeprefix("ratio_"): [np.asarray(v, dtype=float)] for k, v in gains.items()}
        n_tok = len(next(iter(cols.values()))[0])
        block = max(1, round(n_tok / rec["experiment"]["n_members"]))
        return cols, block, (f"per member token, stored text by text (a moving-block bootstrap over blocks of {block} "
                             "consecutive tokens, about one text each, stands in for resampling texts)")
    return None


def mask_ratio(recs: dict[str, dict], *, name: str = "dlm-mask-ratio") -> Finding:
    """Assumption 3.1 on the paper's quantity, the mean gain per token at each training mask ratio: it falls from
    each ratio to the next, each step one comparison per seed with an interval over the members' texts (the same
    texts at every ratio, so paired; the paper's Figure 1 gives no size: read on the direction). Where the gains of
    several seeds are stored pooled, points only. The gain per exposure is shown as context only: it divides by the
    ratio, so it falls by construction."""
    rec = recs[name]
    ratios = sorted(rec["ratios"], key=float)
    mean = [rec["ratios"][r]["mean_gain"] for r in ratios]
    per = [rec["ratios"][r]["mean_gain_per_exposure"] for r in ratios]
    shown = ("mean gain per token (nats) at mask ratio " + ", ".join(f"{r}: {g:.3f}" for r, g in zip(ratios, mean))
             + ". Context, not judged: per exposure " + ", ".join(f"{g:.3f}" for g in per))
    why = ("Read on the paper's quantity (Figure 1: higher mean gain at lower ratios), step by step. Per exposure = "
           "mean gain / (ratio × epochs) falls with the ratio by construction, so it is no evidence for the "
           "assumption.")
    cols = _gain_columns(rec)
    if cols is None or not all(r in cols[0] for r in ratios):
        return Finding(shown + " (points: one value per ratio, the tokens of every seed pooled).", single(POINTS_ONLY),
                       why + f" No interval: an interval per seed needs {GAIN_NEEDS}.", points=True,
                       one_seed=seed_count(rec) < 2)
    values, block, how = cols
    lines, verdicts = [], []
    for a, b in zip(ratios, ratios[1:]):
        per_seed = []
        for x, y in zip(values[a], values[b]):
            if len(x) != len(y):  # not the same tokens at both ratios: no pairing
                return Finding(shown + ".", single(AT_THIS_SIZE), why + " The stored gains of two ratios differ in "
                               "length, so they cannot be paired.", one_seed=True)
            d, lo, hi = bootstrap_mean(x - y, block=block)
            per_seed.append({"diff": d, "ci95": [lo, hi]})
        text, v = judged_seeds(per_seed, scale=1, digits=3)
        verdicts.append(v)
        lines.append(f"{a} → {b}: gain({a}) − gain({b}) {text}")
    return Finding(shown + f"; each step, paired {how}: " + "; ".join(lines), combine(verdicts), why,
                   one_seed=seed_count(rec) < 2)
