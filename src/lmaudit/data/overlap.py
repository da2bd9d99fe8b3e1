"""Texts shared by two sets, compared as a reader would: the same words are the same text.

Two records count as the same text when their normal forms are equal: Unicode NFC
(composed characters, so "é" typed as one code point or as "e" + a combining accent is
one text) and whitespace collapsed (runs of spaces, tabs and newlines are one space; leading
and trailing whitespace dropped). Case is kept: "Apple" and "apple" stay different texts.

A membership-inference run whose members and non-members share texts measures less than
the model's memory (a shared text is both a member and a non-member), so :func:`check_sets`
counts exact and normalised overlaps and duplicates for ``results.json``, warns about any
overlap, and refuses a run whose sets share more than :data:`MAX_SHARE` of the smaller set
(unless allowed) or that was given one set twice (the same texts, character for character, in the same
order: refused even when overlap is allowed).
"""

from __future__ import annotations

import unicodedata
import warnings

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.errors import DataError

MAX_SHARE = 0.05  # of the smaller set: beyond this a run is refused unless the overlap is allowed
_SHOWN = 3  # shared texts named in a message
NGRAM_SIZES = (7, 13)  # words: near-duplicates share long runs of words (13: the contamination checks' length)
NEAR_COPY = 0.5  # a non-member with at least this share of its n-grams in the members is counted as a near-copy


def normal_form(text: str) -> str:
    """``text`` in Unicode NFC with every run of whitespace one space and the ends stripped (case kept)."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def _key(record, normalise: bool) -> tuple[str, str]:
    return (normal_form(record.context), normal_form(record.target)) if normalise else (record.context, record.target)


def duplicates(textset: TextSet) -> dict[str, int]:
    """Records that repeat an earlier record of the same set: ``exact`` (same characters) and ``normalised``
    (same normal form, exact repeats included)."""
    counts = {}
    for name, normalise in (("exact", False), ("normalised", True)):
        keys = [_key(r, normalise) for r in textset.records]
        counts[name] = len(keys) - len(set(keys))
    return counts


def shared(a: TextSet, b: TextSet) -> dict:
    """Records of ``b`` whose text is also in ``a``: counted exactly and after normalisation, with a few ids.

    Returns ``{"exact": int, "normalised": int, "share": float, "ids": [(id in a, id in b), ...]}``;
    ``normalised`` includes the exact matches and ``share`` is it over the smaller set's size.
    """
    counts, first = {}, {}
    for name, normalise in (("exact", False), ("normalised", True)):
        seen = {}
        for r in a.records:
            seen.setdefault(_key(r, normalise), r.id)
        hits = [(seen[_key(r, normalise)], r.id) for r in b.records if _key(r, normalise) in seen]
        counts[name] = len(hits)
        first[name] = hits[:_SHOWN]
    share = counts["normalised"] / max(1, min(len(a), len(b)))
    return {**counts, "share": share, "ids": [list(pair) for pair in first["normalised"]]}


def _describe(name_a: str, name_b: str, a: TextSet, b: TextSet, found: dict) -> str:
    only = found["normalised"] - found["exact"]
    how = f" ({only} of them only after Unicode NFC and whitespace normalisation)" if only else ""
    pairs = ", ".join(f"{x} = {y}" for x, y in found["ids"])
    return (f"{found['normalised']} text(s) of {name_b} ({b.source}) are also in {name_a} ({a.source}){how}, "
            f"{100 * found['share']:.1f}% of the smaller set (e.g. {pairs})")


def check_sets(sets: dict[str, TextSet], pairs: list[tuple[str, str]], *, allow_overlap: bool = False,
               flag: str = "--allow-overlap") -> dict:
    """Overlaps between the named ``pairs`` of ``sets`` and duplicates within each set, for ``results.json``.

    Raises
    ------
    DataError
        When two sets of a pair hold the same records (one file given twice), always; and when
        their normalised overlap exceeds :data:`MAX_SHARE` of the smaller set, unless
        ``allow_overlap``. A smaller (or allowed) overlap is a warning.
    """
    report = {"pairs": {}, "duplicates": {name: duplicates(ts) for name, ts in sets.items()}}
    for name_a, name_b in pairs:
        a, b = sets[name_a], sets[name_b]
        if [_key(r, False) for r in a.records] == [_key(r, False) for r in b.records]:  # one file given twice
            raise DataError(f"{name_a} ({a.source}) and {name_b} ({b.source}) hold the same {len(a)} texts, "
                            "character for character", hint=f"give {name_a} and {name_b} two different sets of texts")
        found = shared(a, b)
        report["pairs"][f"{name_a}/{name_b}"] = found
        if not found["normalised"]:
            continue
        text = _describe(name_a, name_b, a, b, found)
        if found["share"] > MAX_SHARE and not allow_overlap:
            raise DataError(text, hint=f"more than {100 * MAX_SHARE:.0f}% shared: a shared text is both a member "
                                       f"and a non-member, so the figures would not measure memory; remove them, "
                                       f"or pass {flag} to score them in both sets anyway")
        warnings.warn(f"{text}; they are kept and scored in both sets, which caps the achievable AUC", stacklevel=2)
    for name, counts in report["duplicates"].items():
        if counts["normalised"]:
            warnings.warn(f"{name} ({sets[name].source}) repeats {counts['normalised']} text(s) "
                          f"({counts['exact']} exactly); each copy is scored", stacklevel=2)
    return report



def _ngrams(text: str, n: int) -> set[int]:
    """Hashes of the distinct runs of ``n`` words of ``text``'s normal form (case kept, as everywhere here)."""
    words = normal_form(text).split(" ")
    return {hash(tuple(words[i:i + n])) for i in range(len(words) - n + 1)} if len(words) >= n else set()


def ngram_overlap(members: TextSet, nonmembers: TextSet, sizes: tuple[int, ...] = NGRAM_SIZES) -> dict:
    """Per n of ``sizes``: how much of each non-member's word n-grams is found in the members.

    A non-member's share is its distinct n-grams found among the members' over its distinct
    n-grams (prompt and response together); non-members shorter than n words have none and are
    left out of the summary (``too_short``). Returns ``{str(n): {"mean", "median", "max": shares,
    "near_copies": non-members with a share ≥ NEAR_COPY, "scored", "too_short"}}``: near-copies
    across the sets are members in all but name, and an attack's figures on them mislead.
    """
    out = {}
    for n in sizes:
        seen = set().union(*(_ngrams(f"{r.context} {r.target}", n) for r in members.records))
        shares = []
        for r in nonmembers.records:
            grams = _ngrams(f"{r.context} {r.target}", n)
            if grams:
                shares.append(len(grams & seen) / len(grams))
        shares = np.asarray(shares)
        out[str(n)] = {"mean": float(shares.mean()) if len(shares) else None,
                       "median": float(np.median(shares)) if len(shares) else None,
                       "max": float(shares.max()) if len(shares) else None,
                       "near_copies": int((shares >= NEAR_COPY).sum()), "scored": int(len(shares)),
                       "too_short": len(nonmembers) - int(len(shares))}
    return out
