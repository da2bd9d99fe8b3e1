"""Tokenisation of records for scoring: context + target, scored-position masks, each text's token count before
any cut; how many texts a model's token limit cuts (read from those counts, which every probe's records carry)."""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass

import numpy as np

from lmaudit.data.loaders import TextSet
from lmaudit.errors import DataError, warn
from lmaudit.models.handle import ModelHandle
from lmaudit.utils import stable_hash


@dataclass
class TokenizedSet:
    """Token ids per sample and which positions are scored.

    ``ids[i]`` is the full input (context then target, truncated to ``max_length``);
    ``scored[i]`` is a bool mask of the same length, True where the token belongs to
    the target, is not a special token, and is not position 0 (a causal model has no
    prediction for its first token). ``n_tokens[i]`` is the length of sample i before
    any truncation (what a probe's records carry, so that a run counts its long texts
    without tokenising them again).
    """

    ids: list[np.ndarray]
    scored: list[np.ndarray]
    zlib_len: np.ndarray
    sample_keys: np.ndarray
    n_tokens: np.ndarray


def tokenize_records(tokenizer, textset: TextSet, *, max_length: int, first_scorable: int = 1,
                     split_special: bool = False) -> TokenizedSet:
    """Tokenise every record of ``textset`` with ``tokenizer``.

    With ``split_special`` a special token's text inside a record (``<pad>``, ``<mask>``) is read as plain text,
    not as that token: for a tokenizer that must give the text back as it is (the neighbour maker's).

    Texts longer than ``max_length`` tokens are **truncated** to their first
    ``max_length`` tokens (a warning gives the count); lmaudit does not window.
    A record with no scorable target token left is a :class:`DataError` naming it.
    """
    special = np.array(sorted(set(tokenizer.all_special_ids)), dtype=np.int64)
    with_ctx = [r for r in textset.records if r.context]
    split = {"split_special_tokens": True} if split_special else {}
    plain_ids = tokenizer([r.target for r in textset.records], add_special_tokens=True, **split)["input_ids"]
    ctx_ids = tokenizer([r.context for r in with_ctx], add_special_tokens=True, **split)["input_ids"] \
        if with_ctx else []
    tgt_ids = tokenizer([r.target for r in with_ctx], add_special_tokens=False, **split)["input_ids"] \
        if with_ctx else []
    ctx_iter = iter(zip(ctx_ids, tgt_ids))

    ids_out, scored_out, keys = [], [], np.empty(len(textset), dtype=np.uint64)
    n_tokens = np.empty(len(textset), dtype=np.int64)
    for i, rec in enumerate(textset.records):
        if rec.context:
            c, t = next(ctx_iter)
            ids = np.asarray(list(c) + list(t), dtype=np.int64)
            start = len(c)
        else:
            ids = np.asarray(plain_ids[i], dtype=np.int64)
            start = 0
        n_tokens[i] = len(ids)
        ids = ids[:max_length]
        scored = np.zeros(len(ids), dtype=bool)
        scored[max(start, first_scorable):] = True
        scored &= ~np.isin(ids, special)
        if not scored.any():
            raise DataError(
                f"{textset.source}: record '{rec.id}' has no scorable token "
                f"({len(ids)} token(s) after tokenisation{', truncated' if start >= max_length else ''})",
                hint="records need at least two tokens of target text",
            )
        ids_out.append(ids)
        scored_out.append(scored)
        keys[i] = np.uint64(int(stable_hash(rec.context, rec.target, digest_size=8), 16))
    n_truncated = int((n_tokens > max_length).sum())
    if n_truncated:
        warnings.warn(
            f"{n_truncated} of {len(textset)} text(s) in {textset.describe()} exceed the model context of "
            f"{max_length} tokens and were truncated to their first {max_length} tokens",
            stacklevel=2,
        )
    zlib_len = np.array([len(zlib.compress(r.target.encode("utf-8"))) for r in textset.records], dtype=np.int64)
    return TokenizedSet(ids_out, scored_out, zlib_len, keys, n_tokens)


def windows(tok: TokenizedSet, length: int, stride: int) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Every sample cut into overlapping windows of at most ``length`` tokens, ``stride`` apart.

    Returns the windows' ids, their scored masks and the sample each belongs to
    (in order). A token is scored in exactly one window: the first window scores all
    its tokens, each later one only the ``stride`` tokens it adds, which it sees with
    ``length - stride`` tokens of left context. A sample of at most ``length`` tokens
    is one window, as without windowing.
    """
    if not 0 < stride <= length:
        raise DataError(f"the window stride must be in 1..{length}, got {stride}")
    ids_out, scored_out, owner = [], [], []
    for i, (ids, scored) in enumerate(zip(tok.ids, tok.scored)):
        start = 0
        while True:
            keep = scored[start : start + length].copy()
            if start:
                keep[: length - stride] = False  # scored by the previous window
            ids_out.append(ids[start : start + length])
            scored_out.append(keep)
            owner.append(i)
            if start + length >= len(ids):
                break
            start += stride
    return ids_out, scored_out, np.array(owner, dtype=np.int64)


def length_batches(lengths: np.ndarray, batch_size: int, max_tokens: int | None = None) -> list[np.ndarray]:
    """Indices grouped into batches of similar length (longest first), so padding is small.

    A batch holds at most ``batch_size`` samples and, with ``max_tokens``, at most that
    many padded tokens (samples × its longest sample); a sample longer than
    ``max_tokens`` is a batch of its own.
    """
    lengths = np.asarray(lengths)
    order = np.argsort(-lengths, kind="stable")
    if max_tokens is None:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    batches, start = [], 0
    while start < len(order):
        fit = max(1, min(batch_size, max_tokens // max(1, int(lengths[order[start]]))))  # the first is the longest
        batches.append(order[start : start + fit])
        start += fit
    return batches


def model_batches(lengths: np.ndarray, adapter, batch_size: int | None = None,
                  max_tokens: int | None = None) -> list[np.ndarray]:
    """:func:`length_batches` as a probe runs them: at most ``batch_size`` texts and ``max_tokens`` padded tokens
    when given; with neither, as many padded tokens as the model's adapter holds by default
    (:meth:`~lmaudit.models.adapters.ARAdapter.batch_tokens`)."""
    if batch_size is None and max_tokens is None:
        max_tokens = adapter.batch_tokens()
    return length_batches(lengths, batch_size or max(1, len(lengths)), max_tokens)


def pad_batch(ids: list[np.ndarray], scored: list[np.ndarray], index: np.ndarray, pad_id: int):
    """Right-pad the selected samples: (input_ids, attention_mask, scored) as (B, T) arrays."""
    T = max(len(ids[i]) for i in index)
    B = len(index)
    input_ids = np.full((B, T), pad_id, dtype=np.int64)
    attn = np.zeros((B, T), dtype=np.int64)
    mask = np.zeros((B, T), dtype=bool)
    for row, i in enumerate(index):
        n = len(ids[i])
        input_ids[row, :n] = ids[i]
        attn[row, :n] = 1
        mask[row, :n] = scored[i]
    return input_ids, attn, mask


def long_text_counts(target: ModelHandle, n_tokens: np.ndarray, n_members: int, config) -> dict:
    """How many texts of each set exceed the target's token limit, and what the probes did with them (one warning);
    ``n_tokens``: each text's token count before any cut, members first (what the probe's records carry:
    nothing is tokenised again), ``config`` a run's (its ``max_length`` and ``long_texts``).

    The limit is ``--max-tokens`` or the model's context length (the adapter's, one
    rule for every probe). ``window`` scores every token of an AR text in overlapping
    windows; a DLM's masked probe truncates whatever the mode.
    """
    limit = config.max_length or target.adapter.context_length
    over = np.asarray(n_tokens) > limit
    counts = {"members": int(over[:n_members].sum()), "nonmembers": int(over[n_members:].sum())}
    offered = target.adapter.long_text_modes  # what this model's probes can do with a long text
    mode = config.long_texts if config.long_texts in offered else "truncate"
    if any(counts.values()):
        what = ("scored in overlapping windows of that length" if mode == "window"
                else "truncated to their first tokens (--long-texts window scores them whole)" if "window" in offered
                else "truncated to their first tokens (windows apply to AR models only)")
        warn(f"{counts['members']} member(s) and {counts['nonmembers']} non-member(s) exceed {limit} tokens and "
             f"were {what}")
    return {"limit": limit, "mode": mode, **counts}
