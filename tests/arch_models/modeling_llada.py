"""A tiny LLaDA-style masked diffusion LM: bidirectional attention, aligned logits (row i predicts token i).

Shipped inside a model folder and named by ``auto_map`` in its config.json, as LLaDA's
checkpoints ship their modeling code: loaded with ``AutoModel`` and ``trust_remote_code``.
Like LLaDA's ``LLaDAModelLM``, ``forward`` takes a ``(B, T)`` padding mask (1 = token) and
turns it into an additive bias that hides padded keys; there is no causal mask and no
KV cache. Rotary embeddings are computed in ``forward`` (no buffers, so loading on the
meta device leaves nothing uninitialised).
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_llada import LLaDAConfig
from .layers import RMSNorm, rotate


class LLaDABlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, self.h = cfg.d_model, cfg.n_heads
        self.theta = cfg.rope_theta
        self.attn_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.attn_out = nn.Linear(d, d, bias=False)
        self.ff_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.ff_proj = nn.Linear(d, cfg.mlp_hidden_size, bias=False)
        self.up_proj = nn.Linear(d, cfg.mlp_hidden_size, bias=False)
        self.ff_out = nn.Linear(cfg.mlp_hidden_size, d, bias=False)

    def forward(self, x, bias):
        B, T, d = x.shape
        y = self.attn_norm(x)
        q, k, v = (p(y).view(B, T, self.h, d // self.h).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = rotate(q, self.theta), rotate(k, self.theta)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=False)  # (B, H, T, D)
        x = x + self.attn_out(a.transpose(1, 2).reshape(B, T, d))
        y = self.ff_norm(x)
        return x + self.ff_out(F.silu(self.ff_proj(y)) * self.up_proj(y))


class LLaDAModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.embedding_size, cfg.d_model),
            blocks=nn.ModuleList(LLaDABlock(cfg) for _ in range(cfg.n_layers)),
            ln_f=RMSNorm(cfg.d_model, cfg.rms_norm_eps),
            ff_out=nn.Linear(cfg.d_model, cfg.embedding_size, bias=False),
        ))

    def forward(self, input_ids, attention_mask=None):
        x = self.transformer.wte(input_ids)  # (B, T, d)
        bias = None
        if attention_mask is not None:  # (B, T), 1 = token: padded keys get a large negative bias
            keep = attention_mask.to(x.dtype)[:, None, None, :]  # (B, 1, 1, T)
            bias = (1.0 - keep) * torch.finfo(x.dtype).min
        hidden = []
        for block in self.transformer.blocks:
            hidden.append(x)
            x = block(x, bias)
        x = self.transformer.ln_f(x)
        hidden.append(x)
        return self.transformer.ff_out(x), tuple(hidden)  # (B, T, V): row i predicts token i


class LLaDAModelLM(PreTrainedModel):
    config_class = LLaDAConfig
    base_model_prefix = "model"
    _no_split_modules = ["LLaDABlock"]

    def __init__(self, config):
        super().__init__(config)
        self.model = LLaDAModel(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.transformer.wte

    def get_output_embeddings(self):
        return self.model.transformer.ff_out

    def forward(self, input_ids, attention_mask=None, output_hidden_states=None, return_dict=None, use_cache=None,
                **kwargs):
        if use_cache:
            raise ValueError("the KV cache is not supported for a masked diffusion model")
        logits, hidden = self.model(input_ids, attention_mask)
        return CausalLMOutputWithPast(logits=logits, hidden_states=hidden if output_hidden_states else None)
