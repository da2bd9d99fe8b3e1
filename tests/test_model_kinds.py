"""What differs between the kinds of model an experiment builds, answered by models/kinds.py: the base each kind is
built from, the step counts and row names of its extractions, what the unlearning audit runs on, and an AR folder
read as a DLM before adaptation. The experiments pass a kind on as data; these tests pin what they compute with it
(the same models, steps and row names as when they branched on the kind themselves)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import lmaudit.api
from lmaudit.data.loaders import TextSet
from lmaudit.errors import LmauditError
from lmaudit.experiments import config as experiment_config
from lmaudit.experiments.types import extraction_relaxed, pii_extraction, unlearning_audit
from lmaudit.experiments.workspace import Workspace
from lmaudit.models import kinds
from lmaudit.models.adapters import DLMAdapter
from lmaudit.models.loading import load_model


def test_every_kind_an_experiment_trains_has_its_facts():
    assert set(kinds.LABELS) == set(kinds.EXTRACTION_STEPS) == set(experiment_config.KINDS) == {"ar", "dlm"}
    # the experiments' registry still reads its own copy: the two must say the same
    assert kinds.ADAPTED_FROM == {"dlm": "ar"}


def test_a_dlm_base_is_the_ar_base_adapted_and_an_ar_base_is_pretrained():
    assert kinds.adapted_from("dlm") == "ar" and kinds.adapted_from("ar") is None
    assert kinds.lineage("ar") == ("ar",) and kinds.lineage("dlm") == ("ar", "dlm")


def test_extraction_steps_and_row_names():
    assert kinds.extraction_steps("ar") == ["1"] and kinds.extraction_steps("dlm") == ["1", "max"]
    steps = kinds.extraction_steps("dlm")
    steps.append("2")  # an ExtractConfig keeps the list it is given: the table never changes through it
    assert kinds.extraction_steps("dlm") == ["1", "max"]
    assert kinds.exact_extraction("ar") and not kinds.exact_extraction("dlm")
    assert [kinds.label(k) for k in ("ar", "dlm")] == ["AR", "DLM"]
    # an AR extraction has one exact row (runs/extract labels it "ar"), named by its kind alone
    assert kinds.extraction_row("ar", "ar") == kinds.extraction_row("ar", "1") == "AR"
    assert kinds.extraction_row("dlm", "1") == "DLM one-step" and kinds.extraction_row("dlm", "max") == "DLM max-step"
    with pytest.raises(KeyError):  # a step count the experiments never ask for has no row name
        kinds.extraction_row("dlm", "4")


def test_the_unlearning_audit_runs_on_ar_models_only():
    assert kinds.unlearning_audited("ar") and not kinds.unlearning_audited("dlm")
    dlm = unlearning_audit.UnlearningConfig(name="x", type="unlearning-audit", kind="dlm")
    with pytest.raises(LmauditError, match="runs on AR models"):
        unlearning_audit.run(None, dlm)  # refused before the workspace builds anything
    with pytest.raises(LmauditError, match="n_shadows must be 0"):  # a declared setting: refused on construction
        unlearning_audit.UnlearningConfig(name="x", type="unlearning-audit", kind="ar", n_shadows=1)


def test_an_ar_folder_read_as_a_dlm_keeps_its_weights_and_runs_with_full_attention(tiny_model_dir):
    handle = kinds.dlm_before_adaptation(tiny_model_dir)
    adapter, tok = handle.adapter, handle.tokenizer
    ar = load_model(tiny_model_dir)
    assert handle.kind == "dlm" and handle.fingerprint == "" and "read as a DLM" in handle.path
    assert isinstance(adapter, DLMAdapter) and adapter.shift_logits and adapter.bidirectional
    assert adapter.mask_token_id == tok.mask_token_id == ar.tokenizer.mask_token_id  # the tokenizer has <mask>
    assert not adapter.model.training
    theirs = ar.model.state_dict()
    assert all(torch.equal(w, theirs[name]) for name, w in adapter.model.state_dict().items())
    assert load_model(tiny_model_dir).kind == "ar"  # read, never written back


def _calls(monkeypatch, cfg, kind, seed=3):
    """The interface's pretrain and the local_model calls Workspace.base makes for ``kind``, and the path it
    returns."""
    calls = []

    def pretrain(*, packages, tokenizer, **kw):
        calls.append(("pretrain", packages, tokenizer, kw))
        return SimpleNamespace(path=f"{kw['kind']}@{kw['seed']}")

    def local(path):
        calls.append(("local", path))
        return f"local:{path}"

    monkeypatch.setattr(lmaudit.api, "pretrain", pretrain)  # into the model cache, through the interface
    monkeypatch.setattr("lmaudit.experiments.workspace.local_model", local)
    ws = Workspace(cfg)
    ws.__dict__.update(corpus="C", tokenizer="T")  # no corpus or tokenizer is built
    return ws.base(seed, kind), calls


def test_the_workspace_builds_each_kinds_base_from_the_same_models(monkeypatch):
    cfg = experiment_config.BaseConfig(name="x", type="mia", pretrain_tokens=1000, adapt_tokens=500)
    assert _calls(monkeypatch, cfg, "ar") == ("ar@3", [
        ("pretrain", "C", "T", dict(kind="ar", preset="tiny", tokens=1000, seed=3))])
    assert _calls(monkeypatch, cfg, "dlm") == ("dlm@3", [
        ("pretrain", "C", "T", dict(kind="ar", preset="tiny", tokens=1000, seed=3)),
        ("pretrain", "C", "T", dict(kind="dlm", preset="tiny", tokens=500, seed=3, init_from="ar@3"))])
    real = experiment_config.BaseConfig(name="x", type="mia", base="/m", adapt_tokens=500, adapt_lr=2e-4,
                                        adapt_block=32)
    assert _calls(monkeypatch, real, "ar") == ("local:/m", [("local", "/m")])  # the pretrained model, any seed
    assert _calls(monkeypatch, real, "dlm") == ("dlm@0", [
        ("local", "/m"),
        ("pretrain", "C", "T", dict(kind="dlm", preset="tiny", tokens=500, seed=0, init_from="local:/m", lr=2e-4,
                                    block=32, batch_size=None))])


class FakeExtractions:
    """A workspace whose PII models are names and whose extractions record what they were asked (the summary rows
    of runs/extract: one exact "ar" row for an AR model, one per step count for a DLM)."""

    def __init__(self):
        self.asked = []
        self.kinds = []

    def pii_models(self, seed, kinds=("ar", "dlm")):
        self.kinds.append(list(kinds))
        train, unseen = (TextSet.from_texts([f"{name} message {i}" for i in range(2)], source=name)
                         for name in ("train", "unseen"))
        return train, unseen, {kind: f"{kind}-model" for kind in kinds}

    def extract(self, model, data, xcfg):
        self.asked.append((model, data.source, list(xcfg.steps), xcfg.mask, xcfg.context))
        labels = ["ar"] if model == "ar-model" else list(xcfg.steps)
        row = {"discoverable@p=0.5": 1, "convergence": {"not_converged_fraction": 0.0}}
        return {"summary": {label: dict(row) for label in labels}, "n_masked": {"median": 3},
                "relaxed": {"eps": [0]}, "records": {k: v for label in labels for k, v in (
                    (f"p_hat@{label}", [0.5, 0.1]), (f"log_p_hat@{label}", [-0.7, -2.3]))}}


@pytest.mark.parametrize("kind, models", [("ar", ["ar"]), ("dlm", ["ar", "dlm"])])
def test_pii_extraction_asks_each_model_of_its_lineage_for_its_steps(kind, models):
    ws = FakeExtractions()
    cfg = pii_extraction.PIIExtractionConfig(name="x", type="pii-extraction", kind=kind, seeds=[0],
                                             pii_fields=["email"])
    out = pii_extraction.run(ws, cfg)
    steps = {"ar": ["1"], "dlm": ["1", "max"]}
    assert ws.kinds == [models]
    assert ws.asked == [(f"{m}-model", data, steps[m], "pii:email", "left") for m in models
                        for data in ("train", "unseen")]
    rows = {"ar": ["email / AR"], "dlm": ["email / AR", "email / DLM one-step", "email / DLM max-step"]}[kind]
    assert list(out["pii_rows"]) == rows
    # the AR p̂ is exact: its row carries no convergence; every DLM row does
    assert [("convergence" in out["pii_rows"][r][0]) for r in rows] == [r.endswith("-step") for r in rows]


def test_relaxed_extraction_names_its_ar_and_dlm_rows():
    ws = FakeExtractions()
    cfg = extraction_relaxed.RelaxedConfig(name="x", type="extraction-relaxed", seeds=[0])
    out = extraction_relaxed.run(ws, cfg)
    # the relaxed samples at the last step count, then the budget curve at every step count, AR first
    assert [(m, steps) for m, _, steps, _, _ in ws.asked] == [
        ("ar-model", ["1"]), ("ar-model", ["1"]), ("dlm-model", ["max"]), ("dlm-model", ["1", "max"])]
    assert list(out["relaxed"]) == ["AR", "DLM"]
    assert list(out["budget"]["fractions"]) == ["AR", "DLM one-step", "DLM max-step"]
