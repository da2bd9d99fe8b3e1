"""Plot functions, one per figure kind. Each returns PNG bytes (matplotlib, Agg backend); :func:`roc_figure` returns
the figure itself, for a notebook."""

from __future__ import annotations

import io

import matplotlib
import numpy as np

matplotlib.use("Agg")  # plots are written to files; never open a window
import matplotlib.pyplot as plt  # noqa: E402

from lmaudit.metrics import auc, roc_curve, stratified_bootstrap

_PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]


# fixed margins of the membership-inference figures: drawn once, with no layout pass (every mia report has them)
_MARGINS = {"single": dict(left=0.13, right=0.97, bottom=0.12, top=0.93),
            "grid": dict(left=0.05, right=0.99, bottom=0.07, top=0.89, wspace=0.22, hspace=0.5)}


def _png(fig, *, margins: str | None = None) -> bytes:
    """The figure as PNG bytes, cropped to its content; with ``margins`` (a key of ``_MARGINS``), laid out by
    fixed margins instead, which draws the figure once rather than twice."""
    buf = io.BytesIO()
    if margins is not None:
        fig.subplots_adjust(**_MARGINS[margins])
    fig.savefig(buf, format="png", dpi=110, bbox_inches=None if margins else "tight")
    plt.close(fig)
    return buf.getvalue()


def roc_line(labels: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of the ROC curve as drawn: the staircase through :func:`~lmaudit.metrics.roc_curve`'s vertices.

    From each vertex the line runs right at that TPR to the next vertex's FPR, then up:
    the height at any FPR is the largest TPR among vertices at or left of it, which is
    :func:`~lmaudit.metrics.tpr_at_fpr`'s conservative rule (a threshold cannot split a
    block of tied scores, so the diagonal across it is not drawn). Without ties every
    step is horizontal or vertical anyway and the staircase is the usual curve.
    """
    fpr, tpr, _ = roc_curve(labels, score)
    x = np.repeat(fpr, 2)[1:]  # f0, f1, f1, f2, f2, ...
    y = np.repeat(tpr, 2)[:-1]  # t0, t0, t1, t1, t2, ...
    return x, y


def roc_curves(labels: np.ndarray, scores: dict[str, np.ndarray], *, log: bool = False) -> bytes:
    """ROC curve of every attack, AUC in the legend; ``log=True`` uses log-log axes (low-FPR regime).

    Curves are :func:`roc_line` staircases. On log-log axes, zero rates are drawn at the
    axes' edges, and a dashed vertical line marks 1/n_nonmembers, the finest FPR the
    non-members resolve (left of it every curve is the TPR at zero false positives).
    """
    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    n_neg = int((np.asarray(labels) == 0).sum())
    floor = 1.0 / max(n_neg, 1)
    ranked = sorted(scores.items(), key=lambda kv: -auc(labels, kv[1]))
    for i, (name, s) in enumerate(ranked):
        x, y = roc_line(labels, s)
        if log:  # 0 has no place on a log axis: draw it on the edge rather than drop the segments that touch it
            x, y = np.where(x > 0, x, floor / 2), np.where(y > 0, y, floor / 2)
        ax.plot(x, y, lw=1.6, color=_PALETTE[i % len(_PALETTE)], label=f"{name} (AUC {auc(labels, s):.3f})")
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":")
    if log:
        ax.axvline(floor, color="black", lw=0.9, ls="--", label=f"FPR resolution 1/{n_neg:,} non-members")
        ax.set(xscale="log", yscale="log", xlim=(floor / 2, 1), ylim=(floor / 2, 1.05))
    else:
        ax.set(xlim=(0, 1), ylim=(0, 1.01))
    ax.set(xlabel="false positive rate", ylabel="true positive rate",
           title="ROC (log-log)" if log else "ROC")
    ax.legend(fontsize=7.5, loc="lower right")
    return _png(fig, margins="single")


def roc_figure(labels: np.ndarray, scores: dict[str, np.ndarray], *, log: bool = False, n_resamples: int = 200,
               seed: int = 0, ax=None):
    """The ROC curve of every attack with its pointwise 95% band: the TPR at each FPR the non-members resolve, over
    ``n_resamples`` stratified bootstrap resamples (the same for every attack); ``log`` for log-log axes. Draws on
    ``ax`` (a new figure without one) and returns the figure."""
    labels = np.asarray(labels)
    n_neg = int((labels == 0).sum())
    grid = (np.arange(1, n_neg + 1) / n_neg if n_neg <= 400
            else np.unique(np.r_[np.geomspace(1 / n_neg, 1, 200), np.linspace(0.01, 1, 100)]))
    ranked = sorted(scores, key=lambda n: -auc(labels, scores[n]))
    band = stratified_bootstrap(labels, [scores[n] for n in ranked], n_resamples=n_resamples, seed=seed,
                                fprs=list(grid)).tpr  # (B, attacks, FPRs)
    lo, hi = np.percentile(band, 2.5, axis=0), np.percentile(band, 97.5, axis=0)
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.6, 4.6))
    else:
        fig = ax.figure
    floor = 1.0 / max(n_neg, 1)
    for i, name in enumerate(ranked):
        color = _PALETTE[i % len(_PALETTE)]
        x, y = roc_line(labels, scores[name])
        if log:
            x, y = np.where(x > 0, x, floor / 2), np.where(y > 0, y, floor / 2)
        ax.plot(x, y, lw=1.6, color=color, label=f"{name} (AUC {auc(labels, scores[name]):.3f})")
        ax.fill_between(grid, np.maximum(lo[i], floor / 2 if log else 0), hi[i], step="post", color=color,
                        alpha=0.15, lw=0)
    ax.plot([floor / 2 if log else 0, 1], [floor / 2 if log else 0, 1], color="grey", lw=0.8, ls=":")
    if log:
        ax.set(xscale="log", yscale="log", xlim=(floor / 2, 1), ylim=(floor / 2, 1.05))
    else:
        ax.set(xlim=(0, 1), ylim=(0, 1.01))
    ax.set(xlabel="false positive rate", ylabel="true positive rate",
           title=f"ROC with pointwise 95% bands ({n_resamples} resamples)")
    ax.legend(fontsize=7.5, loc="lower right")
    return fig


def score_histograms(labels: np.ndarray, scores: dict[str, np.ndarray]) -> bytes:
    """Member vs non-member score histograms, one panel per attack."""
    n = len(scores)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.0 * cols, 2.8 * rows), squeeze=False)
    labels = np.asarray(labels)
    for ax, (name, s) in zip(axes.flat, sorted(scores.items())):
        s = np.asarray(s, dtype=float)
        bins = np.histogram_bin_edges(s, bins=40)
        # one filled outline per histogram instead of one patch per bar: the same picture, drawn far faster
        ax.hist(s[labels == 0], bins=bins, alpha=0.55, color=_PALETTE[0], label="non-members", histtype="stepfilled")
        ax.hist(s[labels == 1], bins=bins, alpha=0.55, color=_PALETTE[1], label="members", histtype="stepfilled")
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Scores (higher = member)", fontsize=10)
    return _png(fig, margins="grid")


def delta_distributions(member: np.ndarray, nonmember: np.ndarray, *, member_score: float,
                        nonmember_score: float) -> bytes:
    """Q-Skew: the Δ = log p_target − log p_ref values of one member and one non-member."""
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    both = np.concatenate([member, nonmember])
    bins = np.histogram_bin_edges(both, bins=40)
    ax.hist(nonmember, bins=bins, alpha=0.55, color=_PALETTE[0], label=f"non-member (Q-Skew {nonmember_score:.2f})")
    ax.hist(member, bins=bins, alpha=0.55, color=_PALETTE[1], label=f"member (Q-Skew {member_score:.2f})")
    ax.axvline(0, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="Δ = log p_target − log p_ref per masked token", ylabel="count",
           title="Q-Skew: per-token gaps of a typical member and non-member")
    ax.legend(fontsize=8)
    return _png(fig)


def auc_vs_epochs(curves: dict[str, dict]) -> bytes:
    """AUC (mean ± std over seeds) of every attack against the number of fine-tuning epochs."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, (name, c) in enumerate(sorted(curves.items())):
        epochs = sorted(int(e) for e in c)
        mean = np.array([c[str(e)]["auc"][0] for e in epochs])
        std = np.array([c[str(e)]["auc"][1] for e in epochs])
        color = _PALETTE[i % len(_PALETTE)]
        ax.plot(epochs, mean, marker="o", color=color, lw=2.4 if name == "q_skew" else 1.2, label=name)
        ax.fill_between(epochs, mean - std, mean + std, color=color, alpha=0.12)
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="fine-tuning epochs", ylabel="AUC", title="Membership inference vs fine-tuning epochs")
    ax.legend(fontsize=8, ncol=2)
    return _png(fig)


def epsilon_bounds(series: dict[str, list[tuple[float, float]]], *, right: float) -> bytes:
    """ε lower bound against the claimed ε per model kind, with the diagonal ε_lb = ε; points at ``right`` had no DP."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    top = max([right] + [lb for pts in series.values() for _, lb in pts])
    ax.plot([0, right], [0, right], color="grey", lw=0.8, ls=":", label="ε_lb = ε (a DP claim's ceiling)")
    ax.axvline(right, color="grey", lw=0.6, ls="--")
    for i, (name, pts) in enumerate(sorted(series.items())):
        pts = sorted(pts)
        ax.plot([e for e, _ in pts], [lb for _, lb in pts], marker="o", color=_PALETTE[i % len(_PALETTE)], label=name)
    ax.set(xlabel="claimed ε (right edge: no DP)", ylabel="empirical ε lower bound", xlim=(0, right * 1.05),
           ylim=(0, top * 1.05), title="Empirical privacy: ε lower bound vs claimed ε")
    ax.legend(fontsize=8)
    return _png(fig)


def gain_by_ratio(gains: dict[str, np.ndarray]) -> bytes:
    """Violin plot of per-token memorisation gains by the fine-tuning mask ratio."""
    ratios = sorted(gains, key=float)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.violinplot([np.asarray(gains[r]) for r in ratios], showmeans=True, showextrema=False)
    ax.set_xticks(range(1, len(ratios) + 1), [f"mask ratio {r}" for r in ratios])
    ax.axhline(0.0, color="grey", lw=0.8, ls=":")
    ax.set(ylabel="per-token gain Δ (nats)", title="Memorisation gain by fine-tuning mask ratio")
    return _png(fig)


def grouped_bars(groups: list[str], series: dict[str, tuple[list[float], list[float]]], *, ylabel: str, title: str,
                 ylim: tuple[float, float] | None = None, rotate: float = 0.0) -> bytes:
    """Bars of every series side by side within each group: the mean, with ± std as an error bar.

    Parameters
    ----------
    groups : list of str
        The x-axis groups, in order.
    series : dict
        ``{name: (means, stds)}``, one value per group each; one bar colour per series.
    rotate : float
        Degrees to turn the group labels (long labels), anchored at their right end.
    """
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    width = 0.8 / len(series)
    for i, (name, (means, stds)) in enumerate(series.items()):
        ax.bar(np.arange(len(groups)) + i * width, means, width, yerr=stds if any(stds) else None, label=name,
               color=_PALETTE[i % len(_PALETTE)], capsize=2)
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, groups)
    if rotate:
        plt.setp(ax.get_xticklabels(), rotation=rotate, ha="right", rotation_mode="anchor")
    ax.set(ylabel=ylabel, title=title)
    if ylim is not None:
        ax.set_ylim(*ylim)
    if rotate:  # turned labels take the space under the axes
        ax.legend(fontsize=7, loc="upper right")
    else:
        ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    return _png(fig)


def regime_differences(cells: list[str], series: dict[str, list[list[float]]]) -> bytes:
    """AUC differences with their intervals per cell of a grid: one row per cell (top to bottom in order), one
    marker and error bar per series, a line at 0.

    Parameters
    ----------
    cells : list of str
        The cell labels, in order.
    series : dict
        ``{name: [[diff, lo, hi] per cell]}``, in AUC units (drawn in points).
    """
    fig, ax = plt.subplots(figsize=(7.2, 1.2 + 0.42 * len(cells)))
    y = np.arange(len(cells))[::-1].astype(float)
    step = 0.6 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        v = 100 * np.asarray(values, dtype=float).reshape(len(cells), 3)
        ax.errorbar(v[:, 0], y + 0.3 - step / 2 - i * step, xerr=[v[:, 0] - v[:, 1], v[:, 2] - v[:, 0]], fmt="o",
                    color=_PALETTE[i % len(_PALETTE)], capsize=3, ms=5, label=name)
    ax.axvline(0.0, color="grey", lw=0.9, ls=":")
    ax.set_yticks(y, cells)
    ax.set_ylim(-0.6, len(cells) - 0.4)
    ax.set(xlabel="AUC difference (points); right of 0: Q-Skew better", title="Q-Skew − calibration by regime")
    ax.legend(fontsize=7.5, loc="best")
    return _png(fig)


def split_p_values(test: list[float], control: list[float], levels: tuple[float, ...]) -> bytes:
    """Dataset inference: each split's p-value for the suspect set and for the validation set's control halves
    (log scale), with the decision levels."""
    fig, ax = plt.subplots(figsize=(6.0, 2.4))
    floor = 1e-12  # a p-value of 0 (underflow) is drawn at the axis' floor
    for row, (ps, colour) in enumerate(((test, _PALETTE[1]), (control, _PALETTE[0]))):
        ps = np.maximum(np.asarray(ps, dtype=float), floor)
        jitter = np.random.default_rng(row).uniform(-0.12, 0.12, len(ps))
        ax.scatter(ps, row + jitter, s=14, color=colour, alpha=0.8)
        ax.plot([np.median(ps)] * 2, [row - 0.3, row + 0.3], color=colour, lw=2)
    for level in levels:
        ax.axvline(level, color="#7f7f7f", ls=":", lw=1)
        ax.text(level, 1.45, f"α = {level:g}", fontsize=7, ha="center", color="#555555")
    ax.set_xscale("log")
    ax.set_xlim(right=1.5)
    ax.set_ylim(-0.6, 1.7)
    ax.set_yticks([0, 1], ["suspect vs validation", "control"], fontsize=8)
    ax.set_xlabel("p-value of each split (bar: median)", fontsize=8)
    ax.tick_params(labelsize=7)
    return _png(fig)


def estimates_vs_truth(series: dict[str, list[tuple[float, float, float, float]]], *, xlabel: str, ylabel: str,
                       title: str) -> bytes:
    """Estimates against the truth with their intervals: one marker and error bar per point, series side by side
    (a small horizontal offset each), and the diagonal where estimate = truth.

    Parameters
    ----------
    series : dict
        ``{name: [(truth, estimate, low, high), ...]}``; a point whose interval is NaN is drawn without a bar.
    """
    fig, ax = plt.subplots(figsize=(5.6, 4.6))
    ax.plot([0, 1], [0, 1], color="grey", lw=0.9, ls=":", label="estimate = truth")
    step = 0.02
    for i, (name, points) in enumerate(series.items()):
        v = np.asarray(points, dtype=float).reshape(-1, 4)
        shift = (i - (len(series) - 1) / 2) * step
        bars = np.maximum(np.nan_to_num(np.stack([v[:, 1] - v[:, 2], v[:, 3] - v[:, 1]])), 0.0)
        ax.errorbar(v[:, 0] + shift, v[:, 1], yerr=bars, fmt="o", color=_PALETTE[i % len(_PALETTE)], capsize=3, ms=5,
                    label=name, alpha=0.85)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize=7.5, loc="upper left")
    return _png(fig)
