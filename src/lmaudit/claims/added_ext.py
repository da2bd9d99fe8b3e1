"""Judges of the SMI and DLM-extraction claims beyond the main rows (part 2): SMI-M against SMI, the false negatives
of MIA audits at 0% FPR, the collapse of shadow-model MIAs; the generalised extraction definition, a larger DLM
against a smaller AR model, DLM size and the step count as a privacy knob. Every verdict by the rule of
:mod:`lmaudit.claims.verdicts`; a claim nothing here measures says why. Their rows: :mod:`lmaudit.claims.added`.
"""

from __future__ import annotations

import numpy as np

from lmaudit.claims.base import (
    NOT_RUN,
    UNCONVERGED_SHARE,
    UNTESTABLE,
    Finding,
    judged_seeds,
    newcombe,
    one_seed,
    paired_median,
    pct,
    seed_count,
    spread,
)
from lmaudit.claims.intervals import rho_interval
from lmaudit.claims.models import model, weights
from lmaudit.claims.others import first_only, seed_columns
from lmaudit.claims.smi import ERRORS, RHO, gap, judged, truth_error
from lmaudit.claims.verdicts import against_paper, at_this_size, category, combine, effect_text, judge, single
from lmaudit.extraction.reconstruct import wilson_interval

# ---------------------------------------------------------------- SMI


def _fracs(rec: dict) -> list[str]:
    return list(dict.fromkeys(k.split(" / ")[0] for k in rec["unlearning"]))


SMI_M_GAIN = 0.9227 - 0.9089  # the paper's smallest lead of SMI-M over SMI on a retrained model (ResNet50-CINIC10)


def smi_m_beats_smi(recs: dict[str, dict], *, name: str = "unlearning-audit") -> Finding:
    """SMI-M closer to the truth than SMI: per forget fraction, feature set and seed, SMI's error − SMI-M's (the mean
    |ρ − truth| over 'none' and 'retrain') with the interval of :data:`ERRORS`, against the paper's smallest lead."""
    rec = recs[name]
    parts, verdicts = [], []
    for frac in _fracs(rec):
        for smi, features in (("smi", "hidden features"), ("smi-scores", "score features")):
            if f"{frac} / none / {smi}" not in rec["unlearning"]:
                continue
            m = smi.replace("smi", "smi-m", 1)
            a, b = ([truth_error(rec, frac, x, i) for i in range(seed_count(rec))] for x in (smi, m))
            text, v = judged([gap(x, y) for x, y in zip(a, b)], effect=SMI_M_GAIN)
            verdicts.append(v)
            shown = [f"{x} {spread([e[0] for e in es if isinstance(e, tuple)])[0]:.2f}"
                     for x, es in (("SMI", a), ("SMI-M", b))]
            parts.append(f"forget {float(frac):.0%}, {features}: {' vs '.join(shown)}; SMI's error − SMI-M's {text}")
    return Finding(f"mean |ρ − truth| over 'none' (0) and 'retrain' (1), mean over seeds, and per seed ({ERRORS}), "
                   f"{against_paper(SMI_M_GAIN, **RHO)}: " + "; ".join(parts), combine(verdicts),
                   "The paper reads the retrained model only, here 'none' counts too, so an audit that reads "
                   "everything as forgotten cannot win.", one_seed=one_seed(rec))


FNR_AT_0 = 0.1328  # RULI's false-negative rate at 0% FPR (ResNet18-CIFAR10, forget 5%), the lowest of the two
FNR_NEEDS = ("each per-sample audit's misses on the retrained model's forget set at 0% FPR per seed (`fnr_at_0fpr`: "
             "{\"FRAC / AUDIT\": [[misses, forget size] per seed]}), from the unlearning audit run with audit_fpr = 0")


def fnr_at_zero_fpr(recs: dict[str, dict], *, name: str = "unlearning-audit") -> Finding:
    """The false-negative rate of per-sample audits at 0% FPR: per audit and seed, the share of the retrained
    model's forget set it misses, with its Wilson interval, against the paper's :data:`FNR_AT_0`. No audit here is
    thresholded there unless the record stores ``fnr_at_0fpr``: not run."""
    rec = recs[name]
    stored = rec.get("fnr_at_0fpr")
    if not stored:
        frac = _fracs(rec)[-1]
        retrain = {k.split(" / ")[2]: v["per_seed"] for k, v in rec["unlearning"].items()
                   if k.startswith(f"{frac} / retrain / threshold-")}
        return Finding(f"per-sample audits thresholded at {rec['experiment']['audit_fpr']:.0%} FPR; their ρ of the "
                       f"retrained model's forget set (truth 1), forget {float(frac):.0%}, per seed: "
                       + "; ".join(f"{a} " + ", ".join(f"{x:.2f}" for x in v) for a, v in retrain.items()),
                       single(NOT_RUN), "No experiment thresholds a per-sample audit at 0% FPR or stores its "
                       f"false-negative rate (the audits store ρ corrected for their TPR and FPR), and RULI is not "
                       f"implemented. It needs {FNR_NEEDS}.")
    parts, verdicts = [], []
    for key, per in stored.items():
        words = [category(*wilson_interval(k, n), FNR_AT_0) for k, n in per]
        verdicts.append(combine(words))
        parts.append(f"{key} " + ", ".join(f"{k}/{n} [{pct(wilson_interval(k, n)[0])}, "
                                           f"{pct(wilson_interval(k, n)[1])}]%" for k, n in per)
                     + f" ({combine(words).counts})")
    return Finding(f"misses on the retrained model's forget set at 0% FPR, per seed with its Wilson interval, "
                   f"{against_paper(FNR_AT_0)}: " + "; ".join(parts), combine(verdicts),
                   "An FNR above 0 at 0% FPR: the audit reads forgotten samples as still trained.")


COLLAPSE = 0.9362 - 0.4101  # SMI-M − IAM on the retrained model, ViT-CINIC10, forget 10% (the smaller collapse)


def shadow_collapse(recs: dict[str, dict], *, name: str = "unlearning-audit") -> Finding:
    """The AR analogue of IAM / RMIA collapsing: the shadow-model audit stored here (offline LiRA) against SMI-M on
    the retrained model's forget set (truth 1): per fraction, feature set and seed, SMI-M's ρ − LiRA's with the
    interval from their far ends, against the paper's :data:`COLLAPSE`; points only where LiRA stores no interval."""
    rec = recs[name]
    shadows = rec["experiment"].get("n_shadows", 0)
    if not any(k.endswith(" / threshold-lira") for k in rec["unlearning"]):
        return Finding(f"no shadow-model audit stored (n_shadows = {shadows})", single(NOT_RUN), "No shadow model was "
                       "trained in this regime, so no shadow-based MIA audit is stored; it needs the unlearning audit "
                       "with n_shadows > 0.")
    parts, verdicts = [], []
    for frac in _fracs(rec):
        key = f"{frac} / retrain / threshold-lira"
        lira = rec["unlearning"][key]["per_seed"]
        for audit in ("smi-m", "smi-m-scores"):
            own = rec["unlearning"][f"{frac} / retrain / {audit}"]["per_seed"]
            diffs = []
            for i, (x, y) in enumerate(zip(own, lira)):
                ia, ib = rho_interval(rec, f"{frac} / retrain / {audit}", i), rho_interval(rec, key, i)
                diffs.append(gap((x, *ia), (y, *ib)) if ia and ib else None)
            text, v = judged(diffs, effect=COLLAPSE)
            verdicts.append(v)
            parts.append(f"forget {float(frac):.0%}: LiRA " + ", ".join(f"{x:.2f}" for x in lira) + f", {audit} "
                         + ", ".join(f"{x:.2f}" for x in own) + f"; {audit} − LiRA {text}")
    return Finding(f"ρ of the retrained model's forget set (truth 1) per seed, offline LiRA with {shadows} shadow "
                   f"models against SMI-M, {against_paper(COLLAPSE, **RHO)}: " + "; ".join(parts), combine(verdicts),
                   "lmaudit audits unlearning with neither IAM nor RMIA (RMIA is an attack here, not an unlearning "
                   f"audit): the shadow-model audit it stores is offline LiRA, on {model(rec['experiment'], 'a model')}"
                   ", not a ViT. LiRA's ρ comes with the bootstrap interval of its thresholded estimate "
                   "(`threshold_intervals`: its reference sets and forget set resampled); a record without it reads "
                   "points only.", one_seed=one_seed(rec))


# ---------------------------------------------------------------- DLM extraction

IDENTITY_TEST = "tests/test_claims_added.py::test_ar_extraction_is_the_dlm_definition_with_a_suffix_read_left_to_right"
IDENTITY_TOLERANCE = 1e-3  # nats: float32 rounding of a log-probability summed over a suffix
IDENTITY_NEEDS = ("per record, the DLM estimator's log p̂ with M the suffix unmasked left to right and the AR model's "
                  "log-probability of that suffix (`ar_identity`: {\"dlm\": [..], \"ar\": [..]})")


def ar_special_case(recs: dict[str, dict], *, name: str = "extraction-steps") -> Finding:
    """The generalised definition subsumes AR extraction: on records that store both (``ar_identity``), the share
    whose DLM estimate along a left-to-right suffix differs from the AR suffix probability by more than
    :data:`IDENTITY_TOLERANCE`, oriented as −share with its Wilson interval (any difference refutes an identity; none
    cannot prove one: inconclusive). Not stored: not testable here (the test suite checks the identity)."""
    rec = recs[name]
    pair = rec.get("ar_identity")
    if not pair:
        return Finding(f"`{name}` stores no AR suffix probability beside the DLM estimate", single(UNTESTABLE),
                       f"The identity is checked by a test of the suite (`{IDENTITY_TEST}`), not by an experiment: an "
                       f"experiment would store {IDENTITY_NEEDS}.")
    d = np.abs(np.asarray(pair["dlm"], dtype=float) - np.asarray(pair["ar"], dtype=float))
    k, n = int((d > IDENTITY_TOLERANCE).sum()), len(d)
    lo, hi = wilson_interval(k, n)
    return Finding(f"records whose left-to-right DLM estimate differs from the AR suffix log-probability by more than "
                   f"{IDENTITY_TOLERANCE:g} nats: {k}/{n} [{pct(lo)}, {pct(hi)}]% (largest |Δ| {d.max():.2g})",
                   single(category(-hi, -lo)), "An identity: a difference beyond float rounding refutes it, and none "
                   "on a finite set of records is consistent with it.", one_seed=True)


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
    return Finding(f"`results/{gone[0]}` is missing", single(NOT_RUN), f"run `lmaudit run experiments/{gone[0]}.toml`"
                   ) if gone else None


def _setting(name: str, rec: dict) -> str:
    e = rec["experiment"]
    which = f"`{e['base']}`" if e.get("base") else f"the `{e['preset']}` preset"
    return f"{name}: {which}, {e['n_members']} messages, {e['epochs']} epochs ({weights(e)})"


def _moving(rec: dict, key: str) -> bool:
    """Whether a DLM row's p̂ has not been shown to converge in the number of orders (more than the share moved)."""
    moved = [r["convergence"]["not_converged_fraction"] for r in rec["pii_rows"][key] if "convergence" in r]
    return bool(moved) and not max(moved) <= UNCONVERGED_SHARE


def one_size(recs: dict[str, dict], *, name: str = "pii-extraction", other: str = "pii-extraction-large",
             what: str = "", judge_=None, **kw) -> Finding:
    """A claim across model sizes, judged by ``judge_`` once a tiny-model experiment of a second size (``other``) is
    stored beside ``name``; until then not run."""
    if other in recs and judge_ is dlm_size:
        return dlm_size(recs, small=name, large=other, **kw)
    if other in recs and judge_ is larger_dlm_vs_ar:
        return larger_dlm_vs_ar(recs, ar=name, dlm=other, **kw)
    return Finding(f"`{name}`: the AR model and its DLM, both of the `{recs[name]['experiment']['preset']}` preset",
                   single(NOT_RUN), f"No tiny-model experiment extracts PII with {what} on the same messages; a DLM of "
                   f"a larger preset fine-tuned on them (`{other}`) would test it. The real model's column compares "
                   "across experiments.")


def larger_dlm_vs_ar(recs: dict[str, dict], *, ar: str = "pii-extraction", dlm: str = "real-dlm-pii-extraction",
                     p: float = 0.5, effect: float | None = None) -> Finding:
    """A larger DLM leaks less than a smaller AR model: e-mails discoverable from the small AR model's experiment −
    from the large DLM's (max-step), Newcombe's interval, against the paper's difference; not testable at this size
    where the DLM's p̂ has not converged (too few orders: an estimate still moving may be biased low)."""
    if (missing := _missing(recs, ar, dlm)) is not None:
        return missing
    per, counts = _share(recs[ar], "email / AR", recs[dlm], "email / DLM max-step", p)
    text, verdict = judged_seeds(per, effect=effect)
    moving = _moving(recs[dlm], "email / DLM max-step")
    return Finding(f"e-mails discoverable at p = {p:g}, small AR model vs larger DLM (max-step): {', '.join(counts)}, "
                   f"difference {text}, {against_paper(effect)}", at_this_size(verdict) if moving else verdict,
                   f"Across two experiments ({_setting(ar, recs[ar])}; {_setting(dlm, recs[dlm])}): the models differ "
                   "in size and in the messages, their number and the fine-tuning, so the comparison is confounded."
                   + (" The DLM's p̂ has not been shown to converge in the number of orders: not testable at this "
                      "size." if moving else ""), one_seed=one_seed(recs[ar], recs[dlm]))


def dlm_size(recs: dict[str, dict], *, small: str = "pii-extraction", large: str = "real-dlm-pii-extraction",
             p: float = 0.5) -> Finding:
    """Leakage grows with DLM size: e-mails discoverable (max-step) from the larger DLM − from the smaller, Newcombe's
    interval (no share given by the paper: read on the direction); nothing discoverable from either: not testable."""
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
        verdict, text = single(UNTESTABLE), "none from either"
        why += " No e-mail is discoverable from either DLM: the counts cannot differ."
    elif any(_moving(recs[n], key) for n in (small, large)):
        verdict = at_this_size(verdict)
        why += " A DLM's p̂ has not been shown to converge in the number of orders: not testable at this size."
    return Finding(f"e-mails discoverable at p = {p:g} (max-step), larger vs smaller DLM: {', '.join(counts)} "
                   f"({text}); phones {', '.join(phones)}", verdict, why,
                   one_seed=one_seed(recs[small], recs[large]))


def step_knob(recs: dict[str, dict], *, name: str = "extraction-steps", medians: dict[str, float] | None = None,
              p: float = 0.5, share: float = UNCONVERGED_SHARE) -> Finding:
    """The step count as a privacy knob, in two parts, seed by seed. Each larger step count above the one before:
    the per-record median gain in log p̂ with its bootstrap interval, against the difference of the paper's medians
    (``medians``, against one step); not testable at this size where p̂ at either count has not converged. And the
    records it leaks: discoverable at the most steps − at one step, Newcombe's interval (no size given: read on the
    direction; nothing discoverable at either: not testable here)."""
    rec, paper = recs[name], {"1": 0.0, **(medians or {})}
    seeds = seed_columns(rec, "log_p_columns")
    if seeds is None:
        return first_only(rec, "log_p_columns")
    steps = list(rec["steps"])
    parts, verdicts = [], []
    for i, raw in enumerate(seeds):
        cols = {s: np.asarray(v, dtype=np.float64) for s, v in raw.items()}
        for a, b in zip(steps, steps[1:]):
            d, lo, hi = paired_median(cols[b], cols[a])
            effect = paper[b] - paper[a] if a in paper and b in paper else None
            moved = [rec["steps"][s]["per_seed"][i].get("convergence", {}).get("not_converged_fraction")
                     for s in (a, b)]
            loose = [s for s, m in zip((a, b), moved) if m is not None and not m <= share]
            v = judge([(lo, hi)], effect=effect)
            verdicts.append(at_this_size(v) if loose else v)
            parts.append(f"seed {i} {a} → {b}: {d:+.2f} [{lo:+.2f}, {hi:+.2f}] vs "
                         f"{effect_text(effect, scale=1, unit='', digits=2)} ({verdicts[-1].counts}"
                         + (f"; p̂ not converged at N = {', '.join(loose)})" if loose else ")"))
        n = len(cols[steps[0]])
        k = [rec["steps"][x]["per_seed"][i][f"discoverable@p={p:g}"] for x in (steps[0], steps[-1])]
        if not any(k):
            verdicts.append(single(UNTESTABLE))
            parts.append(f"seed {i} records discoverable at p = {p:g}: none at N = {steps[0]} or {steps[-1]} (this "
                         "part cannot be read)")
            continue
        d, lo, hi = newcombe(k[1], n, k[0], n)
        v = judge([(lo, hi)])
        verdicts.append(v)
        parts.append(f"seed {i} records discoverable at p = {p:g}: {k[0]}/{n} at N = {steps[0]}, {k[1]}/{n} at N = "
                     f"{steps[-1]}, difference {100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] points ({v.counts})")
    return Finding("median gain in log p̂ (nats) from each step count to the next, per record (bootstrap 95% interval "
                   "over records), against the difference of the paper's medians: " + "; ".join(parts),
                   combine(verdicts), "Read as a knob where every step fewer gives a lower success probability and "
                   "fewer records leak at the fewest steps. A gain is judged only where p̂ has converged in the number "
                   f"of orders (at most {pct(share)}% of records moving by more than 2× from R/2 to R) at both step "
                   "counts; elsewhere too few orders: not testable at this size.", one_seed=len(seeds) < 2)
