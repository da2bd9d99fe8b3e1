"""Tiny seeded models fine-tuned on a few dozen texts (AR and DLM): the attacks must separate members."""

import json

import pandas as pd
import pytest

from helpers import make_texts, write_jsonl
from lmaudit.attacks import list_attacks
from lmaudit.data.loaders import load_texts
from lmaudit.models.build import finetune
from lmaudit.models.loading import load_causal_lm, load_model
from lmaudit.runs.mia import RunConfig, run_mia


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("e2e")
    members = load_texts(write_jsonl(root / "members.jsonl", make_texts(64, seed=100)))
    nonmembers = load_texts(write_jsonl(root / "nonmembers.jsonl", make_texts(64, seed=200)))
    out = finetune(tiny_model_dir, members, root / "target", mode="dft", epochs=25, lr=3e-3, block=32, batch_size=8)
    return root, out, members, nonmembers


def test_loss_attack_separates_members(finetuned, tiny_model_dir):
    root, target_dir, members, nonmembers = finetuned
    result = run_mia(load_causal_lm(target_dir), members, nonmembers, reference=load_causal_lm(tiny_model_dir),
                     config=RunConfig(n_bootstrap=200))
    assert result.attacks["loss"]["auc"] > 0.8
    assert result.attacks["reference"]["auc"] > 0.8
    path = result.write(root / "run")
    data = json.loads(path.read_text())
    for key in ("lmaudit_version", "git_commit", "created", "config", "target", "reference", "n_members",
                "n_nonmembers"):
        assert key in data
    assert data["target"]["fingerprint"] and data["n_members"] == 64
    m = data["attacks"]["gap_k"]
    assert m["params"] == {"k": 0.2, "window": 3, "smooth": "sequential"}
    assert m["auc_ci95"][0] <= m["auc"] <= m["auc_ci95"][1]
    assert {"tpr@10%fpr", "tpr@1%fpr", "tpr@0.1%fpr"} <= set(m)
    scores = pd.read_parquet(root / "run" / "scores.parquet")
    assert len(scores) == 128 and scores["label"].sum() == 64
    # a reference is given, shadows are not; opt-in attacks (ReCaLL, DC-PDD) run only when named
    runnable = {s.name for s in list_attacks("ar") if not s.needs_shadows and not s.opt_in}
    # p_value, rank: the most exposed records; the blind baselines' out-of-fold scores beside the attacks'
    # and the reference's own scores under every reference-free attack (reference:NAME)
    free = {s.name for s in list_attacks("ar") if not s.needs_shadows and not s.needs_reference and not s.opt_in}
    # digest: each text's content digest, which pairs runs of the same texts (PrivLeak)
    assert set(scores.columns) == ({"id", "digest", "label", "p_value", "rank", "blind_ngrams", "blind_features"}
                                   | runnable
                                   | {f"reference:{n}" for n in free})
    assert data["set_check"]["reference"]["differ"] is False  # the base never saw either draw
    assert data["set_check"]["differ"] is False  # two draws of the same generator: nothing to see without the model
    attack = data["exposure_attack"]  # p_value and rank are those of the named attack's scores
    from lmaudit.report.summary import member_exposure, strongest_attack

    assert attack == strongest_attack(data["attacks"])
    p_value, _ = member_exposure(scores[attack].to_numpy(), scores["label"].to_numpy())
    assert scores["p_value"].to_numpy() == pytest.approx(p_value)


def test_same_seed_same_scores(finetuned):
    root, target_dir, members, nonmembers = finetuned
    a = run_mia(load_causal_lm(target_dir), members, nonmembers, config=RunConfig(n_bootstrap=50, use_cache=False))
    b = run_mia(load_causal_lm(target_dir), members, nonmembers, config=RunConfig(n_bootstrap=50))
    for name in a.scores:
        assert (a.scores[name] == b.scores[name]).all()
    assert a.attacks["loss"]["auc_ci95"] == b.attacks["loss"]["auc_ci95"]


def test_reference_with_its_own_tokenizer(finetuned, tmp_path):
    """Each model tokenises the text itself; the reference attack compares per-sample means."""
    from lmaudit.models.presets import Preset, build_ar_model
    from lmaudit.models.tokenizer import train_tokenizer

    root, target_dir, members, nonmembers = finetuned
    other_tok = train_tokenizer(make_texts(500, seed=7), vocab_size=300)
    preset = Preset("ref", hidden=32, layers=1, heads=2, intermediate=64, context=128, pretrain_tokens=0, block=32,
                    batch=8, lr=1e-3)
    build_ar_model(preset, other_tok, seed=3).save_pretrained(tmp_path / "ref")
    other_tok.save_pretrained(tmp_path / "ref")
    ref = load_causal_lm(tmp_path / "ref")
    assert len(ref.tokenizer) != len(load_causal_lm(target_dir).tokenizer)
    result = run_mia(load_causal_lm(target_dir), members, nonmembers, reference=ref,
                     config=RunConfig(attacks=["reference"], n_bootstrap=50))
    assert result.attacks["reference"]["auc"] > 0.8  # the untrained reference does not mask the target's memorisation


@pytest.mark.slow  # kept out of the default run: the suite must stay under 5 minutes
def test_dlm_finetuned_members_are_detected(tmp_path, tiny_model, tokenizer):
    """A tiny Dream-style DLM (the causal fixture run with full attention and shifted logits)
    fine-tuned with the diffusion objective: every DLM attack runs, and the likelihood-based
    ones separate members from held-out texts."""
    import copy

    from lmaudit.models.dlm import dlm_from_ar

    base = tmp_path / "base"
    dlm_from_ar(copy.deepcopy(tiny_model), tokenizer).save_pretrained(base)
    tokenizer.save_pretrained(base)
    members = load_texts(write_jsonl(tmp_path / "m.jsonl", make_texts(32, seed=300)))
    nonmembers = load_texts(write_jsonl(tmp_path / "n.jsonl", make_texts(32, seed=400)))
    target = finetune(base, members, tmp_path / "dlm", mode="dft", epochs=100, lr=3e-3, block=32, batch_size=8)
    result = run_mia(load_model(target), members, nonmembers, reference=load_model(base),
                     config=RunConfig(n_bootstrap=50))
    aucs = {k: v["auc"] for k, v in result.attacks.items()}
    assert set(aucs) == {s.name for s in list_attacks("dlm")}
    assert aucs["loss"] > 0.8 and aucs["calibration"] > 0.8
