"""GradNorm: equal to the norm of a plain ``loss.backward()`` gradient, per parameter subset and reading; frozen
adapter weights are differentiated and left frozen; a subset that selects nothing is a one-line error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import make_texts
from lmaudit.data.loaders import TextSet
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
    import numpy as np
    import torch

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
