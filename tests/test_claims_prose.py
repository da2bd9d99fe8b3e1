"""CLAIMS.md's header and regime texts read their figures from the stored results (or, for what a result names
without storing its size, from lmaudit's own definitions): each test plants a changed value into a minimal record and
checks that the text moves with it, and that no figure typed by hand stays behind."""

import dataclasses
import json

import pytest

from lmaudit.claims import added as a
from lmaudit.claims import gapk as g
from lmaudit.claims import headline as h
from lmaudit.claims import models as md
from lmaudit.claims import pii as pii
from lmaudit.claims import qskew as q
from lmaudit.claims import regimes as rg
from lmaudit.claims import smi as smi
from lmaudit.claims.table import build_claims
from lmaudit.models.presets import PRESETS, build_ar_model

COUNTS = {"n_members": 200, "n_nonmembers": 200}  # a membership record's sets, read by the unpaired intervals

# ---------------------------------------------------------------- the header


class _Vocabulary:
    """As much of a tokenizer as build_ar_model reads."""
    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("vocab", [4096, 1000])
def test_the_parameter_count_is_that_of_the_model_the_preset_builds(preset, vocab):
    built = build_ar_model(preset, _Vocabulary(vocab))
    assert md.preset_parameters(PRESETS[preset], vocab) == sum(p.numel() for p in built.parameters())


def _write(root, name: str, experiment: dict, torch: str = "2.13.0+cpu", corpus: str = "c0ffee") -> None:
    (root / name).mkdir()
    rec = {"experiment": experiment, "packages": {"torch": torch}, "corpus": corpus}
    (root / name / "results.json").write_text(json.dumps(rec))


def _header(root) -> str:
    return build_claims(root).split("\n")[2]


def test_the_header_reads_the_presets_vocabulary_base_and_torch_build_from_the_records(tmp_path, monkeypatch):
    # names no claim reads, so every judge says 'not run' and only the header reads these records
    _write(tmp_path, "tiny-x", {"preset": "tiny", "kind": "dlm", "base": "", "vocab_size": 4096,
                                "cells": {"centre": {}, "wide": {"preset": "small"}}})
    _write(tmp_path, "real-x", {"preset": "tiny", "kind": "ar", "base": "smollm2-135m", "lora": 16,
                                "vocab_size": 4096})
    text = _header(tmp_path)
    assert "(the `tiny` preset: 2 layers of width 128, 1.05M parameters with the corpus' 4,096-token vocabulary; " \
           "the 'wide' regime of tiny-x uses `small`: 4 layers of width 256, 5.25M parameters)" in text
    assert "`smollm2-135m`, SmolLM2-135M-Instruct (Llama, 134.5M parameters), 4-bit GGUF" in text
    assert "pretrained by its authors (that pretraining is not measured here)" in text
    assert "on the corpus of each record (`c0ffee…`)" in text and "with torch 2.13.0+cpu (a CPU build)" in text
    for typed in ("trillions", "30-layer", "49,152", "5.2M)"):  # the figures once typed by hand
        assert typed not in text

    # the preset's definition changes: the header follows it, and the parameter count with it
    monkeypatch.setitem(PRESETS, "tiny", dataclasses.replace(PRESETS["tiny"], layers=3))
    assert "the `tiny` preset: 3 layers of width 128, 1.31M parameters" in _header(tmp_path)


def test_the_header_follows_a_changed_vocabulary_base_torch_build_and_corpus(tmp_path):
    _write(tmp_path, "tiny-x", {"preset": "tiny", "base": "", "vocab_size": 8192}, torch="2.13.0+cu121")
    _write(tmp_path, "real-x", {"base": "my-model", "vocab_size": 8192}, torch="2.13.0+cu121", corpus="beef")
    text = _header(tmp_path)
    assert "2 layers of width 128, 1.57M parameters with the corpus' 8,192-token vocabulary" in text  # 8192 × 128 …
    assert "`my-model`, not a model lmaudit names, so its size is not known here" in text
    assert "134.5M" not in text and "CPU" not in text and "with torch 2.13.0+cu121" in text
    assert "the corpus of each record (`beef…`)" in text and "the same embedded corpus" not in text


# ---------------------------------------------------------------- LoRA or every weight, from the stored `lora`

def _unlearning(**e) -> dict:
    return {"ul": {"experiment": {"base": "m", "n_members": 200, "forget_fractions": [0.1], "seeds": [0, 1],
                                  "n_shadows": 0, **e}, "unlearning": {}}}


def test_the_unlearning_regime_says_lora_only_where_the_record_stores_a_rank():
    lora = rg.unlearning(_unlearning(lora=8), name="ul")
    assert "`m` fine-tuned (LoRA rank 8) on 200 passages, 10% forgotten by unlearning adapters (LoRA rank 8) on the " \
           "target; 2 seeds, no LiRA" in lora
    for full in (rg.unlearning(_unlearning(), name="ul"), rg.unlearning(_unlearning(lora=0), name="ul")):  # absent, 0
        assert "`m` fine-tuned (every weight) on 200 passages, 10% forgotten in every weight" in full
        assert "LoRA" not in full


def test_the_continued_pretraining_regime_reads_its_model_and_lora():
    rec = {"experiment": {"base": "m", "lr": 3e-5, "pretrain_tokens": 60_000, "seeds": [0], "attacks": [],
                          "lora": 4}, "paired": {}, "rows": {}}
    assert "`m` continued-pretrained (LoRA rank 4, lr 3e-5) for one pass over 60,000 tokens" in \
        rg.pretraining({"pt": rec}, name="pt")
    del rec["experiment"]["lora"]
    text = rg.pretraining({"pt": rec}, name="pt")
    assert "`m` continued-pretrained (every weight, lr 3e-5)" in text and "SmolLM2" not in text


def test_the_fine_tuned_gap_k_and_low_fpr_regimes_read_each_experiments_model_and_lora():
    def rec(**e):
        per = [{"seed": 0, "diff": 0.01, "ci95": [-0.01, 0.03],
                "tpr@5%fpr": {"diff": 0.01, "ci95": [-0.01, 0.03]}, "tpr@1%fpr": {"diff": 0.0, "ci95": [-0.01, 0.01]}}]
        return {"paired": {"compare": "gap_k", "vs": {"min_k_pp": per}},
                "rows": {"gap_k": {"auc": [0.6, 0.0]}, "min_k_pp": {"auc": [0.6, 0.0]}},
                "experiment": {"n_members": 200, "n_nonmembers": 1000, "epochs": 3, **e}}

    recs = {"lo": rec(base="m", lora=16), "full": rec(base="n")}
    assert "(lo: `m`, LoRA rank 16; full: `n`, every weight)" in g.finetuned_gap("lo", "full")(recs).regime
    lora = g.gap_low_fpr_paired(recs, name="lo", fallback="pt").regime
    assert "a fine-tuning of `m` (LoRA rank 16, 3 epochs)" in lora
    low = g.gap_low_fpr_paired(recs, name="full", fallback="pt").regime
    assert "a fine-tuning of `n` (every weight, 3 epochs)" in low and "LoRA" not in low
    assert "the continued-pretraining run, pt, is not stored" in low  # not said to store nothing when absent


def test_the_real_dlm_setting_reads_lora():
    e = {"base": "m", "adapt_tokens": 100, "lr": 5e-4, "epochs": 10, "n_members": 60, "n_nonmembers": 60,
         "budget": 8, "seeds": [0]}
    assert "fine-tuned (LoRA rank 16, lr 0.0005)" in q.real_dlm_setting({"experiment": {**e, "lora": 16}})
    assert "fine-tuned (every weight, lr 0.0005)" in q.real_dlm_setting({"experiment": e})


# ---------------------------------------------------------------- budgets and counts, from the record

def _rho(**e) -> dict:
    rows = {k: {"auc": [0.7, 0.01]} for k in ("ρ = 0.15", "ρ = 0.35")}
    vs = {"ρ = 0.15": [{"seed": 0, "diff": 0.05, "ci95": [0.02, 0.08]}]}
    return {"r": {"paired": {"compare": "ρ = 0.35", "vs": vs}, "rows": rows, "experiment": e}}


def test_the_rho_regime_reads_the_stored_budget_and_assumes_none():
    assert "Each ρ gets the same 8 masked forwards per text" in q.rho_maximises(_rho(budget=8), name="r").regime
    absent = q.rho_maximises(_rho(), name="r").regime
    assert "the same number of masked forwards (not stored) per text" in absent and "16" not in absent


def _pii_extraction(extract: dict, moved: float = 0.0) -> dict:
    row = lambda k, u: {"discoverable@p=0.5": k, "unseen_discoverable": {"discoverable@p=0.5": u},  # noqa: E731
                        "convergence": {"not_converged_fraction": moved}}
    rows = {"email / AR": [row(41, 3)], "email / DLM max-step": [row(0, 0)],
            "phone / AR": [row(0, 0)], "phone / DLM max-step": [row(0, 0)]}
    return {"x": {"pii_rows": rows, "n_train": 60, "n_unseen": 60,
                  "experiment": {"extract": extract, "lr": 5e-4, "lora": 16, "epochs": 10, "n_members": 60}}}


def test_the_pii_query_budget_is_read_from_the_record_and_never_assumed():
    assert "at n = 2,500, p = 0.5" in pii.ar_leaks_more(_pii_extraction({"n": 2500}), name="x").ours
    absent = pii.ar_leaks_more(_pii_extraction({}), name="x").ours
    assert "at a query budget n that is not stored, p = 0.5" in absent and "10,000" not in absent


def test_the_unconverged_estimate_sentence_is_a_possible_reason_not_a_fact():
    f = pii.ar_leaks_more(_pii_extraction({"n": 10_000}, moved=0.5), name="x")
    reason = f.regime.split("not testable at this size.")[-1]
    assert "Possible reason" in reason and "may fall below its expectation" in reason
    assert "is usually below" not in f.regime


def test_the_real_pii_regime_reads_its_budget_model_and_lora():
    def rec(extract, **e):
        rows = {"email / AR": [{"discoverable@p=0.5": 5, "unseen_discoverable": {"discoverable@p=0.5": 2}}]}
        return {"rp": {"experiment": {"base": "m", "epochs": 10, "extract": extract, **e}, "pii_rows": rows,
                       "n_train": 20, "n_unseen": 20}}

    text = rg.pii(rec({"p": [0.5], "n": 500}, lora=4), name="rp")
    assert "`m` fine-tuned (LoRA rank 4) for 10 epochs" in text and "(n, p)-discoverable at n = 500, p = 0.5" in text
    absent = rg.pii(rec({"p": [0.5]}), name="rp")
    assert "fine-tuned (every weight)" in absent and "a query budget n that is not stored" in absent
    assert "10,000" not in absent


def test_the_tpr_regime_counts_the_stored_non_members():
    def rec(n):
        rows = {r: {"per_seed": [{"tpr@1%fpr": x}] * 5} for r, x in (("q_skew", 0.2), ("loss", 0.1))}
        return {"rows": rows, "experiment": {"n_nonmembers": n, "seeds": list(range(5))}}

    assert "1% FPR is 10 of a's 1,000 non-members" in h.tpr_at_1({"a": rec(1000)}, names=("a",)).regime
    assert "1% FPR is 3 of a's 300 non-members" in h.tpr_at_1({"a": rec(300)}, names=("a",)).regime


def test_the_smi_cost_row_reads_the_stored_seconds():
    def cost(smi, features):
        return {"unlearning-audit": {"cost_s": {"smi": smi, "smi-m": smi / 2, "features": features, "smi-scores": 0.01,
                                                "smi-m-scores": 0.01, "lira_probes": 2.0,
                                                "lira_shadow_training": 300.0}}}

    found = smi.smi_cost(cost(0.003, 0.88)).ours
    assert "SMI 0.003 and SMI-M 0.002 on hidden features (+ 0.88 to extract them)" in found
    assert "plus 300.0 per seed for the shadow models" in smi.smi_cost(cost(0.5, 2.5)).ours


# ---------------------------------------------------------------- which attack is ahead, from the stored values

def _paraphrase(unperturbed_gap: float) -> dict:
    rows = {f"s: {r}": {"per_seed": [{"auc": x}] * 3} for r, x in (("perturbed gap_k", 0.55), ("perturbed min_k_pp",
                                                                                            0.6),
                                                                   ("gap_k", unperturbed_gap), ("min_k_pp", 0.6))}
    return {"pt": {"paired": {"s": []}, "rows": rows, "experiment": {"seeds": [0, 1, 2], **COUNTS}}}


def test_the_paraphrase_regime_says_which_attack_leads_from_the_stored_aucs():
    assert "s: perturbed min_k_pp ahead, unperturbed gap_k ahead" in g.paraphrase(_paraphrase(0.7), name="pt").regime
    assert "s: perturbed min_k_pp ahead, unperturbed min_k_pp ahead" in \
        g.paraphrase(_paraphrase(0.5), name="pt").regime
    assert "(Min-K%++ ahead)" not in g.paraphrase(_paraphrase(0.7), name="pt").regime


@pytest.mark.parametrize("diff, leads", [(0.03, False), (-0.03, True)])
def test_the_pretraining_gap_gives_its_possible_reason_only_where_min_k_pp_leads(diff, leads):
    rec = {"paired": {"seen once": [{"seed": 0, "diff": diff, "ci95": [diff - 0.02, diff + 0.02]}]}, "rows": {},
           "experiment": {"attacks": [], "pretrain_tokens": 9, "preset": "p", "kind": "ar"}}
    f = g.pretraining_gap({"pt": rec}, name="pt")
    assert "The `p` AR model pretrained from scratch on 9 tokens" in f.regime
    assert ("Min-K%++ leads on the mean over seeds in seen once. Possible reason:" in f.regime) == leads


def test_the_smoothing_reason_appears_only_where_no_smoothing_leads():
    def rec(none):
        rows = {f"s: gap_k smooth={k}": {"per_seed": [{"auc": x}] * 3}
                for k, x in (("sequential", 0.7), ("shuffled", 0.6), ("none", none))}
        return {"pt": {"paired": {"s": []}, "rows": rows, "experiment": {"seeds": [0, 1, 2], **COUNTS}}}

    assert "No smoothing has the highest mean AUC in s. Possible reason" in g.smoothing(rec(0.8), name="pt").regime
    assert "Possible reason" not in g.smoothing(rec(0.5), name="pt").regime


def test_the_misaligned_regime_describes_only_the_stored_references():
    auc = lambda x: {"auc": [x, 0.0], "per_seed": [{"auc": x}] * 3}  # noqa: E731
    rows = {"golden / q_skew": auc(0.9), "golden / calibration": auc(0.8), "other-seed / q_skew": auc(0.85),
            "other-seed / calibration": auc(0.8)}
    vs = {k: [{"seed": i, "diff": 0.01, "ci95": [-0.01, 0.03]} for i in range(3)] for k in rows if "golden" not in k}
    rec = {"rows": rows, "paired": {"compare": "golden / q_skew", "vs": vs},
           "experiment": {"references": ["golden", "other-seed"], **COUNTS}}
    why = q.misaligned({"dlm-misaligned-ref": rec}).regime
    assert "Misaligned references here: other-seed, a base pretrained with another seed" in why
    assert "perturbed" not in why


# ---------------------------------------------------------------- the real model's name, from its record

def test_the_recent_models_row_names_the_stored_real_model():
    pt = {"experiment": {"pretrain_tokens": 300_000, "preset": "tiny", "kind": "ar"}}
    f = a.not_recent({"ar-pretraining-detection": pt, "real-pretraining-share": {"experiment": {"base": "z"}}})
    assert "the `tiny` AR model is pretrained here from scratch" in f.ours and "judged on `z` (its column)" in f.regime
    assert "SmolLM2" not in a.not_recent({"ar-pretraining-detection": pt}).regime


def test_the_set_validity_regime_does_not_claim_what_a_pretrained_model_never_saw():
    def rec(base):
        cell = {"seed": 0, "prior": {"auc": 0.9, "ci95": [0.85, 0.95], "attack": "zlib", "differ": False, "p": 1.0},
                "best": {"auc": 0.95, "attack": "zlib"}}
        return {"sv": {"cells": {"shifted / fine-tuned": [cell], "iid / fine-tuned": [cell]},
                       "experiment": {"kind": "ar", "base": base, "seeds": [0]}}}

    real = a.prior_separates(rec("m"), name="sv").regime
    assert "`m` was not trained on either here (whether its authors' pretraining held them is not known here)" in real
    assert "never seen" not in real
    assert "the base model was pretrained here without either" in a.prior_separates(rec(""), name="sv").regime


@pytest.mark.parametrize("low, said", [(0.29, "No feature set reads the untouched model's forget set near 0"),
                                       (0.05, "reads near 0 on smi-m-scores (0.05")])
def test_the_unlearning_regime_says_whether_any_audit_reads_the_untouched_forget_set_near_zero(low, said):
    from lmaudit.claims.regimes import untouched_floor

    cell = lambda m: {"mean": m, "std": 0.1, "n_undefined": 0}  # noqa: E731
    rec = {"unlearning": {"0.5 / none / smi": cell(0.52), "0.5 / none / smi-m-scores": cell(low),
                          "0.5 / none / threshold-reference": cell(0.01),  # a per-sample audit: not counted
                          "0.5 / retrain / smi": cell(0.5)}}
    text = untouched_floor(rec)
    assert said in text and ("smi-m-scores" in text) and "threshold" not in text
