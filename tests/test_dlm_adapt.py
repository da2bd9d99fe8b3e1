"""Adapting any Llama-family AR folder into a diffusion LM: its own tokenizer, a mask token added when it has none,
full attention; the adapted folder loads as a DLM that every DLM attack reads. Bad input: a folder that already is
a DLM, an architecture whose attention is not known to turn bidirectional, a budget under one block."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import lmaudit
from helpers import make_texts
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.loading import load_model
from lmaudit.runs.mia import RunConfig, score_set

PACKAGES = [str(Path(scipy.__file__).parent / "optimize")]


def foreign_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer of its own (300 tokens), with an end-of-text token and no mask token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(make_texts(300, seed=3), trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")


def save(folder: Path, model, tokenizer) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_llama_with_its_own_tokenizer_adapts_into_a_dlm(tmp_path):
    tok = foreign_tokenizer()
    n = len(tok)
    assert tok.mask_token_id is None
    torch.manual_seed(0)
    ar = save(tmp_path / "ar", LlamaForCausalLM(LlamaConfig(
        vocab_size=n, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
        intermediate_size=64, max_position_embeddings=128, tie_word_embeddings=True)), tok)
    trained = lmaudit.pretrain(tmp_path / "dlm", kind="dlm", init_from=ar, tokens=2048, packages=PACKAGES, block=32,
                               batch_size=4, lr=1e-3)
    assert trained.training["steps"] >= 1
    handle = load_model(tmp_path / "dlm")
    assert handle.kind == "dlm" and handle.adapter.bidirectional and handle.adapter.shift_logits
    assert len(handle.tokenizer) == n + 1 and handle.adapter.mask_token_id == n  # the mask token, added last
    assert handle.model.get_input_embeddings().weight.shape[0] == n + 1
    ids = torch.tensor([handle.tokenizer("a short text of words to read")["input_ids"]], device=handle.adapter.device)
    later = ids.clone()
    later[0, -1] = (int(later[0, -1]) + 1) % n
    with torch.no_grad():  # full attention: a later token changes what an earlier position predicts
        assert not torch.allclose(handle.adapter(ids)[0, 1], handle.adapter(later)[0, 1])
    scores = score_set(handle, TextSet.from_texts(make_texts(6, seed=4)),
                       config=RunConfig(attacks=["loss", "min_k", "secmi_dlm"], budget=4))
    assert all(np.isfinite(v).all() for v in scores.values())

    with pytest.raises(LmauditError, match="is already a diffusion LM"):
        lmaudit.pretrain(tmp_path / "again", kind="dlm", init_from=tmp_path / "dlm", tokens=2048, packages=PACKAGES)
    gpt2 = save(tmp_path / "gpt2", GPT2LMHeadModel(GPT2Config(vocab_size=n, n_embd=32, n_layer=1, n_head=2,
                                                              n_positions=128)), foreign_tokenizer())
    with pytest.raises(LmauditError, match="cannot adapt a GPT2LMHeadModel into a diffusion LM"):
        lmaudit.pretrain(tmp_path / "g", kind="dlm", init_from=gpt2, tokens=2048, packages=PACKAGES)
    with pytest.raises(LmauditError, match="less than one training block: the minimum is 32 tokens"):
        lmaudit.pretrain(tmp_path / "small", kind="dlm", init_from=ar, tokens=20, packages=PACKAGES, block=32)
    assert not any((tmp_path / name).exists() for name in ("again", "g", "small"))  # nothing written


def test_mask_filling_is_the_same_batched_or_one_text_at_a_time(tiny_dlm_dir):
    from lmaudit.probes.fill_quality import mask_filling

    dlm = load_model(tiny_dlm_dir)
    texts = TextSet.from_texts(make_texts(9, seed=5, min_words=3, max_words=30))  # ragged: padding in batches
    one = mask_filling(dlm, texts, (0.25, 0.75), batch_size=1)
    many = mask_filling(dlm, texts, (0.25, 0.75), batch_size=4)
    for r in ("0.25", "0.75"):
        assert one[r]["tokens"] == many[r]["tokens"] > 0
        assert one[r]["accuracy"] == pytest.approx(many[r]["accuracy"], abs=1e-12)
        assert one[r]["nll"] == pytest.approx(many[r]["nll"], rel=1e-5)
