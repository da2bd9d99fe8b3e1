"""Token frequencies of a reference corpus under one tokenizer, for DC-PDD: counted once and cached.

The corpus is a text file lmaudit reads (JSONL, CSV, Parquet, a folder of ``.txt``), a ``.npy`` file of counts per
token id (its length must be the tokenizer's vocabulary; whole numbers ≥ 0 whose sum fits in 2**62), or by default
the embedded docstring corpus' pretraining pool. Counts are cached by the tokenizer's fingerprint and the corpus'
content; :func:`smoothed` turns them into Laplace-smoothed frequencies, (1 + count) / (Σ count + V), as DC-PDD's
authors do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmaudit.cache import cached_build
from lmaudit.data.corpus import DEFAULT_PACKAGES, build_corpus
from lmaudit.data.loaders import load_texts
from lmaudit.errors import DataError
from lmaudit.folders import sha256_file
from lmaudit.models.fingerprint import tokenizer_fingerprint

EMBEDDED = ""  # the corpus name of the embedded docstring corpus' pretraining pool
MAX_TOKENS = 1024  # tokens counted per text (a corpus document longer than this adds its first ones)
MAX_TOTAL = 2**62  # the largest sum of counts: Σ count + V stays exact in int64 (a float64 keeps its ratio)


def _vocab_size(tokenizer) -> int:
    return len(tokenizer)


def _texts(corpus: str) -> tuple[list[str], str]:
    """(texts, a key of their content)."""
    if corpus == EMBEDDED:
        built = build_corpus(DEFAULT_PACKAGES)
        return [d.text for d in built.pool("pretrain")], f"embedded:{built.fingerprint}"
    found = load_texts(corpus)
    return found.texts, f"file:{sha256_file(Path(corpus)) if Path(corpus).is_file() else found.fingerprint()}"


def token_counts(tokenizer, corpus: str = EMBEDDED) -> np.ndarray:
    """(V,) int64 counts of every token id in ``corpus`` under ``tokenizer`` (cached)."""
    vocab = _vocab_size(tokenizer)
    if corpus.endswith(".npy"):
        counts = np.load(corpus, allow_pickle=False)
        if counts.ndim != 1 or len(counts) != vocab:
            raise DataError(f"{corpus}: counts for a vocabulary of {counts.shape} token ids; this tokenizer has "
                            f"{vocab}", hint="count the corpus with the audited model's tokenizer, or give its texts")
        return checked_counts(counts, corpus)
    texts, content = _texts(corpus)
    if not any(t.strip() for t in texts):
        raise DataError(f"{corpus or 'the embedded corpus'}: no text to count token frequencies from")

    def build(folder: Path) -> None:
        counts = np.zeros(vocab, dtype=np.int64)
        for start in range(0, len(texts), 256):
            for ids in tokenizer(texts[start:start + 256], truncation=True, max_length=MAX_TOKENS)["input_ids"]:
                np.add.at(counts, np.asarray(ids, dtype=np.int64), 1)
        np.save(folder / "counts.npy", counts)

    folder = cached_build("frequencies", ("dc_pdd", tokenizer_fingerprint(tokenizer), content, MAX_TOKENS), build)
    return np.load(folder / "counts.npy", allow_pickle=False)


def checked_counts(counts: np.ndarray, where: str) -> np.ndarray:
    """``counts`` (read from ``where``) as int64, refused unless they are whole numbers ≥ 0 that sum to at most
    :data:`MAX_TOTAL`: a negative count or a sum that wraps around makes a frequency ≤ 0, whose log is NaN."""
    hint = "count the corpus again (lmaudit counts a text corpus itself: give its texts)"
    if not (np.issubdtype(counts.dtype, np.integer) or np.issubdtype(counts.dtype, np.floating)):
        raise DataError(f"{where}: counts of type {counts.dtype}; token counts are integers", hint=hint)
    floating = np.issubdtype(counts.dtype, np.floating)
    values = counts.astype(np.float64) if floating else counts
    checks = [(values < 0, "negative count(s)")]
    if floating:
        checks.insert(0, (~np.isfinite(values) | (values != np.floor(values)), "count(s) that are not whole numbers"))
    for bad, what in checks:
        if bad.any():
            i = int(np.argmax(bad))
            raise DataError(f"{where}: {int(bad.sum())} {what} (token id {i}: {values[i].item()!r})", hint=hint)
    total = sum(int(c) for c in values.tolist())  # exact: a numpy sum would wrap around silently
    if total > MAX_TOTAL:
        raise DataError(f"{where}: the counts sum to {total:,}, more than 2**62 tokens: their sum would overflow",
                        hint=hint)
    return values.astype(np.int64)


def smoothed(counts: np.ndarray) -> np.ndarray:
    """Laplace-smoothed frequencies (1 + count) / (Σ count + V)."""
    return (1.0 + counts) / (counts.sum() + len(counts))
