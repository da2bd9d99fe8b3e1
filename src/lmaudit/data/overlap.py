"""Texts shared by two sets, compared as a reader would: the same words are the same text.

Two records count as the same text when their normal forms are equal (:func:`normal_form`):
Unicode NFC (composed characters, so "é" typed as one code point or as "e" + a combining accent
is one text); invisible characters removed (Unicode's Default_Ignorable_Code_Point: zero-width
spaces and joiners, soft hyphens, direction marks, variation selectors, tags, ...); look-alike
characters mapped to one prototype, as in the skeleton of Unicode TR39 (Cyrillic "а" and Latin
"a", "ｐ" and "p", "𝐚" and "a": the confusables data of the ``confusable-homoglyphs`` package);
and whitespace collapsed (runs of spaces, tabs and newlines are one space; leading and trailing
whitespace dropped). Case is kept: "Apple" and "apple" stay different texts. A copy made by
inserting invisible characters or swapping letters for look-alikes reads as the same text to a
reader, and counts as the same text here, so it is neither a new non-member nor a new text.

Two sets of different forms (prompt/response pairs against plain texts) are told apart by their form alone, so
:func:`check_sets` also compares the forms of each pair of sets and warns (``formats`` and ``notes`` in its
report).

A membership-inference run whose members and non-members share texts measures less than
the model's memory (a shared text is both a member and a non-member), so :func:`check_sets`
counts exact and normalised overlaps and duplicates for ``results.json``, warns about any
overlap, and refuses a run whose sets share more than :data:`MAX_SHARE` of the smaller set
(unless allowed) or that was given one set twice (the same texts, character for character, in the same
order: refused even when overlap is allowed).
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np
from confusable_homoglyphs.confusables import confusables_data

from lmaudit.data.loaders import TextSet
from lmaudit.errors import DataError, warn

MAX_SHARE = 0.05  # of the smaller set: beyond this a run is refused unless the overlap is allowed
_SHOWN = 3  # shared texts named in a message
NGRAM_SIZES = (7, 13)  # words: near-duplicates share long runs of words (13: the contamination checks' length)
NEAR_COPY = 0.5  # a non-member with at least this share of its n-grams in the members is counted as a near-copy


# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): characters with no visible glyph
IGNORABLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
             (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
             (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
             (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))


@functools.cache
def _skeleton_table() -> dict[int, str | None]:
    """``str.translate`` table: every default-ignorable code point to nothing, every confusable character to its
    prototype (TR39's confusables.txt, as the ``confusable-homoglyphs`` package ships it).

    The package stores each source–prototype pair of confusables.txt in both directions. A prototype is never a
    source, so a character with several look-alikes, or whose look-alike is a sequence ("m" → "rn"), is the
    prototype; of two characters that only look like each other, the smaller code point stands for both.
    """
    def clean(s: str) -> str:  # the data wraps right-to-left characters in direction marks
        return s.replace("\u200e", "").replace("\u200f", "")

    pairs = {clean(k): [clean(e["c"]) for e in v] for k, v in confusables_data.items()}
    table: dict[int, str | None] = {}
    for char, alike in pairs.items():
        if len(char) != 1 or len(alike) != 1:
            continue
        other = alike[0]
        if len(other) > 1 or len(pairs.get(other, ())) > 1 or ord(other) < ord(char):
            table[ord(char)] = other
    table.update({c: None for lo, hi in IGNORABLE for c in range(lo, hi + 1)})
    return table


def normal_form(text: str) -> str:
    """``text`` as a reader sees it: NFD, invisible characters removed and look-alikes mapped to their prototype
    (the TR39 skeleton), then NFC, with every run of whitespace one space and the ends stripped (case kept).

    >>> normal_form("\u0441\u043e\u0440y\u200b  p\u00adaste") == normal_form("copy paste")
    True
    """
    skeleton = unicodedata.normalize("NFD", text).translate(_skeleton_table())
    return " ".join(unicodedata.normalize("NFC", skeleton).split())


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
    how = (f" ({only} of them only after Unicode NFC and whitespace normalisation, with invisible characters "
           "removed and look-alike letters mapped)") if only else ""
    pairs = ", ".join(f"{x} = {y}" for x, y in found["ids"])
    return (f"{found['normalised']} text(s) of {name_b} ({b.source}) are also in {name_a} ({a.source}){how}, "
            f"{100 * found['share']:.1f}% of the smaller set (e.g. {pairs})")


FORMS = {"pairs": "prompt/response pairs", "plain": "plain texts", "mixed": "a mix of pairs and plain texts"}


def form_note(name_a: str, name_b: str, a: TextSet, b: TextSet) -> str | None:
    """A caveat when ``a`` and ``b`` are of different forms (:attr:`TextSet.form`), else None."""
    if a.form == b.form:
        return None
    return (f"{name_a} ({a.source}) are {FORMS[a.form]} but {name_b} ({b.source}) are {FORMS[b.form]}: the format "
            "alone tells the two sets apart (a pair's prompt is unscored context, a plain text is scored whole), so "
            "an AUC or a p-value may measure the format, not the model's memory; give both sets in one format")


def check_sets(sets: dict[str, TextSet], pairs: list[tuple[str, str]], *, allow_overlap: bool = False,
               flag: str = "--allow-overlap") -> dict:
    """Overlaps between the named ``pairs`` of ``sets``, duplicates within each set, and each set's form with a
note for every pair of different forms (:func:`form_note`), for ``results.json``.

    Raises
    ------
    DataError
        When two sets of a pair hold the same records (one file given twice), always; and when
        their normalised overlap exceeds :data:`MAX_SHARE` of the smaller set, unless
        ``allow_overlap``. A smaller (or allowed) overlap is a warning.
    """
    report = {"pairs": {}, "duplicates": {name: duplicates(ts) for name, ts in sets.items()},
              "formats": {name: ts.form for name, ts in sets.items()}, "notes": []}
    for name_a, name_b in pairs:
        a, b = sets[name_a], sets[name_b]
        note = form_note(name_a, name_b, a, b)
        if note:
            report["notes"].append(note)
            warn(note)
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
        warn(f"{text}; they are kept and scored in both sets, which caps the achievable AUC")
    for name, counts in report["duplicates"].items():
        if counts["normalised"]:
            warn(f"{name} ({sets[name].source}) repeats {counts['normalised']} text(s) "
                          f"({counts['exact']} exactly); each copy is scored")
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
