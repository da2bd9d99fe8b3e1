"""Masked diffusion language models (DLMs): the tiny model, AR → DLM adaptation, training objective.

How a DLM is run (mask token, logit convention, attention) is the job of
:class:`~lmaudit.models.adapters.DLMAdapter`.

The objective is the masked-diffusion ELBO: per sequence t ~ U(eps, 1), every
trainable token is replaced by the mask token with probability t, and the
cross-entropy on masked tokens is weighted by 1/t and normalised by the number of
trainable tokens. With ``mask_ratio`` set, t is that fixed value instead.
"""

from __future__ import annotations

import torch
from transformers import BertConfig, BertForMaskedLM

from lmaudit.errors import LmauditError
from lmaudit.models.presets import build_ar_model, get_preset
from lmaudit.models.train import masked_cross_entropy


def mark_as_dlm(model, tokenizer, *, shift_logits: bool, bidirectional: bool) -> None:
    """Record in the model's config that it is a DLM and how to run it."""
    cfg = model.config
    cfg.lmaudit_kind = "dlm"
    cfg.mask_token_id = tokenizer.mask_token_id
    cfg.lmaudit_shift_logits = shift_logits
    cfg.lmaudit_bidirectional = bidirectional


# causal architectures whose attention takes the full 4-D mask the DLM adapter passes (bidirectional when it hides
# padding only), as Dream runs Qwen2 with full attention
BIDIRECTIONAL = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
MASK_TOKEN = "<|mdm_mask|>"  # the token added to a vocabulary that has no mask token


def dlm_from_ar(ar_model, tokenizer):
    """Turn a causal LM into a Dream-style DLM in place: full attention, shifted logits.

    The weights are kept, so the AR model's next-token head still predicts token i from position i−1; diffusion
    training then adapts it to masked inputs. A tokenizer without a mask token gets one, in place (:data:`MASK_TOKEN`),
    and the embeddings a row for it, initialised to the mean of the others (Dream's way of adding its mask token to
    Qwen's vocabulary). An architecture outside :data:`BIDIRECTIONAL` is refused, naming it.
    """
    arch = type(ar_model).__name__
    if arch not in BIDIRECTIONAL:
        raise LmauditError(f"cannot adapt a {arch} into a diffusion LM: its attention is not known to take the full "
                           "attention mask that makes it bidirectional", hint=f"supported: {', '.join(BIDIRECTIONAL)}")
    if tokenizer.mask_token_id is None:
        tokenizer.add_special_tokens({"mask_token": MASK_TOKEN})
        embeddings = ar_model.get_input_embeddings().weight
        mean = embeddings.detach().mean(dim=0)
        ar_model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        with torch.no_grad():
            ar_model.get_input_embeddings().weight[tokenizer.mask_token_id] = mean
            head = ar_model.get_output_embeddings()
            if head is not None and head.weight is not ar_model.get_input_embeddings().weight:
                head.weight[tokenizer.mask_token_id] = head.weight[: tokenizer.mask_token_id].mean(dim=0)
    mark_as_dlm(ar_model, tokenizer, shift_logits=True, bidirectional=True)
    ar_model.config.lmaudit_init = "ar"
    return ar_model


def build_dlm_model(preset, tokenizer, *, seed: int = 0, shift_logits: bool = False, arch: str = "bert"):
    """A randomly initialised DLM of the preset's size.

    ``arch="bert"``: a bidirectional encoder masked-LM (``BertForMaskedLM``);
    ``arch="llama"``: a Llama network run with full attention by the adapter.
    """
    if arch == "llama":
        model = build_ar_model(preset, tokenizer, seed=seed)
        mark_as_dlm(model, tokenizer, shift_logits=shift_logits, bidirectional=True)
        return model
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


def diffusion_objective(adapter_factory, *, eps: float = 1e-3, mask_ratio: float | None = None):
    """The masked-diffusion training objective, for :func:`lmaudit.models.train.train`.

    ``adapter_factory(model) -> DLMAdapter``. Only positions with ``loss_mask`` (the
    response of an IFT pair, or every real token for DFT) can be masked and trained;
    prompts and padding are never masked. ``mask_ratio`` (a fixed ratio, None: drawn) is checked where it is
    declared (:class:`~lmaudit.models.train.FinetuneConfig`).
    """

    def objective(model, input_ids, attention_mask, loss_mask, generator) -> torch.Tensor:
        adapter = adapter_factory(model)
        B, T = input_ids.shape
        t, masked = adapter.draw_noise(input_ids, loss_mask, generator, eps=eps, mask_ratio=mask_ratio)
        logits = adapter(adapter.insert_masks(input_ids, masked), attention_mask)  # (B, T, V)
        # (n,) at the masked tokens, on a CPU; elsewhere (B, T), 0 where not masked (masked_cross_entropy)
        nll = masked_cross_entropy(logits, input_ids, masked, reduction="none")
        weights = 1.0 / t.expand(B, T)
        return (nll * (weights[masked] if nll.dim() == 1 else weights)).sum() / loss_mask.sum().clamp(min=1)

    return objective
