"""The PII claims of two papers: (n, p)-discoverable extraction AR vs DLM (the DLM-extraction paper) and
reconstruction of redacted values (the Q-Skew paper's Table 6, and AR vs DLM with its attack)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lmaudit.claims.base import (
    UNCONVERGED_SHARE,
    UNTESTABLE,
    Finding,
    judged_seeds,
    newcombe,
    pct,
)
from lmaudit.claims.models import weights
from lmaudit.claims.verdicts import AGAINST, against_paper, at_this_size, combine, effect_text, single, unless
from lmaudit.extraction.reconstruct import RANK_MODES, paired_rate_diff, top1_hits, wilson_interval


def lineage(rec: dict, texts: str = "messages") -> str:
    """The AR model and the DLM adapted from it of a PII experiment, from its stored settings."""
    e = rec["experiment"]
    how = f"{weights(e)}, lr {e['lr']:g}"
    ar = f"`{e['base']}`" if e.get("base") else f"The `{e['preset']}` AR base" if e.get("preset") else "The AR base"
    adapted = f" on {e['adapt_tokens']:,} tokens" if e.get("adapt_tokens") else ""
    return (f"{ar} and the DLM adapted from it{adapted}, both fine-tuned ({how}) {e['epochs']} epochs on the same "
            f"{e['n_members']} {texts}")


def _wilson(k: int, n: int) -> str:
    lo, hi = wilson_interval(k, n)
    return f"{k}/{n} [{pct(lo)}%, {pct(hi)}%]"


def _query_budget(rec: dict) -> str:
    """'n = 10,000': the stored query budget of an extraction, or that it is not stored."""
    n = (rec["experiment"].get("extract") or {}).get("n")
    return f"n = {n:,}" if n else "a query budget n that is not stored"


def _unconverged(rec: dict, f: str) -> float | None:
    """The highest share over seeds of training records whose DLM max-step p̂ moved > 2× from R/2 to R (None:
    not stored; NaN: some seed had no finite p̂, so its convergence cannot be checked)."""
    moved = [r["convergence"]["not_converged_fraction"] for r in rec["pii_rows"][f"{f} / DLM max-step"]
             if "convergence" in r]
    return (float("nan") if np.isnan(moved).any() else max(moved)) if moved else None


def _counts(rec: dict, key: str, p: float, where: str = "train") -> int:
    """Discoverable values of one 'field / model' row over seeds, on the training or the unseen messages."""
    return sum((r if where == "train" else r["unseen_discoverable"])[f"discoverable@p={p:g}"]
               for r in rec["pii_rows"][key])


def _single(rec: dict) -> bool:
    """Whether a PII record holds one seed (its rows' per-seed entries, or its ranks', say how many)."""
    rows = rec.get("pii_rows") or {}
    if rows:
        return len(next(iter(rows.values()))) < 2
    ranks = next(iter(rec["ranks"].values()))
    return len(next(iter(ranks.values()))) < 2


def _field_seeds(rec: dict, a: str, b: str, p: float) -> tuple[list[dict], list[str]]:
    """Per seed: the share of training values discoverable from model ``a`` − from ``b`` with Newcombe's 95% interval
    (fractions), and the counts as text."""
    n = rec["n_train"]
    out, text = [], []
    for ra, rb in zip(rec["pii_rows"][a], rec["pii_rows"][b]):
        ka, kb = ra[f"discoverable@p={p:g}"], rb[f"discoverable@p={p:g}"]
        d, lo, hi = newcombe(ka, n, kb, n)
        out.append({"diff": d, "ci95": [lo, hi]})
        text.append(f"{ka} vs {kb}")
    return out, text


def ar_leaks_more(recs: dict[str, dict], *, p: float = 0.5, name: str = "pii-extraction",
                  effects: dict[str, float] | None = None) -> Finding:
    """The AR model has more (n, p)-discoverable training values than the DLM max-step: per field and seed, the
    difference of the two shares with Newcombe's 95% interval, against the paper's difference (``effects``, per
    field). A field reads not testable at this size where the DLM's p̂ has not converged in the number of orders
    (too few orders: an estimate still moving may be biased low), and its support does not count (reproduced and
    smaller read inconclusive) where the AR model finds unseen values about as often as training ones (its lead is
    then of guessable values)."""
    rec = recs[name]
    n, effects = rec["n_train"], effects or {}
    parts, verdicts, moving, both_zero, guessed = [], [], [], [], []
    for f in ("email", "phone"):
        per, counts = _field_seeds(rec, f"{f} / AR", f"{f} / DLM max-step", p)
        text, verdict = judged_seeds(per, effect=effects.get(f))
        both_zero.append(all(c == "0 vs 0" for c in counts))
        parts.append(f"{f}: AR vs DLM max-step {', '.join(counts)} of {n}, difference {text}, "
                     f"{against_paper(effects.get(f))}")
        share = _unconverged(rec, f)
        if share is not None and np.isnan(share):  # every p̂ is 0 in some seed: convergence cannot be confirmed
            parts[-1] += " (its p̂ is 0 for every record of a seed: convergence in R orders cannot be checked)"
            moving.append(f)
        elif share is not None:
            parts[-1] += f" (its p̂ moved > 2× from R/2 to R orders: {pct(share)}% of records)"
            if share > UNCONVERGED_SHARE:
                moving.append(f)
        seeds = len(rec["pii_rows"][f"{f} / AR"])
        if all("unseen_discoverable" in r for m in ("AR", "DLM max-step") for r in rec["pii_rows"][f"{f} / {m}"]):
            # the same extraction on messages never trained on: values a model finds without having seen them
            ar, u_ar = _counts(rec, f"{f} / AR", p), _counts(rec, f"{f} / AR", p, "unseen")
            u_dlm, nu = _counts(rec, f"{f} / DLM max-step", p, "unseen"), rec["n_unseen"] * seeds
            parts[-1] += f"; unseen control AR {u_ar}/{nu}, DLM {u_dlm}/{nu}"
            if ar and wilson_interval(ar, n * seeds)[0] <= wilson_interval(u_ar, nu)[1]:
                guessed.append(f)
        verdicts.append(at_this_size(verdict) if f in moving else unless(verdict) if f in guessed else verdict)
    regime = f"{lineage(rec)}. Each field judged by the rule, per seed"
    if any(both_zero):
        regime += ("; " + " and ".join(f for f, z in zip(("e-mails", "phones"), both_zero) if z)
                   + " discoverable from neither model cannot tell them apart")
    regime += "."
    if guessed:
        regime += (f" The AR model's training count of {' and '.join(guessed)} is not above its unseen control (Wilson "
                   "intervals overlap): it finds values it never trained on about as often, so its lead is of "
                   "guessable values more than of memorised ones, and does not count as support.")
    if moving:
        regime += (f" The DLM's p̂ of {' and '.join(moving)} has not been shown to converge in the number of orders "
                   f"(more than {pct(UNCONVERGED_SHARE)}% of records still move by more than 2×, or every p̂ is 0): too "
                   "few orders, so that field is not testable at this size. Possible reason an estimate still moving "
                   "favours this claim: a mean of a heavy-tailed probability over few orders may fall below its "
                   "expectation.")
    verdict = single(UNTESTABLE) if all(both_zero) else combine(verdicts)
    if all(both_zero):
        regime += " No value is discoverable from either model: the claim cannot be read here."
    return Finding(f"(n, p)-discoverable training values at {_query_budget(rec)}, p = {p:g}, per seed: "
                   + "; ".join(parts), verdict, regime, one_seed=_single(rec))


def one_vs_max_step(recs: dict[str, dict], *, name: str = "pii-extraction", effects: dict[str, float] | None = None,
                    p: float = 0.5) -> Finding:
    """Max-step leaks more: per field and seed, the share of training values discoverable at max-step − at one step
    (at ``p``) with Newcombe's 95% interval, against the paper's difference (``effects``); the median log p̂ is shown
    beside it. Not testable where no value is discoverable at either step count."""
    rec, effects = recs[name], effects or {}
    parts, verdicts, counts, higher = [], [], [], []
    for f in ("email", "phone"):
        one = np.mean([r["median_log_p_train"] for r in rec["pii_rows"][f"{f} / DLM one-step"]])
        mx = np.mean([r["median_log_p_train"] for r in rec["pii_rows"][f"{f} / DLM max-step"]])
        higher.append(bool(mx > one))
        per, text = _field_seeds(rec, f"{f} / DLM max-step", f"{f} / DLM one-step", p)
        judged, verdict = judged_seeds(per, effect=effects.get(f))
        verdicts.append(verdict)
        counts += [_counts(rec, f"{f} / DLM one-step", p), _counts(rec, f"{f} / DLM max-step", p)]
        parts.append(f"{f}: discoverable max-step vs one-step {', '.join(text)} of {rec['n_train']}, difference "
                     f"{judged}, {against_paper(effects.get(f))}; median log p̂ {one:.1f} → {mx:.1f}")
    if not any(counts):
        moves = "max-step above one-step" if all(higher) else "not max-step above one-step in every field"
        return Finding("; ".join(parts), single(UNTESTABLE), "No PII value is discoverable from this DLM at any "
                       f"step count, so the counts cannot differ; the median likelihoods (points): {moves}.",
                       one_seed=_single(rec))
    return Finding("; ".join(parts), combine(verdicts), f"Counts at {_query_budget(rec)}, p = {p:g} (training "
                   "messages, per seed), each field judged by the rule.", one_seed=_single(rec))


def pii_pairs(rec: dict, a: str, b: str, *, better: bool, names: tuple[str, str] | None = None,
              effects: dict[str, float] | None = None) -> tuple[list[str], str]:
    """ASR(a) − ASR(b) on the same records, in inference and generation mode, each field, seed by seed with its
    paired bootstrap interval over records: the text of every pair and the claim's verdict (``a`` ahead of ``b``,
    or with ``better=False`` behind it; each pair one comparison against the paper's difference in ``effects``)."""
    if "ranks" not in rec:
        raise KeyError("ranks")
    na, nb = names or (a, b)
    effects = effects or {}
    parts, verdicts = [], []
    for mode, key, asr_key in RANK_MODES:
        ranks = rec.get(key) or {}
        for f in rec["fields"]:
            ra, rb = ranks.get(a, {}).get(f), ranks.get(b, {}).get(f)
            if ra is None or rb is None:
                continue
            per = [dict(zip(("diff", "ci95"), (d, [lo, hi])))
                   for d, lo, hi in (paired_rate_diff(top1_hits([x]), top1_hits([y])) for x, y in zip(ra, rb))]
            text, verdict = judged_seeds(per, effect=effects.get(f), sign=1.0 if better else -1.0)
            verdicts.append(verdict)
            parts.append(f"{mode} {f}: {na} {np.mean(rec[asr_key][a][f]):.1f}% vs {nb} "
                         f"{np.mean(rec[asr_key][b][f]):.1f}%, difference {text}"
                         + (" (against the claim)" if verdict == AGAINST else ""))
    return parts, combine(verdicts)


def _coverage(rec: dict) -> str:
    return ", ".join(f"{f} {np.mean(v['coverage']):.0f}%" for f, v in rec["fields"].items())


def pii_combined(a: str, b: str, better: bool, *, beside: str | None = None, name: str = "pii-reconstruction",
                 effects: dict[str, float] | None = None, more: tuple = ()) -> Callable[[dict], Finding]:
    """``a`` beats (``better``) or trails ``b`` in top-1 ASR, read seed by seed from paired intervals in both modes
    against the paper's difference per field (``effects``); ``more``: further ``(signal, effects)`` judged against
    ``b`` the same way (one claim); ``beside``: a signal shown next to it, not judged (the fitted-α combination
    beside the paper's fixed α)."""
    def judge(recs: dict[str, dict]) -> Finding:
        rec = recs[name]
        parts, verdicts = [], []
        for signal, eff in ((a, effects), *more):
            got, v = pii_pairs(rec, signal, b, better=better, effects=eff)
            parts += got
            verdicts.append(v)
        verdict = combine(verdicts)
        ours = ("; ".join(parts) + " (per seed, paired bootstrap over records; the paper's difference "
                + "; ".join(f"{signal}: " + ", ".join(f"{f} {effect_text(e)}" for f, e in (eff or {}).items())
                            for signal, eff in ((a, effects), *more))
                + f"; generation coverage {_coverage(rec)})")
        if beside:
            ours += (f". Beside it, {beside} (fitted α, not judged): "
                     + "; ".join(pii_pairs(rec, beside, b, better=better)[0]))
        alphas = sorted({a for v in rec["fields"].values() for a in v.get("alpha", []) if a is not None})
        sweep = "; ".join(f"{f}: " + ", ".join(f"α={a:g} {np.mean([p[i] for p in sw['percent']]):.1f}%"
                                              for i, a in enumerate(sw["alpha"]) if a in (0.0, 0.1, 0.2, 1.0))
                          for f, sw in (rec.get("alpha_sweep") or {}).items())
        e = rec["experiment"]
        model = (f"The `{e['base']}` DLM" if e.get("base") else f"A `{e['preset']}` DLM" if e.get("preset")
                 else "A DLM") + f" fine-tuned {e['epochs']} epochs"
        return Finding(ours, verdict, f"{model} on {e['n_members']} messages (the paper: LLaDA-8B on "
                       "TREC); read in inference mode (the true value among the candidates) and in generation mode "
                       f"(generated candidates only, the paper's setting; the true value was generated for "
                       f"{_coverage(rec)} of records). α "
                       f"fitted on {rec['n_calibration']} known messages: {', '.join(f'{a:g}' for a in alphas)} (ties "
                       "go to the smallest α, so a fitted α = 0 makes combined CE itself); the fixed-α sweep "
                       f"(inference, points): {sweep}.", one_seed=_single(rec))
    return judge


def ar_reconstructs_more(recs: dict[str, dict], *, name: str = "pii-reconstruction") -> Finding:
    """AR − DLM top-1 ASR of redacted values, seed by seed (no paper figure: the extraction paper's claim tested with
    the Q-Skew paper's attack, so it is read on the direction); each pair per seed by the rule."""
    rec = recs[name]
    parts, verdict = pii_pairs(rec, "AR ce", "ce", better=True, names=("AR", "DLM"))
    cov = "; ".join(f"{f}: DLM {np.mean(v['coverage']):.0f}%, AR {np.mean(v['ar_coverage']):.0f}%"
                    for f, v in rec["fields"].items() if "ar_coverage" in v)
    return Finding("top-1 ASR of redacted values, both ranked by cross-entropy: " + "; ".join(parts)
                   + f" (per seed, paired over records; true value generated at all: {cov})", verdict,
                   f"{lineage(rec)}; {rec['n_targets']} redacted per field. The AR model continues the left context, "
                   "the DLM fills inserted masks with both contexts. No paper figure for this comparison: read on the "
                   "direction.", one_seed=_single(rec))
