"""Per-sample features for set-level audits: mean-pooled hidden states or a vector of attack scores."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.probes.records import ArrayRecord
from lmaudit.progress import progress

FEATURES = ("hidden", "scores")


FEATURE_VERSION = 1


@torch.inference_mode()
def _hidden_features(loaded, textset: TextSet, batch_size: int, description: str | None) -> np.ndarray:
    from lmaudit.models.dlm import full_attention_mask
    from lmaudit.probes.ar import _pad_id, model_context_length
    from lmaudit.probes.tokenize import length_batches, pad_batch, tokenize_records

    model, tok = loaded.model, loaded.tokenizer
    device = next(model.parameters()).device
    ids = tokenize_records(tok, textset, max_length=model_context_length(model, tok), first_scorable=0).ids
    out = np.empty((len(textset), model.config.hidden_size), dtype=np.float64)
    with progress(description, total=len(textset)) as bar:
        for index in length_batches(np.array([len(x) for x in ids]), batch_size):
            input_ids, attn, _ = pad_batch(ids, [np.ones(len(x), bool) for x in ids], index, _pad_id(tok))
            ids_t, attn_t = torch.from_numpy(input_ids).to(device), torch.from_numpy(attn).to(device)
            mask = attn_t
            if loaded.kind == "dlm" and loaded.adapter.bidirectional:
                mask = full_attention_mask(ids_t, attn_t, model.dtype)
            hidden = model(input_ids=ids_t, attention_mask=mask, output_hidden_states=True).hidden_states[-1]  # (B, T, d)
            w = attn_t[..., None].to(hidden.dtype)  # (B, T, 1)
            pooled = (hidden * w).sum(dim=1) / w.sum(dim=1)  # (B, d)
            out[index] = pooled.double().cpu().numpy()
            bar.advance(len(index))
    if not np.isfinite(out).all():
        raise LmauditError("the model produced NaN or inf hidden states", hint="check the weights and dtype")
    return out


@dataclass(frozen=True)
class HiddenFeatureTask:
    """Hidden features of one shard (picklable: runs here or on a Ray worker)."""

    batch_size: int = 32

    def __call__(self, handle, shard: TextSet) -> ArrayRecord:
        return ArrayRecord(_hidden_features(handle, shard, self.batch_size, None))


def hidden_features(loaded, textset: TextSet, *, batch_size: int = 32, use_cache: bool = True) -> np.ndarray:
    """Mean of the last hidden state over each text's non-padding tokens. → (n, d) float64.

    AR models run causally; DLMs run as the adapter runs them (full attention for a
    bidirectional checkpoint), on the clean text (no mask tokens). Computed shard by
    shard on the current backend and cached per shard like the probes.
    """
    from lmaudit.models.fingerprint import tokenizer_fingerprint
    from lmaudit.probes.shards import run_sharded
    from lmaudit.utils import cache_dir

    key = None
    if use_cache and loaded.fingerprint:
        bidirectional = loaded.kind == "dlm" and loaded.adapter.bidirectional
        key = ("hidden-mean", FEATURE_VERSION, loaded.fingerprint, tokenizer_fingerprint(loaded.tokenizer),
               bidirectional)
    shards = run_sharded(textset, task=HiddenFeatureTask(batch_size), handle=loaded, key=key, load=ArrayRecord.load,
                         cache_dir=cache_dir() if key else None, description=f"hidden features ({textset.source})",
                         suffix=".npy")
    return np.concatenate([r.array for r in shards.all()])


def score_features(loaded, textset: TextSet, *, reference=None, attacks: list[str] | None = None,
                   seed: int = 0, budget: int = 16) -> tuple[np.ndarray, list[str]]:
    """(n, k) attack scores (one column per attack, all higher = more member-like) and the attack names."""
    from lmaudit.mia import RunConfig, score_set

    scores = score_set(loaded, textset, reference=reference,
                       config=RunConfig(attacks=attacks, seed=seed, budget=budget))
    names = sorted(scores)
    return np.column_stack([scores[n] for n in names]), names


def features_for(kind: str, loaded, sets: dict[str, TextSet], **kwargs) -> tuple[dict[str, np.ndarray], list[str]]:
    """Features of every named set; the names of the columns for ``scores`` (empty for ``hidden``)."""
    if kind not in FEATURES:
        raise LmauditError(f"unknown features '{kind}'", hint=f"use one of {', '.join(FEATURES)}")
    if kind == "hidden":
        return {name: hidden_features(loaded, ts) for name, ts in sets.items()}, []
    out, names = {}, []
    for name, ts in sets.items():
        out[name], names = score_features(loaded, ts, **kwargs)
    return out, names
