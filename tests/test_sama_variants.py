"""SAMA as published, and the authors' variants of the DLM baselines, against hand-computed values."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from helpers import TEST_PRESET_ARGS, assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.attacks import get_attack, register_attack
from lmaudit.attacks.secmi_sama import draw_subsets, sama_ratios
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.probes.masked import probe_masked
from lmaudit.probes.masks import BERNOULLI_EPS, MaskPlan
from lmaudit.probes.records import MaskedStats
from lmaudit.probes.tokenize import tokenize_records
from synthetic_dlm import synthetic_masked


def masked_stats(samples, keys=None):
    """MaskedStats from, per sample, (L, n_patterns, [(pattern, position, ratio, logp, ref_logp), ...])."""
    rows = [e for _, _, entries in samples for e in entries]
    col = lambda k, dt: np.array([r[k] for r in rows], dtype=dt)  # noqa: E731
    logp, ref = col(3, np.float32), col(4, np.float32)
    counts = [len(entries) for _, _, entries in samples]
    return MaskedStats(
        offsets=np.r_[0, np.cumsum(counts)].astype(np.int64), pattern=col(0, np.int32), position=col(1, np.int32),
        ratio=col(2, np.float32), logp=logp, top1_logp=logp, mu=logp, sigma=np.ones_like(logp),
        ref_logp=ref, ref_top1_logp=ref, ref_mu=ref, ref_sigma=np.ones_like(ref),
        n_positions=np.array([s[0] for s in samples], dtype=np.int64),
        n_patterns=np.array([s[1] for s in samples], dtype=np.int64),
        sample_keys=np.array(keys or [101 + i for i in range(len(samples))], dtype=np.uint64),
        n_tokens=np.array([s[0] for s in samples], dtype=np.int64))


def gaps(pattern, ratio, d_by_position):
    """Entries of one pattern whose d = log p_tar − log p_ref are given per position (ref log p = −2)."""
    return [(pattern, pos, ratio, -2.0 + d, -2.0) for pos, d in sorted(d_by_position.items())]


# ---------------------------------------------------------------- SAMA


def test_sama_plan_masks_the_published_ratios():
    spec = get_attack("sama", "dlm")
    plan = spec.probe(spec.params, 16)
    # 0.05 + 0.45·(s+1)/17 of L = 340 tokens: 17 + 9·(s+1)
    sizes = [len(p) for p in plan.patterns(340, seed=4)]
    assert sizes == [17 + 9 * (s + 1) for s in range(16)]
    pats = plan.patterns(340, seed=4)
    assert all(set(a) < set(b) for a, b in zip(pats, pats[1:]))  # nested
    np.testing.assert_allclose(sama_ratios(3), [0.05 + 0.45 / 4, 0.05 + 0.9 / 4, 0.05 + 1.35 / 4])


# sample A: L = 6, 3 steps. First-masked d: pos 0 → +1 (step 0); pos 1, 2 → −0.4 (step 1); pos 3 → −0.5,
# pos 4 → −0.2 (step 2). Later masks of a token carry other values, which must be ignored.
SAMPLE_A = (6, 3, gaps(0, 1 / 6, {0: 1.0})
            + gaps(1, 3 / 6, {0: -5.0, 1: -0.4, 2: -0.4})
            + gaps(2, 5 / 6, {0: -5.0, 1: 3.0, 2: 3.0, 3: -0.5, 4: -0.2}))
# sample B: L = 3, 2 steps: pos 2 → −1 (step 0); pos 0 → +0.5 (step 1; pos 2 again at +10, ignored)
SAMPLE_B = (3, 2, gaps(0, 1 / 3, {2: -1.0}) + gaps(1, 2 / 3, {0: 0.5, 2: 10.0}))


def test_sama_hand_computed_cumulative_votes():
    # ≤ 10 tokens masked so far: each step's subsets are all of them, so every vote is 0 or 1.
    # A, cumulative: step 0 {+1} → 1; step 1 {+1, −.4, −.4} = +.2 → 1; step 2 … −.5 −.2 = −.5 → 0
    #    score (1·1 + 1·½ + 0·⅓) / (1 + ½ + ⅓) = 9/11
    #    (new tokens only: 1, 0, 0 → 6/11; each step's own values: 1, 0, 1 → 8/11; unweighted: 2/3)
    # B, cumulative: step 0 {−1} → 0; step 1 {−1, +.5} → 0: score 0 (new tokens only: 1/3)
    stats = masked_stats([SAMPLE_A, SAMPLE_B])
    np.testing.assert_allclose(get_attack("sama", "dlm")(stats), [9 / 11, 0.0], rtol=1e-12)


def test_sama_ties_vote_zero_and_weights_follow_the_step():
    # one token, d = 0 at step 0 (a tie: 0), then d = +1 at step 1 (cumulative 0 + 1 > 0: 1): ½ / (1 + ½) = 1/3
    stats = masked_stats([(2, 2, gaps(0, 0.5, {0: 0.0}) + gaps(1, 1.0, {0: 7.0, 1: 1.0}))])
    np.testing.assert_allclose(get_attack("sama", "dlm")(stats), [1 / 3], rtol=1e-12)


def eleven_tokens(bad_at: int = 5):
    """One step masking 11 tokens: ten with d = +1, one with d = −9.5 (a subset of 10 holding it sums to −0.5)."""
    return (11, 1, gaps(0, 1.0, {i: (-9.5 if i == bad_at else 1.0) for i in range(11)}))


def test_sama_subsets_hold_ten_of_the_tokens_masked_so_far():
    # a subset of 10 of the 11 votes 1 only when it leaves the bad token out: probability 1/11
    # (subsets of 8, the old default, would leave it out 3/11 of the time)
    spec = get_attack("sama", "dlm")
    stats = masked_stats([eleven_tokens()])
    assert 0.02 < spec(stats)[0] < 0.18
    assert spec(stats, n_subsets=20_000)[0] == pytest.approx(1 / 11, abs=0.01)
    assert spec(stats, subset_size=8, n_subsets=20_000)[0] == pytest.approx(3 / 11, abs=0.015)
    assert spec(stats, subset_size=11)[0] == 1.0  # all 11 of them: 10 − 9.5 > 0
    assert spec(stats, subset_size=1, n_subsets=20_000)[0] == pytest.approx(10 / 11, abs=0.01)


@pytest.mark.parametrize("m", [1, 4, 10, 11, 37])
def test_draw_subsets_are_uniform_subsets_of_distinct_indices(m):
    chosen, active = draw_subsets(np.array([12345], dtype=np.uint64), np.array([m]), n_subsets=20_000, subset_size=10)
    k = min(10, m)
    assert active[0, 0].sum() == k
    picks = chosen[0][:, :k]  # (R, k)
    assert picks.min() >= 0 and picks.max() < m
    assert (np.sort(picks, axis=1)[:, 1:] != np.sort(picks, axis=1)[:, :-1]).all()  # distinct within a subset
    freq = np.bincount(picks.ravel(), minlength=m) / len(picks)
    np.testing.assert_allclose(freq, k / m, atol=0.015)  # every index equally likely: k/m


def test_sama_scores_lie_in_the_unit_interval_and_follow_the_samples():
    spec = get_attack("sama", "dlm")
    stats, labels = synthetic_masked(spec.probe(spec.params, 16), seed=6)
    s = spec(stats)
    assert ((s >= 0) & (s <= 1)).all() and len(np.unique(s)) > 5
    perm = np.random.default_rng(1).permutation(len(labels))
    np.testing.assert_array_equal(spec(stats.take(perm)), s[perm])
    hand = masked_stats([SAMPLE_A, SAMPLE_B, eleven_tokens()])
    np.testing.assert_array_equal(spec(hand.take([2, 0, 1])), spec(hand)[[2, 0, 1]])


@pytest.mark.parametrize("params", [{"n_subsets": 0}, {"subset_size": 1.5}])
def test_sama_rejects_bad_subset_settings(params):
    with pytest.raises(LmauditError, match=r"sama(\.|: )(n_subsets|subset_size) must be an integer"):
        get_attack("sama", "dlm")(masked_stats([SAMPLE_A]), **params)


# ---------------------------------------------------------------- loss.variant=sum


def test_loss_sum_hand_computed():
    # A (L = 4): draw t = .5 masks {0, 2} (NLL 1, 2): 3/.5 = 6; t = .25 masks {1} (NLL .5): 2; t = .1 masks
    # nothing: 0. Score −(6 + 2 + 0)/3 = −8/3 (per token, the default, divides by L as well: −2/3).
    # B (L = 2): t = .9 masks {0, 1} (NLL 1, 1): −(2/.9)/1
    stats = masked_stats([
        (4, 3, [(0, 0, 0.5, -1.0, -1.0), (0, 2, 0.5, -2.0, -1.0), (1, 1, 0.25, -0.5, -1.0)]),
        (2, 1, [(0, 0, 0.9, -1.0, -1.0), (0, 1, 0.9, -1.0, -1.0)]),
    ])
    loss = get_attack("loss", "dlm")
    np.testing.assert_allclose(loss(stats, variant="sum"), [-8 / 3, -2 / 0.9], rtol=1e-6)
    np.testing.assert_allclose(loss(stats), [-2 / 3, -1 / 0.9], rtol=1e-6)


def test_bernoulli_plan_masks_each_position_with_its_stratum_probability():
    plan = MaskPlan("bernoulli", budget=8)
    pats, t = plan.draw(4000, seed=3)
    assert len(pats) == 8 == plan.n_patterns
    strata = np.floor((t - BERNOULLI_EPS) / (1 - BERNOULLI_EPS) * 8)
    assert strata.tolist() == list(range(8))  # stratified: one t per eighth of [ε, 1]
    for p, tj in zip(pats, t):
        assert (np.diff(p) > 0).all()
        assert abs(len(p) / 4000 - tj) < 4 * np.sqrt(tj * (1 - tj) / 4000) + 1e-3  # Binomial(L, t_j)
    again, t2 = plan.draw(4000, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(pats, again)) and np.array_equal(t, t2)
    spec = get_attack("loss", "dlm")
    assert spec.probe({"variant": "sum"}, 16) == MaskPlan("bernoulli", budget=16)
    assert spec.probe(spec.params, 16) == MaskPlan("elbo", budget=16)


def test_bernoulli_probe_records_the_draw_probability(tiny_dlm, tokenizer):
    # short texts: the lowest strata often mask nothing (no forward); every draw still counts as a pattern
    plan = MaskPlan("bernoulli", budget=16)
    ts = TextSet.from_texts(make_texts(4, seed=9, min_words=3, max_words=5))
    stats = probe_masked(tiny_dlm.handle(), ts, plan, seed=0)
    assert stats.n_patterns.tolist() == [16] * 4
    tok = tokenize_records(tokenizer, ts, max_length=128, first_scorable=0)
    from lmaudit.utils import stable_seed

    for i in range(4):
        pats, t = plan.draw(int(stats.n_positions[i]), stable_seed("mask", int(tok.sample_keys[i]), plan.key(), 0))
        part = stats.take([i])
        assert part.position.tolist() == np.concatenate(pats).tolist()
        np.testing.assert_allclose(part.ratio, np.repeat(t, [len(p) for p in pats]), rtol=1e-6)
    assert np.isfinite(get_attack("loss", "dlm")(stats, variant="sum")).all()


# ---------------------------------------------------------------- calibration.variant=unmasked_ratio


def test_calibration_unmasked_ratio_on_records():
    # A: NLL_tar (1, 2, 3), NLL_ref (2, 2, 2): −2/2 = −1. B: NLL_tar (.5, 1.5), NLL_ref (4, 4): −1/4
    stats = masked_stats([
        (4, 1, [(0, 1, 0.0, -1.0, -2.0), (0, 2, 0.0, -2.0, -2.0), (0, 3, 0.0, -3.0, -2.0)]),
        (3, 1, [(0, 1, 0.0, -0.5, -4.0), (0, 2, 0.0, -1.5, -4.0)]),
    ])
    np.testing.assert_allclose(get_attack("calibration", "dlm")(stats, variant="unmasked_ratio"), [-1.0, -0.25],
                               rtol=1e-7)
    spec = get_attack("calibration", "dlm")
    assert spec.probe({"variant": "unmasked_ratio"}, 16) == MaskPlan("unmasked", budget=1)


def raw_shifted_nll(model, ids, scored, attention=None):
    """By hand: −log softmax(model(ids).logits)[t, ids[t+1]] for every scored token t + 1 (one text, no mask)."""
    x = torch.tensor(ids)[None]
    kwargs = {} if attention is None else {"attention_mask": attention}
    with torch.no_grad():
        logits = model(input_ids=x, **kwargs).logits[0].double()  # (T, V)
    nll = -torch.log_softmax(logits[:-1], dim=-1).gather(1, x[0, 1:, None])[:, 0]  # row t scores token t + 1
    return nll.numpy()[scored[1:]]


TEXTS = ["Return the mean of the array along the axis.", "Sort a list.",
         "The function reads a file and returns a table of rows, one per line of input data."]


@pytest.fixture(scope="module")
def ref_dlm(tokenizer):
    from lmaudit.models.adapters import adapter_for
    from lmaudit.models.dlm import build_dlm_model
    from lmaudit.models.presets import Preset

    return adapter_for(build_dlm_model(Preset("test-dlm", **TEST_PRESET_ARGS), tokenizer, seed=1), tokenizer)


def test_unmasked_probe_reads_raw_logits_with_an_ar_shift(tiny_dlm, ref_dlm, tokenizer):
    from lmaudit.models.adapters import DLMAdapter

    ts = TextSet.from_texts(TEXTS)  # different lengths: one padded batch
    stats = probe_masked(tiny_dlm.handle(), ts, MaskPlan("unmasked"), reference=ref_dlm.handle(), batch_size=8)
    tok = tokenize_records(tokenizer, ts, max_length=128, first_scorable=0)
    expected = []
    for i, (ids, scored) in enumerate(zip(tok.ids, tok.scored)):
        tar, ref = raw_shifted_nll(tiny_dlm.model, ids, scored), raw_shifted_nll(ref_dlm.model, ids, scored)
        part = stats.take([i])
        np.testing.assert_allclose(-part.logp, tar, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(-part.ref_logp, ref, rtol=1e-4, atol=1e-5)
        assert (part.ratio == 0).all()  # nothing masked
        expected.append(-tar.mean() / ref.mean())
    score = get_attack("calibration", "dlm")(stats, variant="unmasked_ratio")
    np.testing.assert_allclose(score, expected, rtol=1e-5)
    # the statistic reads the network's raw logits: an adapter that realigns shifted logits gets the same numbers
    shifted = DLMAdapter(tiny_dlm.model, tiny_dlm.mask_token_id, shift_logits=True, tokenizer=tokenizer)
    again = probe_masked(shifted.handle(), ts, MaskPlan("unmasked"), batch_size=2)
    np.testing.assert_allclose(again.logp, stats.logp, rtol=1e-5, atol=1e-6)


def test_unmasked_probe_keeps_a_bidirectional_dlm_bidirectional(tokenizer):
    # a Llama network run as a Dream-style DLM (full attention, shifted logits): no causal mask may be added
    from lmaudit.models.adapters import adapter_for
    from lmaudit.models.dlm import build_dlm_model
    from lmaudit.models.presets import Preset

    model = build_dlm_model(Preset("test-dlm", **TEST_PRESET_ARGS), tokenizer, seed=2, shift_logits=True, arch="llama")
    adapter = adapter_for(model, tokenizer)
    assert adapter.bidirectional and adapter.shift_logits
    ts = TextSet.from_texts(TEXTS)
    stats = probe_masked(adapter.handle(), ts, MaskPlan("unmasked"), batch_size=8)
    tok = tokenize_records(tokenizer, ts, max_length=128, first_scorable=0)
    for i, (ids, scored) in enumerate(zip(tok.ids, tok.scored)):
        T = len(ids)
        full = raw_shifted_nll(model, ids, scored, attention=torch.zeros(1, 1, T, T))  # every token sees every token
        causal = raw_shifted_nll(model, ids, scored)
        np.testing.assert_allclose(-stats.take([i]).logp, full, rtol=1e-4, atol=1e-5)
        assert np.abs(full - causal).max() > 1e-3  # the check would see a causal mask


# ---------------------------------------------------------------- the variant parameter


def test_an_unknown_variant_is_one_line_listing_the_valid_ones():
    stats = masked_stats([SAMPLE_A])
    with pytest.raises(LmauditError) as err:
        get_attack("calibration", "dlm")(stats, variant="unmasked")
    assert str(err.value) == "calibration.variant must be one of masked_elbo, unmasked_ratio, got 'unmasked'"
    with pytest.raises(LmauditError, match="must be one of per_token, sum, got 1$"):
        get_attack("loss", "dlm")(stats, variant=1)
    assert get_attack("calibration", "dlm").describe()["choices"] == {"variant": ["masked_elbo", "unmasked_ratio"]}
    assert get_attack("loss", "dlm").describe()["params"] == {"variant": "per_token"}


def test_a_literal_default_outside_its_choices_is_refused():
    from typing import Literal

    with pytest.raises(ValueError, match="default of 'variant'"):
        @register_attack("bad_variant_default", kind="ar")
        def bad(stats, *, variant: Literal["a", "b"] = "c"):
            return stats.zlib_len


def test_attack_listing_shows_the_variants(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # a wide terminal: the table does not cut the parameters short
    out = lmaudit("attacks", "--kind", "dlm", "--json")
    assert_ok(out)
    specs = {s["name"]: s for s in json.loads(out.stdout)}
    assert specs["loss"]["params"]["variant"] == "per_token" and specs["loss"]["choices"]["variant"] == ["per_token",
                                                                                                         "sum"]
    table = lmaudit("attacks", "--kind", "dlm")
    assert_ok(table)
    assert "variant=masked_elbo" in table.stdout and "variant=per_token" in table.stdout


@pytest.fixture(scope="module")
def ref_dlm_dir(tmp_path_factory, ref_dlm, tokenizer):
    path = tmp_path_factory.mktemp("ref_dlm")
    ref_dlm.model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_mia_runs_the_variants(tmp_path, tiny_dlm_dir, ref_dlm_dir, tiny_dlm, ref_dlm, tokenizer):
    members, nonmembers = make_texts(6, seed=11), make_texts(6, seed=12)
    m, n = write_jsonl(tmp_path / "m.jsonl", members), write_jsonl(tmp_path / "n.jsonl", nonmembers)
    common = ["mia", "--target", tiny_dlm_dir, "--reference", ref_dlm_dir, "--members", m, "--nonmembers", n,
              "--bootstrap", "10", "--no-report", "--budget", "4", "--attacks", "sama,calibration,loss"]
    bad = lmaudit(*common, "--param", "loss.variant=bogus", "--out", tmp_path / "bad")
    assert_user_error(bad, "--param loss.variant must be one of per_token, sum, got 'bogus'")
    out = lmaudit(*common, "--param", "calibration.variant=unmasked_ratio", "--param", "loss.variant=sum",
                  "--out", tmp_path / "run")
    assert_ok(out)
    res = json.loads((tmp_path / "run" / "results.json").read_text())["attacks"]
    assert res["calibration"]["params"] == {"variant": "unmasked_ratio"} \
        and res["calibration"]["forwards_per_sample"] == 1
    assert res["loss"]["params"] == {"variant": "sum"} and res["loss"]["forwards_per_sample"] == 4
    assert res["sama"]["forwards_per_sample"] == 4
    scores = pd.read_parquet(tmp_path / "run" / "scores.parquet")
    tok = tokenize_records(tokenizer, TextSet.from_texts(members + nonmembers), max_length=128, first_scorable=0)
    hand = [-raw_shifted_nll(tiny_dlm.model, ids, sc).mean() / raw_shifted_nll(ref_dlm.model, ids, sc).mean()
            for ids, sc in zip(tok.ids, tok.scored)]
    np.testing.assert_allclose(scores["calibration"], hand, rtol=1e-5)
    assert ((scores["sama"] >= 0) & (scores["sama"] <= 1)).all()
