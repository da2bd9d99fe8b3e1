"""LeakageCallback: membership audits inside a transformers Trainer, which leave the training exactly as it was."""

from __future__ import annotations

import copy
import json
import logging
import random
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

from helpers import causal, make_texts, write_jsonl
from lmaudit.api.membership import RunConfig, mia
from lmaudit.errors import LmauditError, SettingError
from lmaudit.integrations import live
from lmaudit.integrations.live import plot_history, untouched
from lmaudit.integrations.transformers import LeakageCallback
from lmaudit.privacy.canaries import DECOYS, TRAIN, make_canaries
from lmaudit.runs.mia_result import MIAResult
from lmaudit.runs.tracking import metrics_of

MEMBERS = make_texts(32, seed=1)  # 4 steps per epoch at batch size 8
HELDOUT = make_texts(32, seed=2)
ATTACKS = ["loss", "zlib", "min_k"]
FAST = RunConfig(n_bootstrap=20, blind=False)
LOGGER = "lmaudit.integrations.transformers"


class Texts(torch.utils.data.Dataset):
    def __init__(self, tokenizer, texts: list[str]) -> None:
        self.ids = [tokenizer(t)["input_ids"] for t in texts]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i]}


class Snapshot(TrainerCallback):
    """Keeps a copy of the model as it is after each of ``steps`` (placed before the LeakageCallback)."""

    def __init__(self, steps) -> None:
        self.steps, self.models = set(steps), {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step in self.steps:
            self.models[state.global_step] = copy.deepcopy(model).eval()


class Reporter(TrainerCallback):
    """Receives what a ``report_to`` integration receives: every ``on_log`` (those run before the user's callbacks)."""

    def __init__(self) -> None:
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs))


def train(tiny_model, tokenizer, out, callbacks=(), *, attach=True, texts=MEMBERS, epochs=3, tokenizer_given=True):
    """A tiny Trainer run. The model has attention dropout (every step draws from torch's generator, and a step in
    eval mode would differ) and frozen input embeddings (a gradient reaching them would change the clipped norm)."""
    model = copy.deepcopy(tiny_model)
    for module in model.modules():
        if hasattr(module, "attention_dropout"):
            module.attention_dropout = 0.1
    model.get_input_embeddings().weight.requires_grad_(False)
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=8, num_train_epochs=epochs,
                             learning_rate=3e-3, logging_steps=1, report_to=[], save_strategy="no", seed=0,
                             use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Texts(tokenizer, texts),
                      processing_class=tokenizer if tokenizer_given else None,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False), callbacks=list(callbacks))
    for callback in callbacks:
        if attach and isinstance(callback, LeakageCallback):
            callback.attach(trainer)
    trainer.train()
    return trainer


def losses(trainer) -> list[tuple]:
    return [(h["step"], h["loss"], h["grad_norm"]) for h in trainer.state.log_history if "loss" in h]


def audits(trainer) -> dict[int, dict]:
    return {h["step"]: {k: v for k, v in h.items() if k.startswith("lmaudit/")}
            for h in trainer.state.log_history if any(k.startswith("lmaudit/") for k in h)}


def same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture(scope="module")
def plain(tiny_model, tokenizer, tmp_path_factory):
    """The run without the callback."""
    return train(tiny_model, tokenizer, tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def audited(tiny_model, tokenizer, tmp_path_factory):
    """The same run with a callback auditing at the start and every 2 steps."""
    callback = LeakageCallback(MEMBERS, HELDOUT, every_steps=2, at_start=True, config=FAST)
    return train(tiny_model, tokenizer, tmp_path_factory.mktemp("audited"), [callback]), callback


def test_the_training_loss_curve_is_the_same_bit_for_bit(plain, audited):
    trainer, callback = audited
    assert len(losses(plain)) == 12 and losses(trainer) == losses(plain)  # step, loss and grad norm, exactly
    assert same_weights(trainer.model, plain.model)
    assert [e.step for e in callback.history] == [0, 2, 4, 6, 8, 10, 12] and callback.errors == []
    assert sorted(audits(trainer)) == [0, 2, 4, 6, 8, 10, 12]
    assert all(set(m) == {f"lmaudit/{a}/auc" for a in ATTACKS} for m in audits(trainer).values())


def test_an_audit_that_draws_randomness_and_flips_the_model_changes_nothing(plain, tiny_model, tokenizer, tmp_path,
                                                                             monkeypatch):
    calls = []

    def careless_mia(handle, *args, **kwargs):  # what a careless audit could do to the trainer's model and state
        calls.append(handle.model.training)
        random.random(), np.random.rand(), torch.rand(8)
        handle.model.train()
        for p in handle.model.parameters():
            p.requires_grad_(True)
        return mia(handle, *args, **kwargs)

    monkeypatch.setattr(live, "mia", careless_mia)
    callback = LeakageCallback(MEMBERS, HELDOUT, every_steps=1, config=FAST)
    trainer = train(tiny_model, tokenizer, tmp_path, [callback])
    assert calls == [False] * 12  # every audit ran, on the model in eval mode
    assert losses(trainer) == losses(plain) and same_weights(trainer.model, plain.model)
    assert not trainer.model.get_input_embeddings().weight.requires_grad


def test_logged_metrics_equal_lmaudit_mia_on_a_copy_of_the_model_at_that_step(tiny_model, tokenizer, tmp_path):
    heldout = make_texts(100, seed=2)  # 100 non-members resolve TPR at 1% FPR
    canaries, decoys = make_canaries(20, "rare", seed=0), make_canaries(20, "rare", seed=0, stream="decoy")
    snapshot, reporter = Snapshot([7, 21]), Reporter()  # 52 texts: 7 steps per epoch
    callback = LeakageCallback(MEMBERS, heldout, every_steps=7, canaries=canaries, decoys=decoys, config=FAST,
                               out_dir=tmp_path / "leakage")
    trainer = train(tiny_model, tokenizer, tmp_path / "run", [reporter, snapshot, callback], texts=MEMBERS + canaries)
    logged = audits(trainer)
    assert sorted(logged) == [7, 14, 21]
    reported = [{k: v for k, v in log.items() if k.startswith("lmaudit/")} for log in reporter.logs]
    assert [r for r in reported if r] == list(logged.values())  # the reporters get them too
    config = RunConfig(attacks=ATTACKS, n_bootstrap=0, blind=False, use_cache=False)
    for step, model in snapshot.models.items():
        alone = mia(causal(model, tokenizer), MEMBERS, heldout, config=config)
        planted = mia(causal(model, tokenizer), canaries, decoys, config=config)
        for a in ATTACKS:
            assert logged[step][f"lmaudit/{a}/auc"] == alone.attacks[a]["auc"]
            assert logged[step][f"lmaudit/{a}/tpr_at_1pct_fpr"] == alone.attacks[a]["tpr@1%fpr"]
            assert logged[step][f"lmaudit/canaries/{a}/auc"] == planted.attacks[a]["auc"]
            written = MIAResult.load(tmp_path / "leakage" / f"step-{step:06d}")
            assert written.attacks[a]["auc"] == alone.attacks[a]["auc"]
            assert written.target["fingerprint"] == "" and written.target["path"].endswith(f"after step {step})")
        assert "lmaudit/canaries/loss/tpr_at_1pct_fpr" not in logged[step]  # 20 decoys cannot resolve 1% FPR
        # the names lmaudit track gives the same folder's figures: one naming for both routes to MLflow
        members_only = {k for k in logged[step] if not k.startswith("lmaudit/canaries/")}
        assert members_only <= set(metrics_of(MIAResult.load(tmp_path / "leakage" / f"step-{step:06d}")))
    assert logged[21]["lmaudit/loss/auc"] > 0.6  # trained for 3 epochs, the members stand out
    history = json.loads((tmp_path / "leakage" / "history.json").read_text())
    assert [e["step"] for e in history["evaluations"]] == [7, 14, 21]
    assert history["evaluations"][-1]["folders"] == [str(tmp_path / "leakage" / "step-000021"),
                                                     str(tmp_path / "leakage" / "step-000021-canaries")]
    png = plot_history(history["evaluations"], tmp_path / "auc.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_training_stops_at_the_first_evaluation_above_the_threshold(audited, plain, tiny_model, tokenizer, tmp_path,
                                                                    caplog):
    _, reference = audited
    best = [max(e.metrics.values()) for e in reference.history]  # every metric logged here is an AUC
    first = next(i for i in range(1, len(best)) if best[i] > max(best[:i]))
    threshold = max(best[:first])
    callback = LeakageCallback(MEMBERS, HELDOUT, every_steps=2, at_start=True, config=FAST, stop_above_auc=threshold)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer = train(tiny_model, tokenizer, tmp_path, [callback])
    stop = reference.history[first].step
    assert stop < 12 and trainer.state.global_step == stop
    assert [e.metrics for e in callback.history] == [e.metrics for e in reference.history[:first + 1]]
    assert losses(trainer) == losses(plain)[:stop]
    assert f"exceeds stop_above_auc = {threshold}" in callback.stop_reason
    assert "stopping training" in caplog.text and callback.stop_reason in caplog.text
    assert "not attached" not in caplog.text


def test_an_audit_error_is_logged_and_training_goes_on(plain, tiny_model, tokenizer, tmp_path, caplog):
    reason = "need a reference model"
    callback = LeakageCallback(MEMBERS, HELDOUT, every_steps=4, attacks=["reference"], config=FAST)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer = train(tiny_model, tokenizer, tmp_path, [callback])
    assert trainer.state.global_step == 12 and losses(trainer) == losses(plain)
    assert [e["step"] for e in callback.errors] == [4, 8, 12] and all(reason in e["error"] for e in callback.errors)
    assert audits(trainer) == {} and callback.history == []
    assert caplog.text.count("was skipped (training goes on)") == 3 and reason in caplog.text
    loud = LeakageCallback(MEMBERS, HELDOUT, every_steps=4, attacks=["reference"], config=FAST, raise_errors=True)
    with pytest.raises(LmauditError, match=reason):
        train(tiny_model, tokenizer, tmp_path / "loud", [loud])


def test_an_epoch_schedule_and_an_unattached_callback_still_fill_the_log_history(tiny_model, tokenizer, tmp_path,
                                                                                  caplog):
    callback = LeakageCallback(MEMBERS, HELDOUT, on="epoch", attacks=["loss"], config=FAST)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer = train(tiny_model, tokenizer, tmp_path, [callback], attach=False)
    assert "not attached" in caplog.text
    assert [e.step for e in callback.history] == [4, 8, 12]
    assert audits(trainer) == {e.step: e.metrics for e in callback.history}
    png = callback.plot(tmp_path / "auc.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class StopAt(TrainerCallback):
    """Stops training after ``step``, in its turn after the LeakageCallback's (as an early-stopping callback would)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def test_without_a_tokenizer_training_is_refused_before_its_first_step(tiny_model, tokenizer, tmp_path):
    for attach in (True, False):  # attach(trainer) refuses at once; unattached, the start of training does
        callback = LeakageCallback(MEMBERS, HELDOUT, every_steps=4, config=FAST, stop_above_auc=0.6)
        with pytest.raises(SettingError, match="no tokenizer") as caught:
            train(tiny_model, tokenizer, tmp_path / str(attach), [callback], attach=attach, tokenizer_given=False)
        assert "processing_class=tokenizer" in str(caught.value) and callback.history == [] and callback.errors == []
    # given to the callback, or found as a processor's tokenizer, it audits
    assert LeakageCallback(MEMBERS, HELDOUT, every_steps=4, tokenizer=tokenizer)._need_tokenizer() is tokenizer
    processor = type("Processor", (), {"tokenizer": tokenizer})()
    assert LeakageCallback(MEMBERS, HELDOUT, every_steps=4)._need_tokenizer(processor) is tokenizer


def test_the_weights_training_ends_with_are_audited(tiny_model, tokenizer, tmp_path):
    callback = LeakageCallback(MEMBERS, HELDOUT, every_steps=5, attacks=["loss"], config=FAST)
    trainer = train(tiny_model, tokenizer, tmp_path / "a", [callback])  # 12 steps: audits at 5, 10 and the last
    assert [h.step for h in callback.history] == [5, 10, 12] and sorted(audits(trainer)) == [5, 10, 12]
    stopped = LeakageCallback(MEMBERS, HELDOUT, every_steps=5, attacks=["loss"], config=FAST)
    trainer = train(tiny_model, tokenizer, tmp_path / "b", [stopped, StopAt(7)])  # stopped after this one's turn
    assert trainer.state.global_step == 7 and [h.step for h in stopped.history] == [5, 7]
    assert sorted(audits(trainer)) == [5, 7]  # at train end: into state.log_history


def test_a_dlm_in_training_is_audited_as_a_dlm_with_the_default_attacks_it_has(tiny_dlm, tokenizer):
    """A masked diffusion network is read as the DLM its config says it is (never as a causal LM), and the default
    attacks are cut to the DLM's (it has no zlib); attacks the user names are kept as named."""
    audit = live.LiveAudit(MEMBERS[:8], HELDOUT[:8], config=RunConfig(n_bootstrap=20, blind=False, budget=2))
    found = audit.evaluate(tiny_dlm.model, tokenizer, step=1, write=False)
    assert sorted(k.split("/")[-2] for k in found.metrics if k.endswith("/auc")) == ["loss", "min_k"]
    want = mia(tiny_dlm.handle(), MEMBERS[:8], HELDOUT[:8], config=RunConfig(n_bootstrap=20, blind=False, budget=2,
                                                                             attacks=["loss", "min_k"]))
    assert found.metrics["lmaudit/loss/auc"] == pytest.approx(want.attacks["loss"]["auc"])
    named = live.LiveAudit(MEMBERS[:8], HELDOUT[:8], attacks=["zlib"], config=RunConfig(n_bootstrap=20, blind=False))
    with pytest.raises(LmauditError, match="zlib"):  # named, so never silently dropped
        named.evaluate(tiny_dlm.model, tokenizer, step=1, write=False)


def test_history_entries_read_as_records(audited, tmp_path):
    _, callback = audited
    first = callback.history[0]
    assert [h["step"] for h in callback.history] == [h.step for h in callback.history] == [0, 2, 4, 6, 8, 10, 12]
    assert first["metrics"] == first.metrics and set(first["metrics"]) == {f"lmaudit/{a}/auc" for a in ATTACKS}
    assert dict(first) == {"step": 0, "epoch": first.epoch, "metrics": first.metrics, "folders": []}
    assert "epoch" in first and first.get("nothing") is None
    with pytest.raises(KeyError):
        first["nothing"]
    png = plot_history(callback.history, tmp_path / "auc.png")  # records plot as the evaluations they hold
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_small_canary_folder_is_said_once_at_construction(tiny_model, tokenizer, tmp_path, caplog):
    canaries, decoys = make_canaries(20, "rare", seed=0), make_canaries(10, "rare", seed=0, stream="decoy")
    folder = tmp_path / "canaries"
    folder.mkdir()
    write_jsonl(folder / TRAIN, canaries), write_jsonl(folder / DECOYS, decoys)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callback = LeakageCallback(MEMBERS, HELDOUT, every_steps=4, canaries=folder, config=FAST)
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            train(tiny_model, tokenizer, tmp_path / "run", [callback], texts=MEMBERS + canaries)
    said = [w for w in caught if "fewer than 20" in str(w.message)]
    assert [h.step for h in callback.history] == [4, 8, 12, 16, 20, 21] and len(said) == 1  # not 6 × 3
    assert "only 20 canaries and 10 decoys" in str(said[0].message) and said[0].filename == __file__
    assert "fewer than 20" not in caplog.text


def test_settings_are_checked_before_training():
    cases = [(dict(members=[]), "members is empty"),
             (dict(attacks=["los"]), "did you mean loss"),
             (dict(every_steps=0), "every_steps must be an integer ≥ 1"),
             (dict(every_steps=5, on="epoch"), "applies to on='steps' only"),
             (dict(on="batch"), "on must be one of steps, epoch"),
             (dict(canaries=["a canary"]), "canaries needs decoys="),
             (dict(stop_above_auc=1.5), "stop_above_auc must be a number in \\[0, 1\\)")]
    for given, message in cases:
        settings = {"members": MEMBERS, "nonmembers": HELDOUT, "every_steps": 2, **given}
        with pytest.raises(SettingError, match=message):
            LeakageCallback(settings.pop("members"), settings.pop("nonmembers"), **settings)


def test_train_texts_warn_of_members_never_trained_on_and_heldout_texts_trained_on():
    with pytest.warns(UserWarning) as caught:
        LeakageCallback(MEMBERS, HELDOUT, every_steps=2, train_texts=MEMBERS[2:] + HELDOUT[:1])
    messages = [str(w.message) for w in caught]
    assert any("2 of 32 members are not among train_texts" in m for m in messages)
    assert any("1 of 32 nonmembers are among train_texts" in m for m in messages)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LeakageCallback(MEMBERS, HELDOUT, every_steps=2, train_texts=[f"  {t}\n" for t in MEMBERS])


def draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_untouched_restores_modes_flags_and_random_states_even_after_an_error(tiny_model):
    model = copy.deepcopy(tiny_model).train()
    model.model.layers[0].eval()  # a submodule the user keeps in eval mode
    model.get_input_embeddings().weight.requires_grad_(False)
    modes = [m.training for m in model.modules()]
    flags = [p.requires_grad for p in model.parameters()]
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    expected = draws()
    random.setstate(states[0]), np.random.set_state(states[1]), torch.set_rng_state(states[2])
    with pytest.raises(RuntimeError, match="inside"), untouched(model):
        assert not model.training and not model.model.layers[1].training and not torch.is_grad_enabled()
        assert draws() == expected
        model.train()
        for p in model.parameters():
            p.requires_grad_(True)
        raise RuntimeError("inside")
    assert torch.is_grad_enabled()
    assert [m.training for m in model.modules()] == modes and [p.requires_grad for p in model.parameters()] == flags
    assert draws() == expected


def test_import_lmaudit_leaves_the_integrations_out():
    code = "import sys, lmaudit; print(any(m.startswith('lmaudit.integrations') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
