"""Tiny built-in model presets for the embedded default and tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lmaudit.errors import LmauditError


@dataclass(frozen=True)
class Preset:
    name: str
    hidden: int
    layers: int
    heads: int
    intermediate: int
    context: int
    # pretraining defaults
    pretrain_tokens: int
    block: int
    batch: int
    lr: float


PRESETS = {
    "tiny": Preset("tiny", hidden=128, layers=2, heads=4, intermediate=512, context=256,
                   pretrain_tokens=2_000_000, block=128, batch=32, lr=2e-3),
    "small": Preset("small", hidden=256, layers=4, heads=8, intermediate=1024, context=256,
                    pretrain_tokens=4_000_000, block=128, batch=32, lr=1e-3),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise LmauditError(f"unknown preset '{name}'", hint=f"choose one of: {', '.join(PRESETS)}")
    return PRESETS[name]


def build_ar_model(preset: Preset | str, tokenizer, *, seed: int = 0):
    """A randomly initialised Llama-style causal LM of the preset's size."""

    p = get_preset(preset) if isinstance(preset, str) else preset
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=p.hidden,
        num_hidden_layers=p.layers,
        num_attention_heads=p.heads,
        num_key_value_heads=p.heads,
        intermediate_size=p.intermediate,
        max_position_embeddings=p.context,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    cfg.lmaudit_kind = "ar"
    cfg.lmaudit_preset = p.name
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.eval()
    return model
