"""The gradient probe: per text, norms of the gradient of its mean token loss with respect to model parameters
(GradNorm).

For each text, the loss is the mean negative log-likelihood of its scored tokens (the tokens the AR probe scores,
under the same tokenisation and truncation); its gradient with respect to a chosen subset of the parameters
(:data:`SUBSETS`) is reduced to four norms (:data:`GRADIENT_NORMS` of :mod:`lmaudit.probes.requests`), so that every
reading of GradNorm comes from one pass. Nothing of the model changes: parameters that were frozen (an adapter
loaded for inference freezes all of them) are differentiated anyway and restored after. Two paths (``method``,
:data:`METHODS`) give the same norms:

- ``batched`` (the default; :mod:`lmaudit.probes.sample_gradients`): padded batches of texts as the AR probe runs
  them, one forward and one backward pass per batch; each text's gradient is formed from its own rows a piece at a
  time and reduced at once, never held whole. Peak memory: a batch's activations (:func:`gradient_batch_tokens`)
  and a few MiB. A model or subset it does not cover is taken by the per-text path, with a warning saying why.
- ``per-text``, the reference: one text at a time, autograd's gradient of the subset, then :func:`norms_of`. Peak
  memory: one text's activations and one gradient of the subset.

Cost on SmolLM2-135M (``python benchmarks/bench_gradnorm.py``: 16 numpy docstrings of 500 characters, every
parameter, one thread, two runs on a machine whose two cores were shared with other work), as a multiple of the AR
probe's CPU time: batched 2.75 and 3.09, per-text 3.16 and 3.79, and 4.08 and 4.37 for the per-text path as it was
before, reducing with ``torch.linalg.vector_norm`` (wall-time ratios within 0.2 of these). A profile of that older
path (8 texts, wall time) put 54% of its time in the backward pass (13% in zeroing the tied embedding's dense
gradient and adding the output layer's to it), 23% in the norms (``vector_norm``'s max norm alone 10 to 30 times
slower than ``aminmax``), 18% in the forward pass, 5% in the output layer and under 1% in the log-softmax. The two
paths' float32 norms differ by at most 5e-5 relative there; against the model cast to float64 the batched path is
within 1e-6, the per-text path within 2e-5 (in float64 the two agree to 3e-16).

``torch.func.vmap`` of ``grad`` over ``functional_call`` (eager attention) ran SmolLM2-135M without falling back to
a per-sample loop, but took 15.0 CPU seconds for 4 texts (two at a time) where the per-text path took 9.3: it
holds each text's whole gradient (540 MB), so neither path uses it. Cached per shard of records like every probe.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from lmaudit.data.loaders import TextSet
from lmaudit.errors import DataError, LmauditError
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.handle import ModelHandle
from lmaudit.probes.batching import run_batches
from lmaudit.probes.gradient_sums import Sums, combine
from lmaudit.probes.records import GradientStats
from lmaudit.probes.requests import GRADIENT_NORMS
from lmaudit.probes.sample_gradients import Plan, Unsupported, batch_norms, wide
from lmaudit.probes.shards import Sharded, run_sharded
from lmaudit.probes.tokenize import model_batches, tokenize_records
from lmaudit.progress import progress

GRADIENT_VERSION = 4  # 2: norms reduced in the gradient's own precision; 3: blocked sums, the batched path;
# 4: each text's tokens before any cut beside its norms
METHODS = ("batched", "per-text")  # batched: one forward and backward per batch; per-text: the reference
ACTIVATION_BYTES = 2 * 2**30  # activations one batch of the batched path keeps for its backward pass, at most
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

    Each tensor is reduced as :meth:`~lmaudit.probes.gradient_sums.Sums.add` reduces the batched path's pieces:
    a block of at most a million values at a time (it stays in cache), ``|g|`` once, then its blocked float32 sum
    (float64 for a float64 model; a bfloat16 block is widened first), its max, and the L2 norms of rows of at most
    4,096 values, squared and summed in float64. A whole tensor's ``torch.linalg.vector_norm`` is not used: on a
    CPU its float32 L1 and L2 norms accumulate without blocking (relative errors of 6e-2 and 3e-3 measured on 28
    million values, the size of SmolLM2's embedding) and its max norm is ten to thirty times slower than a max."""
    sums = Sums(len(grads), 1, grads[0].device if grads else "cpu")
    for i, g in enumerate(grads):
        sums.add(i, 0, g)
    return combine(sums.totals())[0]


def gradient_batch_tokens(adapter) -> int:
    """Padded tokens one batch of the batched path holds by default: the AR probe's budget, at most as many as
    :data:`ACTIVATION_BYTES` of activations kept for the backward pass hold (about ``layers × (6 hidden +
    4 intermediate)`` values a token)."""
    cfg = adapter.config
    hidden = getattr(cfg, "hidden_size", None) or 768
    inner = getattr(cfg, "intermediate_size", None) or 4 * hidden
    layers = getattr(cfg, "num_hidden_layers", None) or 12
    per_token = next(adapter.parameters()).element_size() * layers * (6 * hidden + 4 * inner)
    return max(1, min(adapter.batch_tokens(), ACTIVATION_BYTES // per_token))


@contextmanager
def _with_flags(model, chosen):
    """Every parameter frozen but ``chosen`` (None: all frozen) while in the block; the flags restored after."""
    was = [p.requires_grad for p in model.parameters()]
    try:
        for p in model.parameters():
            p.requires_grad_(False)
        for p in chosen or ():
            p.requires_grad_(True)
        yield
    finally:
        for p, flag in zip(model.parameters(), was):
            p.requires_grad_(flag)


def _per_text(handle: ModelHandle, tok, chosen, bar) -> np.ndarray:
    """(S, 4) one text at a time: its loss's gradient with respect to ``chosen`` by autograd, then its norms."""
    adapter = handle.adapter
    out = np.empty((len(tok.ids), len(GRADIENT_NORMS)))
    with _with_flags(handle.model, chosen), torch.enable_grad():
        for i, (ids, scored) in enumerate(zip(tok.ids, tok.scored)):
            ids_t = torch.from_numpy(ids)[None].to(adapter.device)
            sel = torch.from_numpy(scored[1:])[None].to(adapter.device)  # row t predicts token t + 1
            rows, head = adapter.output_rows(ids_t, None, lambda out, sel=sel: out[:, :-1][sel])
            logits = wide(rows if head is None else head(rows))  # float32, or float64 for a float64 model
            loss = -torch.log_softmax(logits, dim=-1).gather(1, ids_t[:, 1:][sel][:, None]).mean()
            out[i] = norms_of(torch.autograd.grad(loss, chosen))
            bar.advance(1)
    return out


def _batched(handle: ModelHandle, tok, chosen, bar, batch_tokens: int | None) -> np.ndarray:
    """(S, 4) batch by batch (:mod:`lmaudit.probes.sample_gradients`); raises ``Unsupported`` for a model it does
    not cover."""
    adapter = handle.adapter
    plan = Plan(handle.model, chosen)
    out = np.empty((len(tok.ids), len(GRADIENT_NORMS)))
    lengths = np.array([len(x) for x in tok.ids])

    def compute(index: np.ndarray) -> None:
        ids, attn, mask = adapter.pad([tok.ids[i] for i in index], [tok.scored[i] for i in index])
        out[index] = batch_norms(plan, adapter, *(torch.from_numpy(a).to(adapter.device) for a in (ids, attn, mask)))
        bar.advance(len(index))

    with _with_flags(handle.model, None):
        run_batches(model_batches(lengths, adapter, max_tokens=batch_tokens or gradient_batch_tokens(adapter)),
                    compute, lengths=lengths)
    return out


def _gradient_norms(handle: ModelHandle, textset: TextSet, subset: str, max_length: int | None,
                    description: str | None, method: str = "batched",
                    batch_tokens: int | None = None) -> GradientStats:
    """The :data:`GRADIENT_NORMS` of each text's loss gradient ((S, 4), by ``method``: :data:`METHODS`) and its
    tokens before any cut."""
    if method not in METHODS:
        raise DataError(f"gradnorm: unknown method {method!r}", hint=f"use one of {', '.join(METHODS)}")
    adapter, model = handle.adapter, handle.model
    tok = tokenize_records(handle.tokenizer, textset, max_length=max_length or adapter.context_length)
    chosen = [p for _, p in select_parameters(model, subset)]
    with progress(description, total=len(textset)) as bar:
        out = None
        if method == "batched":
            try:
                out = _batched(handle, tok, chosen, bar, batch_tokens)
            except Unsupported as exc:
                warnings.warn(f"gradnorm: {exc}; the gradients are taken one text at a time", stacklevel=2)
        if out is None:
            out = _per_text(handle, tok, chosen, bar)
    if not np.isfinite(out).all():
        i = int(np.argmax(~np.isfinite(out).all(axis=1)))
        raise LmauditError(f"gradnorm: the gradient of text {textset.records[i].id!r} of {textset.source} is not "
                           "finite", hint="check the model weights and dtype (try float32)")
    return GradientStats(out, tok.n_tokens)


@dataclass(frozen=True)
class GradientTask:
    """The gradient norms of one shard (picklable: it runs in this process or on a Ray worker)."""

    subset: str
    max_length: int | None
    method: str = "batched"
    batch_tokens: int | None = None

    def __call__(self, handle, shard: TextSet) -> GradientStats:
        return _gradient_norms(handle, shard, self.subset, self.max_length, None, self.method, self.batch_tokens)


def probe_gradients(handle: ModelHandle, textset: TextSet, subset: str = "all", *, max_length: int | None = None,
                    method: str = "batched", batch_tokens: int | None = None, cache_dir=None,
                    description: str = "gradients") -> Sharded:
    """The :data:`GRADIENT_NORMS` of every text's loss gradient, shard by shard (GradientStats); cached
    under (model, tokenizer, the shard's records, subset, max_length, method, batch_tokens) with ``cache_dir``.
    ``method``: ``batched`` (the default) or ``per-text`` (:data:`METHODS`); ``batch_tokens``: padded tokens a
    batch holds (default :func:`gradient_batch_tokens`)."""
    select_parameters(handle.model, subset)  # a bad subset is said before any shard runs
    if method not in METHODS:
        raise DataError(f"gradnorm: unknown method {method!r}", hint=f"use one of {', '.join(METHODS)}")
    key = None
    if cache_dir is not None and handle.fingerprint:
        key = ("gradnorm", GRADIENT_VERSION, handle.fingerprint, tokenizer_fingerprint(handle.tokenizer), subset,
               max_length, method, batch_tokens)
    return run_sharded(textset, task=GradientTask(subset, max_length, method, batch_tokens), handle=handle, key=key,
                       load=GradientStats.load, cache_dir=cache_dir if key else None, description=description)
