"""Judges of the SMI and DLM-extraction claims issue 42 found without a row (part 2): SMI-M against SMI, the false
negatives of MIA audits at 0% FPR, the collapse of shadow-model MIAs; the generalised extraction definition, a larger
DLM against a smaller AR model, DLM size and the step count as a privacy knob. Every verdict by the rule of
:mod:`lmaudit.report.verdicts`; a claim nothing here measures says why. Their rows: :mod:`lmaudit.report.claims_added`.
"""

from __future__ import annotations

import numpy as np

from lmaudit.metrics import seed_std
from lmaudit.report.claims_base import (
    ONE_SEED,
    UNCONVERGED_SHARE,
    Finding,
    judged_seeds,
    newcombe,
    one_seed,
    paired_median,
    pct,
)
from lmaudit.report.claims_models import model, weights
from lmaudit.report.claims_more import TOLERANCE, UNDEFINED_ERROR
from lmaudit.report.verdicts import (
    INCONCLUSIVE,
    NOT_RUN,
    REPRODUCED,
    UNTESTABLE,
    against_paper,
    capped,
    combine,
    effect_text,
    interval_verdict,
    points_verdict,
    seed_side,
)

# ---------------------------------------------------------------- SMI

def _errors(rec: dict, frac: str, audit: str) -> np.ndarray:
    """Per seed: mean |ρ − truth| over 'none' (ρ = 0) and 'retrain' (ρ = 1), an undefined ρ counted as a guess."""
    table = rec["unlearning"]
    per = [[UNDEFINED_ERROR if not np.isfinite(x) else abs(x - truth)
            for x in table[f"{frac} / {m} / {audit}"]["per_seed"]] for m, truth in (("none", 0.0), ("retrain", 1.0))]
    return np.mean(per, axis=0)


def _fracs(rec: dict) -> list[str]:
    return list(dict.fromkeys(k.split(" / ")[0] for k in rec["unlearning"]))


def smi_m_beats_smi(recs: dict[str, dict], *, name: str = "unlearning-audit") -> Finding:
    """SMI-M closer to the truth than SMI: per forget fraction and feature set, SMI's error − SMI-M's seed by seed
    (points: no paired interval is stored), the error the mean |ρ − truth| over 'none' and 'retrain'."""
    rec = recs[name]
    parts, verdicts = [], []
    for frac in _fracs(rec):
        for smi, features in (("smi", "hidden features"), ("smi-scores", "score features")):
            if f"{frac} / none / {smi}" not in rec["unlearning"]:
                continue
            a, b = _errors(rec, frac, smi), _errors(rec, frac, smi.replace("smi", "smi-m", 1))
            verdicts.append(points_verdict(a - b))
            side = seed_side(a - b, up="SMI-M closer", down="SMI closer")
            parts.append(f"forget {float(frac):.0%}, {features}: SMI {a.mean():.2f} ± {seed_std(a):.2f} vs SMI-M "
                         f"{b.mean():.2f} ± {seed_std(b):.2f} ({side})")
    single = one_seed(rec)
    return Finding("mean |ρ − truth| over 'none' (0) and 'retrain' (1), mean ± std over seeds (ddof = 1): "
                   + "; ".join(parts), combine(verdicts),
                   f"Each fraction and feature set one comparison on points (an undefined ρ counts as an error of "
                   f"{UNDEFINED_ERROR}); the paper reads the retrained model only, here 'none' counts too, so an "
                   "audit that reads everything as forgotten cannot win." + ONE_SEED * single, points=True,
                   one_seed=single)


def fnr_at_zero_fpr(recs: dict[str, dict], *, name: str = "unlearning-audit") -> Finding:
    """The false-negative rate of per-sample audits at 0% FPR: no audit here is thresholded there or stores it."""
    rec = recs[name]
    frac = _fracs(rec)[-1]
    retrain = {k.split(" / ")[2]: v["per_seed"] for k, v in rec["unlearning"].items()
               if k.startswith(f"{frac} / retrain / threshold-")}
    return Finding(f"per-sample audits thresholded at {rec['experiment']['audit_fpr']:.0%} FPR; their ρ of the "
                   f"retrained model's forget set (truth 1), forget {float(frac):.0%}, per seed: "
                   + "; ".join(f"{a} " + ", ".join(f"{x:.2f}" for x in v) for a, v in retrain.items()),
                   NOT_RUN, "No experiment thresholds a per-sample audit at 0% FPR or stores its false-negative rate "
                   "(the audits store ρ corrected for their TPR and FPR), and RULI is not implemented. It needs the "
                   "unlearning audit run with audit_fpr = 0, storing each audit's FNR on the retrained model per seed.",
                   points=True)


def shadow_collapse(recs: dict[str, dict], *, name: str = "unlearning-audit", margin: float = TOLERANCE) -> Finding:
    """The AR analogue of IAM / RMIA collapsing: the shadow-model audit stored here (offline LiRA) against SMI-M on
    the retrained model's forget set (truth 1): SMI-M's ρ − LiRA's above ``margin`` (an error under which an audit
    still reads 'retrain' as forgotten) on every seed, on points; each fraction and feature set one comparison."""
    rec = recs[name]
    shadows = rec["experiment"].get("n_shadows", 0)
    if not any(k.endswith(" / threshold-lira") for k in rec["unlearning"]):
        return Finding(f"no shadow-model audit stored (n_shadows = {shadows})", NOT_RUN, "No shadow model was trained "
                       "in this regime, so no shadow-based MIA audit is stored; it needs the unlearning audit with "
                       "n_shadows > 0.")
    parts, verdicts = [], []
    for frac in _fracs(rec):
        lira = np.array(rec["unlearning"][f"{frac} / retrain / threshold-lira"]["per_seed"])
        shown = []
        for audit in ("smi-m", "smi-m-scores"):
            d = np.array(rec["unlearning"][f"{frac} / retrain / {audit}"]["per_seed"]) - lira
            verdicts.append(points_verdict(d, threshold=margin))
            up, down = f"above LiRA by more than {margin:g}", f"not above LiRA by more than {margin:g}"
            shown.append(f"{audit} " + ", ".join(f"{v:.2f}" for v in d + lira)
                         + f" ({seed_side(d, up=up, down=down, threshold=margin)})")
        parts.append(f"forget {float(frac):.0%}: LiRA " + ", ".join(f"{x:.2f}" for x in lira) + "; " + ", ".join(shown))
    single = one_seed(rec)
    return Finding(f"ρ of the retrained model's forget set (truth 1) per seed, offline LiRA with {shadows} shadow "
                   "models against SMI-M: " + "; ".join(parts), combine(verdicts),
                   "lmaudit audits unlearning with neither IAM nor RMIA (RMIA is an attack here, not an unlearning "
                   "audit): the shadow-model audit it stores is offline LiRA, on "
                   f"{model(rec['experiment'], 'a model')}, not a "
                   "ViT. Read "
                   "seed by seed: LiRA collapses where SMI-M's ρ is above it by more than the margin on every seed."
                   + ONE_SEED * single, points=True, one_seed=single)


# ---------------------------------------------------------------- DLM extraction

IDENTITY_TEST = "tests/test_claims_added.py::test_ar_extraction_is_the_dlm_definition_with_a_suffix_read_left_to_right"


def ar_special_case(recs: dict[str, dict]) -> Finding:
    """The generalised definition subsumes AR extraction: an identity, checked by a test, not measured."""
    return Finding(f"by a test, not an experiment: `{IDENTITY_TEST}` computes, on a tiny causal model, the DLM "
                   "success probability (lmaudit's trajectory estimator) with M a suffix unmasked one token per step "
                   "left to right, and the AR suffix probability; they are equal, and so is every (n, p) "
                   "discoverability read from them; a random order gives a different value", REPRODUCED,
                   "An identity has no noise to judge by the rule: the verdict is the test's, which the suite runs. "
                   "No experiment stores it.")


def _share(a_rec: dict, a_key: str, b_rec: dict, b_key: str, p: float) -> tuple[list[dict], list[str]]:
    """Per seed: share of training values discoverable from row ``a_key`` − from ``b_key`` (two experiments),
    Newcombe's 95% interval, and the counts as text."""
    per, text = [], []
    for ra, rb in zip(a_rec["pii_rows"][a_key], b_rec["pii_rows"][b_key]):
        ka, kb = ra[f"discoverable@p={p:g}"], rb[f"discoverable@p={p:g}"]
        d, lo, hi = newcombe(ka, a_rec["n_train"], kb, b_rec["n_train"])
        per.append({"diff": d, "ci95": [lo, hi]})
        text.append(f"{ka}/{a_rec['n_train']} vs {kb}/{b_rec['n_train']}")
    return per, text


def _missing(recs: dict[str, dict], *names: str) -> Finding | None:
    """'not run' for the first of ``names`` not stored (a judge that needs every one), else None."""
    gone = [n for n in names if n not in recs]
    return Finding(f"`results/{gone[0]}` is missing", NOT_RUN, f"run `lmaudit run experiments/{gone[0]}.toml`") \
        if gone else None


def _setting(name: str, rec: dict) -> str:
    e = rec["experiment"]
    which = f"`{e['base']}`" if e.get("base") else f"the `{e['preset']}` preset"
    return f"{name}: {which}, {e['n_members']} messages, {e['epochs']} epochs ({weights(e)})"


def _moving(rec: dict, key: str) -> bool:
    """Whether a DLM row's p̂ has not been shown to converge in the number of orders (more than the share moved)."""
    moved = [r["convergence"]["not_converged_fraction"] for r in rec["pii_rows"][key] if "convergence" in r]
    return bool(moved) and not max(moved) <= UNCONVERGED_SHARE


def one_size(recs: dict[str, dict], *, name: str = "pii-extraction", what: str = "") -> Finding:
    """A claim across model sizes in a regime whose PII extraction runs one size."""
    return Finding(f"`{name}`: the AR model and its DLM, both of the `{recs[name]['experiment']['preset']}` preset",
                   NOT_RUN, f"No tiny-model experiment extracts PII with {what} on the same messages; a DLM of a "
                   "larger preset fine-tuned on them would test it. The real model's column compares across "
                   "experiments.")


def larger_dlm_vs_ar(recs: dict[str, dict], *, ar: str = "pii-extraction", dlm: str = "real-dlm-pii-extraction",
                     p: float = 0.5, effect: float | None = None) -> Finding:
    """A larger DLM leaks less than a smaller AR model: e-mails discoverable from the small AR model's experiment −
    from the large DLM's (max-step), Newcombe's interval, against the paper's difference; support does not count
    where the DLM's p̂ has not converged (an estimate still moving may be biased low, which would favour the claim)."""
    if (missing := _missing(recs, ar, dlm)) is not None:
        return missing
    per, counts = _share(recs[ar], "email / AR", recs[dlm], "email / DLM max-step", p)
    text, verdict = judged_seeds(per, effect=effect)
    moving = _moving(recs[dlm], "email / DLM max-step")
    return Finding(f"e-mails discoverable at p = {p:g}, small AR model vs larger DLM (max-step): {', '.join(counts)}, "
                   f"difference {text}, {against_paper(effect)}", capped(verdict) if moving else verdict,
                   f"Across two experiments ({_setting(ar, recs[ar])}; {_setting(dlm, recs[dlm])}): the models differ "
                   "in size and in the messages, their number and the fine-tuning, so the comparison is confounded."
                   + (" The DLM's p̂ has not been shown to converge in the number of orders: support does not count."
                      if moving else ""), one_seed=one_seed(recs[ar], recs[dlm]))


def dlm_size(recs: dict[str, dict], *, small: str = "pii-extraction", large: str = "real-dlm-pii-extraction",
             p: float = 0.5) -> Finding:
    """Leakage grows with DLM size: e-mails discoverable (max-step) from the larger DLM − from the smaller, Newcombe's
    interval (no share given by the paper: a tie is inconclusive); nothing discoverable from either: not testable."""
    if (missing := _missing(recs, small, large)) is not None:
        return missing
    key = "email / DLM max-step"
    per, counts = _share(recs[large], key, recs[small], key, p)
    text, verdict = judged_seeds(per)
    text = f"difference {text}"
    phones = _share(recs[large], "phone / DLM max-step", recs[small], "phone / DLM max-step", p)[1]
    why = (f"Across two experiments ({_setting(small, recs[small])}; {_setting(large, recs[large])}): size is "
           "confounded with the messages, their number and the fine-tuning.")
    if all(c.startswith("0/") and " vs 0/" in c for c in counts):
        verdict, text = UNTESTABLE, "none from either"
        why += " No e-mail is discoverable from either DLM: the counts cannot differ."
    elif any(_moving(recs[n], key) for n in (small, large)):
        verdict, why = capped(verdict), why + " A DLM's p̂ has not been shown to converge: support does not count."
    return Finding(f"e-mails discoverable at p = {p:g} (max-step), larger vs smaller DLM: {', '.join(counts)} "
                   f"({text}); phones {', '.join(phones)}", verdict, why,
                   one_seed=one_seed(recs[small], recs[large]))


def step_knob(recs: dict[str, dict], *, name: str = "extraction-steps", medians: dict[str, float] | None = None,
              p: float = 0.5, share: float = UNCONVERGED_SHARE) -> Finding:
    """The step count as a privacy knob, in two parts. Each larger step count above the one before: the per-record
    median gain in log p̂ with its bootstrap interval, against the difference of the paper's medians (``medians``,
    against one step), support not counting where p̂ at either count has not converged. And the records it leaks:
    discoverable at the most steps − at one step, Newcombe's interval (nothing discoverable at either: not
    testable, left out)."""
    rec, paper = recs[name], {"1": 0.0, **(medians or {})}
    steps = list(rec["steps"])
    cols = {s: np.asarray(v, dtype=np.float64) for s, v in rec["log_p_columns"].items()}
    moved = {s: max((c["convergence"]["not_converged_fraction"] for c in rec["steps"][s]["per_seed"]
                     if "convergence" in c), default=None) for s in steps}
    parts, verdicts = [], []
    for a, b in zip(steps, steps[1:]):
        d, lo, hi = paired_median(cols[b], cols[a])
        effect = paper[b] - paper[a] if a in paper and b in paper else None
        loose = [s for s in (a, b) if moved[s] is not None and not moved[s] <= share]
        verdicts.append(INCONCLUSIVE if loose else interval_verdict(lo, hi, effect=effect))
        parts.append(f"{a} → {b}: {d:+.2f} [{lo:+.2f}, {hi:+.2f}] vs {effect_text(effect, scale=1, unit='', digits=2)}"
                     + (f" (p̂ not converged at N = {', '.join(loose)})" if loose else ""))
    n = len(cols[steps[0]]) * len(rec["steps"][steps[0]]["per_seed"])
    k = [sum(s[f"discoverable@p={p:g}"] for s in rec["steps"][x]["per_seed"]) for x in (steps[0], steps[-1])]
    d, lo, hi = newcombe(k[1], n, k[0], n)
    verdicts.append(UNTESTABLE if not any(k) else interval_verdict(lo, hi))
    leak = (f"records discoverable at p = {p:g}: {k[0]}/{n} at N = {steps[0]}, {k[1]}/{n} at N = {steps[-1]}"
            + (" (none at either: this part cannot be read)" if not any(k) else
               f", difference {100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] points"))
    return Finding(f"median gain in log p̂ (nats) from each step count to the next, per record (bootstrap 95% interval "
                   f"over {len(cols[steps[0]])} masks, first seed), against the difference of the paper's medians: "
                   + ", ".join(parts) + f"; {leak}", combine(verdicts),
                   "Read as a knob where every step fewer gives a lower success probability and fewer records leak at "
                   "the fewest steps. A gain is judged only where p̂ has converged in the number of orders (at most "
                   f"{pct(share)}% of records moving by more than 2× from R/2 to R) at both step counts; elsewhere it "
                   "is inconclusive either way. Possible reason an estimate still moving misleads: a mean over too few "
                   "orders may fall below its expectation, more so where the orders differ more.",
                   one_seed=one_seed(rec))
