"""Instruction pairs of variable length built from corpus documents, and text perturbation."""

from __future__ import annotations

import numpy as np

from lmaudit.data.corpus import cut_at_word
from lmaudit.data.loaders import Record, TextSet
from lmaudit.utils import stable_seed


def instruction_pair(doc_text: str, *, seed: int = 0, min_chars: int = 80,
                     max_chars: int = 320) -> tuple[str, str] | None:
    """(prompt, response) from a docstring: the prompt asks about its summary line; the
    response is the rest of the docstring, cut to a length drawn in [min_chars, max_chars]
    (seeded by the text), so responses vary in length. None when the body is too short."""
    summary, _, body = doc_text.strip().partition("\n")
    body = " ".join(body.split())
    if not summary.strip() or len(body) < min_chars:
        return None
    rng = np.random.default_rng(stable_seed("ift", doc_text, seed))
    length = int(rng.integers(min_chars, max_chars + 1))
    prompt = f"Instruction: explain this API in detail.\nSummary: {summary.strip()}\nAnswer:"
    return prompt, " " + cut_at_word(body, length)


def instruction_set(docs, n: int, *, seed: int = 0, prefix: str = "p", source: str = "<corpus>") -> TextSet:
    """``n`` instruction pairs from ``docs`` (in order), skipping documents without a body."""
    records = []
    for d in docs:
        pair = instruction_pair(d.text, seed=seed)
        if pair is not None:
            records.append(Record(id=f"{prefix}{len(records)}", target=pair[1], context=pair[0]))
            if len(records) == n:
                break
    return TextSet(records, source=source)


PERTURB_RATE = 0.15  # the share of words a perturbed text has swapped (the paraphrase stand-in)


def perturb_words(text: str, *, rate: float = PERTURB_RATE, seed: int = 0) -> str:
    """Replace a fraction ``rate`` of the words by other words of the same text (seeded)."""
    words = text.split(" ")
    rng = np.random.default_rng(stable_seed("perturb", text, seed))
    idx = np.flatnonzero(rng.random(len(words)) < rate)
    for i in idx:
        words[i] = words[int(rng.integers(len(words)))]
    return " ".join(words)
