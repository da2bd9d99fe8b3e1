"""Build, cache and save the tiny models of the embedded default.

A model folder holds the ``save_pretrained`` weights (safetensors), the tokenizer
and ``lmaudit_training.json`` (what made it); a LoRA fine-tuning writes an adapter
folder the same way (:mod:`lmaudit.models.lora`). Cached builds are keyed by a hash
of everything that determines the weights, and written to a temporary folder
that is renamed into place, so a killed build is never mistaken for a finished one.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from lmaudit.cache import cached_build
from lmaudit.data.corpus import Corpus, build_corpus
from lmaudit.data.loaders import TextSet
from lmaudit.errors import DataError, LmauditError, SettingError, spell
from lmaudit.folders import output_folder
from lmaudit.models.adapters import KIND_SPELLINGS, adapter_for, context_length, resolve_pad_id
from lmaudit.models.chat import formatted
from lmaudit.models.dlm import build_dlm_model, diffusion_objective, dlm_from_ar
from lmaudit.models.dp import DPSpec, max_examples_per_text, plan_dp, train_dp, trainable
from lmaudit.models.fingerprint import tokenizer_fingerprint
from lmaudit.models.gguf import local_model, quiet_transformers
from lmaudit.models.loading import load_model
from lmaudit.models.lora import LoraSpec, finish_training, full_model, save_weights, start_training
from lmaudit.models.presets import Preset, build_ar_model, get_preset
from lmaudit.models.sources import TRAINING_FILE, detect_kind
from lmaudit.models.tokenizer import train_tokenizer
from lmaudit.models.train import (
    FinetuneConfig,
    PretrainConfig,
    TrainConfig,
    ar_objective,
    dft_examples,
    ift_examples,
    train,
)
from lmaudit.progress import info
from lmaudit.utils import stable_seed


def corpus_tokenizer(corpus: Corpus, *, vocab_size: int = 4096):
    """The BPE tokenizer trained on the corpus' pretraining pool (cached)."""


    def build(tmp: Path) -> None:
        info("training the BPE tokenizer on the pretraining pool")
        train_tokenizer((d.text for d in corpus.pool("pretrain")), vocab_size=vocab_size, out_dir=tmp)

    folder = cached_build("tokenizer", ("tokenizer", corpus.fingerprint, vocab_size), build)
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def save_model(model, tokenizer, out: Path, training: dict) -> None:
    """Weights (of a full model, or of a peft adapter), tokenizer and ``lmaudit_training.json``, written as one
    unit (:mod:`lmaudit.folders`): a folder never holds new weights with an old training record."""
    quiet_transformers()
    with output_folder(out, what="model") as tmp:
        save_weights(model, tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / TRAINING_FILE).write_text(json.dumps(training, indent=2, default=str))


def loss_summary(losses: list[float]) -> dict:
    head, tail = losses[: max(1, len(losses) // 20)], losses[-max(1, len(losses) // 20) :]
    return {"steps": len(losses), "loss_start": float(np.mean(head)), "loss_end": float(np.mean(tail))}


def _build(kind: str, preset: Preset, tokenizer, seed: int):
    if kind == "ar":
        return build_ar_model(preset, tokenizer, seed=seed)
    if kind == "dlm":
        return build_dlm_model(preset, tokenizer, seed=seed)
    raise LmauditError(f"unknown model kind '{kind}'", hint="use {ar} or {dlm}", options=KIND_SPELLINGS)


def objective_for(kind: str, tokenizer, *, mask_ratio: float | None = None):
    """The training objective of a model kind (next-token CE, or masked diffusion)."""
    if kind == "ar":
        if mask_ratio is not None:
            raise LmauditError("{mask_ratio} applies to DLM training only", options=("mask_ratio",))
        return ar_objective

    return diffusion_objective(lambda model: adapter_for(model, tokenizer), mask_ratio=mask_ratio)


def pretrain(
    corpus: Corpus,
    tokenizer,
    out: Path,
    *,
    kind: str = "ar",
    preset: str | Preset = "tiny",
    tokens: int | None = None,
    seed: int = 0,
    init_from: str | Path | None = None,
    include: TextSet | None = None,
    repeats: int = 1,
    block: int | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
) -> Path:
    """Pretrain a model of ``preset`` size on the corpus' pretraining pool; save to ``out``.

    ``kind="ar"``: a causal Llama-style LM. ``kind="dlm"``: a masked diffusion LM
    trained with the masked-diffusion objective — from scratch (a bidirectional
    encoder, LLaDA-style aligned logits), or, with ``init_from`` an AR model folder,
    adapted from that model as Dream is from Qwen (full attention, shifted logits).

    ``include``: texts put into the pretraining stream, each seen exactly ``repeats``
    times (the stream then holds ``tokens`` tokens in all, pool blocks drawn at random
    without repetition for the rest, one pass): pretraining-data detection's members.

    An AR folder ``init_from`` brings its own tokenizer (the corpus is tokenised with it; one without a mask token
    gets one, :func:`~lmaudit.models.dlm.dlm_from_ar`); ``block``, ``batch_size`` and ``lr`` replace the preset's
    (a 135M-parameter model wants a smaller learning rate than the tiny preset's). A folder that is already a
    diffusion LM, or a budget under one block, is refused.
    """
    PretrainConfig(kind=kind, tokens=tokens, seed=seed, repeats=repeats, block=block, batch_size=batch_size, lr=lr)
    p = get_preset(preset) if isinstance(preset, str) else preset
    p = replace(p, block=block or p.block, batch=batch_size or p.batch, lr=lr or p.lr)
    tokens = tokens or p.pretrain_tokens
    if tokens < p.block:
        raise SettingError("tokens", f"a budget of {tokens} tokens ({{name}}) is less than one training block: the "
                           f"minimum is {p.block} tokens", hint="raise it, or lower the block length")
    model = None
    if init_from is not None:
        if kind != "dlm":
            raise LmauditError("{init_from} adapts an AR model into a DLM", hint="use it with {dlm}",
                               options={"init_from": spell("init_from"), "dlm": spell("kind", "dlm")})
        init_from = local_model(init_from)  # a named model (smollm2-135m) or a GGUF file: its imported folder
        if detect_kind(init_from) == "dlm":
            raise LmauditError(f"'{init_from}' is already a diffusion LM: {{init_from}} adapts an AR model",
                               hint="fine-tune it instead, or name its AR base",
                               options={"init_from": spell("init_from")})
        source = load_model(init_from, kind="ar")
        if tokenizer_fingerprint(source.tokenizer) != tokenizer_fingerprint(tokenizer):
            tokenizer = source.tokenizer  # the model's own vocabulary; the corpus is tokenised with it
        model = dlm_from_ar(full_model(source.model), tokenizer)
        model.train()
    docs = TextSet.from_texts([d.text for d in corpus.pool("pretrain")], source="corpus:pretrain")
    examples = dft_examples(tokenizer, docs, block=p.block)
    n_blocks = max(1, tokens // p.block)
    epochs = n_blocks / len(examples)
    if include is not None:
        inserted = dft_examples(tokenizer, include, block=p.block) * repeats
        rest = max(0, min(len(examples), n_blocks - len(inserted)))
        keep = np.random.default_rng(stable_seed("pretrain-stream", seed)).choice(len(examples), rest, replace=False)
        examples = [examples[i] for i in np.sort(keep)] + inserted  # the training loop shuffles them
        n_blocks, epochs = len(examples), 1.0
    if model is None:
        model = _build(kind, p, tokenizer, seed)
    steps = max(1, round(epochs * len(examples) / p.batch))
    cfg = TrainConfig(epochs=epochs, batch_size=p.batch, lr=p.lr, warmup_steps=max(1, min(100, steps // 10)), seed=seed)
    losses = train(model, examples, cfg, objective=objective_for(kind, tokenizer), pad_id=resolve_pad_id(tokenizer),
                   description=f"adapt {Path(init_from).name} into a DLM" if init_from is not None
                   else f"pretrain {kind}/{p.name}")
    save_model(model, tokenizer, Path(out), {
        "stage": "pretrain", "kind": kind, "preset": p.name, "init_from": None if init_from is None else str(init_from),
        "tokens": n_blocks * p.block, "block": p.block,
        "corpus": corpus.fingerprint, "train_config": cfg.__dict__, **loss_summary(losses),
        **({"included": {"data": include.source, "fingerprint": include.fingerprint(), "n_texts": len(include),
                         "repeats": repeats}} if include is not None else {}),
    })
    return Path(out)


# the quick demo's diffusion LM: the embedded masked model (neighbourhood attack) unless a folder is named
EMBEDDED_DLM = {"preset": "tiny", "ar_tokens": 300_000, "dlm_tokens": 100_000, "seed": 0}


def embedded_models() -> tuple[Path, Path]:
    """(the embedded AR model, the embedded diffusion LM adapted from it): the quick demo's bases, trained on first
    use and cached."""
    corpus = build_corpus()
    tokenizer = corpus_tokenizer(corpus)
    cfg = EMBEDDED_DLM
    base = cached_pretrain(corpus, tokenizer, kind="ar", preset=cfg["preset"], tokens=cfg["ar_tokens"],
                           seed=cfg["seed"])
    return base, cached_pretrain(corpus, tokenizer, kind="dlm", preset=cfg["preset"], tokens=cfg["dlm_tokens"],
                                 seed=cfg["seed"], init_from=base)


def embedded_dlm() -> Path:
    """The folder of the embedded diffusion LM (the quick demo's base DLM), trained on first use and cached."""
    return embedded_models()[1]


def masked_model(path: str = ""):
    """The masked model that makes neighbours: the folder named, which must load as a diffusion LM, or the embedded
    one (trained on first use and cached)."""
    handle = load_model(path or embedded_dlm())
    if handle.kind != "dlm":
        raise DataError(f"neighbourhood: '{path}' loads as an {handle.kind.upper()} model; its neighbours need a "
                        "masked model",
                        hint="name a diffusion LM folder (--param neighbourhood.model=DIR), or leave it out "
                             "for the embedded one")
    return handle


def pretrain_key(corpus: Corpus, tokenizer, *, kind: str, preset: str, tokens: int, seed: int,
                 init_from: str | Path | None = None, include: TextSet | None = None, repeats: int = 1,
                 block: int | None = None, batch_size: int | None = None, lr: float | None = None) -> tuple:
    """The model cache's key of a :func:`pretrain`: everything that determines its weights."""
    key = ("pretrain", kind, preset, corpus.fingerprint, len(tokenizer), tokens, seed)
    if init_from is not None:
        key += ("init_from", str(init_from))
    if include is not None:
        key += ("include", include.fingerprint(), repeats)
    if (block, batch_size, lr) != (None, None, None):  # the preset's when not given: earlier keys unchanged
        key += ("training", block, batch_size, lr)
    return key


def cached_pretrain(corpus: Corpus, tokenizer, *, kind: str = "ar", preset: str = "tiny", tokens: int,
                    seed: int = 0, init_from: Path | None = None, include: TextSet | None = None,
                    repeats: int = 1, block: int | None = None, batch_size: int | None = None,
                    lr: float | None = None) -> Path:
    """:func:`pretrain` through the model cache: the same arguments reuse the same folder."""
    key = pretrain_key(corpus, tokenizer, kind=kind, preset=preset, tokens=tokens, seed=seed, init_from=init_from,
                       include=include, repeats=repeats, block=block, batch_size=batch_size, lr=lr)
    return cached_build("models", key, lambda tmp: pretrain(corpus, tokenizer, tmp, kind=kind, preset=preset,
                                                             tokens=tokens, seed=seed, init_from=init_from,
                                                             include=include, repeats=repeats, block=block,
                                                             batch_size=batch_size, lr=lr))


def finetune(
    base: str | Path,
    data: TextSet,
    out: Path,
    *,
    mode: str = "dft",
    epochs: float = 4,
    lr: float | None = None,
    block: int | None = None,
    batch_size: int | None = None,
    seed: int = 0,
    kind: str | None = None,
    mask_ratio: float | None = None,
    load_options: dict | None = None,
    record: dict | None = None,
    lora: LoraSpec | None = None,
    dp: DPSpec | None = None,
    chat_template: bool | None = None,
    steps: int | None = None,
) -> Path:
    """Fine-tune the model at ``base`` on ``data`` (DFT: packed blocks; IFT: pairs); save to ``out``.

    The objective follows the model's kind (detected from its config unless
    ``kind`` is given). ``mask_ratio`` fixes a DLM's mask ratio instead of t ~ U(eps, 1).
    ``load_options`` go to :func:`~lmaudit.models.loading.load_model` (remote code, pickle, mask token, logits).
    ``record`` adds keys to the folder's ``lmaudit_training.json``. ``lora`` trains a LoRA
    adapter instead of every weight, and ``out`` is an adapter folder whose base is ``base``
    (or, with ``lora.merge``, the merged full model) (:mod:`lmaudit.models.lora`). ``dp`` trains with
    DP-SGD (Poisson batches of expected size ``batch_size``, per-example clipping, Gaussian noise) and records
    the privacy spent under ``dp`` in ``lmaudit_training.json`` (:mod:`lmaudit.models.dp`).
    ``lr``, ``block`` and ``batch_size`` left None take the defaults of what is trained
    (:func:`training_defaults`: a tiny preset, or a pretrained model fully or with LoRA); the
    record names which. A training loss that ends far above where it started is a warning.
    IFT pairs are rendered in the tokenizer's chat template when it has one (``chat_template``
    None), or as ``chat_template`` says (:mod:`lmaudit.models.chat`); the record says which.
    ``steps`` (instead of ``epochs``) trains exactly that many optimiser steps, however many examples the data makes.
    The record's ``seconds`` is the wall-clock time from loading ``base`` to the weights trained (what the model
    cost, which a later read from the model cache does not).
    """
    started = time.perf_counter()

    FinetuneConfig(mode=mode, epochs=epochs, lr=lr, block=block, batch_size=batch_size, seed=seed,
                   mask_ratio=mask_ratio, steps=steps)  # every setting checked before the model loads
    base = local_model(base)  # a GGUF file or named model: its imported folder, which the adapter then names
    loaded = load_model(base, kind=kind, **(load_options or {}))
    regime, chosen = training_defaults(loaded.model, lora)
    given = {"lr": lr, "block": block, "batch_size": batch_size}
    lr, block, batch_size = (chosen[k] if v is None else v for k, v in given.items())
    defaults_record = {"defaults": regime, "defaults_used": sorted(k for k, v in given.items() if v is None)}
    model, peft_model = start_training(loaded.model, lora, seed=seed)
    tok = loaded.tokenizer
    ctx = context_length(model, tok)
    chat = False
    if mode == "ift":
        data, chat = formatted(data, tok, chat_template)
    examples = dft_examples(tok, data, block=block) if mode == "dft" else ift_examples(tok, data, max_length=ctx)
    if steps is not None:  # train() runs round(epochs · ⌈examples / batch⌉) steps
        epochs = steps / max(1, math.ceil(len(examples) / batch_size))
    warmup = max(1, min(20, len(examples) // batch_size))
    # DP clips each example's gradient instead of the batch's (grad_clip 0: the record says what was done)
    cfg = TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, warmup_steps=warmup, seed=seed,
                      grad_clip=0.0 if dp else TrainConfig.grad_clip)
    objective = objective_for(loaded.kind, tok, mask_ratio=mask_ratio)
    description = f"fine-tune {loaded.kind} ({mode}{', LoRA' if lora else ''}{', DP' if dp else ''})"
    dp_record = {}
    if dp is None:
        losses = train(model, examples, cfg, objective=objective, pad_id=loaded.adapter.pad_id, description=description)
    else:
        examples = trainable(examples)
        plan = plan_dp(dp, n_examples=len(examples), batch_size=batch_size, epochs=epochs)
        losses = train_dp(model, examples, cfg, plan, objective=objective, pad_id=loaded.adapter.pad_id,
                          description=description)
        per_text = 1 if mode == "ift" else max_examples_per_text(tok, data, block)
        dp_record = {"dp": plan.record(privacy_unit="ift pair" if mode == "ift" else f"dft block of {block} tokens",
                                       max_examples_per_text=per_text)}
    warn_if_diverged(losses, lr)
    weights, lora_record = finish_training(model, peft_model, lora, base, loaded.fingerprint)
    save_model(weights, tok, Path(out), {
        "stage": "finetune", "kind": loaded.kind, "mode": mode, "mask_ratio": mask_ratio, "base": str(base),
        "base_fingerprint": loaded.fingerprint,
        "data": data.source, "data_fingerprint": data.fingerprint(), "n_examples": len(examples),
        "block": block if mode == "dft" else None, "chat_template": chat, "train_config": cfg.__dict__,
        **loss_summary(losses), "seconds": round(time.perf_counter() - started, 3),
        **lora_record, **dp_record, **defaults_record, **(record or {}),
    })
    return Path(out)


# fine-tuning defaults: what suits lmaudit's tiny presets would wreck a pretrained model
TRAINING_DEFAULTS = {
    "tiny preset": {"lr": 1e-3, "block": 64, "batch_size": 16},
    "pretrained, every weight": {"lr": 3e-5, "block": 128, "batch_size": 8},
    "pretrained, LoRA": {"lr": 5e-4, "block": 128, "batch_size": 8},
}


def training_defaults(model, lora: LoraSpec | None) -> tuple[str, dict]:
    """(regime, {lr, block, batch_size}) for fine-tuning ``model``: a model built from an lmaudit preset (its config
    says ``lmaudit_preset``) keeps the tiny presets' settings; any other model is taken as pretrained, with rates
    for full fine-tuning (3e-5) or LoRA (5e-4) in the ranges pretrained models are tuned at."""
    if getattr(model.config, "lmaudit_preset", None):
        regime = "tiny preset"
    else:
        regime = "pretrained, LoRA" if lora is not None else "pretrained, every weight"
    return regime, dict(TRAINING_DEFAULTS[regime])


DIVERGED = 1.5  # the last 5% of steps' mean loss over the first 5%'s


def warn_if_diverged(losses: list[float], lr: float) -> bool:
    """Warn when training ended with a loss far above where it began (or not finite): the rate is too high."""
    summary = loss_summary(losses)
    start, end = summary["loss_start"], summary["loss_end"]
    if np.isfinite(end) and end <= DIVERGED * start:
        return False
    warnings.warn(f"fine-tuning diverged: the training loss went from {start:.3f} to {end:.3f} (learning rate "
                  f"{lr:g}); the model is likely damaged, so lower --lr and train again", stacklevel=2)
    return True
