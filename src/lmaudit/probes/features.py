"""Per-sample hidden features for set-level audits: the mean-pooled last hidden state of each text."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.shards import run_sharded
from lmaudit.probes.stored import ArrayRecord
from lmaudit.probes.tokenize import model_batches, tokenize_records
from lmaudit.progress import progress
from lmaudit.utils import cache_dir

FEATURE_VERSION = 1


@torch.inference_mode()
def _hidden_features(loaded: ModelHandle, textset: TextSet, batch_size: int | None,
                     description: str | None) -> np.ndarray:
    adapter, model = loaded.adapter, loaded.model
    device = adapter.device
    ids = tokenize_records(loaded.tokenizer, textset, max_length=adapter.context_length, first_scorable=0).ids
    out = np.empty((len(textset), model.config.hidden_size), dtype=np.float64)
    with progress(description, total=len(textset)) as bar:
        for index in model_batches(np.array([len(x) for x in ids]), adapter, batch_size):
            input_ids, attn, _ = adapter.pad([ids[i] for i in index])
            ids_t, attn_t = torch.from_numpy(input_ids).to(device), torch.from_numpy(attn).to(device)
            hidden = adapter.hidden_states(ids_t, attn_t)  # (B, T, d)
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

    batch_size: int | None = None  # None: the model's token budget

    def __call__(self, handle, shard: TextSet) -> ArrayRecord:
        return ArrayRecord(_hidden_features(handle, shard, self.batch_size, None))


def hidden_features(loaded, textset: TextSet, *, batch_size: int | None = None, use_cache: bool = True) -> np.ndarray:
    """Mean of the last hidden state over each text's non-padding tokens. → (n, d) float64.

    AR models run causally; DLMs run as the adapter runs them (full attention for a
    bidirectional checkpoint), on the clean text (no mask tokens). Computed shard by
    shard on the current backend and cached per shard like the probes.
    """
    key = None
    if use_cache and loaded.fingerprint:
        bidirectional = bool(getattr(loaded.adapter, "bidirectional", False))  # the one setting of the key that varies
        key = ("hidden-mean", FEATURE_VERSION, loaded.fingerprint, tokenizer_fingerprint(loaded.tokenizer),
               bidirectional, batch_size)  # the batch size too: padded beside others, a text's last bits change
    shards = run_sharded(textset, task=HiddenFeatureTask(batch_size), handle=loaded, key=key, load=ArrayRecord.load,
                         cache_dir=cache_dir() if key else None, description=f"hidden features ({textset.source})",
                         suffix=".npy")
    return np.concatenate([r.array for r in shards.all()])
