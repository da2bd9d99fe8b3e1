"""Canaries for a one-run privacy audit: texts, a secret coin per canary, and the files that carry them.

A canary folder (``lmaudit corpus canaries --n N``) holds

- ``canaries.jsonl``: the N canaries (``id``, ``text``), no labels: score all of them;
- ``train_canaries.jsonl``: the canaries included, about N/2, to append to the fine-tuning data; the other canaries
  are never trained on, and only the inclusion list says which they are;
- ``included.json``: the private inclusion list (ids included, the SHA-256 of
  ``canaries.jsonl`` it belongs to, kind, seed): keep it, and ``train_canaries.jsonl``, from whoever scores;
- ``decoys.jsonl``: ⌈N/2⌉ decoys, texts made like the canaries that are no canary and never trained on: the
  ``--nonmembers`` of the ``lmaudit mia`` run that scores ``canaries.jsonl`` (their scores play no part in the ε
  bound), and the held-out side a training callback compares ``train_canaries.jsonl`` with (about as many).

So N canaries = the included ones + the excluded ones, and the decoys come on top. Each canary is included
independently with probability 1/2, as the theorem of :mod:`lmaudit.privacy.one_run` requires; the decoys stay apart
from the canaries so that scoring the canaries never needs to know which of them were trained on.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from lmaudit.data.pii import pii_messages
from lmaudit.errors import LmauditError, check_int
from lmaudit.folders import output_folder
from lmaudit.utils import stable_seed, write_json_atomic

KINDS = ("random", "rare", "pii")
CANARIES, INCLUDED, TRAIN, DECOYS = "canaries.jsonl", "included.json", "train_canaries.jsonl", "decoys.jsonl"
_ALPHABET = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789"))
_ONSETS = ("b", "ch", "d", "f", "g", "gr", "k", "kl", "l", "m", "n", "p", "pr", "qu", "r", "s", "sh", "st", "t",
           "th", "tr", "v", "w", "z", "zh")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "y")
_CODAS = ("", "", "", "n", "r", "s", "x", "lk", "nd", "rt")


def word_list(n: int = 4000, *, seed: int = 0) -> list[str]:
    """``n`` distinct pronounceable pseudo-words (2–4 syllables) that no real corpus is likely to hold."""
    rng = np.random.default_rng(stable_seed("canary-words", seed))
    words: dict[str, None] = {}
    while len(words) < n:
        k = int(rng.integers(2, 5))
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(k)) + rng.choice(_CODAS)
        words[word] = None
    return list(words)


def _random_texts(n: int, rng: np.random.Generator) -> list[str]:
    """Token-like strings: 8 groups of 4–9 random letters and digits."""
    out = []
    for _ in range(n):
        groups = ["".join(rng.choice(_ALPHABET, size=int(rng.integers(4, 10)))) for _ in range(8)]
        out.append(" ".join(groups))
    return out


def _rare_texts(n: int, rng: np.random.Generator, words: list[str]) -> list[str]:
    """Sentences of 10 pseudo-words."""
    return [" ".join(rng.choice(words, size=10)).capitalize() + "." for _ in range(n)]


def make_canaries(n: int, kind: str, *, seed: int = 0, stream: str = "canary") -> list[str]:
    """``n`` distinct canary texts of ``kind`` (random, rare or pii), from a seeded generator.

    ``stream`` separates independent draws of the same kind and seed (the canaries and the decoys).
    """
    if kind not in KINDS:
        raise LmauditError(f"unknown canary kind {kind!r}", hint=f"use one of {', '.join(KINDS)}")
    rng = np.random.default_rng(stable_seed("canaries", kind, seed, stream))
    if kind == "random":
        texts = _random_texts(n, rng)
    elif kind == "rare":
        texts = _rare_texts(n, rng, word_list(seed=seed))
    else:  # e-mails with a synthetic sender, address and phone around a short rare-word passage
        passages = _rare_texts(n, rng, word_list(seed=seed))
        texts = [r.target for r in pii_messages(passages, seed=stable_seed(seed, stream), prefix="c").records]
    if len(set(texts)) < n:
        raise LmauditError(f"{n - len(set(texts))} {kind} canaries came out identical", hint="pick another --seed")
    return texts


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_jsonl(path: Path, ids: list[str], texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in zip(ids, texts)),
                    encoding="utf-8")


def write_canary_folder(out: str | Path, n: int, kind: str, *, seed: int = 0, n_decoys: int | None = None) -> dict:
    """Write the canary folder ``out`` (replaced whole): ``n`` canaries, each included with probability 1/2, and
    ``n_decoys`` decoys (default ⌈n/2⌉, about as many as the canaries included); return the summary stored in
    ``included.json``."""
    check_int("--n", n, low=2, high=10_000_000, hint="the audit needs canaries both in and out")
    if kind not in KINDS:
        raise LmauditError(f"unknown canary kind {kind!r}", hint=f"use one of {', '.join(KINDS)}")
    n_decoys = (n + 1) // 2 if n_decoys is None else check_int("n_decoys", n_decoys, low=1, high=10_000_000)
    texts = make_canaries(n, kind, seed=seed)
    decoys = make_canaries(n_decoys, kind, seed=seed, stream="decoy")
    if set(texts) & set(decoys):
        raise LmauditError("a decoy came out identical to a canary", hint="pick another --seed")
    width = len(str(n - 1))
    ids = [f"canary-{i:0{width}d}" for i in range(n)]
    coins = np.random.default_rng(stable_seed("canary-inclusion", kind, seed, n)).random(n) < 0.5
    with output_folder(out, what="canaries") as tmp:
        _write_jsonl(tmp / CANARIES, ids, texts)
        _write_jsonl(tmp / TRAIN, [i for i, c in zip(ids, coins) if c], [t for t, c in zip(texts, coins) if c])
        _write_jsonl(tmp / DECOYS, [f"decoy-{i:0{len(str(n_decoys - 1))}d}" for i in range(n_decoys)], decoys)
        summary = {"private": "which canaries were trained on: keep this file from whoever scores the canaries",
                   "canaries_sha256": file_sha256(tmp / CANARIES), "kind": kind, "seed": seed, "n": n,
                   "n_included": int(coins.sum()), "n_decoys": n_decoys,
                   "included": [i for i, c in zip(ids, coins) if c]}
        write_json_atomic(tmp / INCLUDED, summary)
    return summary


def read_canary_folder(folder: str | Path) -> tuple[list[str], np.ndarray]:
    """(canary ids in file order, included flags) of a canary folder, checked against each other.

    Raises :class:`LmauditError` for a missing ``canaries.jsonl`` or ``included.json``, an
    ``included.json`` whose hash does not match ``canaries.jsonl``, or included ids that
    are not canaries.
    """
    folder = Path(folder)
    canaries, inclusion = folder / CANARIES, folder / INCLUDED
    made_by = "write it with: lmaudit corpus canaries --n M --kind random|rare|pii --out DIR"
    if not canaries.is_file():
        raise LmauditError(f"{canaries}: missing (no canaries to audit)", hint=made_by)
    if not inclusion.is_file():
        raise LmauditError(f"{inclusion}: missing (the inclusion list says which canaries were trained on)",
                           hint=f"put the included.json written with {CANARIES} back into {folder}")
    try:
        info = json.loads(inclusion.read_text(encoding="utf-8"))
        expected, included = str(info["canaries_sha256"]), set(info["included"])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise LmauditError(f"{inclusion}: unreadable inclusion list", hint=made_by) from None
    if file_sha256(canaries) != expected:
        raise LmauditError(f"{inclusion} does not belong to {canaries} (its SHA-256 does not match)",
                           hint="use the canaries.jsonl and included.json written together by one "
                                "'lmaudit corpus canaries'")
    ids = []
    for n, line in enumerate(canaries.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            ids.append(str(json.loads(line)["id"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise LmauditError(f"{canaries}: line {n}: not a canary record with an 'id'") from None
    unknown = included - set(ids)
    if unknown:
        raise LmauditError(f"{inclusion}: {len(unknown)} included id(s) are not canaries (e.g. {sorted(unknown)[0]})",
                           hint=made_by)
    return ids, np.array([i in included for i in ids], dtype=bool)
