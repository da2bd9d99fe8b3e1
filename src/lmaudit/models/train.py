"""One training loop for pretraining, DFT and IFT; the objective is pluggable.

An example is ``(input_ids, loss_mask)``: the loss is taken on positions whose
``loss_mask`` is True. DFT packs texts into fixed-length blocks (all tokens
trained); IFT keeps each ``prompt``/``response`` pair as one variable-length example
with the prompt tokens never trained. The AR objective is next-token cross-entropy;
a diffusion objective plugs into the same loop through the ``objective`` argument.
"""

from __future__ import annotations

import hashlib
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lmaudit.cache import TRAINING_STATE
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError, spell
from lmaudit.models.batching import pad_sequences, to_device
from lmaudit.progress import info, progress
from lmaudit.settings import check_settings, fraction, integer, non_negative, one_of, positive, seed_value, setting
from lmaudit.utils import atomic_path, stable_hash

Example = tuple[np.ndarray, np.ndarray]  # (input_ids (L,), loss_mask (L,) bool)
Objective = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator], torch.Tensor]


@dataclass
class TrainConfig:
    """How a model is trained; each setting's constraint is declared beside it and checked on construction."""

    epochs: float = setting(1.0, check=positive())
    batch_size: int = setting(32, check=integer(1))
    lr: float = setting(1e-3, check=positive())
    warmup_steps: int = setting(50, check=integer(0))
    weight_decay: float = setting(0.01, check=non_negative())
    grad_clip: float = setting(1.0, check=non_negative(hint="0: no clipping"))  # 0: none (DP clips each example)
    seed: int = setting(0, check=seed_value())
    min_lr_ratio: float = setting(0.1, check=fraction())

    def __post_init__(self) -> None:
        check_settings(self)


MODES = ("dft", "ift")  # fine-tuning on packed text blocks, or on prompt/response pairs


@dataclass
class FinetuneConfig:
    """What a fine-tuning is asked for, checked on construction, before the model loads and the data is tokenised:
    ``lr``, ``block`` and ``batch_size`` left None take the defaults of what is trained (known once it is loaded),
    and then make its :class:`TrainConfig`."""

    mode: str = setting("dft", check=one_of(MODES, noun="fine-tuning mode"))
    epochs: float = setting(4.0, check=positive())
    lr: float | None = setting(None, check=positive(optional=True))
    block: int | None = setting(None, check=integer(1, optional=True))
    batch_size: int | None = setting(None, check=integer(1, optional=True))
    seed: int = setting(0, check=seed_value())
    mask_ratio: float | None = setting(None, check=fraction(above_zero=True, optional=True))  # DLM: a fixed ratio
    steps: int | None = setting(None, check=integer(1, optional=True))  # optimiser steps instead of epochs

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class PretrainConfig:
    """What a pretraining (or an AR model's adaptation into a DLM) is asked for, checked on construction, before the
    corpus is tokenised or a model built: ``block``, ``batch_size`` and ``lr`` left None take the preset's, and
    ``tokens`` None its budget (the preset is named, and checked, by its name)."""

    kind: str = setting("ar", check=one_of(("ar", "dlm"), noun="model kind"))
    tokens: int | None = setting(None, check=integer(1, optional=True))
    seed: int = setting(0, check=seed_value())
    repeats: int = setting(1, check=integer(1))  # times each included text is seen
    block: int | None = setting(None, check=integer(1, optional=True))
    batch_size: int | None = setting(None, check=integer(1, optional=True))
    lr: float | None = setting(None, check=positive(optional=True))

    def __post_init__(self) -> None:
        check_settings(self)


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, *,
                         gather: bool | None = None, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy in float32 of the rows of ``logits`` (..., V) where ``mask`` (...) is True, at ``targets`` (...).

    ``gather`` (default: on the CPU) takes those rows first and returns their mean, or with ``reduction="none"``
    their (n,) values, as lmaudit has always trained on the CPU, bit for bit. Elsewhere a gather of a count the
    device computes would wait for it: every row is scored, those outside ``mask`` ignored; the same mean to float
    rounding, or with ``reduction="none"`` the values in the mask's shape, 0 outside it.
    """
    if gather is None:
        gather = logits.device.type == "cpu"
    if gather:
        return F.cross_entropy(logits[mask].float(), targets[mask], reduction=reduction)
    ignored = targets.masked_fill(~mask, -100)  # cross_entropy's ignore_index
    loss = F.cross_entropy(logits.flatten(0, -2).float(), ignored.flatten(), reduction=reduction)
    return loss if reduction == "mean" else loss.view(mask.shape)


def ar_objective(model, input_ids, attention_mask, loss_mask, generator) -> torch.Tensor:
    """Mean next-token cross-entropy over positions with ``loss_mask`` (position t predicted from < t)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits  # (B, T, V)
    return masked_cross_entropy(logits[:, :-1], input_ids[:, 1:], loss_mask[:, 1:])


def dft_examples(tokenizer, textset: TextSet, *, block: int = 64) -> list[Example]:
    """Pack texts (each followed by EOS) into consecutive blocks of ``block`` tokens.

    Every token is trained. The tail shorter than a block is kept as a shorter block
    so that no member text is left out of training.
    """
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    for ids in tokenizer(textset.texts, add_special_tokens=True)["input_ids"]:
        stream.extend(ids)
        if eos is not None:
            stream.append(eos)
    arr = np.asarray(stream, dtype=np.int64)
    blocks = [arr[i : i + block] for i in range(0, len(arr), block)]
    blocks = [b for b in blocks if len(b) >= 2]
    return [(b, np.ones(len(b), dtype=bool)) for b in blocks]


def ift_examples(tokenizer, textset: TextSet, *, max_length: int) -> list[Example]:
    """One example per prompt/response pair; only response tokens (and EOS) are trained."""
    missing = [r.id for r in textset.records if not r.context]
    if missing:
        raise LmauditError(
            f"{textset.source}: IFT needs 'prompt' and 'response' in every record; '{missing[0]}' has no prompt",
            hint="use {dft} for plain texts", options={"dft": spell("mode", "dft")},
        )
    prompts = tokenizer([r.context for r in textset.records], add_special_tokens=True)["input_ids"]
    responses = tokenizer([r.target for r in textset.records], add_special_tokens=False)["input_ids"]
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    out = []
    for p, r in zip(prompts, responses):
        end = [] if eos and eos[0] in r[-2:] else eos  # a chat template's reply already ends its turn
        ids = np.asarray(list(p) + list(r) + end, dtype=np.int64)[:max_length]
        mask = np.zeros(len(ids), dtype=bool)
        mask[len(p) :] = True
        out.append((ids, mask))
    return out


def collate(batch: Sequence[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad examples into (input_ids, attention_mask, loss_mask) (B, T) tensors."""
    ids, attn, mask = pad_sequences([x for x, _ in batch], pad_id, [m for _, m in batch])
    return torch.from_numpy(ids), torch.from_numpy(attn), torch.from_numpy(mask)


def prepare(model: torch.nn.Module, config: TrainConfig) -> None:
    """What every training run does first: seed torch, and forget the folder the weights came from."""
    # the weights will no longer be those of the folder the model was loaded from: a Ray worker must not reload it
    model.__dict__.pop("lmaudit_load_spec", None)
    torch.manual_seed(config.seed)


def make_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW over the trainable parameters; weight decay on matrices only."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr,
        betas=(0.9, 0.95),
    )


def lr_at(config: TrainConfig, total: int, step: int) -> float:
    """The learning rate at ``step`` of ``total``: linear warm-up, then cosine decay to ``min_lr_ratio``."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    frac = (step - config.warmup_steps) / max(1, total - config.warmup_steps)
    return config.lr * (config.min_lr_ratio + (1 - config.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


CHECKPOINT_EVERY_S = 600.0  # a training inside a cached build saves its state this often (lmaudit.folders)
STATE_FILE = "train_state.pt"
# the losses of this many steps are read back from the device at once (and checked, and shown): the loop never
# waits for the device between two read-backs
READ_EVERY = 25


def _read_losses(pending: list[torch.Tensor], losses: list[float], step: int) -> None:
    """Move the losses of the steps before ``step`` still on the device into ``losses`` (one wait for the device);
    a non-finite one stops the training, naming its step."""
    if not pending:
        return
    values = torch.stack(pending).tolist()
    first = step - len(values)
    pending.clear()
    for k, value in enumerate(values):
        if not math.isfinite(value):
            raise LmauditError(f"training diverged (loss {value}) at step {first + k}", hint="lower the learning rate")
    losses.extend(values)


def _signature(model: torch.nn.Module, examples: list[Example], config: TrainConfig, total: int, objective,
               pad_id: int) -> str:
    """What a saved state must have been saved by: the same settings, steps, examples, objective and trainable
    tensors."""
    digest = hashlib.sha256()
    for ids, mask in examples:
        digest.update(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
        digest.update(np.packbits(np.asarray(mask, dtype=bool)).tobytes())
    shapes = [(n, tuple(p.shape), str(p.dtype)) for n, p in model.named_parameters() if p.requires_grad]
    name = f"{getattr(objective, '__module__', '')}.{getattr(objective, '__qualname__', type(objective).__name__)}"
    return stable_hash((asdict(config), total, len(examples), digest.hexdigest(), shapes, name, pad_id))


def _save_state(folder: Path, signature: str, step: int, model, opt, rng, gen, order, losses, objective) -> None:
    """The training's state after ``step`` steps, written whole (a reader sees the previous state or this one). An
    objective that keeps state of its own (unlearning's retain batches) saves it through its ``save_state``."""
    state = {"signature": signature, "step": step, "losses": list(losses), "order": order.tolist(),
             "params": {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.requires_grad},
             "optimizer": opt.state_dict(), "numpy": rng.bit_generator.state, "generator": gen.get_state(),
             "torch": torch.get_rng_state(),
             "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
             "objective": objective.save_state() if hasattr(objective, "save_state") else None}
    with atomic_path(folder / STATE_FILE) as tmp:
        torch.save(state, tmp)


def _load_state(folder: Path, signature: str) -> dict | None:
    """The saved state of this very training, or None (none saved, another training's, or unreadable: said)."""
    path = folder / STATE_FILE
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        if state["signature"] == signature:
            return state
        info(f"training state {path} was saved by another training; starting from the first step")
    except Exception as exc:  # a damaged state is never resumed from
        warnings.warn(f"training state {path} could not be read ({type(exc).__name__}: {exc}); starting from the "
                      "first step", stacklevel=3)
    return None


def train(
    model: torch.nn.Module,
    examples: list[Example],
    config: TrainConfig,
    *,
    objective: Objective = ar_objective,
    pad_id: int = 0,
    description: str = "training",
) -> list[float]:
    """Train ``model`` in place with AdamW, linear warm-up and cosine decay.

    Returns the loss of every step. Deterministic for a given seed on one device. Inside a cached build
    (:func:`~lmaudit.cache.cached_build`) it saves its state every :data:`CHECKPOINT_EVERY_S` seconds and, started
    again after being stopped, resumes from the last state saved: the same model, step for step, as a run never
    stopped. The losses are read back every :data:`READ_EVERY` steps (a non-finite one stops the training then,
    naming its step), so that on a GPU the steps queue without waiting for each other.
    """
    if not examples:
        raise LmauditError("no training examples", hint="the training data is empty after tokenisation")
    prepare(model, config)
    rng = np.random.default_rng(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    steps_per_epoch = math.ceil(len(examples) / config.batch_size)
    total = max(1, round(config.epochs * steps_per_epoch))
    opt = make_optimizer(model, config)
    device = next(model.parameters()).device
    model.train()
    losses: list[float] = []
    pending: list[torch.Tensor] = []  # losses of the steps since the last read-back, on the device
    order = np.empty(0, dtype=np.int64)
    folder, start = TRAINING_STATE.get(), 0
    signature = None if folder is None else _signature(model, examples, config, total, objective, pad_id)
    state = None if folder is None else _load_state(folder, signature)
    if state is not None:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.requires_grad:
                    p.copy_(state["params"][name])
        opt.load_state_dict(state["optimizer"])
        rng.bit_generator.state = state["numpy"]
        gen.set_state(state["generator"])
        torch.set_rng_state(state["torch"])
        if state["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
        if state["objective"] is not None:
            objective.load_state(state["objective"])
        order, losses, start = np.asarray(state["order"], dtype=np.int64), list(state["losses"]), state["step"]
        info(f"{description}: resumed at step {start:,} of {total:,} from {folder / STATE_FILE}")
    saved = time.monotonic()
    with progress(description, total=total) as bar:
        bar.advance(start)
        for step in range(start, total):
            if len(order) < config.batch_size:
                order = np.concatenate([order, rng.permutation(len(examples))])
            idx, order = order[: config.batch_size], order[config.batch_size :]
            ids, attn, mask = to_device(collate([examples[i] for i in idx], pad_id), device)
            for group in opt.param_groups:
                group["lr"] = lr_at(config, total, step)
            loss = objective(model, ids, attn, mask, gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            opt.step()
            pending.append(loss.detach())
            bar.advance(1)
            if len(pending) == READ_EVERY:
                _read_losses(pending, losses, step + 1)
                bar.update(extra=f"loss {np.mean(losses[-10:]):.3f}")
            if folder is not None and step + 1 < total and time.monotonic() - saved >= CHECKPOINT_EVERY_S:
                _read_losses(pending, losses, step + 1)
                _save_state(folder, signature, step + 1, model, opt, rng, gen, order, losses, objective)
                saved = time.monotonic()
        _read_losses(pending, losses, total)
    if folder is not None:  # done: another training of the same build never reads this one's state
        (folder / STATE_FILE).unlink(missing_ok=True)
    model.eval()
    return losses
