"""The DLM adapter and masked probe: conventions, padding invariance, identical masks, errors."""

import numpy as np
import pytest
import torch

from helpers import TEST_PRESET_ARGS, make_texts
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.models.adapters import DLMAdapter, adapter_for
from lmaudit.models.dlm import build_dlm_model, diffusion_objective
from lmaudit.models.presets import Preset
from lmaudit.probes.masked import probe_masked
from lmaudit.probes.masks import MaskPlan


def texts(n=9, seed=5):
    return TextSet.from_texts(make_texts(n, seed=seed, min_words=2, max_words=30))


def test_padding_and_batching_do_not_change_statistics(tiny_dlm, tokenizer):
    plan = MaskPlan("cyclic", budget=6, rho=0.35)
    a = probe_masked(tiny_dlm.handle(), texts(), plan, reference=tiny_dlm.handle(), batch_size=7)
    b = probe_masked(tiny_dlm.handle(), texts(), plan, reference=tiny_dlm.handle(), batch_size=1)
    np.testing.assert_array_equal(a.position, b.position)
    for name in ("logp", "top1_logp", "mu", "sigma", "ref_logp"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-5)
    np.testing.assert_allclose(a.logp, a.ref_logp, atol=1e-6)  # same model on identical masks


def test_cached_masked_statistics_are_those_of_the_batch_size_asked_for(tiny_dlm, tokenizer, tmp_path):
    plan, many = MaskPlan("cyclic", budget=6, rho=0.35), texts(24)
    fresh = {b: probe_masked(tiny_dlm.handle(), many, plan, batch_size=b).logp for b in (1, 16)}
    assert not np.array_equal(fresh[1], fresh[16])  # padding moves the last float32 bits
    for b in (16, 1):
        cached = probe_masked(tiny_dlm.handle(fingerprint="fp"), many, plan, batch_size=b,
                              cache_dir=tmp_path)
        np.testing.assert_array_equal(cached.logp, fresh[b])


@pytest.mark.parametrize("shift", [False, True])
def test_logit_convention_matches_a_direct_forward(tokenizer, shift):
    model = build_dlm_model(Preset("conv", **TEST_PRESET_ARGS), tokenizer, seed=1, shift_logits=shift)
    adapter = adapter_for(model, tokenizer)
    assert adapter.shift_logits is shift
    text = make_texts(1, seed=8)[0]
    stats = probe_masked(adapter.handle(), TextSet.from_texts([text]), MaskPlan("random", budget=1, rho=0.3))
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    positions = stats.position + 1  # scorable index i is token position i+1 (after <bos>)
    noisy = ids.clone()
    noisy[0, positions] = tokenizer.mask_token_id
    with torch.no_grad():
        raw = torch.log_softmax(model(input_ids=noisy).logits[0].double(), dim=-1)  # (T, V)
    rows = positions - 1 if shift else positions  # Dream: output at i-1 predicts token i
    want = raw[rows, ids[0, positions]].numpy()
    np.testing.assert_allclose(stats.logp, want, atol=1e-5)


def test_masks_are_seeded_by_content_and_seed(tiny_dlm, tokenizer):
    plan = MaskPlan("random", budget=3, rho=0.35)
    a = probe_masked(tiny_dlm.handle(), texts(), plan, seed=0)
    b = probe_masked(tiny_dlm.handle(), texts(), plan, seed=0)
    c = probe_masked(tiny_dlm.handle(), texts(), plan, seed=1)
    np.testing.assert_array_equal(a.position, b.position)
    np.testing.assert_array_equal(a.logp, b.logp)
    assert not np.array_equal(a.position, c.position)
    # a sample's masks do not depend on the other samples in the set
    single = probe_masked(tiny_dlm.handle(), TextSet.from_texts([texts().texts[2]]), plan, seed=0)
    np.testing.assert_array_equal(single.position, a.position[a.offsets[2]:a.offsets[3]])


def test_every_attack_spends_the_budget(tiny_dlm_dir, tmp_path):
    from lmaudit.models.loading import load_model
    from lmaudit.runs.mia import RunConfig, run_mia

    m = load_model(tiny_dlm_dir)
    assert m.kind == "dlm"
    res = run_mia(m, texts(6, seed=1), texts(6, seed=2), reference=m, config=RunConfig(n_bootstrap=20, budget=16))
    forwards = {k: v["forwards_per_sample"] for k, v in res.attacks.items()}
    assert set(forwards.values()) == {16}  # Q-Skew too: 5 rounds of ⌈1/0.35⌉ = 3 chunks and one chunk of a sixth


def test_vocabulary_mismatch_and_bad_mask_id(tiny_dlm, tokenizer):
    from lmaudit.models.tokenizer import train_tokenizer

    other = train_tokenizer(make_texts(300, seed=9), vocab_size=300)
    ref = adapter_for(build_dlm_model(Preset("o", **TEST_PRESET_ARGS), other), other)
    with pytest.raises(LmauditError, match="differ in vocabulary"):
        probe_masked(tiny_dlm.handle(), texts(), MaskPlan("elbo"), reference=ref.handle())
    with pytest.raises(LmauditError, match="mask token id 99999"):
        DLMAdapter(tiny_dlm.model, 99999)


def test_diffusion_objective_never_masks_the_prompt(tiny_dlm, tokenizer):
    seen = []

    class Spy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = tiny_dlm.model
            self.config = tiny_dlm.model.config

        def get_output_embeddings(self):
            return self.inner.get_output_embeddings()

        def forward(self, input_ids, attention_mask=None):
            seen.append(input_ids.clone())
            return self.inner(input_ids=input_ids, attention_mask=attention_mask)

    objective = diffusion_objective(lambda m: DLMAdapter(m, tokenizer.mask_token_id), mask_ratio=0.9)
    ids = torch.tensor([r[:20] for r in tokenizer(make_texts(4, seed=3, min_words=20, max_words=20))["input_ids"]])
    loss_mask = torch.zeros_like(ids, dtype=torch.bool)
    loss_mask[:, 10:] = True  # tokens 0..9 are the prompt
    loss = objective(Spy(), ids, torch.ones_like(ids), loss_mask, torch.Generator().manual_seed(0))
    masked = seen[0] == tokenizer.mask_token_id
    assert not masked[:, :10].any() and masked[:, 10:].float().mean() > 0.6
    assert torch.isfinite(loss) and loss > 0


def test_ar_model_made_bidirectional_sees_both_sides(tiny_model, tokenizer):
    """A causal network adapted Dream-style: full attention (later tokens matter), shifted logits,
    and padding still changes nothing."""
    import copy

    from lmaudit.models.dlm import dlm_from_ar

    adapter = adapter_for(dlm_from_ar(copy.deepcopy(tiny_model), tokenizer), tokenizer)
    assert adapter.bidirectional and adapter.shift_logits
    ids = torch.tensor([tokenizer("model data train value index batch")["input_ids"]])
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % len(tokenizer)
    with torch.no_grad():
        a, b = adapter(ids), adapter(changed)
        causal_a, causal_b = (tiny_model(input_ids=x).logits for x in (ids, changed))
    assert not torch.allclose(a[0, 1], b[0, 1])  # an early position sees the last token
    torch.testing.assert_close(causal_a[0, :-1], causal_b[0, :-1])  # the causal original does not
    plan = MaskPlan("elbo", budget=4)
    one = probe_masked(adapter.handle(), texts(), plan, batch_size=1)
    many = probe_masked(adapter.handle(), texts(), plan, batch_size=5)
    np.testing.assert_allclose(one.logp, many.logp, atol=1e-5)


def test_dlm_reference_with_another_tokenizer_is_refused(tiny_dlm_dir, tmp_path):
    from lmaudit.models.loading import load_model
    from lmaudit.models.tokenizer import train_tokenizer
    from lmaudit.runs.mia import run_mia

    other = train_tokenizer(make_texts(400, seed=11), vocab_size=400)  # same size, other merges
    model = load_model(tiny_dlm_dir).model
    assert len(other) == model.get_output_embeddings().weight.shape[0]
    model.save_pretrained(tmp_path / "ref")
    other.save_pretrained(tmp_path / "ref")
    with pytest.raises(LmauditError, match="another tokenizer"):
        run_mia(load_model(tiny_dlm_dir), texts(4, seed=1), texts(4, seed=2), reference=load_model(tmp_path / "ref"))


def test_fused_output_layer_matches_full_logits_for_a_dlm(tiny_model, tokenizer):
    import copy

    from lmaudit.models.dlm import dlm_from_ar

    adapter = adapter_for(dlm_from_ar(copy.deepcopy(tiny_model), tokenizer), tokenizer)
    assert adapter.fused_head() is not None
    plan = MaskPlan("cyclic", budget=6)
    fused = probe_masked(adapter.handle(), texts(), plan)
    full = probe_masked(DLMAdapter(adapter.model, adapter.mask_token_id, True, True, fuse=False,
                                    tokenizer=tokenizer).handle(),
                        texts(), plan)
    np.testing.assert_allclose(fused.logp, full.logp, atol=1e-5)
    np.testing.assert_allclose(fused.sigma, full.sigma, atol=1e-5)
