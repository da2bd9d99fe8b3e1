"""The PII claims of two papers: (n, p)-discoverable extraction AR vs DLM (the DLM-extraction paper) and
reconstruction of redacted values (the Q-Skew paper's Table 6, and AR vs DLM with its attack)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lmaudit.extraction.reconstruct import RANK_MODES, paired_signals, wilson_interval
from lmaudit.report.claims_base import (
    NOT_REPRODUCED,
    PARTLY,
    REPRODUCED,
    UNCONVERGED_SHARE,
    UNTESTABLE,
    Finding,
    ci,
    pct,
    pts,
)


def lineage(rec: dict, texts: str = "messages") -> str:
    """The AR model and the DLM adapted from it of a PII experiment, from its stored settings."""
    e = rec["experiment"]
    how = f"LoRA rank {e['lora']}, lr {e['lr']:g}" if e.get("lora") else f"every weight, lr {e['lr']:g}"
    ar = f"`{e['base']}`" if e.get("base") else "The tiny AR base"
    adapted = f" on {e['adapt_tokens']:,} tokens" if e.get("adapt_tokens") else ""
    return (f"{ar} and the DLM adapted from it{adapted}, both fine-tuned ({how}) {e['epochs']} epochs on the same "
            f"{e['n_members']} {texts}")


def _wilson(k: int, n: int) -> str:
    lo, hi = wilson_interval(k, n)
    return f"{k}/{n} [{pct(lo)}%, {pct(hi)}%]"


def _query_budget(rec: dict) -> str:
    return f"{rec['experiment']['extract'].get('n', 10_000):,}"


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


def ar_leaks_more(recs: dict[str, dict], *, p: float = 0.5, name: str = "pii-extraction") -> Finding:
    """The AR model has more (n, p)-discoverable training values than the DLM max-step, Wilson intervals disjoint
    per field; where the DLM's p̂ has not converged in the number of orders, the verdict is at most 'partly'."""
    rec = recs[name]
    n = rec["n_train"]
    parts, ok, found, moving, both_zero, guessed = [], [], False, [], [], []
    for f in ("email", "phone"):
        ar, dlm = _counts(rec, f"{f} / AR", p), _counts(rec, f"{f} / DLM max-step", p)
        seeds = len(rec["pii_rows"][f"{f} / AR"])
        ok.append(wilson_interval(ar, n * seeds)[0] > wilson_interval(dlm, n * seeds)[1])
        found |= ar > 0 or dlm > 0
        both_zero.append(ar == dlm == 0)
        parts.append(f"{f}: AR {_wilson(ar, n * seeds)} vs DLM max-step {_wilson(dlm, n * seeds)}")
        share = _unconverged(rec, f)
        if share is not None and np.isnan(share):  # every p̂ is 0 in some seed: convergence cannot be confirmed
            parts[-1] += " (its p̂ is 0 for every record of a seed: convergence in R orders cannot be checked)"
            moving.append(True)
        elif share is not None:
            parts[-1] += f" (its p̂ moved > 2× from R/2 to R orders: {pct(share)}% of records)"
            moving.append(share > UNCONVERGED_SHARE)
        if all("unseen_discoverable" in r for m in ("AR", "DLM max-step") for r in rec["pii_rows"][f"{f} / {m}"]):
            # the same extraction on messages never trained on: values a model finds without having seen them
            u_ar, u_dlm, nu = _counts(rec, f"{f} / AR", p, "unseen"), \
                _counts(rec, f"{f} / DLM max-step", p, "unseen"), rec["n_unseen"] * seeds
            parts[-1] += f"; unseen control AR {u_ar}/{nu}, DLM {u_dlm}/{nu}"
            if ar and wilson_interval(ar, n * seeds)[0] <= wilson_interval(u_ar, nu)[1]:
                guessed.append(f)
    verdict = REPRODUCED if all(ok) else PARTLY if any(ok) else (NOT_REPRODUCED if found else UNTESTABLE)
    regime = f"{lineage(rec)}. 'Ahead' only when the intervals are disjoint"
    if any(both_zero):
        regime += ("; " + " and ".join(f for f, z in zip(("e-mails", "phones"), both_zero) if z)
                   + " discoverable from neither model cannot tell them apart")
    regime += "."
    if guessed:
        regime += (f" The AR model's training count of {' and '.join(guessed)} is not above its unseen control (Wilson "
                   "intervals overlap): it finds values it never trained on about as often, so its lead is of "
                   "guessable values more than of memorised ones; the counts judged are of training messages, as the "
                   "paper's.")
    if verdict in (REPRODUCED, PARTLY) and any(moving):
        verdict = PARTLY
        regime += (" The DLM's p̂ has not been shown to converge in the number of orders (more than "
                   f"{pct(UNCONVERGED_SHARE)}% of records still move by more than 2×, or every p̂ is 0): a mean of a "
                   "heavy-tailed probability over few orders is usually below its expectation, which favours this "
                   "claim, so the verdict is at most partly.")
    return Finding(f"(n, p)-discoverable at n = {_query_budget(rec)}, p = {p:g}, Wilson 95% intervals: "
                   + "; ".join(parts), verdict, regime)


def one_vs_max_step(recs: dict[str, dict], *, name: str = "pii-extraction") -> Finding:
    """Max-step leaks more: in every field its count is not below one-step's and its median log p̂ is above, and in
    some field its count is higher (points: counts and medians, no interval)."""
    rec = recs[name]
    parts, higher, more, counts = [], [], [], []
    for f in ("email", "phone"):
        one = np.mean([r["median_log_p_train"] for r in rec["pii_rows"][f"{f} / DLM one-step"]])
        mx = np.mean([r["median_log_p_train"] for r in rec["pii_rows"][f"{f} / DLM max-step"]])
        k1, k2 = _counts(rec, f"{f} / DLM one-step", 0.5), _counts(rec, f"{f} / DLM max-step", 0.5)
        higher.append(bool(mx > one) and k2 >= k1)
        more.append(k2 > k1)
        counts += [k1, k2]
        parts.append(f"{f}: discoverable one-step {k1}, max-step {k2}; median log p̂ {one:.1f} → {mx:.1f}")
    counts_zero = not any(counts)
    verdict = UNTESTABLE if counts_zero else (REPRODUCED if all(higher) and any(more) else NOT_REPRODUCED)
    moves = "max-step above one-step" if all(higher) else "not max-step above one-step in every field"
    return Finding("; ".join(parts), verdict,
                   f"No PII value is discoverable from this DLM at any step count, so the counts cannot differ; the "
                   f"median likelihoods: {moves}." if counts_zero else
                   f"Counts at n = {_query_budget(rec)}, p = 0.5 (training messages, every seed); max-step leaks more "
                   "where its count is not below one-step's and its median log p̂ is above it in every field, and its "
                   "count is higher in one at least.", points=True)


def pii_pairs(rec: dict, a: str, b: str, *, better: bool, names: tuple[str, str] | None = None
              ) -> tuple[list[str], str]:
    """ASR(a) − ASR(b) on the same records, in inference and generation mode, each field: the text of every pair
    and the verdict ('a' ahead of, or with ``better=False`` behind, 'b' in every pair: reproduced)."""
    if "ranks" not in rec:
        raise KeyError("ranks")
    na, nb = names or (a, b)
    asr_key = {mode: key for mode, _, key in RANK_MODES}
    parts, wins, n = [], 0, 0
    for mode, f, d, lo, hi in paired_signals(rec, a, b):
        n += 1
        wins += (lo > 0) if better else (hi < 0)
        against = (hi < 0) if better else (lo > 0)  # the interval excludes 0 on the other side
        parts.append(f"{mode} {f}: {na} {np.mean(rec[asr_key[mode]][a][f]):.1f}% vs {nb} "
                     f"{np.mean(rec[asr_key[mode]][b][f]):.1f}%, difference {pts(d)} {ci(lo, hi)}"
                     + (" (against the claim)" if against else ""))
    return parts, REPRODUCED if n and wins == n else PARTLY if wins else NOT_REPRODUCED


def _coverage(rec: dict) -> str:
    return ", ".join(f"{f} {np.mean(v['coverage']):.0f}%" for f, v in rec["fields"].items())


def pii_combined(a: str, b: str, better: bool, *, beside: str | None = None, name: str = "pii-reconstruction"
                 ) -> Callable[[dict], Finding]:
    """``a`` beats (``better``) or trails ``b`` in top-1 ASR, read from paired intervals in both modes; ``beside``: a
    signal shown next to it, not judged (the fitted-α combination beside the paper's fixed α)."""
    def judge(recs: dict[str, dict]) -> Finding:
        rec = recs[name]
        parts, verdict = pii_pairs(rec, a, b, better=better)
        ours = ("; ".join(parts)
                + f" (paired bootstrap over records, all seeds pooled; generation coverage {_coverage(rec)})")
        if beside:
            ours += (f". Beside it, {beside} (fitted α, not judged): "
                     + "; ".join(pii_pairs(rec, beside, b, better=better)[0]))
        alphas = sorted({a for v in rec["fields"].values() for a in v.get("alpha", []) if a is not None})
        sweep = "; ".join(f"{f}: " + ", ".join(f"α={a:g} {np.mean([p[i] for p in sw['percent']]):.1f}%"
                                              for i, a in enumerate(sw["alpha"]) if a in (0.0, 0.1, 0.2, 1.0))
                          for f, sw in (rec.get("alpha_sweep") or {}).items())
        e = rec["experiment"]
        model = (f"The `{e['base']}` DLM" if e.get("base") else "A tiny DLM") + f" fine-tuned {e['epochs']} epochs"
        return Finding(ours, verdict, f"{model} on {e['n_members']} messages (the paper: LLaDA-8B on "
                       "TREC); read in inference mode (the true value among the candidates) and in generation mode "
                       f"(generated candidates only, the paper's setting; the true value was generated for "
                       f"{_coverage(rec)} of records). α "
                       f"fitted on {rec['n_calibration']} known messages: {', '.join(f'{a:g}' for a in alphas)} (ties "
                       "go to the smallest α, so a fitted α = 0 makes combined CE itself); the fixed-α sweep "
                       f"(inference, points): {sweep}.")
    return judge


def ar_reconstructs_more(recs: dict[str, dict], *, name: str = "pii-reconstruction") -> Finding:
    rec = recs[name]
    parts, verdict = pii_pairs(rec, "AR ce", "ce", better=True, names=("AR", "DLM"))
    cov = "; ".join(f"{f}: DLM {np.mean(v['coverage']):.0f}%, AR {np.mean(v['ar_coverage']):.0f}%"
                    for f, v in rec["fields"].items() if "ar_coverage" in v)
    return Finding("top-1 ASR of redacted values, both ranked by cross-entropy: " + "; ".join(parts)
                   + f" (paired over records; true value generated at all: {cov})", verdict,
                   f"{lineage(rec)}; {rec['n_targets']} redacted per field. The AR model continues the left context, "
                   "the DLM fills inserted masks with both contexts.")
