"""Experiments on a pretrained ``base`` (a model folder standing in for SmolLM2): continued pretraining with the
members in the stream, LoRA unlearning adapters on a LoRA target without LiRA, and PII extraction on an AR base."""

import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

import lmaudit
from helpers import mini_experiment as mini
from lmaudit.attacks.gap_k import large_gap_counts
from lmaudit.errors import LmauditError
from lmaudit.experiments.registry import load_experiment
from lmaudit.experiments.runner import run_experiment
from lmaudit.experiments.types.pretraining import _model, stream
from lmaudit.experiments.types.unlearning_audit import _plans, _variant_configs
from lmaudit.experiments.workspace import Workspace
from lmaudit.models.sources import is_adapter_dir, read_adapter_config, resolve_source
from lmaudit.report.build import experiment_report
from lmaudit.runs.mia import RunConfig


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("base-experiment-cache")


@pytest.fixture(autouse=True)
def _one_cache(shared_cache, monkeypatch):
    monkeypatch.setenv("LMAUDIT_CACHE", str(shared_cache))


def _training(folder):
    return json.loads((folder / "lmaudit_training.json").read_text())


def test_continued_pretraining_puts_each_member_in_the_bases_stream_exactly_r_times(tmp_path, tiny_model_dir,
                                                                                    tokenizer):
    exp = mini(tmp_path, name="cpt", type="pretraining-detection", kind="ar", base=str(tiny_model_dir), n_members=8,
               n_nonmembers=8, pretrain_tokens=6000, repeats=[1, 3], ks=[0.1], smooth=["none"], perturb=False,
               lr=1e-3, block=32, batch_size=8, gap_tau=1.0)
    ws = Workspace(exp)
    members, _ = ws.data(0)
    s3 = stream(ws, members, 3, 0)
    counts = Counter(s3.texts)
    assert all(counts[t] == 3 for t in members.texts)  # each member three times, the rest pool passages once
    assert {t for t, c in counts.items() if c > 1} == set(members.texts)
    tokens = sum(len(ids) + 1 for ids in tokenizer(s3.texts)["input_ids"])
    last = max(len(ids) + 1 for ids in tokenizer(s3.texts)["input_ids"])
    assert 6000 <= tokens < 6000 + last  # filled to the budget, one passage past it at most
    assert s3.texts != stream(ws, members, 3, 1).texts and s3.texts == stream(ws, members, 3, 0).texts
    small = Workspace(replace(exp, pretrain_tokens=100))  # the members' copies alone exceed it: nothing else
    assert Counter(stream(small, members, 3, 0).texts) == {t: 3 for t in members.texts}
    for r in (1, 3):  # member_share: the stream sized so that the members' copies are that share of it
        shared = stream(Workspace(replace(exp, member_share=0.25)), members, r, 0)
        lengths = [len(ids) + 1 for ids in tokenizer(shared.texts)["input_ids"]]
        copies = sum(n for t, n in zip(shared.texts, lengths) if t in set(members.texts))
        assert copies == r * sum(len(ids) + 1 for ids in tokenizer(members.texts)["input_ids"])
        assert 0.25 - max(lengths) / sum(lengths) <= copies / sum(lengths) <= 0.25
    with pytest.raises(LmauditError, match="member_share = 0.001: the pretraining pool lacks"):
        stream(Workspace(replace(exp, member_share=0.001)), members, 3, 0)

    folder = run_experiment(exp, out_root=tmp_path / "results", command="lmaudit run cpt.toml")
    res = json.loads((folder / "results.json").read_text())
    assert set(res["paired"]) == {"seen 1×", "seen 3×"}
    table = (folder / "table.md").read_text()
    assert "continued pretraining for one pass (every weight, lr 0.001, 32-token blocks) over 6,000 tokens" in table
    # the large-gap shares: each set's tokens with |g_t| > τ, as a probe of that set alone counts them
    lg = res["large_gaps"]["seen 3×"][0]
    assert lg["tau"] == 1.0 and lg["diff"] == pytest.approx(lg["nonmembers"] - lg["members"])
    assert lg["ci95"][0] <= lg["diff"] <= lg["ci95"][1]
    _, nonmembers = ws.data(0)
    for texts, share in ((members, lg["members"]), (nonmembers, lg["nonmembers"])):
        records = lmaudit.probe(str(_model(ws, exp, members, 3, 0)), texts,
                                config=RunConfig(attacks=["gap_k"], use_cache=False))
        counts, totals = large_gap_counts(next(iter(records.stats.values())), 1.0)
        assert 0 < counts.sum() < totals.sum() and abs(share * totals.sum() - counts.sum()) <= 1
    assert "Share of tokens whose normalised top-1 gap |g_t| exceeds τ = 1 " in table


def test_a_continued_pretraining_trains_the_base_one_pass_over_the_stream(tmp_path, tiny_model_dir, shared_cache):
    exp = mini(tmp_path, name="cpt1", type="pretraining-detection", kind="ar", base=str(tiny_model_dir), n_members=6,
               n_nonmembers=6, pretrain_tokens=800, repeats=[2], ks=[0.1], smooth=["none"], perturb=False, lr=1e-3,
               block=32, batch_size=8)
    run_experiment(exp, out_root=tmp_path / "results")
    ws = Workspace(exp)
    members, _ = ws.data(0)
    want = stream(ws, members, 2, 0).fingerprint()
    records = [_training(m) for m in (shared_cache / "models").iterdir() if (m / "lmaudit_training.json").exists()]
    (rec,) = [r for r in records if r.get("data_fingerprint") == want]
    assert rec["stage"] == "finetune" and rec["base"] == str(tiny_model_dir) and rec["train_config"]["epochs"] == 1


def test_an_unlearning_audit_on_a_lora_target_trains_adapters_and_may_leave_lira_out(tmp_path, tiny_model_dir,
                                                                                     shared_cache):
    exp = mini(tmp_path, name="ul", type="unlearning-audit", kind="ar", base=str(tiny_model_dir), lora=4, lr=3e-2,
               block=32, batch_size=8, n_members=24, n_nonmembers=24, forget_fractions=[0.25], n_shadows=0,
               unlearn_methods=["none", "gradient_ascent"], unlearn={"epochs": 1.0, "lr": 3e-2},
               smi_m_variants={"same": {"kernel": "rbf", "bandwidth_factor": 1.0}, "lap": {"kernel": "laplacian"}})
    folder = run_experiment(exp, out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert {k.split(" / ")[2] for k in res["unlearning"]} == {"smi", "smi-m", "smi-scores", "smi-m-scores",
                                                             "threshold-loss", "threshold-reference",
                                                             "smi-m-scores same", "smi-m-scores lap"}
    raw = res["rho_unclipped"]  # a variant with the default settings is the default audit, on the same features
    np.testing.assert_equal(raw["0.25 / none / smi-m-scores same"], raw["0.25 / none / smi-m-scores"])
    assert res["cost_s"]["lira_shadow_training"] is None
    table = (folder / "table.md").read_text()
    assert "score probes: target + reference (per model audited; no LiRA)" in table and "shadow training" not in table
    unlearned = [m for m in (shared_cache / "models").iterdir()
                 if (m / "lmaudit_training.json").exists() and _training(m).get("stage") == "unlearn"]
    (ga,) = [m for m in unlearned if _training(m)["method"] == "gradient_ascent"]
    target = resolve_source(ga).adapters[0]  # the LoRA target, itself on the base
    assert is_adapter_dir(ga) and read_adapter_config(ga)["base_model_name_or_path"] == str(target.resolve())
    assert resolve_source(ga).folder.resolve() == tiny_model_dir.resolve()


def test_smi_m_variants_run_on_the_score_features_with_their_own_settings():
    hidden, scores = ["h"] * 3, ["s"] * 3
    plans = _plans(hidden, scores, _variant_configs({"lap": {"kernel": "laplacian"},
                                                     "wide": {"bandwidth_factor": 2.0}}))
    by = {name: (fs, conf) for name, fs, conf in plans}
    assert list(by) == ["smi", "smi-m", "smi-scores", "smi-m-scores", "smi-m-scores lap", "smi-m-scores wide"]
    assert by["smi-m"][0] is hidden and by["smi-m-scores lap"][0] is scores and by["smi-m-scores wide"][0] is scores
    assert (by["smi-m-scores lap"][1].method, by["smi-m-scores lap"][1].kernel) == ("smi-m", "laplacian")
    assert (by["smi-m-scores wide"][1].kernel, by["smi-m-scores wide"][1].bandwidth_factor) == ("rbf", 2.0)
    assert by["smi-scores"][1].method == "smi"


@pytest.mark.parametrize("variant, match", [({"kernal": "rbf"}, r"smi_m_variants.v: unknown key\(s\) kernal"),
                                            ({"kernel": "cosine"}, r"smi_m_variants.v: unknown kernel 'cosine'")])
def test_a_bad_smi_m_variant_is_refused_before_anything_is_trained(tmp_path, variant, match):
    exp = mini(tmp_path, type="unlearning-audit", kind="ar", n_shadows=0, smi_m_variants={"v": variant})
    with pytest.raises(LmauditError, match=match):
        run_experiment(exp, out_root=tmp_path)
    assert not (tmp_path / exp.name).exists()


@pytest.mark.parametrize("n, ok", [(0, True), (1, False), (-1, False)])
def test_n_shadows_is_zero_or_at_least_two(tmp_path, n, ok):
    if n < 0:
        with pytest.raises(LmauditError, match="n_shadows must be an integer ≥ 0, got -1"):
            mini(tmp_path, type="unlearning-audit", kind="ar", n_shadows=n)
        return
    if not ok:  # refused as the file is read, before anything runs
        with pytest.raises(LmauditError, match="n_shadows must be 0 .* or at least 2"):
            mini(tmp_path, type="unlearning-audit", kind="ar", n_shadows=n)
        return
    assert mini(tmp_path, type="unlearning-audit", kind="ar", n_shadows=n).n_shadows == n


def test_pii_extraction_on_an_ar_base_has_the_ar_rows_only(tmp_path, tiny_model_dir):
    folder = run_experiment(mini(tmp_path, name="pii", type="pii-extraction", kind="ar", base=str(tiny_model_dir),
                                 pii_fields=["email"], block=128, lr=1e-3, batch_size=8), out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert set(res["pii_rows"]) == {"email / AR"} and set(res["likelihood_shift"]) == {"email / AR"}
    assert "left context only." in (folder / "table.md").read_text()
    assert experiment_report(folder, res).facts["model"] == f"ar {tiny_model_dir}"  # the base, not a preset


def test_pii_extraction_on_a_dlm_adapted_from_an_ar_base_has_both_models_rows(tmp_path, tiny_model_dir):
    folder = run_experiment(mini(tmp_path, name="pii-dlm", type="pii-extraction", kind="dlm", base=str(tiny_model_dir),
                                 pii_fields=["email"], block=128, lr=1e-3, batch_size=8, adapt_tokens=4000,
                                 extract={"trajectories": 2}), out_root=tmp_path)
    res = json.loads((folder / "results.json").read_text())
    assert set(res["pii_rows"]) == {"email / AR", "email / DLM one-step", "email / DLM max-step"}
    assert "for both model kinds." in (folder / "table.md").read_text()


def test_the_committed_real_model_files_name_the_real_base():
    from pathlib import Path

    for name in ("real-unlearning", "real-pretraining-detection", "real-pii-extraction"):
        exp = load_experiment(Path(__file__).parent.parent / "experiments" / f"{name}.toml")
        assert exp.base == "smollm2-135m" and exp.kind == "ar"
