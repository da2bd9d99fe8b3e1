"""A tiny Dream-style masked diffusion LM: a Qwen2-shaped network with full attention and SHIFTED logits.

Dream is initialised from an autoregressive model and keeps its head's alignment: the
output at position i predicts token i + 1 (Dream's sampler shifts the logits by one:
``cat([logits[:, :1], logits[:, :-1]])``). Shipped in the model folder and named by
``auto_map`` (``AutoModel``), as Dream's checkpoints do. As in Dream's ``DreamSdpaAttention``,
``attention_mask`` goes to ``scaled_dot_product_attention`` as given, with ``is_causal=False``:
the caller passes ``None`` (full attention) or a mask that broadcasts to (B, H, T, T),
never a (B, T) padding mask (Dream's sampler builds a 4-D one itself).
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput

from .configuration_dream import DreamConfig
from .layers import RMSNorm, rotate


class DreamDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, self.h, self.kv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
        self.dh = d // self.h
        self.theta = cfg.rope_theta
        self.input_layernorm = RMSNorm(d, cfg.rms_norm_eps)
        self.q_proj = nn.Linear(d, self.h * self.dh, bias=True)
        self.k_proj = nn.Linear(d, self.kv * self.dh, bias=True)
        self.v_proj = nn.Linear(d, self.kv * self.dh, bias=True)
        self.o_proj = nn.Linear(self.h * self.dh, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d, cfg.rms_norm_eps)
        self.gate_proj = nn.Linear(d, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(d, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, d, bias=False)

    def forward(self, x, attention_mask):
        B, T, d = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(B, T, self.h, self.dh).transpose(1, 2)
        k = self.k_proj(y).view(B, T, self.kv, self.dh).transpose(1, 2).repeat_interleave(self.h // self.kv, 1)
        v = self.v_proj(y).view(B, T, self.kv, self.dh).transpose(1, 2).repeat_interleave(self.h // self.kv, 1)
        q, k = rotate(q, self.theta), rotate(k, self.theta)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask if isinstance(attention_mask, torch.Tensor)
                                           else None, is_causal=False)  # (B, H, T, dh)
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, d))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class DreamBaseModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DreamDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, input_ids, attention_mask=None):
        x = self.embed_tokens(input_ids)  # (B, T, d)
        hidden = []
        for layer in self.layers:
            hidden.append(x)
            x = layer(x, attention_mask)
        x = self.norm(x)
        hidden.append(x)
        return BaseModelOutput(last_hidden_state=x, hidden_states=tuple(hidden))


class DreamModel(PreTrainedModel):
    config_class = DreamConfig
    base_model_prefix = "model"
    _no_split_modules = ["DreamDecoderLayer"]

    def __init__(self, config):
        super().__init__(config)
        self.model = DreamBaseModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        out = self.model(input_ids, attention_mask)
        logits = self.lm_head(out.last_hidden_state)  # (B, T, V): row i predicts token i + 1
        return MaskedLMOutput(logits=logits, hidden_states=out.hidden_states if output_hidden_states else None)
