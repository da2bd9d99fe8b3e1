"""GradNorm: equal to the norm of a plain ``loss.backward()`` gradient, per parameter subset and reading; frozen
adapter weights are differentiated and left frozen; a subset that selects nothing is a one-line error. The batched
path (the default) gives the per-text path's norms, for tied and untied output layers, padded texts of different
lengths, unscored prompts and every subset, and falls back to the per-text path for what it does not cover."""

from __future__ import annotations

import copy
import types
import warnings

import numpy as np
import pytest
import torch

from helpers import causal, make_texts
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import DataError
from lmaudit.models.loading import load_model
from lmaudit.runs.mia import RunConfig, score_set

TEXTS = make_texts(6, seed=97, min_words=4, max_words=20)


def plain_gradients(model, tokenizer, text: str, keep) -> list[torch.Tensor]:
    """Gradients of the mean next-token NLL of ``text`` from ``model(ids).logits``, for the parameters ``keep(name)``
    selects (a tied weight once, as ``named_parameters`` lists it)."""
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    model.zero_grad()
    with torch.enable_grad():
        logits = model(ids).logits[0, :-1].float()
        torch.nn.functional.cross_entropy(logits, ids[0, 1:]).backward()
    grads = [p.grad.clone() for n, p in model.named_parameters() if keep(n)]
    model.zero_grad()
    return grads


@pytest.mark.parametrize("subset, keep", [("all", lambda n: True),
                                          ("embeddings", lambda n: n == "model.embed_tokens.weight"),
                                          ("last:1", lambda n: n.startswith("model.layers.1."))])
def test_equal_to_the_norm_of_a_plain_backward(tiny_model_dir, tiny_model, tokenizer, subset, keep):
    handle = load_model(tiny_model_dir)
    texts = TextSet.from_texts(TEXTS)
    for variant, p, norm in [("l2", "inf", lambda gs: torch.sqrt(sum((g.double() ** 2).sum() for g in gs))),
                             ("tensor_mean", "inf", lambda gs: torch.stack([g.abs().max() for g in gs]).mean()),
                             ("tensor_mean", 1, lambda gs: torch.stack([g.abs().sum() for g in gs]).mean())]:
        got = score_set(handle, texts, config=RunConfig(attacks=["gradnorm"], params={
            "gradnorm": {"parameters": subset, "variant": variant, "p": p}}))["gradnorm"]
        want = [-float(norm(plain_gradients(tiny_model, tokenizer, t, keep))) for t in TEXTS]
        np.testing.assert_allclose(got, want, rtol=1e-4)
    assert all(p.requires_grad for p in handle.model.parameters())  # left as they were


def test_a_frozen_adapter_is_differentiated_and_left_frozen(tmp_path, tiny_model_dir):
    from lmaudit.models.build import finetune
    from lmaudit.models.lora import LoraSpec
    from lmaudit.probes.gradients import describe_subset

    folder = finetune(tiny_model_dir, TextSet.from_texts(TEXTS), tmp_path / "lora", epochs=1, block=32,
                      batch_size=4, lora=LoraSpec(4))
    handle = load_model(folder)
    assert not any(p.requires_grad for p in handle.model.parameters())  # loaded for inference: all frozen
    lora = describe_subset(handle.model, "adapter")
    lora_values = sum(p.numel() for n, p in handle.model.named_parameters() if "lora_" in n)
    assert lora["values"] == lora_values > 0 and lora["frozen_in_model"] == lora["tensors"]
    texts = TextSet.from_texts(TEXTS)
    only = score_set(handle, texts, config=RunConfig(attacks=["gradnorm"], params={
        "gradnorm": {"parameters": "adapter"}}))["gradnorm"]
    every = score_set(handle, texts, config=RunConfig(attacks=["gradnorm"]))["gradnorm"]
    assert np.all(only < 0) and np.all(every < only)  # the whole gradient is larger than its LoRA part
    assert not any(p.requires_grad for p in handle.model.parameters())
    with pytest.raises(DataError, match="parameters=adapter, but the model has no adapter"):
        score_set(load_model(tiny_model_dir), texts, config=RunConfig(attacks=["gradnorm"], params={
            "gradnorm": {"parameters": "adapter"}}))
    for bad, said in [("last:9", "has 2 transformer blocks"), ("head", "unknown parameters 'head'")]:
        with pytest.raises(DataError, match=said):
            score_set(handle, texts, config=RunConfig(attacks=["gradnorm"], params={"gradnorm": {"parameters": bad}}))


def test_gradient_norms_reduced_in_place_equal_a_float64_reference():
    from lmaudit.probes.gradients import norms_of

    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(3000, 70, generator=g) * 1e-3, torch.randn(5, generator=g), torch.randn(40, 9, generator=g)]
    flat = [t.double().reshape(-1) for t in grads]
    l2 = np.array([float(t.square().sum().sqrt()) for t in flat])
    want = [float(np.sqrt((l2 ** 2).sum())), float(np.mean([float(t.abs().sum()) for t in flat])), float(l2.mean()),
            float(np.mean([float(t.abs().max()) for t in flat]))]
    np.testing.assert_allclose(norms_of(grads), want, rtol=1e-5)
    half = norms_of([t.bfloat16() for t in grads])  # reduced in float32, not in bfloat16
    np.testing.assert_allclose(half, norms_of([t.bfloat16().float() for t in grads]), rtol=1e-6)
    big = torch.rand(4_000_000, generator=g) * 1e-3 + 1e-3  # vector_norm's float32 L1 is 2e-2 off here
    exact = [float(big.double().sum()), float(big.double().square().sum().sqrt()), float(big.double().max())]
    np.testing.assert_allclose(norms_of([big, big.view(-1, 8000)])[1:], exact, rtol=1e-6)


# The per-text path is the reference. In float64 both compute the same numbers up to float64 rounding (measured:
# 3e-16 on SmolLM2-135M), so any mistake (a text's rows mixed with another's, a missed contribution) shows far
# above 1e-9; in float32 they differ by float32 rounding propagated through the network (about 1e-7 here; up to 5e-5
# on SmolLM2-135M, mostly the per-text path's: against float64 it is 2e-5 off there, the batched path 1e-6).
RTOL = {torch.float64: 1e-9, torch.float32: 2e-5}
MIXED = TextSet([Record(f"r{i}", t, "Question: " + c if c else "") for i, (t, c) in enumerate(zip(
    make_texts(7, seed=31, min_words=2, max_words=30), ["", "what is it?", "", "", "a b c d e f g h", "", ""]))])


def _untied(model):
    from transformers import LlamaForCausalLM

    cfg = copy.deepcopy(model.config)
    cfg.tie_word_embeddings = False
    torch.manual_seed(1)
    out = LlamaForCausalLM(cfg).eval()
    out.load_state_dict(model.state_dict(), strict=False)
    torch.nn.init.normal_(out.lm_head.weight, std=0.05)
    return out


def both_paths(handle, subset: str, texts=MIXED, **batched) -> tuple[np.ndarray, np.ndarray]:
    from lmaudit.probes.gradients import _gradient_norms

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the batched path must not have fallen back
        fast = _gradient_norms(handle, texts, subset, None, None, "batched", **batched).norms
    return fast, _gradient_norms(handle, texts, subset, None, None, "per-text").norms


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_batched_norms_are_the_per_text_norms(tiny_model, tokenizer, monkeypatch, tied, dtype):
    from lmaudit.probes import gradient_sums, sample_gradients

    model = copy.deepcopy(tiny_model) if tied else _untied(tiny_model)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    handle = causal(model.to(dtype), tokenizer)
    lengths = [len(tokenizer(r.context + r.target)["input_ids"]) for r in MIXED.records]
    assert len(set(lengths)) > 3  # padded in one batch
    for subset in ["last:1", "last:2", "embeddings", "all"]:
        fast, slow = both_paths(handle, subset)
        np.testing.assert_allclose(fast, slow, rtol=RTOL[dtype], err_msg=subset)
    # every text alone in its batch, and in batches of a few texts: the same norms (of every parameter: ``slow``)
    np.testing.assert_allclose(both_paths(handle, "all", batch_tokens=1)[0], slow, rtol=RTOL[dtype])
    np.testing.assert_allclose(both_paths(handle, "all", batch_tokens=130)[0], slow, rtol=RTOL[dtype])
    # the output layer's probabilities computed again per vocabulary block, gradients reduced in small blocks and
    # short rows: still the same norms
    monkeypatch.setattr(sample_gradients, "HEAD_LIMIT", 50)
    monkeypatch.setattr(gradient_sums, "PIECE", 700)
    monkeypatch.setattr(gradient_sums, "ROW", 24)
    fast, slow = both_paths(handle, "all")
    np.testing.assert_allclose(fast, slow, rtol=RTOL[dtype])
    assert all(p.requires_grad for p in model.parameters())  # left as they were


def test_a_text_mixed_with_another_would_show(tiny_model, tokenizer, monkeypatch):
    """The comparison above is sharp: one layer's gradient of one text counted for another fails it."""
    from lmaudit.probes.gradient_sums import Sums

    handle = causal(copy.deepcopy(tiny_model).double(), tokenizer)
    row = [n for n, _ in handle.model.named_parameters()].index("model.layers.0.mlp.up_proj.weight")
    add = Sums.add

    def mixed(self, r, text, g, **kwargs):  # (the per-text path reduces one text at a time: left as it is)
        add(self, r, {0: 1, 1: 0}.get(text, text) if r == row and self.shape[1] > 1 else text, g, **kwargs)

    monkeypatch.setattr(Sums, "add", mixed)
    fast, slow = both_paths(handle, "all")
    wrong = ~np.isclose(fast, slow, rtol=1e-4).all(axis=1)
    assert wrong.sum() == 2 and np.isclose(fast[~wrong], slow[~wrong], rtol=RTOL[torch.float64]).all()


def test_the_batched_norms_of_an_adapter_are_the_per_text_norms(tmp_path, tiny_model_dir):
    from lmaudit.models.build import finetune
    from lmaudit.models.lora import LoraSpec

    folder = finetune(tiny_model_dir, TextSet.from_texts(TEXTS), tmp_path / "lora", epochs=1, block=32,
                      batch_size=4, lora=LoraSpec(4))
    handle = load_model(folder)
    handle.model.double()
    for subset in ["adapter", "all", "last:1"]:
        fast, slow = both_paths(handle, subset)
        np.testing.assert_allclose(fast, slow, rtol=RTOL[torch.float64], err_msg=subset)
    assert not any(p.requires_grad for p in handle.model.parameters())


def _uses_a_weight_outside_its_layer(self, x):  # up_proj's weight read by the MLP itself
    return self.down_proj(self.act_fn(self.gate_proj(x)) * torch.nn.functional.linear(x, self.up_proj.weight))


def _calls_a_layer_twice(self, x):
    return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x)) + 0.1 * self.down_proj(self.up_proj(x))


@pytest.mark.parametrize("forward, said", [(_uses_a_weight_outside_its_layer, "used outside its own call"),
                                           (_calls_a_layer_twice, "called twice in a forward")])
def test_what_the_batched_path_does_not_cover_falls_back_to_the_per_text_path(tiny_model, tokenizer, forward,
                                                                              said):
    from lmaudit.probes.gradients import _gradient_norms

    model = copy.deepcopy(tiny_model).double()
    mlp = model.model.layers[0].mlp
    mlp.forward = types.MethodType(forward, mlp)
    handle = causal(model, tokenizer)
    with pytest.warns(UserWarning, match=f"{said}; the gradients are taken one text at a time"):
        fast = _gradient_norms(handle, MIXED, "all", None, None, "batched").norms
    np.testing.assert_allclose(fast, _gradient_norms(handle, MIXED, "all", None, None, "per-text").norms, rtol=0)
    fast, slow = both_paths(handle, "last:1", MIXED)  # layer 0 is not differentiated: nothing to cover there
    np.testing.assert_allclose(fast, slow, rtol=RTOL[torch.float64])
    with pytest.raises(DataError, match="unknown method 'fast'"):
        _gradient_norms(handle, MIXED, "all", None, None, "fast")
