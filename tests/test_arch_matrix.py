"""Architecture matrix: lmaudit on tiny seeded models of every family it claims to serve.

AR: GPT-2, GPT-NeoX (Pythia), OPT, Llama, Qwen2, Mistral, Gemma, Phi, each saved with
``save_pretrained`` and reloaded with :func:`lmaudit.models.loading.load_model`:
(a) the AR probe's per-token statistics equal those of a plain ``model(ids).logits``
forward (log-softmax, shifted by one), on both output paths (fused head / full logits);
(b) ``lmaudit mia`` runs end to end and its ``loss`` scores are those of the plain forward;
(c) a reference of the same family with ANOTHER tokenizer: each model scores the text with
its own tokenizer, and the ``reference`` scores are the difference of the two plain forwards.

DLM: modeling code shipped in the folder through ``auto_map`` (tests/arch_models), with the
config keys of the real checkpoints: LLaDA (``model_type`` llada, aligned logits, mask id
from ``mask_token_id`` in config.json, not the tokenizer's) and Dream (``model_type`` Dream,
logits shifted by one, attention mask given straight to SDPA). The masked probe equals a
hand-made masked forward, and ``lmaudit mia --kind dlm --trust-remote-code`` runs end to end.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from arch_models import AR_ARCHS, llada_mask_id, save_ar, save_dlm
from helpers import assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.attacks import list_attacks
from lmaudit.data.loaders import TextSet
from lmaudit.models.loading import load_model
from lmaudit.probes.ar import ARProbeConfig, probe_ar
from lmaudit.probes.masked import probe_masked
from lmaudit.probes.masks import MaskPlan

MEMBERS = make_texts(8, seed=31, min_words=3, max_words=30)
NONMEMBERS = make_texts(8, seed=32, min_words=3, max_words=30)
TEXTS = MEMBERS + NONMEMBERS
pytestmark = pytest.mark.filterwarnings("ignore:.*fewer than 20 per class:UserWarning")  # tiny sets on purpose
AR_CLASSES = {"gpt2": "GPT2LMHeadModel", "gpt_neox": "GPTNeoXForCausalLM", "opt": "OPTForCausalLM",
              "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM",
              "gemma": "GemmaForCausalLM", "phi": "PhiForCausalLM"}


@pytest.fixture(scope="module")
def other_tokenizer():
    """A second tokenizer: other training texts, a smaller vocabulary (so other ids for the same text)."""
    from lmaudit.models.tokenizer import train_tokenizer

    return train_tokenizer(make_texts(600, seed=77), vocab_size=300)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    return SimpleNamespace(members=write_jsonl(folder / "m.jsonl", MEMBERS),
                           nonmembers=write_jsonl(folder / "n.jsonl", NONMEMBERS))


@pytest.fixture(scope="module", params=list(AR_ARCHS))
def ar(request, tmp_path_factory, tokenizer, other_tokenizer):
    """One family: the target (test tokenizer) and a reference of the same family with the other tokenizer."""
    arch = request.param
    target = save_ar(arch, tokenizer, tmp_path_factory.mktemp(f"{arch}_target"), seed=0)
    reference = save_ar(arch, other_tokenizer, tmp_path_factory.mktemp(f"{arch}_reference"), seed=1)
    return SimpleNamespace(arch=arch, target=target, reference=reference)


def plain_ar_stats(model, tokenizer, text: str) -> np.ndarray:
    """(T-1, 5) float64 of a plain forward: logp, top1_logp, mu, sigma of tokens 1..T-1, and the
    logp the same logits would give if read without the shift (row t for token t)."""
    ids = torch.tensor([tokenizer(text)["input_ids"]])  # (1, T)
    with torch.no_grad():  # run where the model is; the statistics are read back on the CPU
        logits = model(ids.to(model.device)).logits[0].double().cpu()  # (T, V)
    targets = ids[0, 1:]
    lp = torch.log_softmax(logits[:-1], dim=-1)  # row t predicts token t + 1
    p = lp.exp()
    mu = (p * lp).sum(-1)
    sigma = (p * (lp - mu[:, None]) ** 2).sum(-1).sqrt()
    unshifted = torch.log_softmax(logits[1:], dim=-1)[torch.arange(len(targets)), targets]
    return torch.stack([lp[torch.arange(len(targets)), targets], lp.max(-1).values, mu, sigma, unshifted], 1).numpy()


def per_text_mean_logp(model, tokenizer) -> np.ndarray:
    return np.array([plain_ar_stats(model, tokenizer, t)[:, 0].mean() for t in TEXTS])


def test_ar_probe_equals_a_plain_forward(ar):
    handle = load_model(ar.target)
    assert handle.kind == "ar" and type(handle.model).__name__ == AR_CLASSES[ar.arch]
    want = [plain_ar_stats(handle.model, handle.tokenizer, t) for t in TEXTS]
    flat = np.concatenate(want)
    textset = TextSet.from_texts(TEXTS)
    for fused in (True, False):  # a plain output layer applied in row chunks, and the model's own logits
        stats = probe_ar(handle, textset, ARProbeConfig(batch_size=5, fused_head=fused))
        np.testing.assert_array_equal(stats.lengths, [len(w) for w in want])  # every token after <bos>, no padding
        for k, name in enumerate(("logp", "top1_logp", "mu", "sigma")):
            np.testing.assert_allclose(getattr(stats, name), flat[:, k], atol=1e-5, err_msg=f"{name}, fused={fused}")
        np.testing.assert_allclose(stats.entropy, -flat[:, 2], atol=1e-5)
    # the distributions are far from uniform: a probe reading the logits one row off would be caught
    assert np.ptp(flat[:, 0]) > 2.0
    assert np.abs(flat[:, 0] - flat[:, 4]).max() > 0.5


def test_ar_mia_end_to_end(ar, data, tmp_path):
    out = lmaudit("mia", "--model", ar.target, "--members", data.members, "--nonmembers", data.nonmembers,
                  "--attacks", "loss,zlib,min_k", "--bootstrap", "20", "--no-report", "--out", tmp_path / "run")
    assert_ok(out)
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["target"]["kind"] == "ar" and set(res["attacks"]) == {"loss", "zlib", "min_k"}
    for name, metrics in res["attacks"].items():
        assert 0.0 <= metrics["auc"] <= 1.0 and np.isfinite(metrics["auc_ci95"]).all(), name
    scores = pd.read_parquet(tmp_path / "run" / "scores.parquet")
    assert scores["label"].tolist() == [1] * len(MEMBERS) + [0] * len(NONMEMBERS)
    handle = load_model(ar.target)
    np.testing.assert_allclose(scores["loss"], per_text_mean_logp(handle.model, handle.tokenizer), atol=1e-5)


def test_ar_reference_with_another_tokenizer(ar, data, tmp_path, tokenizer, other_tokenizer):
    """Each model reads the text with its own tokenizer: reference score = mean logp(target) − mean logp(reference)."""
    assert len(other_tokenizer) < len(tokenizer)  # target ids would overflow the reference's embedding table
    assert any(tokenizer(t)["input_ids"] != other_tokenizer(t)["input_ids"] for t in TEXTS)
    out = lmaudit("mia", "--model", ar.target, "--reference", ar.reference, "--members", data.members,
                  "--nonmembers", data.nonmembers, "--attacks", "loss,reference", "--bootstrap", "20", "--no-report",
                  "--out", tmp_path / "run")
    assert_ok(out)
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert np.isfinite(res["attacks"]["reference"]["auc"]) \
        and np.isfinite(res["attacks"]["reference"]["auc_ci95"]).all()
    target, reference = load_model(ar.target), load_model(ar.reference)
    assert len(reference.tokenizer) == len(other_tokenizer)
    want = per_text_mean_logp(target.model, target.tokenizer) - per_text_mean_logp(reference.model, reference.tokenizer)
    scores = pd.read_parquet(tmp_path / "run" / "scores.parquet")
    np.testing.assert_allclose(scores["reference"], want, atol=1e-5)
    assert np.ptp(scores["reference"]) > 0.1


# ---- masked diffusion LMs with shipped modeling code -------------------------------------------------------------


@pytest.fixture(scope="module", params=["llada", "dream"])
def dlm(request, tmp_path_factory, tokenizer):
    """One DLM convention: the target and a reference (another seed, the same tokenizer)."""
    style = request.param
    target = save_dlm(style, tokenizer, tmp_path_factory.mktemp(f"{style}_target"), seed=0)
    reference = save_dlm(style, tokenizer, tmp_path_factory.mktemp(f"{style}_reference"), seed=1)
    return SimpleNamespace(style=style, target=target, reference=reference, shift=style == "dream",
                           mask_id=llada_mask_id(tokenizer) if style == "llada" else tokenizer.mask_token_id)


def test_dlm_convention_is_read_from_the_shipped_config(dlm, tokenizer):
    cfg = json.loads((dlm.target / "config.json").read_text())
    assert "lmaudit_kind" not in cfg and "lmaudit_shift_logits" not in cfg  # only the keys a real checkpoint has
    assert cfg["mask_token_id"] == dlm.mask_id
    handle = load_model(dlm.target, trust_remote_code=True)
    assert handle.kind == "dlm"  # from model_type
    assert type(handle.model).__module__.startswith("transformers_modules.")  # the folder's own code
    assert handle.adapter.mask_token_id == dlm.mask_id
    assert handle.adapter.shift_logits is dlm.shift
    assert handle.adapter.bidirectional is dlm.shift  # Dream's attention takes the 4-D mask the adapter builds
    if dlm.style == "llada":  # LLaDA's mask id is a reserved row, not the tokenizer's <mask>
        assert dlm.mask_id != tokenizer.mask_token_id and dlm.mask_id >= len(tokenizer)


def hand_masked_stats(model, ids: torch.Tensor, masked: np.ndarray, mask_id: int, shift: bool) -> np.ndarray:
    """(n, 4) float64 logp, top1_logp, mu, sigma of the tokens at ``masked`` positions, from one plain forward of
    ``ids`` (T,) with those positions replaced by ``mask_id``; Dream-style logits are read one row earlier."""
    noisy = ids.clone()
    noisy[masked] = mask_id
    with torch.no_grad():  # (T, V), no attention mask: nothing is padded; run where the model is, read on the CPU
        logits = model(input_ids=noisy[None].to(model.device)).logits[0].double().cpu()
    rows = masked - 1 if shift else masked
    lp = torch.log_softmax(logits[rows], dim=-1)
    p = lp.exp()
    mu = (p * lp).sum(-1)
    sigma = (p * (lp - mu[:, None]) ** 2).sum(-1).sqrt()
    return torch.stack([lp[torch.arange(len(masked)), ids[masked]], lp.max(-1).values, mu, sigma], 1).numpy()


def test_masked_probe_equals_a_hand_masked_forward(dlm):
    handle = load_model(dlm.target, trust_remote_code=True)
    tok = handle.tokenizer
    stats = probe_masked(handle, TextSet.from_texts(TEXTS), MaskPlan("random", budget=3, rho=0.3),
                         batch_size=5)  # ragged batches: padding must change nothing
    special = set(tok.all_special_ids)
    # the mask id a reader ignoring config.json would use (LLaDA); for Dream, whose <mask> it is, any other token
    other_mask = tok.mask_token_id if dlm.style == "llada" else tok.unk_token_id
    got, want, wrong_row, wrong_mask = [], [], [], []
    for i, text in enumerate(TEXTS):
        ids = torch.tensor(tok(text)["input_ids"])
        scorable = np.array([p for p, t in enumerate(ids.tolist()) if t not in special])
        entries = np.arange(stats.offsets[i], stats.offsets[i + 1])
        assert stats.n_positions[i] == len(scorable) and stats.n_patterns[i] == 3
        for j in range(3):
            e = entries[stats.pattern[entries] == j]  # ordered by position
            masked = scorable[stats.position[e]]
            got.append(np.stack([stats.logp[e], stats.top1_logp[e], stats.mu[e], stats.sigma[e]], 1))
            want.append(hand_masked_stats(handle.model, ids, masked, dlm.mask_id, dlm.shift))
            wrong_row.append(hand_masked_stats(handle.model, ids, masked, dlm.mask_id, not dlm.shift)[:, 0])
            wrong_mask.append(hand_masked_stats(handle.model, ids, masked, other_mask, dlm.shift)[:, 0])
    got, want = np.concatenate(got), np.concatenate(want)
    assert len(got) == len(stats.logp)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # what a wrong convention would have given: another logit row, another mask token
    assert np.abs(want[:, 0] - np.concatenate(wrong_row)).max() > 0.5
    assert np.abs(want[:, 0] - np.concatenate(wrong_mask)).max() > 0.5


def test_dlm_mia_end_to_end(dlm, data, tmp_path):
    args = ["--model", dlm.target, "--reference", dlm.reference, "--members", data.members,
            "--nonmembers", data.nonmembers, "--kind", "dlm", "--budget", "6", "--bootstrap", "20", "--no-report"]
    assert_user_error(lmaudit("mia", *args, "--out", tmp_path / "refused"), "custom modeling code",
                      "--trust-remote-code")
    out = lmaudit("mia", *args, "--trust-remote-code", "--out", tmp_path / "run")
    assert_ok(out)
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["target"]["kind"] == "dlm"
    expected = {s.name for s in list_attacks("dlm") if not s.needs_shadows}
    assert set(res["attacks"]) == expected and {"q_skew", "loss", "calibration"} <= expected
    for name, metrics in res["attacks"].items():
        assert 0.0 <= metrics["auc"] <= 1.0 and np.isfinite(metrics["auc_ci95"]).all(), name
        assert 0 < metrics["forwards_per_sample"] <= 6, name
    scores = pd.read_parquet(tmp_path / "run" / "scores.parquet")
    assert np.isfinite(scores[sorted(expected)].to_numpy()).all()
    assert np.ptp(scores["loss"]) > 0 and np.ptp(scores["q_skew"]) > 0
