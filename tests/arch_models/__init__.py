"""Tiny seeded models of many architectures, saved as model folders (nothing is downloaded).

- :func:`save_ar`: a causal LM of one of :data:`AR_ARCHS`, built from transformers' own config
  class with ``AutoModelForCausalLM.from_config``.
- :func:`save_dlm`: a masked diffusion LM whose modeling code ships in the folder, named by
  ``auto_map`` as real checkpoints do: ``"llada"`` (aligned logits, LLaDA's config keys:
  ``model_type`` llada, ``mask_token_id``, ``max_sequence_length``, an embedding table padded
  past the tokenizer) or ``"dream"`` (shifted logits, Dream's keys: ``model_type`` Dream,
  ``mask_token_id``, ``AutoModel`` only).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    GemmaConfig,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    MistralConfig,
    OPTConfig,
    PhiConfig,
    Qwen2Config,
)

HERE = Path(__file__).parent
INIT_STD = 0.2  # larger than the usual 0.02: token distributions far from uniform, so misread rows show


def _common(tokenizer) -> dict:
    return dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id)


def _decoder(cls, tokenizer, **extra):
    return cls(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=128, initializer_range=INIT_STD, **_common(tokenizer), **extra)


AR_ARCHS = {
    "gpt2": lambda tok: GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=128, initializer_range=INIT_STD,
                                   **_common(tok)),
    "gpt_neox": lambda tok: _decoder(GPTNeoXConfig, tok),  # Pythia
    "opt": lambda tok: OPTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                                 word_embed_proj_dim=32, max_position_embeddings=128, init_std=INIT_STD,
                                 **_common(tok)),
    "llama": lambda tok: _decoder(LlamaConfig, tok, num_key_value_heads=2),
    "qwen2": lambda tok: _decoder(Qwen2Config, tok, num_key_value_heads=2),
    "mistral": lambda tok: _decoder(MistralConfig, tok, num_key_value_heads=1, sliding_window=64),
    "gemma": lambda tok: _decoder(GemmaConfig, tok, num_key_value_heads=1, head_dim=8),
    "phi": lambda tok: _decoder(PhiConfig, tok),
}


def save_ar(arch: str, tokenizer, folder: Path, *, seed: int = 0) -> Path:
    """A randomly initialised (seeded) causal LM of ``arch`` and ``tokenizer``, saved into ``folder``."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AR_ARCHS[arch](tokenizer))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


DLM_STYLES = {
    # style: (configuration module, modeling module, config class, model class, auto_map)
    "llada": ("configuration_llada", "modeling_llada", "LLaDAConfig", "LLaDAModelLM",
              {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM",
               "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM"}),
    "dream": ("configuration_dream", "modeling_dream", "DreamConfig", "DreamModel",
              {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"}),
}
LLADA_PADDED_VOCAB = 16  # extra embedding rows past the tokenizer (LLaDA pads its table; its mask id is a reserved id)


def llada_mask_id(tokenizer) -> int:
    """The mask id of the LLaDA-style model: a reserved row past the tokenizer, not the tokenizer's own <mask>."""
    return len(tokenizer) + 3


def save_dlm(style: str, tokenizer, folder: Path, *, seed: int = 0) -> Path:
    """A seeded DLM of ``style`` ("llada" or "dream") with its modeling code copied into ``folder``."""
    import importlib

    conf_mod, model_mod, conf_cls, model_cls, auto_map = DLM_STYLES[style]
    conf = getattr(importlib.import_module(f"{__name__}.{conf_mod}"), conf_cls)
    model_class = getattr(importlib.import_module(f"{__name__}.{model_mod}"), model_cls)
    if style == "llada":
        cfg = conf(vocab_size=len(tokenizer) + LLADA_PADDED_VOCAB, mask_token_id=llada_mask_id(tokenizer),
                   initializer_range=INIT_STD, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    else:
        cfg = conf(vocab_size=len(tokenizer), mask_token_id=tokenizer.mask_token_id, initializer_range=INIT_STD,
                   pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                   eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = model_class(cfg).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = auto_map
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    for name in (conf_mod, model_mod, "layers"):  # the modeling file imports its layers from beside it
        shutil.copy(HERE / f"{name}.py", folder / f"{name}.py")
    return folder
