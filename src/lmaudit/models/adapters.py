"""The model seam: one adapter interface for autoregressive and masked diffusion LMs.

Code outside ``models/`` asks an adapter how to run its model instead of branching
on the model kind. Both adapters answer:

- ``pad_id`` and ``context_length`` (resolved once, the same way everywhere);
- :meth:`pad` — right-padding ragged token ids into ``(B, T)`` arrays; :meth:`batch_tokens` — how many
  padded tokens a forward holds by default, from the model's shapes and its device;
- :meth:`fused_head` — ``(base, output layer)`` when logits are a plain linear head,
  so callers can apply it to the rows they need only;
- :meth:`hidden` and :meth:`__call__` — last hidden states and logits; ``row_for``
  maps a predicted token position to the row that predicts it (AR: the previous
  position; DLM: the same position);
- :meth:`hidden_states` — the last hidden state as the model runs on clean text;
- :meth:`fill` — sampled values of a masked span; :meth:`span_input` — the input ids a span
  is scored on (an AR model reads one span at the end of its input, a DLM both sides);
  ``long_text_modes`` — what its probes can do with a text longer than its context;
- for DLMs, :meth:`DLMAdapter.insert_masks` and :meth:`DLMAdapter.draw_noise`;
- ``scoring`` — how a token gets its probability: ``"left-to-right"`` (from the tokens before it) or
  ``"masked"`` (hidden among visible tokens). This capability, not the kind, keys a job's tables
  (``runs/extract.TABLES``, ``runs/pii_candidates.CANDIDATE_LOGP``): a new kind that scores alike adds no entry;
- ``ignored_settings`` — the decoding settings the model does not read, each with the reason a job says.

Code above ``models/`` holds a :class:`~lmaudit.models.handle.ModelHandle` whole and never builds an
adapter: :func:`make_adapter` builds it for a model of a kind, :func:`network_handle` gives a network in memory its
handle.

Logit conventions of DLMs:

- **LLaDA-style** (``shift_logits=False``): the logits at position i predict token i.
- **Dream-style** (``shift_logits=True``): the network's output at position i−1
  predicts token i; the adapter realigns them so that row i always predicts token i
  (row 0 reuses the output at 0, as Dream's own code does).
- A causal-architecture checkpoint made bidirectional (``bidirectional=True``, as
  Dream is a Qwen2 network with full attention): the adapter passes a full 4-D
  attention mask that only hides padding, so every token sees both sides.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from lmaudit.errors import DataError, LmauditError, spell
from lmaudit.models.batching import default_batch_tokens, full_attention_mask, pad_sequences, to_device
from lmaudit.models.generate import ar_sample, denoise
from lmaudit.models.handle import ModelHandle
from lmaudit.models.kv_cache import cache_kwargs, cache_of, cache_selectable, expand_cache, select_cache
from lmaudit.models.sources import kind_of_config

DEFAULT_CONTEXT = 2048
KIND_SPELLINGS = {"ar": spell("kind", "ar"), "dlm": spell("kind", "dlm")}  # the kinds, as Python and the CLI set them

# Architectures whose logits are exactly ``lm_head(last_hidden_state)`` (no scaling or soft-capping),
# so the head can be applied in row chunks that stay in cache.
_PLAIN_HEAD = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "GPT2LMHeadModel",
               "GPTNeoXForCausalLM", "OPTForCausalLM", "PhiForCausalLM"}


def fused_head(model):
    """(base model, output layer) when logits are a plain linear head on the base model's output, else None."""
    if type(model).__name__ not in _PLAIN_HEAD:
        return None
    head, base = model.get_output_embeddings(), getattr(model, "base_model", None)
    if not isinstance(head, torch.nn.Linear) or base is None or base is model:
        return None
    return base, head


def resolve_pad_id(tokenizer) -> int:
    """The id used for padding: the tokenizer's pad token, else its EOS token, else 0."""
    for tok_id in (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if tok_id is not None:
            return int(tok_id)
    return 0


def context_length(model, tokenizer=None) -> int:
    """The model's context length in tokens: from its config, else the tokenizer's limit, else 2048."""
    cfg = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        val = getattr(cfg, name, None)
        if isinstance(val, int) and val > 0:
            return val
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < 10**7:
        return limit
    return DEFAULT_CONTEXT


class _Adapter:
    """What both adapters share: the wrapped model, its tokenizer, padding and context length."""

    kind = ""
    causal = False
    scoring = ""  # "left-to-right" or "masked" (module docstring)
    access = "weights"  # what it gives an attack (attacks.registry.ACCESS): the weights themselves
    keeps_probes = True  # probe results may be kept on disk under the model's fingerprint (weights: they stay put)
    ignored_settings: ClassVar[dict[str, str]] = {}  # a decoding setting the model does not read → why
    model: torch.nn.Module
    tokenizer: object

    @property
    def config(self):
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def parameters(self):
        return self.model.parameters()

    def session(self) -> AbstractContextManager:
        """A job's run with this model (:func:`~lmaudit.runs.inputs.running`): weights held in this process stay one
        model through it, so there is nothing to check (a served model's adapter checks that its server's does)."""
        return nullcontext()

    def handle(self, *, path: str = "", fingerprint: str = "") -> ModelHandle:
        """The handle of a network in memory, of this adapter's kind, tokenised with its tokenizer (a model loaded from
        a folder, a GGUF file or an endpoint comes with its handle: :func:`~lmaudit.models.loading.load_model`).
        ``fingerprint`` names its weights for a probe cache; none (the default) keeps nothing on disk."""
        return ModelHandle(self.model, self.tokenizer, path or getattr(self.model, "name_or_path", ""), fingerprint,
                           self.kind, self)

    @property
    def pad_id(self) -> int:
        return resolve_pad_id(self.tokenizer)

    @property
    def context_length(self) -> int:
        return context_length(self.model, self.tokenizer)

    def pad(self, seqs, masks=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Right-pad ragged ids with this model's pad id (see :func:`pad_sequences`)."""
        return pad_sequences(seqs, self.pad_id, masks)

    def batch_tokens(self) -> int:
        """Padded tokens one forward holds when no batch size is given: sized from the model and its device
        (:func:`~lmaudit.models.batching.default_batch_tokens`)."""
        return default_batch_tokens(self.model, self.device, fused=self.fused_head() is not None)

    def output_rows(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, pick, *,
                    fuse: bool = True, past=None) -> tuple[torch.Tensor, torch.nn.Linear | None]:
        """The output rows ``pick`` selects, and the output layer still to apply to them, if any.

        ``pick`` maps a (B, T, X) tensor to the (n, X) rows needed. When the logits are a
        plain linear head (and ``fuse``), returns (picked hidden rows (n, d), the head):
        the caller applies the head to those rows only, in chunks, and never holds
        (B, T, V) logits. Otherwise returns (picked logits (n, V), None). Rows are
        aligned as :meth:`__call__`'s (see :meth:`row_for`).
        """
        fused = self.fused_head() if fuse else None
        extra = {} if past is None else {"past": past}  # an AR model's cached prefix (the DLM's take none)
        if fused is not None:
            return pick(self.hidden(fused[0], input_ids, attention_mask, **extra)), fused[1]  # (n, d)
        return pick(self(input_ids, attention_mask, **extra)), None  # (n, V)


@dataclass(eq=False)
class ARAdapter(_Adapter):
    """A causal LM: row t of the logits predicts token t + 1."""

    model: torch.nn.Module
    tokenizer: object = None
    fuse: bool = True

    kind = "ar"
    causal = True
    scoring = "left-to-right"  # one causal pass scores every token from the tokens before it
    ignored_settings = {"order": "an AR model reads left to right"}
    long_text_modes = ("truncate", "window")  # a causal model can score a long text in overlapping windows

    def fused_head(self):
        return fused_head(self.model) if self.fuse else None

    def hidden(self, base, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               past=None) -> torch.Tensor:
        """Last hidden states of the base model, (B, T) → (B, T, d); row t predicts token t + 1. With ``past``
        (:meth:`prefix_cache`), the rows continue after the cached prefix (``attention_mask`` covers both)."""
        return base(input_ids=input_ids, attention_mask=attention_mask, **cache_kwargs(base, past)).last_hidden_state

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 past=None) -> torch.Tensor:
        """Logits (B, T) → (B, T, V); row t predicts token t + 1 (after the cached ``past``, as :meth:`hidden`)."""
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **cache_kwargs(self.model, past)).logits

    def prefix_cache(self, prefix: torch.Tensor, attention_mask: torch.Tensor | None = None, pick=None, *,
                     fuse: bool = True):
        """The keys and values of the (B, P) ids ``prefix`` (right-padded), computed once for every text that starts
        with it (:meth:`expand_cache`, :meth:`select_cache`); with ``pick``, (cache, rows, head) as
        :meth:`output_rows` gives them."""
        fused = self.fused_head() if fuse and pick is not None else None
        out = (fused[0] if fused else self.model)(input_ids=prefix, attention_mask=attention_mask, use_cache=True)
        if pick is None:
            return cache_of(out)
        rows = pick(out.last_hidden_state) if fused else pick(out.logits)
        return cache_of(out), rows, fused[1] if fused else None

    # a prefix cache cut to some rows and positions, or repeated for a batch (lmaudit.models.kv_cache)
    cache_selectable = staticmethod(cache_selectable)
    select_cache = staticmethod(select_cache)
    expand_cache = staticmethod(expand_cache)

    @staticmethod
    def row_for(positions):
        """The logit row that predicts the token at each position (the previous one)."""
        return positions - 1

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Last hidden state on clean text, run causally. (B, T) → (B, T, d)."""
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          output_hidden_states=True).hidden_states[-1]

    def fill(self, ids: np.ndarray, masked: np.ndarray, *, samples: int, steps: int | None = None,
             temperature: float = 1.0, remasking: str = "low_confidence", block_length: int | None = None,
             seed: int = 0) -> np.ndarray:
        """``samples`` draws of the tokens at positions ``masked`` of ``ids`` (1-D): sampled left to right after
        the tokens before the first masked position (a causal model never sees what follows; ``steps``,
        ``remasking`` and ``block_length`` are a DLM's). → (samples, len(masked))."""
        return ar_sample(self.model, ids[: masked[0]], len(masked), samples=samples, temperature=temperature,
                         seed=seed)

    @staticmethod
    def span_input(ids: np.ndarray, masked: np.ndarray, *, context: str = "both", where: str = "") -> np.ndarray:
        """The ids a span at positions ``masked`` of ``ids`` is scored on: read left to right, the span must be
        one run of tokens after at least one other, and the input ends with it (``context`` is a DLM's)."""
        if len(masked) > 1 and not np.all(np.diff(masked) == 1):
            raise DataError(f"{where}the mask is not one contiguous span",
                            hint="an AR model extracts a suffix: use suffix:K, span:A-B or a single PII field")
        if masked[0] == 0:
            raise DataError(f"{where}an AR model needs at least one token before the mask")
        return ids[: masked[-1] + 1]


@dataclass(eq=False)
class DLMAdapter(_Adapter):
    """A bidirectional masked-LM with its mask token and logit convention; row i predicts token i."""

    model: torch.nn.Module
    mask_token_id: int
    shift_logits: bool = False
    bidirectional: bool = False
    fuse: bool = True  # let probes apply a plain output layer in chunks (same statistics, less memory traffic)
    tokenizer: object = None

    kind = "dlm"
    causal = False
    scoring = "masked"  # a token is scored hidden under the mask token, the others visible
    long_text_modes = ("truncate",)  # a masked probe sees its whole input at once

    def __post_init__(self) -> None:
        head = self.model.get_output_embeddings()
        vocab = head.weight.shape[0] if head is not None else None
        if self.mask_token_id is None or self.mask_token_id < 0 or (vocab is not None and self.mask_token_id >= vocab):
            raise LmauditError(
                f"mask token id {self.mask_token_id} is not in the model's vocabulary ({vocab})",
                hint="pass {mask_token_id} with the id of the [MASK] token", options=("mask_token_id",),
            )

    def fused_head(self):
        """(base, output layer) when the logits are a plain linear head (see :func:`fused_head`), else None."""
        return fused_head(self.model) if self.fuse else None

    def _attention(self, input_ids, attention_mask):
        if self.bidirectional:
            return full_attention_mask(input_ids, attention_mask, self.model.dtype)
        return attention_mask

    def hidden(self, base, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Last hidden states realigned like the logits (row i → token i). (B, T) → (B, T, d)."""
        hidden = base(input_ids=input_ids, attention_mask=self._attention(input_ids, attention_mask),
                      use_cache=False).last_hidden_state
        if self.shift_logits:
            hidden = torch.cat([hidden[:, :1], hidden[:, :-1]], dim=1)
        return hidden

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits aligned with positions: row i predicts token i. (B, T) → (B, T, V)."""
        if self.bidirectional:
            logits = self.model(input_ids=input_ids, attention_mask=self._attention(input_ids, attention_mask),
                                use_cache=False).logits
        else:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, T, V)
        if self.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        return logits

    @staticmethod
    def row_for(positions):
        """The logit row that predicts the token at each position (the same one)."""
        return positions

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Last hidden state on clean text (no mask tokens), as the adapter runs the model. (B, T) → (B, T, d)."""
        return self.model(input_ids=input_ids, attention_mask=self._attention(input_ids, attention_mask),
                          output_hidden_states=True).hidden_states[-1]

    def fill(self, ids: np.ndarray, masked: np.ndarray, *, samples: int, steps: int | None = None,
             temperature: float = 1.0, remasking: str = "low_confidence", block_length: int | None = None,
             seed: int = 0) -> np.ndarray:
        """``samples`` draws of the tokens at positions ``masked`` of ``ids`` (1-D), every other token visible:
        iterative unmasking in ``steps`` steps (default: one per masked token; see
        :func:`~lmaudit.models.generate.denoise`). → (samples, len(masked))."""
        x = np.tile(np.asarray(ids, dtype=np.int64), (samples, 1))
        x[:, masked] = self.mask_token_id
        filled = denoise(self, x, np.ones_like(x), steps=steps or len(masked), temperature=temperature,
                         remasking=remasking, block_length=block_length, seed=seed)
        return filled[:, masked]

    @staticmethod
    def span_input(ids: np.ndarray, masked: np.ndarray, *, context: str = "both", where: str = "") -> np.ndarray:
        """The ids a span at positions ``masked`` of ``ids`` is scored on: every token (``context="both"``), or
        those up to the span's end (``"left"``, as an AR model would see them)."""
        return ids if context == "both" else ids[: masked[-1] + 1]

    def insert_masks(self, input_ids: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """``input_ids`` with the mask token wherever ``masked`` (same shape, bool) is True."""
        return torch.where(masked, torch.full_like(input_ids, self.mask_token_id), input_ids)

    @staticmethod
    def draw_noise(input_ids: torch.Tensor, loss_mask: torch.Tensor, generator: torch.Generator, *,
                   eps: float = 1e-3, mask_ratio: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One masked-diffusion draw: ``(t (B, 1), masked (B, T) bool)``.

        t ~ U(eps, 1) per sequence (or the fixed ``mask_ratio``); each position of
        ``loss_mask`` is masked with probability t. Random numbers come from
        ``generator`` on the CPU, so a draw does not depend on the device.
        """
        B, T = input_ids.shape
        if mask_ratio is None:
            t = eps + (1 - eps) * torch.rand(B, 1, generator=generator)  # (B, 1)
        else:
            t = torch.full((B, 1), float(mask_ratio))
        t, draw = to_device((t, torch.rand(B, T, generator=generator)), input_ids.device)  # without waiting for it
        masked = (draw < t) & loss_mask  # (B, T)
        return t, masked


def adapter_for(model, tokenizer=None, *, mask_token_id: int | None = None,
                shift_logits: bool | None = None) -> DLMAdapter:
    """A :class:`DLMAdapter`, the mask token and convention detected from the config/tokenizer; explicit values win."""
    cfg = model.config
    if mask_token_id is None:
        mask_token_id = getattr(cfg, "mask_token_id", None)
    if mask_token_id is None and tokenizer is not None:
        mask_token_id = tokenizer.mask_token_id
    if mask_token_id is None:
        raise LmauditError("the model defines no mask token", hint="pass {mask_token_id}", options=("mask_token_id",))
    dream = (getattr(cfg, "model_type", "") or "").lower() == "dream"
    if shift_logits is None:
        shift_logits = bool(getattr(cfg, "lmaudit_shift_logits", dream))
    # Dream's attention hands attention_mask to SDPA as given: it needs the 4-D mask, not a (B, T) padding mask
    bidirectional = bool(getattr(cfg, "lmaudit_bidirectional", dream))
    return DLMAdapter(model, int(mask_token_id), shift_logits, bidirectional, tokenizer=tokenizer)


def make_adapter(model, tokenizer, kind: str, *, mask_token_id: int | None = None,
                 shift_logits: bool | None = None) -> ARAdapter | DLMAdapter:
    """The adapter of a model of ``kind`` ("ar" or "dlm")."""
    if kind == "ar":
        return ARAdapter(model, tokenizer)
    if kind == "dlm":
        return adapter_for(model, tokenizer, mask_token_id=mask_token_id, shift_logits=shift_logits)
    raise LmauditError(f"unknown model kind '{kind}'", hint="use {ar} or {dlm}", options=KIND_SPELLINGS)


def network_handle(model, tokenizer, *, kind: str | None = None, path: str = "") -> ModelHandle:
    """The handle of a network in memory (a model a training loop holds): of ``kind``, else the kind its config
    declares (:func:`~lmaudit.models.sources.kind_of_config`), with its adapter; no fingerprint, so no probe of it is
    kept on disk."""
    config = getattr(model, "config", None)
    declared = config.to_dict() if hasattr(config, "to_dict") else {}
    return make_adapter(model, tokenizer, kind or kind_of_config(declared)).handle(path=path)
