"""The gradient probe: per text, norms of the gradient of its mean token loss with respect to model parameters
(GradNorm).

For each text, the loss is the mean negative log-likelihood of its scored tokens (the tokens the AR probe scores,
under the same tokenisation and truncation); one forward and one backward pass give its gradient with respect to a
chosen subset of the parameters (:data:`SUBSETS`), and four norms of it are kept (:data:`GRADIENT_NORMS` of
:mod:`lmaudit.probes.requests`), so that every reading of GradNorm comes from one pass. Nothing of the model
changes: parameters that were frozen (an adapter loaded for inference freezes all of them) are differentiated
anyway and restored after.

Texts are taken one at a time: a per-sample gradient of a batch would hold one copy of the subset's gradient per
text, and on a CPU ``torch.func.vmap`` over a Llama block falls back to a per-sample loop inside attention, so it
saves nothing there (measured: 0.082 s with it against 0.075 s without, 8 texts of 64 tokens on a 2-block Llama,
the same norms). Peak memory is one text's activations
and one gradient of the subset. Cached per shard of records like every probe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lmaudit.data.loaders import TextSet
from lmaudit.errors import DataError, LmauditError
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.records import ArrayRecord
from lmaudit.probes.requests import GRADIENT_NORMS
from lmaudit.probes.shards import Sharded, run_sharded
from lmaudit.probes.tokenize import tokenize_records
from lmaudit.progress import progress

GRADIENT_VERSION = 2  # 2: norms reduced in the gradient's own precision
SUBSETS = "all, embeddings, adapter, or last:N (the last N transformer blocks)"


def _blocks(model) -> tuple[str, int]:
    """(name, length) of the model's list of transformer blocks: its longest ``ModuleList``."""
    lists = [(name, len(m)) for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m)]
    if not lists:
        raise LmauditError(f"gradnorm: {type(model).__name__} has no list of transformer blocks for 'last:N'",
                           hint="use parameters=all or parameters=embeddings")
    return max(lists, key=lambda x: x[1])


def select_parameters(model, subset: str) -> list[tuple[str, torch.nn.Parameter]]:
    """The named parameters ``subset`` differentiates (tied weights once); an empty selection is an error."""
    named = list(model.named_parameters())  # every parameter once, frozen or not
    if subset == "all":
        chosen = named
    elif subset == "embeddings":
        weight = model.get_input_embeddings().weight
        chosen = [(n, p) for n, p in named if p is weight]
    elif subset == "adapter":
        chosen = [(n, p) for n, p in named if "lora_" in n]
        if not chosen:
            raise DataError("gradnorm: parameters=adapter, but the model has no adapter (LoRA) weights",
                            hint="load an adapter folder, or use parameters=all")
    elif subset.startswith("last:") and subset[5:].isdigit() and int(subset[5:]) > 0:
        name, length = _blocks(model)
        k = int(subset[5:])
        if k > length:
            raise DataError(f"gradnorm: parameters={subset}, but the model has {length} transformer blocks")
        prefixes = tuple(f"{name}.{i}." for i in range(length - k, length))
        chosen = [(n, p) for n, p in named if n.startswith(prefixes)]
    else:
        raise DataError(f"gradnorm: unknown parameters {subset!r}", hint=f"use {SUBSETS}")
    if not chosen:
        raise DataError(f"gradnorm: parameters={subset} selects no parameter of {type(model).__name__}")
    return chosen


def describe_subset(model, subset: str) -> dict:
    """What ``subset`` differentiates: tensors, parameters, and how many of them were frozen in the model."""
    chosen = select_parameters(model, subset)
    return {"parameters": subset, "tensors": len(chosen), "values": int(sum(p.numel() for _, p in chosen)),
            "frozen_in_model": int(sum(not p.requires_grad for _, p in chosen))}


def norms_of(grads: list[torch.Tensor]) -> np.ndarray:
    """(4,) the :data:`GRADIENT_NORMS` of one gradient, given tensor by tensor.

    Each tensor's L1, L2 and max norms are reduced where it lies, in its own precision (float32 for a float32 model:
    torch sums in blocks, so the error stays near float32 rounding however large the tensor), without a copy; the
    per-tensor norms are combined in float64. A float64 copy of every gradient cost a 135M-parameter model about
    a gigabyte of memory traffic per text."""
    per = torch.tensor([[float(torch.linalg.vector_norm(g, o, dtype=torch.float64 if g.dtype == torch.float64
                                                      else torch.float32)) for o in (1, 2, float("inf"))]
                        for g in grads], dtype=torch.float64)  # (tensors, 3); bfloat16 gradients reduced in float32
    l1, l2, linf = per.T
    return np.array([float(l2.square().sum().sqrt()), float(l1.mean()), float(l2.mean()), float(linf.mean())])


def _gradient_norms(handle: ModelHandle, textset: TextSet, subset: str, max_length: int | None,
                    description: str | None) -> np.ndarray:
    """(S, 4) the :data:`GRADIENT_NORMS` of each text's loss gradient."""
    adapter, model = handle.adapter, handle.model
    tok = tokenize_records(handle.tokenizer, textset, max_length=max_length or adapter.context_length)
    chosen = [p for _, p in select_parameters(model, subset)]
    was = [p.requires_grad for p in model.parameters()]
    out = np.empty((len(textset), len(GRADIENT_NORMS)))
    try:
        for p in model.parameters():
            p.requires_grad_(False)
        for p in chosen:
            p.requires_grad_(True)
        with torch.enable_grad(), progress(description, total=len(textset)) as bar:
            for i, (ids, scored) in enumerate(zip(tok.ids, tok.scored)):
                ids_t = torch.from_numpy(ids)[None].to(adapter.device)
                sel = torch.from_numpy(scored[1:])[None].to(adapter.device)  # row t predicts token t + 1
                rows, head = adapter.output_rows(ids_t, None, lambda out, sel=sel: out[:, :-1][sel])
                logits = (rows if head is None else head(rows)).float()
                loss = -torch.log_softmax(logits, dim=-1).gather(1, ids_t[:, 1:][sel][:, None]).mean()
                out[i] = norms_of(torch.autograd.grad(loss, chosen))
                bar.advance(1)
    finally:
        for p, flag in zip(model.parameters(), was):
            p.requires_grad_(flag)
    if not np.isfinite(out).all():
        i = int(np.argmax(~np.isfinite(out).all(axis=1)))
        raise LmauditError(f"gradnorm: the gradient of text {textset.records[i].id!r} of {textset.source} is not "
                           "finite", hint="check the model weights and dtype (try float32)")
    return out


@dataclass(frozen=True)
class GradientTask:
    """The gradient norms of one shard (picklable: it runs in this process or on a Ray worker)."""

    subset: str
    max_length: int | None

    def __call__(self, handle, shard: TextSet) -> ArrayRecord:
        return ArrayRecord(_gradient_norms(handle, shard, self.subset, self.max_length, None))


def probe_gradients(handle: ModelHandle, textset: TextSet, subset: str = "all", *, max_length: int | None = None,
                    cache_dir=None, description: str = "gradients") -> Sharded:
    """The :data:`GRADIENT_NORMS` of every text's loss gradient, shard by shard (ArrayRecords of (n, 4)); cached
    under (model, tokenizer, the shard's records, subset, max_length) with ``cache_dir``."""
    select_parameters(handle.model, subset)  # a bad subset is said before any shard runs
    key = None
    if cache_dir is not None and handle.fingerprint:
        key = ("gradnorm", GRADIENT_VERSION, handle.fingerprint, tokenizer_fingerprint(handle.tokenizer), subset,
               max_length)
    return run_sharded(textset, task=GradientTask(subset, max_length), handle=handle, key=key, load=ArrayRecord.load,
                       cache_dir=cache_dir if key else None, description=description, suffix=".npy")
