"""Differentially private fine-tuning (DP-SGD): accountant, per-example clipping, Poisson sampling, the CLI."""

import json

import numpy as np
import pytest
import torch
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

from helpers import TEST_PRESET_ARGS, assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.adapters import adapter_for
from lmaudit.models.build import objective_for
from lmaudit.models.dlm import build_dlm_model
from lmaudit.models.dp import (
    DPSpec,
    example_generator,
    max_examples_per_text,
    plan_dp,
    poisson_batch,
    private_gradient,
    rdp_floor,
    spent_epsilon,
    train_dp,
)
from lmaudit.models.loading import load_model
from lmaudit.models.presets import Preset, build_ar_model
from lmaudit.models.shadows import ShadowSet
from lmaudit.models.train import TrainConfig, ar_objective, collate, dft_examples

MEMBERS = make_texts(24, seed=5)
NONMEMBERS = make_texts(24, seed=6)
FAST = ["--epochs", 4, "--lr", 1e-2, "--block", 32, "--batch-size", 8]
DP8 = ["--dp-epsilon", 8, "--dp-delta", 1e-5]
PRESET = Preset("test", **TEST_PRESET_ARGS)
# Opacus' own calls below warn that the bound could use larger RDP orders; lmaudit's own calls silence it
OPACUS_ORDERS = pytest.mark.filterwarnings("ignore:Optimal order is the largest alpha")


def record(folder):
    return json.loads((folder / "lmaudit_training.json").read_text())


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir, tiny_dlm_dir):
    """DP fine-tunings by the command line: AR full DFT, DLM LoRA DFT, AR LoRA IFT (σ given, PRV), DLM full IFT."""
    root = tmp_path_factory.mktemp("dp")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMAUDIT_CACHE", str(root / "cache"))
        members = write_jsonl(root / "members.jsonl", MEMBERS)
        write_jsonl(root / "nonmembers.jsonl", NONMEMBERS)
        pairs = root / "pairs.jsonl"
        pairs.write_text("".join(json.dumps({"prompt": f"Question {i}: {t[:40]}", "response": t[40:]}) + "\n"
                                 for i, t in enumerate(MEMBERS)))
        runs = {
            "ar": (tiny_model_dir, members, DP8),
            "dlm_lora": (tiny_dlm_dir, members, [*DP8, "--lora", 4]),
            "ar_ift_lora": (tiny_model_dir, pairs, ["--mode", "ift", "--noise-multiplier", 1.0, "--max-grad-norm", 0.5,
                                                    "--dp-accountant", "prv", "--lora", 2]),
            "dlm_ift": (tiny_dlm_dir, pairs, ["--mode", "ift", *DP8]),
        }
        for name, (base, data, extra) in runs.items():
            assert_ok(lmaudit("finetune", "--model", base, "--data", data, "--out", root / name, *FAST, *extra))
    return root


# (a) the accountant is Opacus' own


@OPACUS_ORDERS
def test_spent_epsilon_and_noise_multiplier_are_opacus_values():
    sigma, q, steps, delta = 1.1, 0.01, 1000, 1e-5
    acc = RDPAccountant()
    for _ in range(steps):
        acc.step(noise_multiplier=sigma, sample_rate=q)
    assert spent_epsilon(sigma, q, steps, delta) == pytest.approx(acc.get_epsilon(delta), rel=1e-12)
    prv = PRVAccountant()
    prv.history = [(sigma, q, steps)]
    assert spent_epsilon(sigma, q, steps, delta, accountant="prv") == pytest.approx(prv.get_epsilon(delta), rel=1e-9)

    plan = plan_dp(DPSpec(epsilon=8, delta=1e-5), n_examples=100, batch_size=10, epochs=3)
    assert (plan.sample_rate, plan.steps, plan.expected_batch_size) == (0.1, 30, 10)
    assert plan.noise_multiplier == get_noise_multiplier(target_epsilon=8, target_delta=1e-5, sample_rate=0.1,
                                                         steps=30, accountant="rdp")
    assert 8 - 0.01 <= plan.spent() <= 8  # Opacus' binary search stops within 0.01 below the target
    given = plan_dp(DPSpec(noise_multiplier=0.8), n_examples=5, batch_size=16, epochs=2.4)
    # batch ≥ n: every example, each step
    assert (given.sample_rate, given.steps, given.noise_multiplier) == (1.0, 2, 0.8)


@OPACUS_ORDERS
def test_saved_records_hold_the_accountants_epsilon(trained):
    for name in ("ar", "dlm_lora", "dlm_ift"):
        dp = record(trained / name)["dp"]
        assert dp["epsilon"] <= 8 + 1e-9 and dp["target_epsilon"] == 8 and dp["delta"] == 1e-5
        acc = RDPAccountant()
        acc.history = [(dp["noise_multiplier"], dp["sample_rate"], dp["steps"])]
        assert dp["epsilon"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
        assert dp["noise_multiplier"] == get_noise_multiplier(target_epsilon=8, target_delta=1e-5,
                                                              sample_rate=dp["sample_rate"], steps=dp["steps"])
        assert dp["sample_rate"] == pytest.approx(8 / dp["n_examples"]) and dp["steps"] == round(4 / dp["sample_rate"])
        assert (dp["max_grad_norm"], dp["accountant"], dp["sampling"]) == (1.0, "rdp", "poisson")
    given = record(trained / "ar_ift_lora")["dp"]
    assert (given["noise_multiplier"], given["max_grad_norm"], given["accountant"], given["target_epsilon"]) == \
        (1.0, 0.5, "prv", None)
    assert given["epsilon"] == pytest.approx(spent_epsilon(1.0, given["sample_rate"], given["steps"], 1e-5,
                                                           accountant="prv"))
    assert given["privacy_unit"] == "ift pair" and given["max_examples_per_text"] == 1


def test_an_unreachable_epsilon_is_a_one_line_error():
    # RDP converts to (ε, δ) at a cost ≥ 0.103 at δ = 1e-5 (Opacus' largest order, 63), whatever the noise
    assert rdp_floor(1e-5) == pytest.approx(0.10287, abs=1e-4)
    with pytest.raises(LmauditError, match=r"the RDP accountant cannot certify an ε below 0.103 at δ=1e-05") as err:
        plan_dp(DPSpec(epsilon=0.1), n_examples=10, batch_size=5, epochs=1)
    assert 'accountant="prv"' in err.value.hint  # as Python spells it; the command line says --dp-accountant prv
    assert err.value.on_command_line().startswith("--dp-epsilon 0.1: the RDP accountant")
    assert "(hint: use --dp-accountant prv, or raise --dp-epsilon or --dp-delta)" in err.value.on_command_line()
    assert plan_dp(DPSpec(epsilon=0.2), n_examples=38, batch_size=8, epochs=4).spent() <= 0.2
    assert plan_dp(DPSpec(epsilon=0.05, accountant="prv"), n_examples=38, batch_size=8, epochs=4).spent() <= 0.05
    with pytest.raises(LmauditError, match=r"epsilon=1e-09 at δ=1e-05 cannot be reached in 19 steps at "
                                           r"sampling rate 0.2105"):  # σ would exceed Opacus' limit, 1e6
        plan_dp(DPSpec(epsilon=1e-9, accountant="prv"), n_examples=38, batch_size=8, epochs=4)


# (b) per-example clipping, noise and the expected-batch-size average


def _by_hand(model, objective, examples, gens, C, expected):
    """Two separate backward passes, clipped to C (Opacus' factor), summed, divided by the expected batch size."""
    params = [p for p in model.parameters() if p.requires_grad]
    total, norms = [torch.zeros_like(p) for p in params], []
    for example, gen in zip(examples, gens):
        model.zero_grad(set_to_none=True)
        ids, attn, mask = collate([example], 0)
        objective(model, ids, attn, mask, gen).backward()
        grads = [p.grad.clone() for p in params]
        norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
        norms.append(norm.item())
        for t, g in zip(total, grads):
            t += g * min(1.0, C / (norm.item() + 1e-6))
    model.zero_grad(set_to_none=True)
    return [t / expected for t in total], norms


@pytest.mark.parametrize("kind", ["ar", "dlm"])
def test_private_gradient_is_the_sum_of_clipped_per_example_gradients(kind, tokenizer):
    if kind == "ar":
        model, objective = build_ar_model(PRESET, tokenizer, seed=3), ar_objective
    else:
        model, objective = build_dlm_model(PRESET, tokenizer, seed=3), objective_for("dlm", tokenizer)
        adapter_for(model, tokenizer)  # a DLM with a mask token
    model.train()
    a, b = dft_examples(tokenizer, TextSet.from_texts(make_texts(6, seed=9)), block=24)[:2]
    examples = [a, (b[0][:13], b[1][:13])]  # two lengths: each example runs unpadded
    gens = lambda: [example_generator(7, 0, 0), example_generator(7, 0, 5)]  # noqa: E731
    _, norms = _by_hand(model, objective, examples, gens(), 1e9, 1.0)
    C = float(np.mean(norms))  # between the two norms: one example is clipped, the other is not
    assert min(norms) < C < max(norms)
    expected, _ = _by_hand(model, objective, examples, gens(), C, 3.0)
    ours, losses = private_gradient(model, objective, examples, gens(), max_grad_norm=C, noise_multiplier=0.0,
                                    expected_batch_size=3.0, noise_generator=None)
    assert len(losses) == 2 and all(p.grad is None for p in model.parameters())
    for e, o in zip(expected, ours):
        torch.testing.assert_close(o, e, atol=1e-6, rtol=0)
    # an example's gradient (its noise draw included) does not depend on who else is in the batch
    alone, _ = private_gradient(model, objective, examples[1:], gens()[1:], max_grad_norm=C, noise_multiplier=0.0,
                                expected_batch_size=3.0, noise_generator=None)
    first, _ = private_gradient(model, objective, examples[:1], gens()[:1], max_grad_norm=C, noise_multiplier=0.0,
                                expected_batch_size=3.0, noise_generator=None)
    for o, x, y in zip(ours, alone, first):
        torch.testing.assert_close(o, x + y, atol=1e-6, rtol=0)


def test_noise_has_standard_deviation_sigma_c_over_the_expected_batch(tokenizer):
    model = build_ar_model(PRESET, tokenizer, seed=0)
    grads, losses = private_gradient(model, ar_objective, [], [], max_grad_norm=0.5, noise_multiplier=2.0,
                                     expected_batch_size=4.0, noise_generator=torch.Generator().manual_seed(0))
    flat = torch.cat([g.flatten() for g in grads])
    assert losses == [] and flat.numel() > 30_000
    assert flat.std().item() == pytest.approx(2.0 * 0.5 / 4.0, rel=0.02) and abs(flat.mean().item()) < 0.01


def test_poisson_batches_include_each_example_independently():
    rng = np.random.default_rng(0)
    draws = [poisson_batch(rng, 50, 0.2) for _ in range(2000)]
    inclusion = np.bincount(np.concatenate(draws), minlength=50) / len(draws)
    sizes = np.array([len(d) for d in draws])
    assert np.abs(inclusion - 0.2).max() < 0.04  # every example at rate q
    assert sizes.mean() == pytest.approx(10, rel=0.03) \
        and sizes.std() == pytest.approx(np.sqrt(50 * 0.2 * 0.8), rel=0.1)


def test_dp_training_is_deterministic_and_learns_when_the_noise_is_small(tokenizer):
    examples = dft_examples(tokenizer, TextSet.from_texts(make_texts(12, seed=2)), block=32)
    plan = plan_dp(DPSpec(noise_multiplier=1e-3, max_grad_norm=5.0), n_examples=len(examples), batch_size=4,
                   epochs=12)
    runs = []
    for _ in range(2):
        model = build_ar_model(PRESET, tokenizer, seed=1)
        runs.append(train_dp(model, examples, TrainConfig(lr=1e-2, warmup_steps=2, seed=4), plan,
                             objective=ar_objective))
    assert runs[0] == runs[1] and len(runs[0]) <= plan.steps
    assert np.mean(runs[0][-5:]) < np.mean(runs[0][:5]) - 1.0


def test_max_examples_per_text_counts_the_blocks_a_packed_text_spans(tokenizer):
    texts = TextSet.from_texts(["a " * 30, "b", "c " * 5])
    lengths = [len(ids) + 1 for ids in tokenizer(texts.texts)["input_ids"]]  # + EOS
    assert max_examples_per_text(tokenizer, texts, 1000) == 1
    assert max_examples_per_text(tokenizer, texts, lengths[0]) == 1  # the first text fills block 0 exactly
    assert max_examples_per_text(tokenizer, texts, 4) == -(-lengths[0] // 4)


# (c) the command line: AR and DLM, DFT and IFT, full and LoRA


def test_dp_finetunes_save_their_record_and_load(trained, tiny_model_dir, tiny_dlm_dir):
    for name, kind, adapter in (("ar", "ar", False), ("dlm_lora", "dlm", True), ("ar_ift_lora", "ar", True),
                                ("dlm_ift", "dlm", False)):
        rec = record(trained / name)
        assert rec["kind"] == kind and ("lora" in rec) == adapter
        handle = load_model(trained / name)
        assert handle.kind == kind and handle.dp == rec["dp"] and handle.facts()["dp"] == rec["dp"]
        assert rec["dp"]["n_examples"] == rec["n_examples"] and rec["train_config"]["grad_clip"] == 0.0
    assert record(trained / "ar")["dp"]["privacy_unit"] == "dft block of 32 tokens"
    assert record(trained / "ar")["dp"]["max_examples_per_text"] >= 2  # ~20-token texts packed into 32-token blocks
    assert "dp" not in load_model(tiny_model_dir).facts()  # a model trained without DP has no record


# (d) mia shows the record


def test_mia_results_show_the_dp_record_of_the_target(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("LMAUDIT_CACHE", str(trained / "cache"))
    out = tmp_path / "mia"
    assert_ok(lmaudit("mia", "--model", trained / "ar", "--members", trained / "members.jsonl", "--nonmembers",
                      trained / "nonmembers.jsonl", "--out", out, "--attacks", "loss", "--bootstrap", 10,
                      "--no-report"))
    target = json.loads((out / "results.json").read_text())["target"]
    assert target["dp"] == record(trained / "ar")["dp"] and target["dp"]["epsilon"] <= 8


# (e) bad input: one-line errors before any work


@pytest.mark.parametrize("args, message", [
    (["--dp-epsilon", 8, "--dp-delta", 1], "--dp-delta must be in (0, 1), got 1.0"),
    (["--dp-epsilon", 8, "--dp-delta", 0], "--dp-delta must be in (0, 1), got 0.0"),
    (["--dp-epsilon", 8, "--dp-delta", -1e-5], "--dp-delta must be in (0, 1)"),
    (["--dp-epsilon", 0], "--dp-epsilon must be a positive number, got 0.0"),
    (["--dp-epsilon", -2], "--dp-epsilon must be a positive number"),
    (["--dp-epsilon", "nan"], "--dp-epsilon must be a positive number, got nan"),
    (["--dp-epsilon", 8, "--noise-multiplier", 1], "give --dp-epsilon or --noise-multiplier, not both"),
    (["--noise-multiplier", 0], "--noise-multiplier must be a positive number"),
    (["--dp-epsilon", 8, "--max-grad-norm", 0], "--max-grad-norm must be a positive number, got 0.0"),
    (["--dp-epsilon", 8, "--max-grad-norm", -1], "--max-grad-norm must be a positive number"),
    (["--dp-epsilon", 8, "--dp-accountant", "gdp"], "--dp-accountant must be one of rdp, prv"),
    (["--max-grad-norm", 1], "--max-grad-norm applies to DP training only"),
    (["--dp-delta", 1e-5], "--dp-delta applies to DP training only"),
    (["--dp-accountant", "rdp"], "--dp-accountant applies to DP training only"),
])
def test_bad_dp_options_are_refused_before_any_work(args, message, tmp_path):
    # neither the model nor the data exists: the error is about the options, said before anything is read
    out = tmp_path / "out"
    result = lmaudit("finetune", "--model", tmp_path / "no-model", "--data", tmp_path / "no-data.jsonl", "--out", out,
                     *args)
    assert_user_error(result, message)
    assert not out.exists()


@pytest.mark.slow  # kept out of the default run: the suite must stay under 5 minutes
@OPACUS_ORDERS
def test_shadows_train_with_dp_as_the_target_did(tmp_path, tiny_model_dir):
    pool = write_jsonl(tmp_path / "pool.jsonl", MEMBERS[:8] + NONMEMBERS[:8])
    assert_ok(lmaudit("shadows", "--model", tiny_model_dir, "--pool", pool, "--out", tmp_path / "s", "--k", 2,
                      "--epochs", 1, "--block", 32, "--batch-size", 4, *DP8))
    manifest = json.loads((tmp_path / "s" / "shadows.json").read_text())
    assert manifest["finetune"]["dp"]["epsilon"] == 8 and manifest["finetune"]["dp"]["delta"] == 1e-5
    for shadow in ShadowSet.load(tmp_path / "s").paths:  # every shadow spent at most ε, as the target would
        dp = record(shadow)["dp"]
        assert 0 < dp["epsilon"] <= 8 + 1e-9 and dp["target_epsilon"] == 8 and dp["noise_multiplier"] > 0
    assert_user_error(lmaudit("shadows", "--model", tiny_model_dir, "--pool", pool, "--out", tmp_path / "t",
                              "--dp-delta", 1e-5), "--dp-delta applies to DP training only")
