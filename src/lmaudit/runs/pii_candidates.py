"""The candidates of a PII reconstruction and their scores: candidates generated at the placeholder (a DLM fills
mask tokens there, an AR model continues the left context), the cross-entropy of each filled record, and Q-Skew over
masked windows around the field (shard-cached). How the target scores a token (its adapter's ``scoring``) picks how a
candidate is scored (:data:`CANDIDATE_LOGP`) and whether Q-Skew has masked windows to read (:data:`SKEW_SCORING`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmaudit.attacks.q_skew import weighted_skew
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import LmauditError, SettingError, check_int
from lmaudit.extraction.reconstruct import (
    PIIRecord,
    dedupe,
    trim,
)
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.probes.masked import masked_window_stats, probe_masked
from lmaudit.probes.masks import MaskPlan
from lmaudit.probes.segments import segment_mean
from lmaudit.probes.shards import run_sharded
from lmaudit.probes.stored import ArrayDict
from lmaudit.settings import refusing
from lmaudit.utils import cache_dir, stable_hash, stable_seed


def mask_lengths(mask_length: int | list[int]) -> list[int]:
    """The mask lengths of a ``mask_length`` setting: one length, or a list (each checked ≥ 1)."""
    lengths = [mask_length] if isinstance(mask_length, int) and not isinstance(mask_length, bool) else mask_length
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise SettingError("mask_length", f"{{name}} must be an integer or a list of integers, got {mask_length!r}")
    return [check_int("mask_length", m, low=1, flag="--mask-length") for m in lengths]


def mask_length_setting(value, name: str, flag: str | None) -> None:
    """The declared check of ``mask_length`` (:func:`mask_lengths`)."""
    mask_lengths(value)


refusing(mask_length_setting, 0, [0], [], "20", None, 2.5, [4, "8"])


def generate_candidates(loaded, rec: PIIRecord, field: str, *, n: int = 64, mask_length: int | list[int] = 20,
                        steps: int | None = None, temperature: float = 1.0, seed: int = 0) -> list[str]:
    """Trimmed, de-duplicated candidates from ``n`` independent generations at the placeholder.

    A list of mask lengths spreads the ``n`` generations evenly over them (the first
    lengths get the remainder): the attacker does not know how many tokens the value
    has, and a DLM fills every mask it is given (it cannot leave one empty), so a
    length far from the value's makes it pad or truncate the value. ``steps`` is capped
    at each length (default: one token per step).
    """

    tok = loaded.tokenizer
    left = np.asarray(tok(rec.left)["input_ids"], dtype=np.int64)
    lengths = mask_lengths(mask_length)
    right = np.asarray(tok(rec.right, add_special_tokens=False)["input_ids"], dtype=np.int64)
    texts = []
    for i, length in enumerate(lengths):
        k = n // len(lengths) + (i < n % len(lengths))
        if k == 0:
            continue
        # one length keeps the seed it always had, so earlier runs reproduce
        gen_seed = stable_seed("pii-candidates", rec.id, seed, *([length] if len(lengths) > 1 else []))
        x = np.concatenate([left, np.zeros(length, dtype=np.int64), right])  # the span's ids are filled in
        new = loaded.adapter.fill(x, np.arange(len(left), len(left) + length), samples=k,
                                  steps=min(steps or length, length), temperature=temperature, seed=gen_seed)
        texts += tok.batch_decode(new, skip_special_tokens=True)
    return dedupe(trim(t, field) for t in texts)


def _ar_logp(loaded, ts: TextSet, *, ratio: float, batches: int, seed: int):
    return probe_ar(loaded, ts, ARProbeConfig(), description="score candidates")


def _masked_logp(loaded, ts: TextSet, *, ratio: float, batches: int, seed: int):
    return probe_masked(loaded, ts, MaskPlan("random", budget=batches, rho=ratio), seed=seed)


# How a model scores a token (its adapter's ``scoring``) maps to how it scores a candidate text (its per-token
# log-probabilities): one causal pass (or a served model's prompt log-probabilities), or random masks
CANDIDATE_LOGP = {"left-to-right": _ar_logp, "served": _ar_logp, "masked": _masked_logp}


def ce_scores(loaded, texts: list[str], *, ratio: float = 0.35, batches: int = 8, seed: int = 0) -> np.ndarray:
    """−(mean masked cross-entropy) of each text: DLM under ``batches`` random masks of ``ratio``; AR: −mean NLL."""
    score = CANDIDATE_LOGP[loaded.adapter.scoring]
    stats = score(loaded, TextSet.from_texts(texts, prefix="c", source="candidates"), ratio=ratio, batches=batches,
                  seed=seed)
    return segment_mean(stats.logp.astype(np.float64), stats.offsets)


def _window(tok, rec: PIIRecord, value: str, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(window token ids, bool mask of the field's tokens in it).

    The context budget is ``width`` minus the field's length (at least 4 tokens, so a
    long candidate keeps some context); about 40% of it goes before the field.
    """
    left = tok(rec.left, add_special_tokens=False)["input_ids"]
    mid = tok(value, add_special_tokens=False)["input_ids"]
    right = tok(rec.right, add_special_tokens=False)["input_ids"]
    ctx = max(width - len(mid), 4)
    before = min(len(left), max(1, (2 * ctx) // 5))
    after = min(len(right), ctx - before)
    before = min(len(left), ctx - after)  # unused room after the field goes before it
    ids = left[len(left) - before :] + mid + right[:after]
    is_field = np.zeros(len(ids), dtype=bool)
    is_field[before : before + len(mid)] = True
    return np.asarray(ids, dtype=np.int64), is_field


WINDOW_VERSION = 1


@dataclass(frozen=True)
class WindowTask:
    """Masked statistics of candidate windows for one shard (picklable: runs here or on a Ray worker).

    A shard's records are candidates: ``target`` is the candidate value, ``fields``
    hold the record's ``left`` and ``right`` text and its ``record`` id. Masks fall on
    the field (``where="pii"``) or on its context (``"context"``) of each window.
    """

    plan: MaskPlan
    where: str
    width: int
    seed: int

    def windows(self, tokenizer, shard: TextSet) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
        windows, allowed, seeds = [], [], []
        for r in shard.records:
            rec = PIIRecord(r.fields["record"], r.fields["left"], r.fields["right"], None)
            w, is_field = _window(tokenizer, rec, r.target, self.width)
            allow = np.flatnonzero(is_field if self.where == "pii" else ~is_field)
            if len(allow) == 0:
                raise LmauditError(f"record '{rec.id}': the window holds no {self.where} token",
                                   hint="use a wider {window}", options=("window",))
            windows.append(w)
            allowed.append(allow)
            seeds.append(stable_seed("pii-skew", rec.id, r.target, self.seed))
        return windows, allowed, seeds

    def __call__(self, handle, shard: TextSet) -> ArrayDict:
        windows, allowed, seeds = self.windows(handle.tokenizer, shard)
        stats, offsets = masked_window_stats(handle, windows, allowed, self.plan, seeds)
        return ArrayDict(stats=stats, offsets=offsets)


def _window_shard_key(shard: TextSet):
    return stable_hash([(r.target, r.fields["record"], r.fields["left"], r.fields["right"]) for r in shard.records])


def window_logp(loaded, rec: PIIRecord, values: list[str], task: WindowTask, *, use_cache: bool = True,
                description: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """log p of every masked window token of every candidate (flat, float64) and the per-candidate offsets.

    The windows go through the sharded probe machinery: cached per shard under the
    model's fingerprint (a second ranking of the same candidates does no forward
    pass) and run on the current backend (local or Ray).
    """
    cands = TextSet([Record(f"{rec.id}:{i}", v, fields={"record": rec.id, "left": rec.left, "right": rec.right})
                     for i, v in enumerate(values)], source=f"candidates of '{rec.id}'")
    key = None
    if use_cache and loaded.fingerprint:
        key = ("pii-window", WINDOW_VERSION, loaded.fingerprint, tokenizer_fingerprint(loaded.tokenizer),
               task.plan.cache_key(), task.where, task.width, task.seed)
    shards = run_sharded(cands, task=task, handle=loaded, key=key, load=ArrayDict.load,
                         cache_dir=cache_dir() if key else None, description=description, fingerprint=_window_shard_key)
    parts = shards.all()
    logp = np.concatenate([p["stats"][:, 0] for p in parts]).astype(np.float64)
    sizes = np.concatenate([np.diff(p["offsets"]) for p in parts])
    return logp, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


SKEW_SCORING = ("masked",)  # how a model must score a token for its masked windows to give Q-Skew its signal


def skew_scores(target, reference, rec: PIIRecord, values: list[str], *, where: str, window: int = 20,
                rho: float = 0.35, budget: int = 12, seed: int = 0) -> np.ndarray:
    """Q-Skew per candidate, masks restricted to the field (``where="pii"``) or to its context (``"context"``).

    Target and reference see identical windows and masks (the reference must share the tokenizer).
    """
    task = WindowTask(MaskPlan("cyclic", budget=budget, rho=rho), where, window, seed)
    tar, offsets = window_logp(target, rec, values, task, description=f"Q-Skew ({where}) target")
    ref, _ = window_logp(reference, rec, values, task, description=f"Q-Skew ({where}) reference")
    return weighted_skew(tar - ref, offsets)
