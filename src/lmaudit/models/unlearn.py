"""Unlearning: make a fine-tuned AR or DLM model forget a set of texts.

Four methods, all trained with the loop of :mod:`lmaudit.models.train`:

- ``retrain`` (the gold standard): fine-tune the *base* model on the retain set only.
- ``gradient_ascent``: from the fine-tuned model, minimise −L_forget + w · L_retain.
- ``npo`` (Negative Preference Optimization, Zhang et al. 2024): minimise
  (2/β) · mean softplus(β · (log π_θ(y) − log π_ref(y))) + w · L_retain, with π_ref
  the frozen starting model.
- ``finetune``: continue fine-tuning the fine-tuned model on the retain set only.

L_forget and L_retain are the model kind's training objective (next-token CE, or the
masked-diffusion loss). One step pairs a forget batch with a retain batch drawn by
cycling through the retain set in a seeded order (no retain batch when w = 0); the
number of steps is ``epochs`` passes over the forget set.

NPO needs a per-sequence log-likelihood. It is *summed* (not averaged) over the
trained tokens, so that it is log π(y) of the example (a packed block for DFT, the
response for IFT). For a DLM it is the masked-diffusion ELBO estimate
−Σ_masked CE / t, with one noise draw (t and mask) shared by the current and the
reference model in a step, so that their difference has low variance.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError, SettingError
from lmaudit.models.adapters import DLMAdapter, adapter_for, context_length
from lmaudit.models.batching import to_device
from lmaudit.models.build import finetune, loss_summary, objective_for, save_model
from lmaudit.models.loading import load_model
from lmaudit.models.lora import LoraSpec, finish_training, folder_fingerprint, start_training
from lmaudit.models.sources import check_model_dir
from lmaudit.models.train import MODES, Example, Objective, TrainConfig, collate, dft_examples, ift_examples, train
from lmaudit.settings import check_settings, integer, non_negative, one_of, positive, refusing, seed_value, setting

METHODS = ("retrain", "gradient_ascent", "npo", "finetune")
Noise = tuple[torch.Tensor, torch.Tensor]  # (t (B, 1), masked (B, T) bool) of one diffusion draw


#: One masked-diffusion draw, as in :func:`~lmaudit.models.dlm.diffusion_objective`: t ~ U(eps, 1) per sequence.
draw_noise = DLMAdapter.draw_noise


def sequence_logprob(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, loss_mask: torch.Tensor, *,
                     kind: str, tokenizer=None, noise: Noise | None = None) -> torch.Tensor:
    """Per-sequence log-likelihood, summed over trained tokens: (B, T) → (B,).

    AR: Σ log p(x_t | x_<t) over positions t ≥ 1 with ``loss_mask``. DLM: the ELBO
    estimate −Σ_masked CE / t of the given ``noise`` draw (:func:`draw_noise`).
    """
    if kind == "ar":
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits  # (B, T, V)
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
        token = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
        return (token * loss_mask[:, 1:]).sum(dim=1)  # (B,)
    if noise is None:
        raise LmauditError("a DLM's sequence log-likelihood needs a noise draw", hint="pass noise=draw_noise(...)")
    adapter = adapter_for(model, tokenizer)
    t, masked = noise
    logits = adapter(adapter.insert_masks(input_ids, masked), attention_mask).float()  # (B, T, V)
    nll = F.cross_entropy(logits.transpose(1, 2), input_ids, reduction="none")  # (B, T)
    return -(nll * masked / t).sum(dim=1)  # (B,)


def npo_objective(reference: torch.nn.Module, kind: str, tokenizer=None, *, beta: float = 0.1) -> Objective:
    """The NPO forget term (2/β) · mean softplus(β · (log π_θ − log π_ref)), as a train-loop objective.

    Equals (2/β) · log 2 while the model equals ``reference`` (frozen, no gradient).
    """
    def objective(model, input_ids, attention_mask, loss_mask, generator) -> torch.Tensor:
        noise = draw_noise(input_ids, loss_mask, generator) if kind == "dlm" else None
        args = (input_ids, attention_mask, loss_mask)
        logp = sequence_logprob(model, *args, kind=kind, tokenizer=tokenizer, noise=noise)  # (B,)
        with torch.no_grad():
            ref = sequence_logprob(reference, *args, kind=kind, tokenizer=tokenizer, noise=noise)  # (B,)
        return F.softplus(beta * (logp - ref)).mean() * 2 / beta

    return objective


def _floats(values: list) -> list[float]:
    """Logged losses as floats, those still on the device read back at once (one wait for it, not one a step)."""
    on_device = [v for v in values if isinstance(v, torch.Tensor)]
    read = iter(torch.stack(on_device).tolist() if on_device else [])
    return [next(read) if isinstance(v, torch.Tensor) else v for v in values]


def _paired_objective(forget_term: Objective, sign: float, retain_loss: Objective, retain: list[Example], *,
                      weight: float, batch_size: int, pad_id: int, seed: int, log: dict[str, list]) -> Objective:
    """sign · forget_term(forget batch) + weight · retain_loss(next retain batch); logs both parts (kept on the
    device: :func:`_floats` reads them)."""
    rng = np.random.default_rng(seed + 1)
    state = {"order": np.empty(0, dtype=np.int64)}

    def objective(model, input_ids, attention_mask, loss_mask, generator) -> torch.Tensor:
        forget = forget_term(model, input_ids, attention_mask, loss_mask, generator)
        log["forget"].append(forget.detach())  # L_forget for gradient ascent, the NPO term for NPO
        if weight == 0:
            return sign * forget
        while len(state["order"]) < batch_size:  # cycle the retain set, reshuffled each pass
            state["order"] = np.concatenate([state["order"], rng.permutation(len(retain))])
        idx, state["order"] = state["order"][:batch_size], state["order"][batch_size:]
        batch = to_device(collate([retain[i] for i in idx], pad_id), input_ids.device)
        kept = retain_loss(model, *batch, generator)
        log["retain"].append(kept.detach())
        return sign * forget + weight * kept

    def save_state() -> dict:  # what a resumed training needs of this objective (lmaudit.models.train)
        return {"numpy": rng.bit_generator.state, "order": state["order"].tolist(),
                "log": {name: _floats(values) for name, values in log.items()}}

    def load_state(saved: dict) -> None:
        rng.bit_generator.state = saved["numpy"]
        state["order"] = np.asarray(saved["order"], dtype=np.int64)
        for name, values in saved["log"].items():
            log[name][:] = values

    objective.save_state, objective.load_state = save_state, load_state
    return objective


def _examples(tokenizer, data: TextSet, mode: str, block: int, model) -> list[Example]:
    if mode == "dft":
        return dft_examples(tokenizer, data, block=block)
    return ift_examples(tokenizer, data, max_length=context_length(model, tokenizer))


def mean_loss(loaded, textset: TextSet, *, mode: str = "dft", block: int = 64, batch_size: int = 16,
              seed: int = 0) -> float:
    """Mean training loss of a loaded model on ``textset`` (no gradient), weighted by trained tokens.

    The loss is the kind's objective (next-token CE, or the masked-diffusion loss
    with noise from a generator seeded by ``seed``, so that two models of the same
    tokenizer see the same masks). Use it for "forget loss before/after".
    """
    model, tok = loaded.model, loaded.tokenizer
    examples = _examples(tok, textset, mode, block, model)
    objective = objective_for(loaded.kind, tok)
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    total, weight = torch.zeros((), dtype=torch.float64, device=device), 0.0  # summed on the device: one read back
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            batch = collate(examples[i : i + batch_size], loaded.adapter.pad_id)
            n = float(batch[2].sum())  # trained tokens, counted before the batch leaves the CPU
            total += objective(model, *to_device(batch, device), gen).double() * n
            weight += n
    model.train(was_training)
    return total.item() / max(weight, 1.0)


def _method(value, name: str, flag: str | None) -> None:
    """One of :data:`METHODS`; the hint names a close one."""
    if value in METHODS and isinstance(value, str):
        return
    close = difflib.get_close_matches(value, METHODS, n=1) if isinstance(value, str) else []
    hint = (f"did you mean '{close[0]}'? " if close else "") + "valid methods: " + ", ".join(METHODS)
    shown = repr(value).replace("{", "{{").replace("}", "}}")
    raise SettingError(name, f"unknown unlearning method {shown}", flag=flag, hint=hint)


refusing(_method, "forget", 3, None)


@dataclass
class UnlearnConfig:
    """The settings of an unlearning (:func:`unlearn`), each checked on construction, before any model loads."""

    method: str = setting(check=_method)
    epochs: float = setting(2.0, check=positive())
    lr: float = setting(1e-4, check=positive())
    batch_size: int = setting(16, check=integer(1))
    block: int = setting(64, check=integer(2))
    mode: str = setting("dft", check=one_of(MODES, noun="fine-tuning mode"))
    retain_weight: float = setting(1.0, check=non_negative(hint="0 disables the retain term"))
    npo_beta: float = setting(0.1, check=positive())
    seed: int = setting(0, check=seed_value())

    def __post_init__(self) -> None:
        check_settings(self)


def _check_inputs(method: str, forget: TextSet, retain: TextSet, base_dir, retain_weight: float) -> None:
    """What the method needs of its inputs: a base to retrain, texts to forget, texts to retain."""
    if method == "retrain" and base_dir is None:
        raise LmauditError("method 'retrain' fine-tunes the base model on the retain set and needs base_dir",
                           hint="pass the model the fine-tuned model started from")
    if method in ("gradient_ascent", "npo") and len(forget) == 0:
        raise LmauditError(f"the forget set ({forget.source}) is empty", hint=f"'{method}' needs texts to forget")
    if (method in ("retrain", "finetune") or retain_weight > 0) and len(retain) == 0:
        hint = "pass retain_weight=0 to unlearn without a retain term" if method in ("gradient_ascent", "npo") else None
        raise LmauditError(f"the retain set ({retain.source}) is empty", hint=hint)


def unlearn(model_dir: str | Path, forget: TextSet, retain: TextSet, out: str | Path, *, method: str,
            base_dir: str | Path | None = None, epochs: float = 2,
            lr: float = 1e-4, batch_size: int = 16, block: int = 64, mode: str = "dft", retain_weight: float = 1.0,
            npo_beta: float = 0.1, seed: int = 0, kind: str | None = None, load_options: dict | None = None,
            lora: LoraSpec | None = None) -> Path:
    """Unlearn ``forget`` from the model at ``model_dir`` and save the result to ``out``.

    Parameters
    ----------
    model_dir
        The fine-tuned model (AR or DLM) to unlearn from; the objective follows its kind.
    forget, retain
        Texts to forget, and texts whose knowledge should be kept.
    out
        Output folder (weights, tokenizer and ``lmaudit_training.json``).
    method
        One of :data:`METHODS` (see the module docstring).
    base_dir
        The model ``model_dir`` was fine-tuned from; required by ``retrain``.
    epochs, lr, batch_size, block, mode
        Training settings; ``epochs`` counts passes over the forget set for
        ``gradient_ascent``/``npo`` and over the retain set otherwise.
    retain_weight
        Weight w of the retain loss for ``gradient_ascent``/``npo`` (0 disables it).
    npo_beta
        β of NPO.
    seed
        Seeds batching and diffusion noise; the same seed gives the same weights.
    kind
        ``"ar"`` or ``"dlm"``; detected from the model's config when None.
    load_options
        Keyword arguments of :func:`~lmaudit.models.loading.load_model` (remote code, pickle, mask token, logits).
    lora
        Train a LoRA adapter instead of every weight: ``out`` is then an adapter folder whose
        base is the model training started from (``model_dir``, or ``base_dir`` for ``retrain``);
        with ``lora.merge`` the merged full model (:mod:`lmaudit.models.lora`).

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    LmauditError
        A :class:`~lmaudit.errors.SettingError` naming the setting for a value outside :class:`UnlearnConfig`'s
        declared constraints (an unknown method or mode, non-positive ``lr``/``epochs``/``npo_beta``); an
        empty forget or retain set that the method needs, or ``retrain`` without ``base_dir``.
    """
    UnlearnConfig(method=method, epochs=epochs, lr=lr, batch_size=batch_size, block=block, mode=mode,
                  retain_weight=retain_weight, npo_beta=npo_beta, seed=seed)  # every setting, before any model loads
    _check_inputs(method, forget, retain, base_dir, retain_weight)
    check_model_dir(model_dir)
    out = Path(out)
    record = {
        "stage": "unlearn", "method": method, "source": str(model_dir),
        "source_fingerprint": folder_fingerprint(model_dir, (load_options or {}).get("adapter_base")),
        "forget": forget.source, "forget_fingerprint": forget.fingerprint(), "n_forget": len(forget),
        "retain": retain.source, "retain_fingerprint": retain.fingerprint(), "n_retain": len(retain),
        "hyperparameters": {"epochs": epochs, "lr": lr, "batch_size": batch_size, "block": block, "mode": mode,
                            "retain_weight": retain_weight, "npo_beta": npo_beta, "seed": seed},
    }
    if method in ("retrain", "finetune"):
        start = base_dir if method == "retrain" else model_dir
        return finetune(start, retain, out, mode=mode, epochs=epochs, lr=lr, block=block, batch_size=batch_size,
                        seed=seed, kind=kind, load_options=load_options, record={**record, "started_from": str(start)},
                        lora=lora)

    loaded = load_model(model_dir, kind=kind, **(load_options or {}))
    model, peft_model = start_training(loaded.model, lora, seed=seed)
    tok = loaded.tokenizer
    pad_id = loaded.adapter.pad_id
    forget_examples = _examples(tok, forget, mode, block, model)
    retain_examples = _examples(tok, retain, mode, block, model) if retain_weight > 0 else []
    base_loss = objective_for(loaded.kind, tok)
    if method == "npo":
        reference = copy.deepcopy(model).eval().requires_grad_(False)
        forget_term, sign = npo_objective(reference, loaded.kind, tok, beta=npo_beta), 1.0
    else:
        forget_term, sign = base_loss, -1.0
    log: dict[str, list] = {"forget": [], "retain": []}
    objective = _paired_objective(forget_term, sign, base_loss, retain_examples, weight=retain_weight,
                                  batch_size=batch_size, pad_id=pad_id, seed=seed, log=log)
    warmup = max(1, min(20, len(forget_examples) // batch_size))
    cfg = TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, warmup_steps=warmup, seed=seed)
    losses = train(model, forget_examples, cfg, objective=objective, pad_id=pad_id,
                   description=f"unlearn {loaded.kind} ({method}{', LoRA' if lora else ''})")
    parts = {f"{name}_{key}": value for name, values in log.items() if values
             for key, value in loss_summary(_floats(values)).items() if key != "steps"}
    weights, lora_record = finish_training(model, peft_model, lora, model_dir, loaded.fingerprint)
    save_model(weights, tok, out, {**record, "kind": loaded.kind, "started_from": str(model_dir),
                                   "n_examples": len(forget_examples), "train_config": cfg.__dict__,
                                   **loss_summary(losses), **parts, **lora_record})
    return out
