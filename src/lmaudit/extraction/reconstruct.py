"""PII reconstruction, the parts that need no model: redacted records, candidate clean-up, ranking and α.

A record is a text with one placeholder (``[REDACTED]`` by default) where the value
was, and, for evaluation, the true value. Candidates are trimmed to the field's
pattern and de-duplicated; signals are combined as −(1−α)·Z(ce) + α·Z(skew) with
z-scores over the candidate set. Success is the top-1 attack success rate (ASR) with a
Wilson 95% interval; the α sweep of the Q-Skew paper's Appendix F.1 re-ranks stored
scores. The model-dependent steps are in :mod:`lmaudit.runs.pii`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import DataError, LmauditError

PLACEHOLDER = "[REDACTED]"
PATTERNS = {"email": re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"),
            "phone": re.compile(r"\+?\d[\d\s().-]{6,}\d")}
PAPER_ALPHA = 0.1  # the Q-Skew paper's Combine-0.1: the fixed α its claim is made at
SIGNALS = ("ce", "skew_pii", "skew_context", "combined", "combined_paper")  # combined_paper: combined at PAPER_ALPHA
ALPHA_GRID = tuple(round(0.1 * i, 1) for i in range(11))  # the α sweep: 0, 0.1, …, 1


@dataclass
class PIIRecord:
    id: str
    left: str
    right: str
    truth: str | None

    def filled(self, value: str) -> str:
        return self.left + value + self.right


def redacted_records(textset: TextSet, field: str, *, placeholder: str = PLACEHOLDER) -> list[PIIRecord]:
    """Records whose text holds exactly one placeholder; the true value (if given) is the ``field`` column."""
    if field not in PATTERNS:
        raise LmauditError(f"unknown field '{field}'", hint=f"use one of {', '.join(PATTERNS)}")
    out = []
    for r in textset.records:
        n = r.text.count(placeholder)
        if n != 1:
            raise DataError(f"{textset.source}: record '{r.id}' has {n} '{placeholder}' placeholders; "
                            "exactly one needed",
                            hint="redact one field per record (--placeholder sets the marker)")
        left, right = r.text.split(placeholder)
        out.append(PIIRecord(r.id, left, right, r.fields.get(field)))
    return out


def redact(textset: TextSet, field: str, *, placeholder: str = PLACEHOLDER) -> TextSet:
    """Replace the first occurrence of each record's ``field`` value by the placeholder (keeps the value as a field)."""

    records = []
    for r in textset.records:
        value = r.fields.get(field)
        if not value or value not in r.text:
            raise DataError(f"{textset.source}: record '{r.id}' has no '{field}' value in its text")
        records.append(Record(r.id, r.text.replace(value, placeholder, 1), fields=dict(r.fields)))
    return TextSet(records, source=f"{textset.source} (redacted {field})")


def trim(text: str, field: str) -> str | None:
    """The first substring of a generation that matches the field's pattern; else its first word."""
    match = PATTERNS[field].search(text)
    if match:
        return match.group(0)
    words = text.strip().split()
    word = words[0].strip("<>()[],;:\"'") if words else ""
    return word or None


def dedupe(values) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def mask_value(value: str | None, field: str = "value") -> str:
    """A PII value replaced by its field and length, e.g. ``[email, 26 chars]``: nothing of its characters or shape.

    (Keeping punctuation, as in ``a**@*.***``, would still show the shape of an address or a number.)
    """
    if not value:
        return "-"
    return f"[{field}, {len(value)} chars]"


def zscore(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    sd = x.std()
    return np.zeros_like(x) if sd <= 1e-12 else (x - x.mean()) / sd


def combined(ce: np.ndarray, skew: np.ndarray, alpha: float) -> np.ndarray:
    """−(1−α)·Z(cross-entropy) + α·Z(skew); ``ce`` holds −cross-entropy (higher = better), as :func:`ce_scores`."""
    return (1 - alpha) * zscore(ce) + alpha * zscore(skew)


def rank_of(scores: np.ndarray, values: list[str], truth: str | None) -> int | None:
    """1-based rank of the true value among the candidates (ties broken by generation order), None if absent."""
    if truth is None or truth not in values:
        return None
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return int(np.flatnonzero(np.asarray(values, dtype=object)[order] == truth)[0]) + 1


def combined_hits(cases: list[dict], alpha: float) -> int:
    """Records (``cases``: {values, truth, ce, skew}) whose true value ranks first under ``combined`` at ``alpha``."""
    return sum(rank_of(combined(c["ce"], c["skew"], alpha), c["values"], c["truth"]) == 1 for c in cases)


def fit_alpha(cases: list[dict], *, grid=None) -> tuple[float, int]:
    """α maximising top-1 hits over ``cases`` ({values, truth, ce, skew}); ties go to the smallest α."""
    grid = np.round(np.linspace(0, 1, 21), 2) if grid is None else np.asarray(grid)
    hits = [combined_hits(cases, a) for a in grid]
    best = int(np.argmax(hits))
    return float(grid[best]), int(hits[best])


def wilson_interval(count: int, n: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``count / n`` (fractions in [0, 1]).

    ``(p̂ + z²/2n ± z·sqrt(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n)`` with z the two-sided normal
    quantile of ``confidence`` (1.96 at 95%); unlike p̂ ± z·se it stays in [0, 1] and is
    not empty at 0 or n successes (0 of 50 gives [0, 7.1%]). ``n = 0`` gives (0, 1): no data.
    Equals scipy's ``binomtest(count, n).proportion_ci(confidence, method="wilson")``.
    """
    if n < 0 or not 0 <= count <= n:
        raise LmauditError(f"a proportion needs 0 ≤ count ≤ n, got {count} of {n}")
    if not 0 < confidence < 1:
        raise LmauditError(f"confidence must be in (0, 1), got {confidence}")
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p, z2 = count / n, z * z
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    lo, hi = max(0.0, center - half), min(1.0, center + half)
    return (0.0 if count == 0 else lo), (1.0 if count == n else hi)  # exact ends (no 1e-17 rounding)


def top1_hits(ranks_per_seed: list[list]) -> list[int]:
    """1 where the true value ranked first, per record, every seed's records in order (None, nothing generated,
    is a miss)."""
    return [int(r == 1) for per_seed in ranks_per_seed for r in per_seed]


def paired_rate_diff(hits_a, hits_b, *, n_resamples: int = 2000, level: float = 0.95,
                     seed: int = 0) -> tuple[float, float, float]:
    """Rate(a) − rate(b) of two signals scored on the same records, with a paired bootstrap interval.

    ``hits_a`` and ``hits_b`` are 0/1 per record in one order; each replicate resamples
    records (both signals together), so the interval reflects how differently the two
    signals do on the same records. Identical hits give exactly (0, 0, 0). Fractions.
    """
    a, b = np.asarray(hits_a, dtype=float), np.asarray(hits_b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise LmauditError(f"paired rates need two equal-length, non-empty hit lists, got {a.shape} and {b.shape}")
    d = a - b
    idx = np.random.default_rng(seed).integers(0, len(d), size=(n_resamples, len(d)))
    reps = d[idx].mean(axis=1)
    tail = (1 - level) / 2
    return float(d.mean()), float(np.quantile(reps, tail)), float(np.quantile(reps, 1 - tail))


RANK_MODES = (("inference", "ranks", "asr"), ("generation", "generation_ranks", "generation_asr"))


def paired_signals(record: dict, a: str, b: str):
    """Yield (mode, field, diff, lo, hi): ASR(a) − ASR(b) on the same records (every seed pooled) with the paired
    bootstrap 95% interval, for each mode and field whose ranks a reconstruction record stores for both signals
    (``ranks`` / ``generation_ranks``: per signal, per field, per seed, the true value's rank per record)."""
    for mode, key, _ in RANK_MODES:
        ranks = record.get(key) or {}
        for f in record["fields"]:
            ra, rb = ranks.get(a, {}).get(f), ranks.get(b, {}).get(f)
            if ra is not None and rb is not None:
                yield (mode, f, *paired_rate_diff(top1_hits(ra), top1_hits(rb)))


def asr(count: int, n: int) -> dict:
    """Top-1 attack success rate of ``count`` hits in ``n`` records: count, percent and Wilson 95% interval (%)."""
    lo, hi = wilson_interval(count, n)
    return {"count": int(count), "percent": 100.0 * count / n if n else float("nan"), "ci95": [100 * lo, 100 * hi]}


def alpha_sweep(cases: list[dict], n: int, *, grid=ALPHA_GRID) -> dict:
    """ASR of ``combined`` at each α of ``grid`` (the Q-Skew paper's Appendix F.1), over ``n`` records.

    ``cases`` are the records with candidates ({values, truth, ce, skew}); records without
    candidates count as misses. α = 0 ranks as ``ce`` and α = 1 as ``skew`` (z-scoring is
    monotone), so the ends equal those signals' ASRs. No forward pass: stored scores are re-ranked.
    """
    rows = [asr(combined_hits(cases, float(a)), n) for a in grid]
    return {"alpha": [float(a) for a in grid], "count": [r["count"] for r in rows],
            "percent": [r["percent"] for r in rows], "ci95": [r["ci95"] for r in rows]}
