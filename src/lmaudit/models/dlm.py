"""Masked diffusion language models (DLMs): adapter, tiny model, training objective.

The adapter hides the two public logit conventions and the attention pattern:

- **LLaDA-style** (``shift_logits=False``): the logits at position i predict token i.
- **Dream-style** (``shift_logits=True``): the network's output at position i−1
  predicts token i; the adapter realigns them so that row i always predicts token i
  (row 0 reuses the output at 0, as Dream's own code does; lmaudit's tokenizer puts
  an unscored ``<bos>`` there).
- A causal-architecture checkpoint made bidirectional (``bidirectional=True``, as
  Dream is a Qwen2 network with full attention): the adapter passes a full 4-D
  attention mask that only hides padding, so every token sees both sides.

The objective is the masked-diffusion ELBO: per sequence t ~ U(eps, 1), every
trainable token is replaced by the mask token with probability t, and the
cross-entropy on masked tokens is weighted by 1/t and normalised by the number of
trainable tokens. With ``mask_ratio`` set, t is that fixed value instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lmaudit.errors import LmauditError


@dataclass
class DLMAdapter:
    """A bidirectional masked-LM with its mask token and logit convention."""

    model: torch.nn.Module
    mask_token_id: int
    shift_logits: bool = False
    bidirectional: bool = False
    fuse: bool = True  # let probes apply a plain output layer in chunks (same statistics, less memory traffic)

    def __post_init__(self) -> None:
        vocab = self.model.get_output_embeddings().weight.shape[0] if self.model.get_output_embeddings() is not None else None
        if self.mask_token_id is None or self.mask_token_id < 0 or (vocab is not None and self.mask_token_id >= vocab):
            raise LmauditError(
                f"mask token id {self.mask_token_id} is not in the model's vocabulary ({vocab})",
                hint="pass --mask-token-id with the id of the [MASK] token",
            )

    @property
    def config(self):
        return self.model.config

    def parameters(self):
        return self.model.parameters()

    def fused_head(self):
        """(base, output layer) when the logits are a plain linear head (see ``probes.ar.fused_head``), else None."""
        from lmaudit.probes.ar import fused_head

        return fused_head(self.model) if self.fuse else None

    def hidden(self, base, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states aligned like :meth:`__call__`'s logits, for a fused output layer."""
        return _adapter_hidden(self, base, input_ids, attention_mask)

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits aligned with positions: row i predicts token i. (B, T) → (B, T, V)."""
        if self.bidirectional:
            attention_mask = full_attention_mask(input_ids, attention_mask, self.model.dtype)
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        else:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, T, V)
        if self.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        return logits


def _adapter_hidden(adapter: "DLMAdapter", base, input_ids, attention_mask):
    """Last hidden states realigned like the logits (row i → token i). (B, T) → (B, T, d)."""
    if adapter.bidirectional:
        attention_mask = full_attention_mask(input_ids, attention_mask, adapter.model.dtype)
    hidden = base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    if adapter.shift_logits:
        hidden = torch.cat([hidden[:, :1], hidden[:, :-1]], dim=1)
    return hidden


def full_attention_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, dtype) -> torch.Tensor:
    """Additive (B, 1, T, T) mask letting every query see every non-padding key."""
    B, T = input_ids.shape
    keep = torch.ones(B, T, dtype=torch.bool, device=input_ids.device) if attention_mask is None else attention_mask.bool()
    mask = torch.zeros(B, 1, T, T, dtype=dtype, device=input_ids.device)
    return mask.masked_fill(~keep[:, None, None, :], torch.finfo(dtype).min)


def mark_as_dlm(model, tokenizer, *, shift_logits: bool, bidirectional: bool) -> None:
    """Record in the model's config that it is a DLM and how to run it."""
    cfg = model.config
    cfg.lmaudit_kind = "dlm"
    cfg.mask_token_id = tokenizer.mask_token_id
    cfg.lmaudit_shift_logits = shift_logits
    cfg.lmaudit_bidirectional = bidirectional


def dlm_from_ar(ar_model, tokenizer):
    """Turn a causal LM into a Dream-style DLM in place: full attention, shifted logits.

    The weights are kept, so the AR model's next-token head still predicts token i
    from position i−1; diffusion training then adapts it to masked inputs.
    """
    mark_as_dlm(ar_model, tokenizer, shift_logits=True, bidirectional=True)
    ar_model.config.lmaudit_init = "ar"
    return ar_model


def build_dlm_model(preset, tokenizer, *, seed: int = 0, shift_logits: bool = False, arch: str = "bert"):
    """A randomly initialised DLM of the preset's size.

    ``arch="bert"``: a bidirectional encoder masked-LM (``BertForMaskedLM``);
    ``arch="llama"``: a Llama network run with full attention by the adapter.
    """
    if arch == "llama":
        from lmaudit.models.presets import build_ar_model

        model = build_ar_model(preset, tokenizer, seed=seed)
        mark_as_dlm(model, tokenizer, shift_logits=shift_logits, bidirectional=True)
        return model
    from transformers import BertConfig, BertForMaskedLM

    from lmaudit.models.presets import get_preset

    p = get_preset(preset) if isinstance(preset, str) else preset
    cfg = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=p.hidden,
        num_hidden_layers=p.layers,
        num_attention_heads=p.heads,
        intermediate_size=p.intermediate,
        max_position_embeddings=p.context,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=tokenizer.pad_token_id,
        type_vocab_size=1,
        tie_word_embeddings=True,
    )
    cfg.lmaudit_preset = p.name
    torch.manual_seed(seed)
    model = BertForMaskedLM(cfg)
    mark_as_dlm(model, tokenizer, shift_logits=shift_logits, bidirectional=False)
    model.eval()
    return model


def adapter_for(model, tokenizer=None, *, mask_token_id: int | None = None, shift_logits: bool | None = None) -> DLMAdapter:
    """Detect the mask token and convention from the config/tokenizer; explicit values win."""
    cfg = model.config
    if mask_token_id is None:
        mask_token_id = getattr(cfg, "mask_token_id", None)
    if mask_token_id is None and tokenizer is not None:
        mask_token_id = tokenizer.mask_token_id
    if mask_token_id is None:
        raise LmauditError("the model defines no mask token", hint="pass --mask-token-id")
    if shift_logits is None:
        shift_logits = bool(getattr(cfg, "lmaudit_shift_logits", (getattr(cfg, "model_type", "") or "").lower() == "dream"))
    return DLMAdapter(model, int(mask_token_id), shift_logits, bool(getattr(cfg, "lmaudit_bidirectional", False)))


def diffusion_objective(adapter_factory, *, eps: float = 1e-3, mask_ratio: float | None = None):
    """The masked-diffusion training objective, for :func:`lmaudit.models.train.train`.

    ``adapter_factory(model) -> DLMAdapter``. Only positions with ``loss_mask`` (the
    response of an IFT pair, or every real token for DFT) can be masked and trained;
    prompts and padding are never masked.
    """
    if mask_ratio is not None and not 0.0 < mask_ratio <= 1.0:
        raise LmauditError(f"--mask-ratio must be in (0, 1], got {mask_ratio}")

    def objective(model, input_ids, attention_mask, loss_mask, generator) -> torch.Tensor:
        adapter = adapter_factory(model)
        B, T = input_ids.shape
        if mask_ratio is None:
            t = eps + (1 - eps) * torch.rand(B, 1, generator=generator)  # (B, 1)
        else:
            t = torch.full((B, 1), float(mask_ratio))
        t = t.to(input_ids.device)
        masked = (torch.rand(B, T, generator=generator).to(input_ids.device) < t) & loss_mask  # (B, T)
        noisy = torch.where(masked, torch.full_like(input_ids, adapter.mask_token_id), input_ids)
        logits = adapter(noisy, attention_mask)  # (B, T, V)
        nll = F.cross_entropy(logits[masked].float(), input_ids[masked], reduction="none")  # (n,)
        weights = (1.0 / t.expand(B, T))[masked]
        return (nll * weights).sum() / loss_mask.sum().clamp(min=1)

    return objective
