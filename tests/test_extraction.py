"""Extraction: masks, teacher-forced trajectory probabilities, (n, p) arithmetic, sampling."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lmaudit.errors import DataError, LmauditError
from lmaudit.extraction.discoverable import discoverable, gaussian_relaxed_rate, queries_needed, success_within
from lmaudit.extraction.masks import MaskSpec
from lmaudit.models.adapters import ARAdapter, DLMAdapter
from lmaudit.models.generate import denoise, transfer_counts
from lmaudit.probes import trajectories as traj
from lmaudit.probes.trajectories import Target, ar_suffix_logp, dlm_trajectories, step_bounds


@pytest.fixture(scope="module")
def llama_dlm(tokenizer):
    """A tiny Llama run with full attention and shifted logits (the fused output-layer path)."""
    from lmaudit.models.adapters import adapter_for
    from lmaudit.models.dlm import build_dlm_model
    from lmaudit.models.presets import Preset

    model = build_dlm_model(Preset("t", hidden=32, layers=2, heads=2, intermediate=64, context=128, pretrain_tokens=0,
                                   block=32, batch=8, lr=1e-3), tokenizer,
                            seed=3, shift_logits=True, arch="llama")
    model.eval()
    return adapter_for(model, tokenizer)


def _target(tokenizer, text="the model data train token layer value array matrix", masked=(2, 4, 5, 7)):
    ids = np.asarray(tokenizer(text)["input_ids"], dtype=np.int64)
    return Target("t0", ids, np.asarray(masked, dtype=np.int64))


@torch.inference_mode()
def _brute_force_logp(adapter, target: Target, order: np.ndarray, steps: int, temperature: float = 1.0) -> float:
    """log p of one trajectory, one sequence at a time, straight from the definition."""
    b = step_bounds(len(order), steps)
    hidden = set(int(x) for x in target.masked)
    total = 0.0
    for k in range(steps):
        x = torch.tensor(target.ids)[None].clone()
        x[0, sorted(hidden)] = adapter.mask_token_id
        logp = torch.log_softmax(adapter(x, torch.ones_like(x))[0].double() / temperature, dim=-1)  # (T, V)
        for pos in order[b[k] : b[k + 1]]:
            total += float(logp[pos, target.ids[pos]])
            hidden.discard(int(pos))
    return total


@pytest.mark.parametrize("steps", [1, 2, 4])
def test_estimator_mean_equals_exact_expectation_over_all_orders(llama_dlm, tokenizer, monkeypatch, steps):
    target = _target(tokenizer)
    perms = np.array(list(itertools.permutations(target.masked)))  # all 24 orders of |M| = 4
    exact = np.mean([math.exp(_brute_force_logp(llama_dlm, target, p, steps)) for p in perms])
    monkeypatch.setattr(traj, "random_orders", lambda t, r, s: perms)
    res = dlm_trajectories(llama_dlm.handle(), [target], steps=[steps], trajectories=len(perms), temperature=1.0)[0]
    assert res.p_hat == pytest.approx(exact, rel=1e-5)
    assert res.forwards == steps


def test_sampled_trajectories_estimate_the_expectation(llama_dlm, tokenizer):
    target = _target(tokenizer)
    perms = list(itertools.permutations(target.masked))
    exact = np.mean([math.exp(_brute_force_logp(llama_dlm, target, np.array(p), 2, 0.7)) for p in perms])
    res = dlm_trajectories(llama_dlm.handle(), [target], steps=[2], trajectories=2000, temperature=0.7, seed=5)[0]
    assert abs(res.p_hat - exact) < 4 * res.std_error + 1e-12
    assert res.forwards == 2


def test_one_step_is_the_product_of_one_step_marginals(tiny_dlm, tokenizer):
    target = _target(tokenizer, masked=(1, 3, 6, 8, 9))
    x = torch.tensor(target.ids)[None].clone()
    x[0, target.masked] = tiny_dlm.mask_token_id
    with torch.inference_mode():
        logp = torch.log_softmax(tiny_dlm(x, torch.ones_like(x))[0].double(), dim=-1)
    expected = sum(float(logp[p, target.ids[p]]) for p in target.masked)
    res = dlm_trajectories(tiny_dlm.handle(), [target], steps=[1], trajectories=64)[0]
    assert len(res.logp) == 1 and res.forwards == 1
    assert res.logp[0] == pytest.approx(expected, abs=1e-4)


def test_low_confidence_unmasks_the_most_probable_target_first(llama_dlm, tokenizer):
    target = _target(tokenizer)
    # brute force: at each single-token step pick the position whose target token is most probable
    best = -np.inf
    for perm in itertools.permutations(target.masked):
        best = max(best, _brute_force_logp(llama_dlm, target, np.array(perm), 4))
    remaining, total = list(target.masked), 0.0
    with torch.inference_mode():
        while remaining:
            x = torch.tensor(target.ids)[None].clone()
            x[0, remaining] = llama_dlm.mask_token_id
            logp = torch.log_softmax(llama_dlm(x, torch.ones_like(x))[0].double(), dim=-1)
            scores = {p: float(logp[p, target.ids[p]]) for p in remaining}
            pick = max(scores, key=scores.get)
            total += scores[pick]
            remaining.remove(pick)
    res = dlm_trajectories(llama_dlm.handle(), [target], steps=[4], order="low_confidence")[0]
    assert len(res.logp) == 1
    assert res.logp[0] == pytest.approx(total, abs=1e-4)
    assert res.logp[0] <= best + 1e-9


def test_batched_records_match_one_at_a_time(llama_dlm, tokenizer):
    a = _target(tokenizer, masked=(2, 4, 5, 7))
    b = Target("t1", np.asarray(tokenizer("array matrix function return input output tensor")["input_ids"]),
               np.array([1, 2, 5]))
    together = dlm_trajectories(llama_dlm.handle(), [a, b], steps=[4, 3], trajectories=16, seed=1)
    alone = [dlm_trajectories(llama_dlm.handle(), [t], steps=[n], trajectories=16, seed=1)[0]
             for t, n in ((a, 4), (b, 3))]
    for x, y in zip(together, alone):
        np.testing.assert_allclose(x.logp, y.logp, atol=1e-4)
    small = dlm_trajectories(llama_dlm.handle(), [a, b], steps=[4, 3], trajectories=16, seed=1, max_tokens=64)
    for x, y in zip(small, alone):
        np.testing.assert_allclose(x.logp, y.logp, atol=1e-4)
    # a step split over calls to fit the token budget is still one forward pass of each trajectory
    assert [r.forwards for r in small] == [r.forwards for r in together] == [4, 3]


def test_ar_suffix_probability_is_exact(tiny_model, tokenizer):
    ids = np.asarray(tokenizer("the model data train token layer value array matrix")["input_ids"], dtype=np.int64)
    target = Target("a", ids, np.arange(len(ids) - 3, len(ids)))
    with torch.inference_mode():
        logits = tiny_model(input_ids=torch.tensor(ids)[None]).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    expected = sum(float(logp[t - 1, ids[t]]) for t in target.masked)
    res = ar_suffix_logp(ARAdapter(tiny_model, tokenizer).handle(), [target])[0]
    assert res.logp[0] == pytest.approx(expected, abs=1e-4)
    assert res.p_hat == pytest.approx(math.exp(expected), rel=1e-4)


class _OracleModel(torch.nn.Module):
    """A model that knows the sequence and grows more certain with every visible token (Assumption 4.2 holds)."""

    def __init__(self, truth: np.ndarray, vocab: int = 12, mask_token_id: int = 4) -> None:
        super().__init__()
        self.register_buffer("truth", torch.tensor(truth))
        self.head = torch.nn.Linear(1, vocab)  # not used: it tells the adapter the vocabulary size
        self.config, self.mask_token_id = SimpleNamespace(), mask_token_id

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, attention_mask=None):
        visible = (input_ids != self.mask_token_id).sum(dim=1, keepdim=True).double()  # (B, 1)
        logits = torch.zeros(*input_ids.shape, self.head.out_features, dtype=torch.float64)  # (B, T, V)
        bonus = (0.3 * visible)[..., None].expand(*input_ids.shape, 1)
        return SimpleNamespace(logits=logits.scatter(2, self.truth.expand_as(input_ids)[..., None], bonus))


def test_refinement_never_lowers_success_under_recovery_monotonicity():
    truth = np.array([2, 7, 9, 5, 6, 8, 10, 11, 7, 9], dtype=np.int64)
    target = Target("o", truth, np.array([1, 2, 4, 5, 7, 8, 9]))
    oracle = DLMAdapter(_OracleModel(truth), mask_token_id=4)  # the real adapter: padding, masks, device
    coarse = dlm_trajectories(oracle.handle(), [target], steps=[2], trajectories=32, seed=0)[0].logp
    fine = dlm_trajectories(oracle.handle(), [target], steps=[7], trajectories=32, seed=0)[0].logp
    assert set(step_bounds(7, 2)) <= set(step_bounds(7, 7))  # the same orders, cut at nested points
    assert np.all(fine >= coarse - 1e-12) and np.any(fine > coarse + 1e-6)


def test_refinement_report_on_a_tiny_model(llama_dlm, tokenizer, record_property):
    """Report (not force) how often refining the partition raised p on an untrained tiny model."""
    target = _target(tokenizer, masked=(1, 2, 3, 5, 6, 7, 8, 9))
    runs = {n: dlm_trajectories(llama_dlm.handle(), [target], steps=[n], trajectories=64, seed=2)[0]
            for n in (1, 2, 4, 8)}
    fraction = float(np.mean(runs[8].logp >= runs[4].logp - 1e-9))
    record_property("refined_not_lower_fraction", fraction)
    print(f"refinement 4→8 steps kept or raised p on {fraction:.0%} of 64 paired trajectories; "
          f"log p̂: " + ", ".join(f"N={n}: {r.log_p_hat:.3f}" for n, r in runs.items()))
    assert all(np.isfinite(r.log_p_hat) for r in runs.values())


def test_np_arithmetic_against_hand_computed_values():
    assert success_within(0.5, 2) == pytest.approx(0.75)
    assert success_within(0.1, 10) == pytest.approx(1 - 0.9**10)
    assert success_within(1e-12, 10**6) == pytest.approx(1e-6, rel=1e-5)
    assert success_within(0.0, 10**9) == 0.0
    assert success_within(1.0, 1) == 1.0
    assert queries_needed(0.5, 0.99) == 7  # log(0.01)/log(0.5) = 6.64
    assert queries_needed(0.5, 0.75) == 2  # exactly 1 − 0.5² = 0.75
    assert queries_needed(0.0, 0.5) == np.inf
    assert queries_needed(1.0, 0.99) == 1
    np.testing.assert_array_equal(discoverable([0.0, 6.9e-5, 7.0e-5, 1.0], n=10_000, p=0.5), [False, False, True, True])
    with pytest.raises(LmauditError, match="n must be at least 1"):
        success_within(0.3, 0)
    with pytest.raises(LmauditError, match=r"\[0, 1\]"):
        queries_needed(1.5, 0.5)
    with pytest.raises(LmauditError, match="p must be in"):
        queries_needed(0.5, 1.0)


def test_mask_specs_resolve_to_positions():
    assert MaskSpec.parse("suffix:3").resolve(10, record_id="r").tolist() == [7, 8, 9]
    assert MaskSpec.parse("prefix:2").resolve(10, record_id="r").tolist() == [0, 1]
    assert MaskSpec.parse("span:1-3,6-8").resolve(10, record_id="r").tolist() == [1, 2, 6, 7]
    rnd = MaskSpec.parse("random:0.5")
    a, b = rnd.resolve(40, record_id="r", seed=1), rnd.resolve(40, record_id="r", seed=1)
    assert len(a) == 20 and a.tolist() == b.tolist() and a.tolist() != rnd.resolve(40, record_id="q", seed=1).tolist()
    text = "mail bob@x.org now"
    offsets = [(0, 4), (4, 8), (8, 9), (9, 14), (14, 18)]
    pii = MaskSpec.parse("pii:email").resolve(5, record_id="r", text=text, fields={"email": "bob@x.org"},
                                              offsets=offsets)
    assert pii.tolist() == [1, 2, 3]


@pytest.mark.parametrize("spec, message", [
    ("span:3-3", "empty"), ("span:4-2", "empty"), ("span:1-5,3-8", "overlap"), ("suffix:0", "bad argument"),
    ("random:1.5", "bad argument"), ("middle:3", "unknown kind"), ("span:a-b", "bad argument"),
])
def test_bad_mask_specs_are_clear_errors(spec, message):
    with pytest.raises(LmauditError, match=message):
        MaskSpec.parse(spec)


def test_masks_that_do_not_fit_the_record_name_it():
    with pytest.raises(DataError, match="record 'r7'.*12 tokens.*10"):
        MaskSpec.parse("suffix:12").resolve(10, record_id="r7")
    with pytest.raises(DataError, match="record 'r7'.*ends at token 12"):
        MaskSpec.parse("span:8-12").resolve(10, record_id="r7")
    with pytest.raises(DataError, match="covers every token"):
        MaskSpec.parse("prefix:10").resolve(10, record_id="r7")
    with pytest.raises(DataError, match="no 'phone' field"):
        MaskSpec.parse("pii:phone").resolve(5, record_id="r7", text="abc", fields={}, offsets=[(0, 1)] * 5)
    with pytest.raises(DataError, match="does not occur"):
        MaskSpec.parse("pii:email").resolve(5, record_id="r7", text="abc", fields={"email": "z@y"},
                                            offsets=[(0, 1)] * 5)


def test_gaussian_relaxed_rate():
    d = np.random.default_rng(0).normal(10, 2, 20000).round()
    pred, emp, mu, sigma = gaussian_relaxed_rate(d, [6, 10, 14])
    assert mu == pytest.approx(10, abs=0.05) and sigma == pytest.approx(2.02, abs=0.05)
    np.testing.assert_allclose(pred, emp, atol=0.01)
    pred, emp, _, _ = gaussian_relaxed_rate(np.array([3.0, 3.0, 3.0]), [2, 3])
    np.testing.assert_allclose(pred, [0.0, 1.0], atol=1e-9)
    np.testing.assert_allclose(emp, [0.0, 1.0])


def test_transfer_counts_split_evenly():
    assert transfer_counts(10, 4).tolist() == [3, 3, 2, 2]
    assert transfer_counts(3, 3).tolist() == [1, 1, 1]


@pytest.mark.parametrize("remasking", ["low_confidence", "random"])
def test_denoise_fills_every_mask_and_keeps_the_rest(llama_dlm, tokenizer, remasking):
    ids = np.asarray(tokenizer("the model data train token layer value array matrix")["input_ids"], dtype=np.int64)
    x = np.tile(ids, (3, 1))
    x[:, [2, 3, 6, 8]] = llama_dlm.mask_token_id
    out = denoise(llama_dlm, x, np.ones_like(x), steps=4, temperature=1.0, remasking=remasking, seed=0)
    assert not (out == llama_dlm.mask_token_id).any()
    keep = np.ones(len(ids), dtype=bool)
    keep[[2, 3, 6, 8]] = False
    np.testing.assert_array_equal(out[:, keep], x[:, keep])
    again = denoise(llama_dlm, x, np.ones_like(x), steps=4, temperature=1.0, remasking=remasking, seed=0)
    np.testing.assert_array_equal(out, again)


def test_greedy_one_step_denoise_is_the_argmax(llama_dlm, tokenizer):
    ids = np.asarray(tokenizer("the model data train token layer")["input_ids"], dtype=np.int64)
    x = ids[None].copy()
    x[0, [2, 4]] = llama_dlm.mask_token_id
    with torch.inference_mode():
        expected = llama_dlm(torch.tensor(x), torch.ones(1, len(ids), dtype=torch.long))[0, [2, 4]].argmax(-1).numpy()
    out = denoise(llama_dlm, x, np.ones_like(x), steps=1, temperature=0.0)
    np.testing.assert_array_equal(out[0, [2, 4]], expected)


def test_ar_sample_with_cache_matches_a_full_recompute(tiny_model, tokenizer):
    from lmaudit.models.generate import ar_sample

    ids = np.asarray(tokenizer("array matrix function return")["input_ids"], dtype=np.int64)
    out = ar_sample(tiny_model, ids, 6, samples=2, temperature=0.0)
    x = torch.tensor(ids)[None]
    with torch.inference_mode():
        for _ in range(6):
            x = torch.cat([x, tiny_model(input_ids=x).logits[0, -1].argmax().view(1, 1)], dim=1)
    np.testing.assert_array_equal(out[0], x[0, len(ids):].numpy())
    np.testing.assert_array_equal(out[1], out[0])
    sampled = ar_sample(tiny_model, ids, 6, samples=4, temperature=1.0, seed=3)
    np.testing.assert_array_equal(sampled, ar_sample(tiny_model, ids, 6, samples=4, temperature=1.0, seed=3))
