"""Tiny GGUF files for the tests, written with the ``gguf`` package's own writer from a Llama model folder.

The layout is llama.cpp's for Llama: ``token_embd``, ``blk.N.attn_{q,k,v,output}``,
``blk.N.ffn_{gate,up,down}``, the norms and ``output_norm``; q and k rows permuted as
llama.cpp stores them (transformers undoes it on load); a GPT-2-style byte-level BPE
vocabulary with its merges.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

_LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
          "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's row order of a q or k projection (pairs of rotary halves interleaved per head)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model_dir: Path, out: Path, *, qtype: str = "F32", pad: bool = True, arch: str = "llama",
               drop: tuple[str, ...] = (), extra: dict[str, np.ndarray] | None = None, merges: int | None = None,
               without: tuple[str, ...] = (), **meta: int) -> Path:
    """Write the Llama folder ``model_dir`` (weights and tokenizer) as the GGUF file ``out``.

    ``qtype``: ``F32`` or a quantized type (``Q8_0``) for the 2-D weights whose rows fit its
    block size (norms stay F32, as llama.cpp keeps them). ``pad=False`` leaves out the padding
    token id; ``arch`` names another architecture in the metadata (to test refusal).
    Damaged files, to test refusal: ``drop`` leaves out the named tensors, ``extra`` adds
    tensors (name -> array, replacing one of the same name), ``merges`` keeps only the first
    that many BPE merges, ``without`` leaves out tokenizer keys (``tokens``, ``merges``,
    ``token_types``, ``model``), and ``meta`` overrides ``block_count`` or ``context_length``.
    """
    cfg = json.loads((model_dir / "config.json").read_text())
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    weights = load_file(model_dir / "model.safetensors")
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    w = gguf.GGUFWriter(str(out), arch)
    w.add_name("tiny test llama")
    w.add_context_length(meta.get("context_length", cfg["max_position_embeddings"]))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(meta.get("block_count", cfg["num_hidden_layers"]))
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(float(cfg.get("rope_theta") or cfg.get("rope_parameters", {}).get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_rope_dimension_count(cfg["hidden_size"] // heads)
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    specials = {t["id"] for t in tok["added_tokens"]}
    if "model" not in without:
        w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    if "tokens" not in without:
        w.add_token_list([t for t, _ in vocab])
    if "token_types" not in without:
        w.add_token_types([gguf.TokenType.CONTROL if i in specials else gguf.TokenType.NORMAL for _, i in vocab])
    if "merges" not in without:
        w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]][:merges])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_add_bos_token(True)
    w.add_eos_token_id(cfg["eos_token_id"])
    if pad:
        w.add_pad_token_id(cfg["pad_token_id"])
    qt = getattr(gguf.GGMLQuantizationType, qtype)
    block = gguf.GGML_QUANT_SIZES[qt][0]

    def add(name: str, t: np.ndarray) -> None:
        if name in drop or name in (extra or {}):
            return
        t = t.astype(np.float32)
        if qtype != "F32" and t.ndim == 2 and t.shape[1] % block == 0:
            w.add_tensor(name, gguf.quants.quantize(t, qt), raw_dtype=qt)
        else:
            w.add_tensor(name, t)

    add("token_embd.weight", weights["model.embed_tokens.weight"])
    for i in range(cfg["num_hidden_layers"]):
        for hf, short in _LAYER.items():
            t = weights[f"model.layers.{i}.{hf}.weight"]
            if short == "attn_q":
                t = _permute(t, heads)
            elif short == "attn_k":
                t = _permute(t, kv)
            add(f"blk.{i}.{short}.weight", t)
    add("output_norm.weight", weights["model.norm.weight"])
    if "lm_head.weight" in weights and not cfg.get("tie_word_embeddings"):
        add("output.weight", weights["lm_head.weight"])
    for name, t in (extra or {}).items():
        w.add_tensor(name, t.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
