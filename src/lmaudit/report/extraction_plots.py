"""Extraction figures: success probability by step count, relaxed extraction, query budget. PNG bytes."""

from __future__ import annotations

import numpy as np

from lmaudit.report.plots import _PALETTE, _png, plt


def log_p_by_steps(columns: dict[str, np.ndarray], *,
                   title: str = "Single-query success by sampling resolution") -> bytes:
    """Box plot of per-record log10 p̂ for each step count (or model), infinite values dropped."""
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    labels = list(columns)
    data = [np.asarray(columns[k], dtype=float)[np.isfinite(columns[k])] / np.log(10) for k in labels]
    ax.boxplot(data, showfliers=True, flierprops={"markersize": 2})
    ax.set_xticks(range(1, len(labels) + 1), labels)
    medians = [np.median(d) if len(d) else np.nan for d in data]
    ax.plot(range(1, len(labels) + 1), medians, color=_PALETTE[1], marker="o", lw=1.2, label="median")
    ax.set(xlabel="denoising steps N", ylabel="log10 p̂ (single query)", title=title)
    ax.legend(fontsize=8)
    return _png(fig)


def relaxed_rates(eps, predicted, empirical, *, label: str = "") -> bytes:
    """Mean Pr(d ≤ ε) over records: Gaussian prediction vs empirical rate of sampled generations."""
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    ax.plot(eps, empirical, color=_PALETTE[0], marker="o", ms=3, lw=1.6, label=f"empirical {label}".strip())
    ax.plot(eps, predicted, color=_PALETTE[1], ls="--", lw=1.6, label=f"Gaussian fit {label}".strip())
    ax.set(xlabel="Hamming tolerance ε (tokens)", ylabel="Pr(d ≤ ε), mean over records", ylim=(-0.02, 1.02),
           title="Relaxed extraction")
    ax.legend(fontsize=8)
    return _png(fig)


def budget_curves(ns: np.ndarray, fractions: dict[str, np.ndarray], *, p: float) -> bytes:
    """Fraction of records extractable with probability ≥ p within n queries, log-x."""
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    for i, (name, frac) in enumerate(fractions.items()):
        ax.plot(ns, 100 * np.asarray(frac), color=_PALETTE[i % len(_PALETTE)], lw=1.6, label=name)
    ax.set(xscale="log", xlabel="query budget n", ylabel=f"extractable records (%), p = {p:g}",
           title="Extractable fraction vs query budget")
    ax.legend(fontsize=8)
    return _png(fig)


def likelihood_shift(train: np.ndarray, unseen: np.ndarray, *, title: str) -> bytes:
    """Histograms of log10 p̂ on training vs unseen records."""
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    t = np.asarray(train)[np.isfinite(train)] / np.log(10)
    u = np.asarray(unseen)[np.isfinite(unseen)] / np.log(10)
    bins = np.histogram_bin_edges(np.concatenate([t, u]), bins=30)
    ax.hist(t, bins=bins, alpha=0.6, color=_PALETTE[1], label=f"training (median {np.median(t):.1f})")
    ax.hist(u, bins=bins, alpha=0.6, color=_PALETTE[0], label=f"unseen (median {np.median(u):.1f})")
    ax.set(xlabel="log10 p̂", ylabel="records", title=title)
    ax.legend(fontsize=8)
    return _png(fig)
