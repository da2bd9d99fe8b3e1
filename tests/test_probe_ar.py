import numpy as np
import pytest
import torch

from helpers import causal, make_texts
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import LmauditError
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.probes.records import ARStats
from lmaudit.probes.stats import token_stats


def test_token_stats_match_float64_reference():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(37, 300, generator=gen) * 3
    targets = torch.randint(0, 300, (37,), generator=gen)
    got = token_stats(logits, targets, row_chunk=8).double()
    lp = torch.log_softmax(logits.double(), dim=-1)
    p = lp.exp()
    mu = (p * lp).sum(-1)
    sigma = ((p * (lp - mu[:, None]) ** 2).sum(-1)).sqrt()
    want = torch.stack([lp[torch.arange(37), targets], lp.max(-1).values, mu, sigma], dim=1)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_batched_padded_equals_one_at_a_time(tiny_model, tokenizer):
    texts = TextSet.from_texts(make_texts(19, seed=5, min_words=2, max_words=40))
    batched = probe_ar(causal(tiny_model, tokenizer), texts, ARProbeConfig(batch_size=8))
    single = probe_ar(causal(tiny_model, tokenizer), texts, ARProbeConfig(batch_size=1))
    np.testing.assert_array_equal(batched.offsets, single.offsets)
    for name in ("logp", "top1_logp", "mu", "sigma", "entropy"):
        np.testing.assert_allclose(getattr(batched, name), getattr(single, name), atol=1e-5)


def test_probe_matches_direct_forward(tiny_model, tokenizer):
    text = make_texts(1, seed=9)[0]
    stats = probe_ar(causal(tiny_model, tokenizer), TextSet.from_texts([text]))
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        lp = torch.log_softmax(tiny_model(ids).logits[0, :-1].double(), dim=-1)
    want = lp[torch.arange(ids.shape[1] - 1), ids[0, 1:]].numpy()
    np.testing.assert_allclose(stats.logp, want, atol=1e-5)
    np.testing.assert_allclose(stats.top1_logp, lp.max(-1).values.numpy(), atol=1e-5)
    assert stats.n_samples == 1 and stats.lengths[0] == ids.shape[1] - 1  # every token after <bos>


def test_context_prefix_is_visible_but_not_scored(tiny_model, tokenizer):
    rec = TextSet([Record("a", target=" model data train", context="Question: index batch?")])
    stats = probe_ar(causal(tiny_model, tokenizer), rec)
    n_resp = len(tokenizer(" model data train", add_special_tokens=False)["input_ids"])
    assert stats.lengths[0] == n_resp
    plain = probe_ar(causal(tiny_model, tokenizer), TextSet([Record("b", target=" model data train")]))
    assert not np.allclose(stats.logp[-n_resp:], plain.logp[-n_resp:])  # the context changed the predictions


def test_long_texts_are_truncated_with_a_warning(tiny_model, tokenizer):
    texts = TextSet.from_texts(make_texts(3, seed=1, min_words=200, max_words=220))
    with pytest.warns(UserWarning, match="3 of 3 text.*truncated to their first 128 tokens"):
        stats = probe_ar(causal(tiny_model, tokenizer), texts)
    assert stats.lengths.max() == 127


def test_cache_hit_does_no_forward_pass(tiny_model, tokenizer, tmp_path):
    texts = TextSet.from_texts(make_texts(6, seed=2))
    first = probe_ar(causal(tiny_model, tokenizer, "fp"), texts, cache_dir=tmp_path)
    files = list((tmp_path / "probes" / "shards").glob("*.npz"))
    assert len(files) == 1 and not list((tmp_path / "probes").rglob("*.tmp"))

    class Boom(torch.nn.Module):
        def forward(self, *a, **k):
            raise AssertionError("forward pass on a cache hit")

    again = probe_ar(causal(Boom(), tokenizer, "fp"), texts, cache_dir=tmp_path)
    np.testing.assert_array_equal(first.logp, again.logp)
    other = TextSet.from_texts(make_texts(6, seed=3))
    probe_ar(causal(tiny_model, tokenizer, "fp"), other, cache_dir=tmp_path)
    assert len(list((tmp_path / "probes" / "shards").glob("*.npz"))) == 2  # new data, new key


def test_a_cached_shard_is_read_back_only_at_the_batch_size_that_computed_it(tiny_model, tokenizer, tmp_path):
    texts = TextSet.from_texts(make_texts(19, seed=5, min_words=2, max_words=40))
    fresh = {b: probe_ar(causal(tiny_model, tokenizer), texts, ARProbeConfig(batch_size=b)).logp for b in (1, 8)}
    assert not np.array_equal(fresh[1], fresh[8])  # padding beside other texts moves the last float32 bits
    for b in (8, 1, 8):  # the second batch size finds the first one's shard in the cache, and must not read it
        cached = probe_ar(causal(tiny_model, tokenizer, "fp"), texts, ARProbeConfig(batch_size=b),
                          cache_dir=tmp_path)
        np.testing.assert_array_equal(cached.logp, fresh[b])
    assert len(list((tmp_path / "probes" / "shards").glob("*.npz"))) == 2


def test_records_roundtrip_and_take(tmp_path, tiny_model, tokenizer):
    stats = probe_ar(causal(tiny_model, tokenizer), TextSet.from_texts(make_texts(5, seed=4)))
    stats.save(tmp_path / "s.npz")
    back = ARStats.load(tmp_path / "s.npz")
    np.testing.assert_array_equal(back.logp, stats.logp)
    sub = stats.take(np.array([3, 1]))
    np.testing.assert_array_equal(sub.logp[: sub.lengths[0]], stats.logp[stats.offsets[3] : stats.offsets[4]])
    np.testing.assert_array_equal(ARStats.concat([stats.take([0, 1]), stats.take([2, 3, 4])]).logp, stats.logp)


def test_nan_logits_are_a_clear_error(tiny_model, tokenizer):
    class NaNModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = tiny_model
            self.config = tiny_model.config

        def forward(self, **kw):
            out = self.inner(**kw)
            out.logits = out.logits * float("nan")
            return out

    with pytest.raises(LmauditError, match="NaN or inf"):
        probe_ar(causal(NaNModel(), tokenizer), TextSet.from_texts(["model data train value"]))


def test_fused_output_layer_equals_full_logits(tiny_model, tokenizer):
    from lmaudit.models.adapters import fused_head

    assert fused_head(tiny_model) is not None
    texts = TextSet.from_texts(make_texts(7, seed=12))
    fused = probe_ar(causal(tiny_model, tokenizer), texts, ARProbeConfig(fused_head=True, row_chunk=16))
    full = probe_ar(causal(tiny_model, tokenizer), texts, ARProbeConfig(fused_head=False))
    for name in ("logp", "top1_logp", "mu", "sigma"):
        np.testing.assert_allclose(getattr(fused, name), getattr(full, name), atol=1e-5)


def test_the_fused_head_reduces_cache_sized_chunks_to_the_same_bits():
    """On a CPU the output layer's 256-row chunks are reduced in rows of about 2 MiB of logits; every row is
    reduced on its own, so the statistics equal those of the whole logits at once, bit for bit."""
    import torch

    from lmaudit.probes.stats import head_stats, reduction_rows, token_stats

    torch.manual_seed(3)
    head = torch.nn.Linear(16, 9000, bias=False)
    hidden, targets = torch.randn(700, 16), torch.randint(0, 9000, (700,))
    assert reduction_rows(9000, hidden.device) == 58  # 2^19 values ÷ 9,000: 256-row chunks split unevenly
    with torch.no_grad():
        whole = token_stats(head(hidden), targets, row_chunk=700)
        assert torch.equal(head_stats(hidden, head, targets), whole)
