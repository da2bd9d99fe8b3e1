"""The training loop queues its steps without waiting for the device (losses read back in blocks, batches copied
without waiting, no gather of a count the device computes) and still trains what a plain loop trains: the same
batches in the same order, bit for bit on the CPU."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch

import lmaudit.models.dlm as dlm
from helpers import make_texts
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import LmauditError
from lmaudit.models import train as loop
from lmaudit.models.adapters import adapter_for
from lmaudit.models.dlm import build_dlm_model, diffusion_objective
from lmaudit.models.presets import Preset, build_ar_model
from lmaudit.models.train import TrainConfig, ar_objective, collate, dft_examples, masked_cross_entropy, train

PRESET = Preset("t", hidden=32, layers=1, heads=2, intermediate=64, context=128, pretrain_tokens=0, block=32, batch=8,
                lr=3e-3)


def plain_loop(model, examples, config: TrainConfig, objective, pad_id: int) -> list[float]:
    """What the loop trains, written plainly: a permutation of the examples at a time cut into batches, a loss read
    back every step."""
    torch.manual_seed(config.seed)
    rng, gen = np.random.default_rng(config.seed), torch.Generator().manual_seed(config.seed)
    total = max(1, round(config.epochs * math.ceil(len(examples) / config.batch_size)))
    opt, order, losses = loop.make_optimizer(model, config), np.empty(0, dtype=np.int64), []
    model.train()
    for step in range(total):
        if len(order) < config.batch_size:
            order = np.concatenate([order, rng.permutation(len(examples))])
        idx, order = order[: config.batch_size], order[config.batch_size :]
        for group in opt.param_groups:
            group["lr"] = loop.lr_at(config, total, step)
        loss = objective(model, *collate([examples[i] for i in idx], pad_id), gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


@pytest.mark.parametrize("kind", ["ar-dft", "ar-ift", "dlm"])
def test_the_loop_trains_what_a_plain_loop_trains_bit_for_bit(tokenizer, kind):
    if kind == "ar-ift":
        pairs = [Record(f"r{i}", t, c) for i, (t, c) in enumerate(zip(make_texts(30, seed=7), make_texts(30, seed=8)))]
        examples = loop.ift_examples(tokenizer, TextSet(pairs, source="pairs"), max_length=128)  # prompts never trained
    else:
        examples = dft_examples(tokenizer, TextSet.from_texts(make_texts(60, seed=2)), block=32)
    if kind == "dlm":
        build = functools.partial(build_dlm_model, PRESET, tokenizer, seed=1)
        objective = diffusion_objective(lambda m: adapter_for(m, tokenizer))
    else:
        build, objective = functools.partial(build_ar_model, PRESET, tokenizer, seed=1), ar_objective
    config = TrainConfig(epochs=8, batch_size=8, lr=3e-3, warmup_steps=2, seed=4)
    ours, plain = build(), build()
    losses = train(ours, examples, config, objective=objective, pad_id=tokenizer.pad_token_id)
    assert len(losses) > loop.READ_EVERY and len(losses) % loop.READ_EVERY  # read back in blocks, the last partial
    assert losses == plain_loop(plain, examples, config, objective, tokenizer.pad_token_id)
    for (name, a), b in zip(ours.named_parameters(), plain.parameters()):
        assert torch.equal(a, b), name


def test_a_non_finite_loss_stops_the_training_naming_its_step(tokenizer):
    examples = dft_examples(tokenizer, TextSet.from_texts(make_texts(40, seed=3)), block=32)
    steps = []

    def objective(*args):
        steps.append(1)
        loss = ar_objective(*args)
        return loss * float("nan") if len(steps) == 8 else loss

    with pytest.raises(LmauditError, match=r"training diverged \(loss nan\) at step 7"):
        train(build_ar_model(PRESET, tokenizer, seed=1), examples,
              TrainConfig(epochs=8, batch_size=4, lr=1e-3, warmup_steps=1, seed=0), objective=objective)
    assert len(steps) == loop.READ_EVERY  # found when the block of losses holding it was read back


def test_the_cross_entropy_that_never_gathers_is_the_gathered_one_to_float_rounding():
    """Off the CPU no row is gathered (a count computed on the device would be waited for): every row is scored and
    those outside the mask ignored. Checked here on the CPU: value and gradient, mean and per token."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 9, 50, generator=gen, requires_grad=True)
    targets = torch.randint(0, 50, (3, 9), generator=gen)
    mask = torch.rand(3, 9, generator=gen) < 0.6
    got = {}
    for gather in (True, False):
        loss = masked_cross_entropy(logits, targets, mask, gather=gather)
        (grad,) = torch.autograd.grad(loss, logits)
        got[gather] = (loss, grad, masked_cross_entropy(logits, targets, mask, gather=gather, reduction="none"))
    torch.testing.assert_close(got[False][0], got[True][0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got[False][1], got[True][1], rtol=1e-6, atol=1e-7)
    assert got[False][2].shape == mask.shape and not got[False][2][~mask].any()
    torch.testing.assert_close(got[False][2][mask], got[True][2])
    assert got[True][0].item() == pytest.approx(torch.nn.functional.cross_entropy(logits[mask], targets[mask]).item())


def test_the_diffusion_objective_that_never_gathers_is_the_gathered_one(tokenizer, monkeypatch):
    model = build_dlm_model(PRESET, tokenizer, seed=1)
    ids, attn, mask = collate(dft_examples(tokenizer, TextSet.from_texts(make_texts(8, seed=4)), block=32)[:4],
                              tokenizer.pad_token_id)
    objective = diffusion_objective(lambda m: adapter_for(m, tokenizer))
    got = []
    for gather in (True, False):
        monkeypatch.setattr(dlm, "masked_cross_entropy", functools.partial(masked_cross_entropy, gather=gather))
        loss = objective(model, ids, attn, mask, torch.Generator().manual_seed(3))  # the same noise draw
        got.append((loss, torch.autograd.grad(loss, list(model.parameters()))))
    torch.testing.assert_close(got[1][0], got[0][0], rtol=1e-6, atol=1e-6)
    for a, b in zip(got[1][1], got[0][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
